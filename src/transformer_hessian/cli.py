"""Command line of the reproduction pipeline; one command per Snakemake rule (see each command's --help).

Each Snakemake rule calls exactly one of these commands. Settings arrive as JSON (the
validated config section of the rule), so the rule's ``params`` are the single source of truth.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# Many small kernels per job: idle OpenMP threads must sleep, not spin, or jobs that share the
# cores (snakemake runs several at once) slow each other down several-fold.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .utils import log, set_threads, setup_logging

DATA_ROOT_HELP = "data root (data.root); the data set lies in DATA_ROOT/DATASET/"


def _json_arg(text: str) -> dict:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON: {err}") from None


def cmd_download(a) -> None:
    """Rule download: fetch and verify a data set, then write its manifest."""
    from .data import download, write_manifest

    root = a.root or Path(a.manifest).resolve().parent.parent
    manifest = download(a.dataset, root, mirror=a.mirror or None, deadline=a.deadline)
    write_manifest(manifest, a.manifest)
    log.info("%s ready under %s", a.dataset, Path(root) / a.dataset)


def cmd_train(a) -> None:
    """Rule train: train (or resume) one experiment."""
    from .train import train

    m = train(a.experiment, a.spec, a.data_root, a.out, device=a.device)
    log.info("%s: final val_acc %.4f after %d epochs", a.experiment, m["final"]["val_acc"], m["epochs"])


def _check_hessian_memory(a, dev) -> None:
    """Stop before the dense P x P float64 Hessian is allocated when it cannot fit; name the keys."""
    from .config import ConfigError
    from .resources import available_bytes, dense_hessian_bytes, format_bytes, hessian_group_size

    m = a.spec["model"]
    need = dense_hessian_bytes(m["width"], m["d_k"], m["d_ff"])
    have = available_bytes(dev)
    if have is not None and need > have:
        exp = a.hessian.get("experiment", "<hessian.experiment>")
        p = hessian_group_size(m["width"], m["d_k"], m["d_ff"])
        raise ConfigError(
            f"hessian.experiment: the dense Hessian of {exp!r} is {p:,} x {p:,} float64 and this job needs about "
            f"{format_bytes(need)}, but only {format_bytes(have)} is available on {dev}; lower "
            f"experiments.{exp}.model.width / d_k / d_ff (or run on a machine with more memory)"
        )


def _hessian_inputs(a):
    """Model from the checkpoint (float64) and the fixed batch (same for every stage)."""
    import torch

    from .hessian import fixed_batch
    from .train import load_experiment_data, load_model
    from .utils import resolve_device

    dev = resolve_device(a.device)
    _check_hessian_memory(a, dev)
    data = load_experiment_data(a.spec, a.data_root)
    images, labels = fixed_batch(data["train_x"], data["train_y"], a.hessian["batch_size"], a.hessian["seed"])
    model = load_model(a.checkpoint, device=dev, dtype=torch.float64)
    return model, images.to(device=dev, dtype=torch.float64), labels.to(dev)


def cmd_hessian(a) -> None:
    """Rule hessian: dense Hessian of one block's five groups and its block norms."""
    from .hessian import block_norms, compute_hessian, group_layout, weight_norms
    from .utils import save_npz, write_json

    model, images, labels = _hessian_inputs(a)
    block = a.hessian["block"]
    H, method, seconds = compute_hessian(model, block, images, labels, a.hessian["method"])
    names, shapes, offsets = group_layout(model, block)
    Hn = H.cpu().numpy()
    save_npz(a.out_npz, H=Hn, names=names, offsets=offsets, shapes=shapes)
    norms = {
        "stage": a.stage,
        "experiment": a.hessian["experiment"],
        "block": block,
        "method": method,
        "seconds": seconds,
        "batch_size": int(len(images)),
        "n_params": int(offsets[-1]),
        "blocks": block_norms(Hn, offsets, names),
        "weights": weight_norms(model, block),
    }
    write_json(norms, a.out_norms)
    log.info("hessian %s: %d x %d via %s in %.2f s", a.stage, Hn.shape[0], Hn.shape[1], method, seconds)


