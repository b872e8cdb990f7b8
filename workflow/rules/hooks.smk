# What runs around the jobs rather than in them (included last by the Snakefile): checkpoints
# damaged after their job finished are set aside before the jobs are planned, the settings files are
# written when the run starts (never by a dry run: see settings_file in common.smk), and a recap is
# printed when it succeeds.

import time

RUN_START = time.time()  # the recap at the end (onsuccess) reports the run's wall time


# A checkpoint damaged after its job finished (see docs/reliability.md) is set aside, so that
# its train job runs again and resumes from the newest valid epoch checkpoint.
if workflow.is_main_process:
    from transformer_hessian.train.checkpoints import set_aside_damaged  # noqa: E402

    set_aside_damaged(
        [str(p) for e in config["experiments"] for p in expand([rules.train.output.init, rules.train.output.final], exp=e)],
        dry_run=workflow.dryrun,
    )


# The config sections the commands read (@results/settings/...): written here, once the run starts.
onstart:
    write_settings_files()


# A recap of at most 20 lines, printed last: where the outputs are, the claim counts (the claims
# that were not reproduced named), the figure to open first, the wall time. The full verdict table
# is paper/claims.md.
onsuccess:
    if os.path.exists(rules.claims.output.json):
        from transformer_hessian.pipeline.recap import recap_lines  # noqa: E402

        pngs = {fig: FIGURE_FILES[fig]["png"] for fig in FIGURES}
        print("\n" + "\n".join(recap_lines(rules.claims.output.json, pngs, time.time() - RUN_START)))
