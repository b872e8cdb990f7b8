"""The commands of :mod:`.cli` that belong to the pipeline's own rules (download, train,
tables, summary, report-pages, claims, registry, bench): each
parses its JSON sections into their frozen settings once and calls one function of ``steps`` or
the owning module, imported inside the command so that ``--help`` stays fast. A study's commands
are in its ``studies/<name>/cli.py``."""

from __future__ import annotations

from ..util.files import log


def cmd_download(a) -> None:
    """Rule download: fetch and verify a data set, then write its manifest."""
    from .steps import download_dataset

    download_dataset(a.dataset, a.manifest, root=a.root, mirror=a.mirror, deadline=a.deadline, local=a.local)


def cmd_train(a) -> None:
    """Rule train: train (or resume) one experiment."""
    from ..config.settings import Experiment
    from ..train import train

    m = train(
        a.experiment, Experiment.from_dict(a.spec, f"experiments.{a.experiment}"), a.data_root, a.out, device=a.device
    )
    log.info("%s: final val_acc %.4f after %d epochs", a.experiment, m["final"]["val_acc"], m["epochs"])


def cmd_tables(a) -> None:
    """Rule tables: the run summary table."""
    from .report_steps import tables_step

    tables_step(a.metrics, a.out_dir)


def cmd_report_pages(a) -> None:
    """Rule report_pages: the HTML pages of the review report (claims, tables, config, provenance)."""
    from .report_pages import write_report_pages

    write_report_pages(a.claims, a.summary, a.tables, a.config, a.out_dir)


def cmd_summary(a) -> None:
    """Rule summary: paper/summary.json with provenance, claims and the studies' sections."""
    from .report_steps import summary_step

    summary_step(
        a.config_hash,
        a.metrics,
        a.out,
        figures=a.figures,
        tables=a.tables,
        registry_config=a.registry_config,
        notebook_dir=a.notebook_dir,
        claims=a.claims,
        sections=[*a.section, *(f"{name}={path}" for name, path in (a.sections or {}).items())],
    )


def cmd_claims(a) -> None:
    """Rule claims: one verdict per empirical claim of the paper."""
    from .report_steps import claims_step

    claims_step(
        a.metrics_hessian,
        a.metrics_landscape,
        a.out_json,
        a.out_md,
        rows=a.rows,
        own_rows_at=a.own_rows_at,
        config_hash=a.config_hash,
    )


def cmd_claims_readme(a) -> None:
    """Refresh (or check) the generated claims tables (docs/claims.md) and the README's summary."""
    from .report_steps import claims_readme_step

    claims_readme_step(a.claims, a.readme, check=a.check, tag=a.tag, doc=a.doc)


def cmd_claims_compare(a) -> None:
    """Fail when the verdicts of a run differ from a committed snapshot."""
    from ..claims.compare import compare_step

    compare_step(a.claims, a.snapshot)


def cmd_notebook(a) -> None:
    """Run a figure notebook in this process with its parameters; write the executed notebook."""
    import logging

    from .notebooks import execute_notebook, parameter_value

    # the cells' libraries log as in a kernel, where logging is not configured (warnings and up):
    # no INFO lines of matplotlib's font subsetting in the rule's log
    if not a.verbose:
        logging.getLogger().setLevel(logging.WARNING)
    execute_notebook(a.notebook, a.executed, {name: parameter_value(value) for name, value in a.parameter})


def cmd_registry(a) -> None:
    """List the figure registry, or write / check paper/README.md from it."""
    from .report_steps import registry_step

    registry_step(a.path, write_readme=a.write_readme, check=a.check)


def cmd_bench(a) -> None:
    """The benchmarks: Hessian extraction (``bench hessian``), encoder layers, language models,
    GPT-2 at scale (``bench scale``) or training throughput (``bench train``)."""
    if a.bench == "encoder":
        from ..bench.encoder import cmd_bench_encoder

        cmd_bench_encoder(a)
        return
    if a.bench == "models":
        from ..bench.models import cmd_bench_models

        cmd_bench_models(a)
        return
    if a.bench == "scale":
        from ..bench.scale import cmd_bench_scale

        cmd_bench_scale(a)
        return
    if a.bench == "precision":
        from ..bench.precision import cmd_bench_precision

        cmd_bench_precision(a)
        return
    if a.bench == "train":
        from ..bench.train import run_train_bench

        run_train_bench(a)
        return
    from ..bench import run_bench

    run_bench(a)