def cmd_theory(a) -> None:
    """Rule theory: check the saved Hessian against curvlinops products; fail above the tolerance."""
    import numpy as np

    from .checks import saved_hessian_check
    from .utils import read_json, write_json

    model, images, labels = _hessian_inputs(a)
    with np.load(a.hessian_npz, allow_pickle=False) as saved:
        H = saved["H"]
    result = saved_hessian_check(
        H,
        model,
        images,
        labels,
        probes=a.probes,
        seed=a.hessian["seed"],
        tolerance=a.tolerance,
        block=a.hessian["block"],
    )
    result["stage"] = a.stage
    result["hessian_file"] = a.hessian_npz
    result["hessian_method"] = read_json(a.norms)["method"] if a.norms else "unknown"
    write_json(result, a.out)
    worst = max(result["blocks"], key=lambda r: r["rel_error"])
    log.info(
        "saved Hessian (%s) vs curvlinops on %d probes (%s): max relative error %.3e (block %s-%s)",
        result["hessian_method"],
        result["n_probes"],
        a.stage,
        result["max_rel_error"],
        worst["row"],
        worst["col"],
    )
    if not result["passed"]:
        raise ValueError(
            f"the saved {result['hessian_method']} Hessian {a.hessian_npz} disagrees with curvlinops at stage "
            f"{a.stage}: relative error {result['max_rel_error']:.3e} in block ({worst['row']}, {worst['col']}) "
            f"exceeds theory.tolerance={a.tolerance:g} (details in {a.out})"
        )


def cmd_dynamics(a) -> None:
    """Rule dynamics: replay the first training steps and record the snapshots of Figures 7-11."""
    from .dynamics import check_against_saved, record_dynamics
    from .plotting import load_hessian
    from .utils import save_npz, write_json

    arrays, summary, H0 = record_dynamics(
        a.spec,
        a.data_root,
        a.checkpoint,
        a.hessian,
        a.dynamics,
        device=a.device,
        checkpoint_dir=Path(a.checkpoint).parent,
    )
    summary["experiment"] = a.hessian["experiment"]
    summary["dataset"] = a.spec["dataset"]
    summary["model"] = a.spec["model"]
    if a.saved_init_hessian:
        chk = check_against_saved(H0, load_hessian(a.saved_init_hessian))
        chk["tolerance"] = a.tolerance
        chk["passed"] = bool(chk["rel_error"] <= a.tolerance)
        summary["init_hessian_check"] = chk
    save_npz(a.out_npz, **arrays)
    write_json(summary, a.out_json)
    log.info(
        "dynamics: %d snapshots over %d steps in %.1f s (Hessians %.1f s via %s)",
        len(summary["steps"]),
        summary["steps"][-1],
        summary["seconds"],
        summary["hessian_seconds"],
        summary["hessian_method"],
    )
    if summary["capped"]:
        log.warning(
            "dynamics: dynamics.steps=%d exceeds the run's %d steps; recorded those",
            summary["requested_steps"],
            summary["replayed_steps"],
        )
    bad = [c["epoch"] for c in summary["epoch_checks"] if not c["identical"]]
    if bad:
        log.warning("dynamics: the replay differs from the saved epoch checkpoint(s) %s", bad)
    if a.saved_init_hessian and not summary["init_hessian_check"]["passed"]:
        raise ValueError(
            f"dynamics: the step-0 Hessian differs from {a.saved_init_hessian} by relative error "
            f"{summary['init_hessian_check']['rel_error']:.3e} > theory.tolerance={a.tolerance:g}"
        )


def cmd_table1(a) -> None:
    """Rule table1: Table 1 from the config and the runs' metrics."""
    from .report import write_table
    from .table1 import table1
    from .utils import read_json

    metrics = {m["experiment"]: m for m in map(read_json, a.metrics)}
    df = table1(a.config, metrics)
    write_table(
        df,
        Path(a.out_dir) / "table1",
        "Table 1: ViT hyperparameters of both experiments, this run next to the paper's values",
    )


def cmd_landscape(a) -> None:
    """Rule landscape: per-sample losses at w*, D_k over orderings and the fitted slope."""
    from .landscape import analyse_landscape
    from .train import load_experiment_data, load_model, per_sample_losses
    from .utils import resolve_device, write_json

    data = load_experiment_data(a.spec, a.data_root)
    model = load_model(a.checkpoint, device=resolve_device(a.device))
    x, y = data["train_x"], data["train_y"]
    if a.landscape.get("max_samples"):
        x, y = x[: a.landscape["max_samples"]], y[: a.landscape["max_samples"]]
    losses = per_sample_losses(model, x, y)
    L = a.landscape
    result = analyse_landscape(
        losses,
        n_orderings=L["n_orderings"],
        seed=L["seed"],
        ema_factor=L["ema_factor"],
        k_min=L["k_min"],
        n_bootstrap=L["n_bootstrap"],
        granularity=L.get("granularity", "sample"),
        batch_size=L.get("batch_size", 16),
    )
    result["experiment"] = L["experiment"]
    write_json(result, a.out)
    log.info("landscape: slope %.3f, 95%% CI [%.3f, %.3f]", result["slope"], *result["slope_ci95"])
    if not result["ci95_contains_minus_one"]:
        log.warning(
            "landscape: the 95%% interval [%.3f, %.3f] of the fitted slope excludes -1, the paper's "
            "O(1/k) rate (Theorem 7's bound 2L/(k+1) itself %s)",
            *result["slope_ci95"],
            "holds" if result["bound_holds"] else "is violated",
        )


def cmd_probe(a) -> None:
    """Rule probe: Theorem 7 off w*, the Taylor model and Assumption 1 around w*."""
    import torch

    from .probe import run_probe
    from .train import load_experiment_data, load_model
    from .utils import resolve_device, write_json

    dev = resolve_device(a.device)
    data = load_experiment_data(a.spec, a.data_root)
    model = load_model(a.checkpoint, device=dev, dtype=torch.float64)
    init = load_model(a.init_checkpoint, device=dev, dtype=torch.float64) if a.init_checkpoint else None
    result = run_probe(model, data["train_x"], data["train_y"], a.probe, init_model=init)
    result["experiment"] = a.probe.get("experiment")
    result["dataset"] = a.spec["dataset"]
    write_json(result, a.out)
    s = result["theorem7_summary"]
    log.info(
        "probe: Theorem 7 off w* held in %.4f%% of %d comparisons (M = %.3g); Assumption 1 slope %.3f "
        "[%.3f, %.3f]; %.1f s",
        100 * s["held_fraction"],
        s["n_comparisons"],
        result["M"],
        result["assumption1"]["slope"],
        *result["assumption1"]["slope_ci95"],
        result["timings"]["total"],
    )
    if s["n_violations"]:
        w = s["worst"]
        log.warning(
            "probe: Theorem 7's bound fails in %d comparisons; worst lhs/rhs = %.3g (%s, t = %.3g, k = %d)",
            s["n_violations"],
            w["ratio"],
            w["direction"],
            w["t"],
            w["k"],
        )


def cmd_tables(a) -> None:
    """Rule tables: block norms, run summary and closed-form check tables."""
    from .report import block_norm_table, closed_form_table, run_summary_table, write_table
    from .utils import read_json

    out = Path(a.out_dir)
    write_table(
        block_norm_table(read_json(a.norms_init), read_json(a.norms_trained)),
        out / "block_norms",
        "Hessian block norms of the loss w.r.t. (W_Q, W_K, W_V, W_1, W_2) at initialisation and after training",
    )
    metrics = {m["experiment"]: m for m in map(read_json, a.metrics)}
    write_table(run_summary_table(metrics), out / "run_summary", "Runs behind the figures")
    checks = {c["stage"]: c for c in map(read_json, a.theory)}
    write_table(
        closed_form_table(checks),
        out / "closed_form_check",
        "Saved Hessian vs curvlinops Hessian-vector products on random probes: errors and functional "
        "share per block pair",
    )


def cmd_summary(a) -> None:
    """Rule summary: paper/summary.json with provenance, claims and bounds."""
    from .report import build_summary
    from .utils import write_json

    figures = {Path(p).stem: p for p in a.figures}
    tables = {Path(p).stem: p for p in a.tables}
    summary = build_summary(
        a.config_hash, a.norms, a.metrics, a.landscape, a.theory, figures, tables, bounds=a.bounds, spectrum=a.spectrum
    )
    if a.registry_config:
        from .registry import provenance

        summary["figure_provenance"] = provenance(a.registry_config, notebook_dir=a.notebook_dir)
    if a.claims:
        from .utils import read_json

        summary["claims"] = read_json(a.claims)["claims"]
    write_json(summary, a.out)


def cmd_claims(a) -> None:
    """Rule claims: one verdict per empirical claim of the paper."""
    from . import claims
    from .utils import read_json, write_json, write_text

    mh, ml = read_json(a.metrics_hessian), read_json(a.metrics_landscape)
    spread = None
    if a.hessian_init:
        import numpy as np

        with np.load(a.hessian_init) as data:
            spread = claims.entry_spread(data["H"])
    rows = claims.hessian_claim_rows(
        read_json(a.norms_init),
        read_json(a.norms_trained),
        mh,
        evidence=", ".join(p for p in (a.hessian_init, a.norms_init, a.norms_trained, a.metrics_hessian) if p),
        spread=spread,
    )
    rows += claims.training_claim_rows(mh, ml, a.metrics_hessian, a.metrics_landscape)
    rows += claims.landscape_claim_rows(read_json(a.landscape), ml, evidence=a.landscape)
    extra = {}
    for item in a.extra:
        name, _, path = item.partition("=")
        extra[name] = read_json(path)
    extra_rows = [r for path in a.rows for r in read_json(path)]
    rows = claims.collect_claims(rows, extra_rows, extra=extra)
    write_json({"config_hash": a.config_hash, "claims": rows}, a.out_json)
    write_text(claims.claims_document(rows, a.config_hash), a.out_md)
    failed = [r["id"] for r in rows if r["verdict"] == claims.NOT_REPRODUCED]
    log.info("claims: %d rows, not reproduced: %s", len(rows), ", ".join(failed) or "none")


def cmd_claims_readme(a) -> None:
    """Refresh (or check) the README's generated claims section."""
    from . import claims
    from .utils import read_json, write_text

    doc = read_json(a.claims)
    rows = doc["claims"] if isinstance(doc, dict) else doc
    text = Path(a.readme).read_text()
    new = claims.update_readme(text, rows)
    if a.check:
        if new != text:
            raise ValueError(
                f"{a.readme}: the claims section differs from {a.claims}; run "
                f"`transformer-hessian claims-readme --claims {a.claims} --readme {a.readme}`"
            )
        log.info("%s: claims section up to date", a.readme)
    else:
        write_text(new, a.readme)
        log.info("%s: claims section refreshed from %s", a.readme, a.claims)


def cmd_registry(a) -> None:
    """List the figure registry, or write / check paper/README.md from it."""
    from . import registry
    from .utils import write_text

    text = registry.render_paper_readme()
    if a.write_readme:
        write_text(text, a.path)
        log.info("wrote %s from the figure registry", a.path)
    elif a.check:
        if Path(a.path).read_text() != text:
            raise ValueError(f"{a.path} differs from the registry; run `transformer-hessian registry --write-readme`")
        log.info("%s matches the registry", a.path)
    else:
        for fig in registry.FIGURES:
            print(f"{fig.id}\t{fig.paper}\t{fig.label}\tnotebooks/{fig.notebook}")


def cmd_bench(a) -> None:
    """The Hessian extraction benchmark."""
    from .bench import run_bench

    run_bench(a)


def cmd_bounds_evaluate(a) -> None:
    """Rule bounds: measured norms against the project's and the paper's bounds, one stage."""
    from .bounds.pipeline import run_evaluate

    run_evaluate(a)


def cmd_bounds_table(a) -> None:
    """Rule bounds_table: paper/tables/bounds.* and the bound claim rows."""
    from .bounds.pipeline import run_table

    run_table(a)


def cmd_spectrum(a) -> None:
    """Rule spectrum: matrix-free top eigenvalues, traces, densities and block-pair norms."""
    import torch

    from .hessian import fixed_batch
    from .spectrum import DEFAULTS, run_spectrum
    from .train import load_experiment_data, load_model
    from .utils import resolve_device, write_json

    s = {**DEFAULTS, **a.spectrum}
    dev = resolve_device(a.device)
    data = load_experiment_data(a.spec, a.data_root)
    images, labels = fixed_batch(data["train_x"], data["train_y"], s["batch_size"], s["seed"])
    model = load_model(a.checkpoint, device=dev, dtype=torch.float64)
    result = run_spectrum(model, images.to(device=dev, dtype=torch.float64), labels.to(dev), s)
    result["experiment"] = s.get("experiment")
    result["dataset"] = a.spec["dataset"]
    result["device"] = str(dev)
    write_json(result, a.out)
    log.info(
        "spectrum: whole-model lambda_max %.4g, trace %.4g +- %.2g; %d blocks; %.1f s",
        result["whole_model"]["top"]["eigenvalues"][0],
        result["whole_model"]["trace"]["mean"],
        result["whole_model"]["trace"]["stderr"],
        len(result["blocks"]),
        result["seconds"],
    )
    if not result["interlacing"]["holds"]:
        log.warning(
            "spectrum: the whole-model top Ritz value lies below a block's (gaps %s): Lanczos has not "
            "converged; raise spectrum.lanczos_steps",
            result["interlacing"]["gap"],
        )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command (imports nothing heavy, so --help is instant)."""
    p = argparse.ArgumentParser(prog="transformer-hessian", description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("download", help="fetch and verify a data set (digits needs no download)")
    s.add_argument("--dataset", required=True, help="digits, mnist or cifar100")
    s.add_argument(
        "--root", default=None, help="data root; files go to ROOT/DATASET/ (default: two levels above --manifest)"
    )
    s.add_argument("--mirror", default=None, help="base URL of a mirror to use instead of torchvision's ('' = none)")
    s.add_argument("--deadline", type=float, default=3600.0, help="seconds one file may take in all")
    s.add_argument("--manifest", required=True, help="JSON manifest written on success (ROOT/DATASET/manifest.json)")
    s.set_defaults(func=cmd_download)

    s = sub.add_parser("train", help="train one experiment (resumes from its last epoch checkpoint)")
    s.add_argument("--experiment", required=True, help="experiment name (a key under experiments: in the config)")
    s.add_argument("--spec", type=_json_arg, required=True, help="the experiment's config section as JSON")
    s.add_argument("--data-root", required=True, help=DATA_ROOT_HELP)
    s.add_argument("--out", required=True, help="output folder of the experiment")
    s.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]")
    s.set_defaults(func=cmd_train)

    for name, helptext in (
        ("hessian", "exact dense Hessian of one block's five weight groups"),
        ("theory", "closed-form Hessian vs curvlinops on the same batch"),
    ):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("--checkpoint", required=True, help="model checkpoint (init.pt or final.pt)")
        s.add_argument("--stage", required=True, choices=["init", "trained"], help="which checkpoint this is")
        s.add_argument("--spec", type=_json_arg, required=True, help="the experiment's config section")
        s.add_argument("--hessian", type=_json_arg, required=True, help="the 'hessian' config section")
        s.add_argument("--data-root", required=True, help=DATA_ROOT_HELP)
        s.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]; float64 throughout")
        if name == "hessian":
            s.add_argument("--out-npz", required=True, help="dense Hessian with group names, shapes, offsets")
            s.add_argument("--out-norms", required=True, help="JSON of block and weight norms")
            s.set_defaults(func=cmd_hessian)
        else:
            s.add_argument("--tolerance", type=float, default=1e-8, help="largest relative error that passes")
            s.add_argument("--hessian-npz", required=True, help="the Hessian the hessian rule saved (.npz)")
            s.add_argument("--norms", default=None, help="its norms JSON (names the method that computed it)")
            s.add_argument("--probes", type=int, default=8, help="random probe vectors per parameter group")
            s.add_argument("--out", required=True, help="JSON of errors per block pair")
            s.set_defaults(func=cmd_theory)

    s = sub.add_parser("dynamics", help="replay the first training steps; weights, norms, Hessian blocks (App. A.1)")
    s.add_argument("--checkpoint", required=True, help="the run's init.pt (epoch checkpoints beside it are compared)")
    s.add_argument("--spec", type=_json_arg, required=True, help="the experiment's config section")
    s.add_argument("--hessian", type=_json_arg, required=True, help="the 'hessian' config section")
    s.add_argument("--dynamics", type=_json_arg, required=True, help="the 'dynamics' config section")
    s.add_argument("--data-root", required=True, help=DATA_ROOT_HELP)
    s.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]")
    s.add_argument("--saved-init-hessian", default=None, help="hessian rule's init .npz: must equal step 0")
    s.add_argument(
        "--tolerance",
        type=float,
        default=1e-8,
        help="largest relative error of the replayed step-0 Hessian vs the saved init Hessian",
    )
    s.add_argument("--out-npz", required=True, help="snapshots: weights and diagonal Hessian blocks (.npz)")
    s.add_argument("--out-json", required=True, help="snapshots: norms and Hessian block norms (JSON)")
    s.set_defaults(func=cmd_dynamics)

    s = sub.add_parser("table1", help="write paper/tables/table1.{csv,tex,md} (Table 1 of the paper)")
    s.add_argument("--config", type=_json_arg, required=True, help="the whole validated config as JSON")
    s.add_argument("--metrics", nargs="+", required=True, help="metrics.json of each experiment (train rule)")
    s.add_argument("--out-dir", required=True, help="folder for the table (paper/tables)")
    s.set_defaults(func=cmd_table1)

    s = sub.add_parser("landscape", help="per-sample losses at w*, |L_{k+1}-L_k| and its log-log slope")
    s.add_argument("--checkpoint", required=True, help="trained checkpoint w* (final.pt)")
    s.add_argument("--spec", type=_json_arg, required=True, help="the experiment's config section as JSON")
    s.add_argument("--landscape", type=_json_arg, required=True, help="the 'landscape' config section")
    s.add_argument("--data-root", required=True, help=DATA_ROOT_HELP)
    s.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]")
    s.add_argument("--out", required=True, help="output JSON (landscape.json)")
    s.set_defaults(func=cmd_landscape)

    s = sub.add_parser("probe", help="landscape probes at w*: Theorem 7 off w*, Taylor model, Assumption 1")
    s.add_argument("--checkpoint", required=True, help="trained checkpoint w* (final.pt)")
    s.add_argument("--init-checkpoint", default=None, help="weights at initialisation (Assumption 1 control)")
    s.add_argument("--spec", type=_json_arg, required=True, help="the experiment's config section as JSON")
    s.add_argument("--probe", type=_json_arg, required=True, help="the 'probe' config section")
    s.add_argument("--data-root", required=True, help=DATA_ROOT_HELP)
    s.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]; float64 throughout")
    s.add_argument("--out", required=True, help="output JSON (results/<exp>/probe/probe.json)")
    s.set_defaults(func=cmd_probe)

    s = sub.add_parser("tables", help="write paper/tables/*.{csv,tex,md}")
    s.add_argument("--norms-init", required=True, help="block norms at initialisation (hessian rule, *_norms.json)")
    s.add_argument("--norms-trained", required=True, help="block norms after training (hessian rule, *_norms.json)")
    s.add_argument("--metrics", nargs="+", required=True, help="metrics.json of each experiment (train rule)")
    s.add_argument("--theory", nargs="+", required=True, help="closed-form check of each stage (theory rule)")
    s.add_argument("--out-dir", required=True, help="folder for the tables (paper/tables)")
    s.set_defaults(func=cmd_tables)

    s = sub.add_parser("summary", help="write paper/summary.json")
    s.add_argument("--config-hash", required=True, help="hash of the validated config the results came from")
    s.add_argument("--norms", nargs="+", required=True, help="block norms of each stage (hessian rule)")
    s.add_argument("--metrics", nargs="+", required=True, help="metrics.json of each experiment (train rule)")
    s.add_argument("--landscape", required=True, help="landscape.json (landscape rule)")
    s.add_argument("--theory", nargs="+", required=True, help="closed-form check of each stage (theory rule)")
    s.add_argument("--figures", nargs="+", default=[], help="figure files to list with their hashes")
    s.add_argument("--tables", nargs="+", default=[], help="table files to list with their hashes")
    s.add_argument(
        "--registry-config",
        type=_json_arg,
        default=None,
        help="the config as JSON: adds figure_provenance (notebook, rule, sha256 of inputs)",
    )
    s.add_argument("--notebook-dir", default=None, help="folder of the figure notebooks (default ./notebooks)")
    s.add_argument("--claims", default=None, help="paper/claims.json: adds the key 'claims'")
    s.add_argument("--bounds", nargs="*", default=[], help="results/<exp>/bounds/<stage>.json (bounds rule)")
    s.add_argument("--spectrum", default=None, help="results/spectrum/<exp>.json (spectrum_compute rule)")
    s.add_argument("--out", required=True, help="output JSON (paper/summary.json)")
    s.set_defaults(func=cmd_summary)

    s = sub.add_parser("claims", help="a verdict on each empirical claim of the paper -> claims.{md,json}")
    s.add_argument("--norms-init", required=True, help="block norms at initialisation (hessian rule)")
    s.add_argument("--norms-trained", required=True, help="block norms after training (hessian rule)")
    s.add_argument("--hessian-init", default=None, help="init.npz: spread of the entries at initialisation")
    s.add_argument("--metrics-hessian", required=True, help="metrics.json of the Hessian experiment")
    s.add_argument("--metrics-landscape", required=True, help="metrics.json of the landscape experiment")
    s.add_argument("--landscape", required=True, help="landscape.json (landscape rule)")
    s.add_argument(
        "--extra",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="result of another module; rows from claims.PROVIDERS[NAME](result)",
    )
    s.add_argument(
        "--rows", action="append", default=[], metavar="PATH", help="JSON list of finished claim rows to append"
    )
    s.add_argument("--config-hash", default=None, help="hash of the config the results came from")
    s.add_argument("--out-md", required=True, help="paper/claims.md")
    s.add_argument("--out-json", required=True, help="paper/claims.json")
    s.set_defaults(func=cmd_claims)

    s = sub.add_parser("claims-readme", help="refresh (or --check) the README's generated claims section")
    s.add_argument("--claims", required=True, help="claims JSON (paper/claims.json or docs/claims_default.json)")
    s.add_argument("--readme", default="README.md", help="the README whose claims section is refreshed")
    s.add_argument("--check", action="store_true", help="fail if the section differs instead of writing")
    s.set_defaults(func=cmd_claims_readme)

    s = sub.add_parser("registry", help="list the figure registry, or write/check paper/README.md from it")
    s.add_argument("--write-readme", action="store_true", help="write paper/README.md from the registry")
    s.add_argument("--check", action="store_true", help="fail if paper/README.md differs from the registry")
    s.add_argument("--path", default="paper/README.md", help="path of the generated paper README")
    s.set_defaults(func=cmd_registry)

    s = sub.add_parser("bench", help="benchmarks (see `bench hessian --help`)")
    bsub = s.add_subparsers(dest="bench", required=True)
    b = bsub.add_parser("hessian", help="time dense Hessian extraction: curvlinops, torch.func, closed form, pipeline")
    b.add_argument("--widths", type=int, nargs="+", default=[8, 16, 32], help="model widths d to time")
    b.add_argument("--batch-size", type=int, default=64, help="samples in the Hessian batch")
    b.add_argument("--repeats", type=int, default=3, help="timed runs per method after one warm-up")
    b.add_argument("--memory-cap-gib", type=float, default=8.0, help="address-space cap of each method's process")
    b.add_argument("--timeout", type=float, default=600.0, help="seconds per method and size")
    b.add_argument("--out-dir", default="results/bench", help="folder for hessian_bench.{json,md}")
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser("bounds", help="Hessian bounds (Theorems 1, 6, Lemma 4) vs measured curvature")
    bsub = s.add_subparsers(dest="bounds_command", required=True)
    e = bsub.add_parser("evaluate", help="one stage: measured norms, project and paper bounds -> JSON")
    e.add_argument("--checkpoint", required=True, help="model checkpoint (init.pt or final.pt)")
    e.add_argument("--stage", required=True, choices=["init", "trained"], help="which checkpoint this is")
    e.add_argument("--spec", type=_json_arg, required=True, help="the experiment's config section")
    e.add_argument("--hessian", type=_json_arg, required=True, help="the 'hessian' config section")
    e.add_argument("--bounds", type=_json_arg, required=True, help="the 'bounds' config section")
    e.add_argument("--data-root", required=True, help=DATA_ROOT_HELP)
    e.add_argument("--norms", required=True, help="the hessian rule's <stage>_norms.json (measured CE blocks)")
    e.add_argument("--hessian-npz", default=None, help="the hessian rule's <stage>.npz (for the total norm)")
    e.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]")
    e.add_argument("--out", required=True, help="output JSON (results/<exp>/bounds/<stage>.json)")
    e.set_defaults(func=cmd_bounds_evaluate)
    t = bsub.add_parser("table", help="paper/tables/bounds.{csv,tex,md}")
    t.add_argument("--results", nargs="+", required=True, help="the bounds rule's JSON of each stage")
    t.add_argument("--out-dir", required=True, help="folder for the table (paper/tables)")
    t.add_argument("--claims-out", default=None, help="also write the claim rows (JSON list) here")
    t.set_defaults(func=cmd_bounds_table)

    s = sub.add_parser(
        "spectrum", help="matrix-free Hessian spectrum per block and of the whole model (Lanczos, Hutchinson, SLQ)"
    )
    s.add_argument("--checkpoint", required=True, help="trained checkpoint (final.pt)")
    s.add_argument("--spec", type=_json_arg, required=True, help="the experiment's config section as JSON")
    s.add_argument("--spectrum", type=_json_arg, required=True, help="the 'spectrum' config section")
    s.add_argument("--data-root", required=True, help=DATA_ROOT_HELP)
    s.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]; float64 throughout")
    s.add_argument("--out", required=True, help="output JSON (results/spectrum/<exp>.json)")
    s.set_defaults(func=cmd_spectrum)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command; the package's expected errors end in one line on stderr and exit status 1."""
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    set_threads(args.threads)
    try:
        args.func(args)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        # The package's own errors (ConfigError is a ValueError; DataError, TrainingError,
        # CheckpointError are RuntimeErrors) get one line; other RuntimeErrors propagate. Their modules are looked
        # up only if loaded, so light commands (claims, registry) do not import torch.
        own = tuple(
            getattr(sys.modules[m], n)
            for m, n in (
                ("transformer_hessian.data", "DataError"),
                ("transformer_hessian.train", "TrainingError"),
                ("transformer_hessian.checkpoints", "CheckpointError"),
            )
            if m in sys.modules
        )
        if isinstance(err, RuntimeError) and not isinstance(err, own):
            raise
        print(f"transformer-hessian {args.command}: error: {err}", file=sys.stderr)
        return 1
    except MemoryError:
        print(
            f"transformer-hessian {args.command}: error: out of memory; lower the model sizes "
            "(experiments.<name>.model.*) or the batch sizes in the config",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print(f"transformer-hessian {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
