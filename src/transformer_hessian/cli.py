"""Command line of the pipeline: ``transformer-hessian <command> --help``.

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


def _json_arg(text: str) -> dict:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON: {err}") from None


def cmd_download(a) -> None:
    from .data import download, write_manifest

    root = a.root or Path(a.manifest).resolve().parent.parent
    manifest = download(a.dataset, root, mirror=a.mirror or None, deadline=a.deadline)
    write_manifest(manifest, a.manifest)
    log.info("%s ready under %s", a.dataset, Path(root) / a.dataset)


def cmd_train(a) -> None:
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
    from .hessian import block_norms, compute_hessian, group_layout, weight_norms
    from .utils import save_npz, write_json

    model, images, labels = _hessian_inputs(a)
    block = a.hessian["block"]
    H, method, seconds = compute_hessian(model, block, images, labels, a.hessian["method"])
    names, shapes, offsets = group_layout(model, block)
    Hn = H.cpu().numpy()
    save_npz(a.out_npz, H=Hn, names=names, offsets=offsets, shapes=shapes)
    norms = {
        "stage": a.stage, "experiment": a.hessian["experiment"], "block": block, "method": method,
        "seconds": seconds, "batch_size": int(len(images)), "n_params": int(offsets[-1]),
        "blocks": block_norms(Hn, offsets, names), "weights": weight_norms(model, block),
    }
    write_json(norms, a.out_norms)
    log.info("hessian %s: %d x %d via %s in %.2f s", a.stage, Hn.shape[0], Hn.shape[1], method, seconds)


def cmd_theory(a) -> None:
    from .checks import closed_form_check
    from .utils import write_json

    model, images, labels = _hessian_inputs(a)
    if model.cfg.depth != 1:
        raise ValueError(
            f"theory: experiment {a.hessian['experiment']!r} has {model.cfg.depth} blocks; the closed-form "
            "check needs a single-block model (model.depth: 1)"
        )
    result = closed_form_check(model, images, labels, tolerance=a.tolerance)
    result["stage"] = a.stage
    write_json(result, a.out)
    worst = max(result["blocks"], key=lambda r: r["rel_error"])
    log.info("closed form vs curvlinops (%s): max relative error %.3e (block %s-%s)", a.stage,
             result["max_rel_error"], worst["row"], worst["col"])
    if not result["passed"]:
        raise ValueError(
            f"closed-form Hessian disagrees with curvlinops at stage {a.stage}: relative error "
            f"{result['max_rel_error']:.3e} in block ({worst['row']}, {worst['col']}) exceeds "
            f"theory.tolerance={a.tolerance:g} (details in {a.out})"
        )


def cmd_landscape(a) -> None:
    from .landscape import analyse_landscape
    from .train import load_experiment_data, load_model, per_sample_losses
    from .utils import write_json

    from .utils import resolve_device

    data = load_experiment_data(a.spec, a.data_root)
    model = load_model(a.checkpoint, device=resolve_device(a.device))
    x, y = data["train_x"], data["train_y"]
    if a.landscape.get("max_samples"):
        x, y = x[: a.landscape["max_samples"]], y[: a.landscape["max_samples"]]
    losses = per_sample_losses(model, x, y)
    L = a.landscape
    result = analyse_landscape(losses, n_orderings=L["n_orderings"], seed=L["seed"], ema_factor=L["ema_factor"],
                               k_min=L["k_min"], n_bootstrap=L["n_bootstrap"])
    result["experiment"] = L["experiment"]
    write_json(result, a.out)
    log.info("landscape: slope %.3f, 95%% CI [%.3f, %.3f]", result["slope"], *result["slope_ci95"])
    if not result["ci95_contains_minus_one"]:
        log.warning("landscape: the 95%% interval [%.3f, %.3f] of the fitted slope excludes -1, the paper's "
                    "O(1/k) rate (Theorem 7's bound 2L/(k+1) itself %s)", *result["slope_ci95"],
                    "holds" if result["bound_holds"] else "is violated")


def cmd_tables(a) -> None:
    from .report import block_norm_table, closed_form_table, run_summary_table, write_table
    from .utils import read_json

    out = Path(a.out_dir)
    write_table(block_norm_table(read_json(a.norms_init), read_json(a.norms_trained)), out / "block_norms",
                "Hessian block norms of the loss w.r.t. (W_Q, W_K, W_V, W_1, W_2) at initialisation and after training")
    metrics = {m["experiment"]: m for m in map(read_json, a.metrics)}
    write_table(run_summary_table(metrics), out / "run_summary", "Runs behind the figures")
    checks = {c["stage"]: c for c in map(read_json, a.theory)}
    write_table(closed_form_table(checks), out / "closed_form_check",
                "Closed-form Hessian vs curvlinops: errors and functional share per block pair")


def cmd_summary(a) -> None:
    from .report import build_summary
    from .utils import write_json

    figures = {Path(p).stem: p for p in a.figures}
    tables = {Path(p).stem: p for p in a.tables}
    write_json(build_summary(a.config_hash, a.norms, a.metrics, a.landscape, a.theory, figures, tables), a.out)


def cmd_bench(a) -> None:
    from .bench import run_bench

    run_bench(a)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="transformer-hessian", description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("download", help="fetch and verify a data set (digits needs no download)")
    s.add_argument("--dataset", required=True)
    s.add_argument("--root", default=None,
                   help="data root; files go to ROOT/DATASET/ (default: two levels above --manifest)")
    s.add_argument("--mirror", default=None, help="base URL of a mirror to use instead of torchvision's ('' = none)")
    s.add_argument("--deadline", type=float, default=3600.0, help="seconds one file may take in all")
    s.add_argument("--manifest", required=True, help="JSON manifest written on success (ROOT/DATASET/manifest.json)")
    s.set_defaults(func=cmd_download)

    s = sub.add_parser("train", help="train one experiment (resumes from its last epoch checkpoint)")
    s.add_argument("--experiment", required=True)
    s.add_argument("--spec", type=_json_arg, required=True, help="the experiment's config section as JSON")
    s.add_argument("--data-root", required=True)
    s.add_argument("--out", required=True, help="output folder of the experiment")
    s.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]")
    s.set_defaults(func=cmd_train)

    for name, helptext in (("hessian", "exact dense Hessian of one block's five weight groups"),
                           ("theory", "closed-form Hessian vs curvlinops on the same batch")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("--checkpoint", required=True)
        s.add_argument("--stage", required=True, choices=["init", "trained"])
        s.add_argument("--spec", type=_json_arg, required=True, help="the experiment's config section")
        s.add_argument("--hessian", type=_json_arg, required=True, help="the 'hessian' config section")
        s.add_argument("--data-root", required=True)
        s.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]; float64 throughout")
        if name == "hessian":
            s.add_argument("--out-npz", required=True)
            s.add_argument("--out-norms", required=True)
            s.set_defaults(func=cmd_hessian)
        else:
            s.add_argument("--tolerance", type=float, default=1e-8)
            s.add_argument("--out", required=True)
            s.set_defaults(func=cmd_theory)

    s = sub.add_parser("landscape", help="per-sample losses at w*, |L_{k+1}-L_k| and its log-log slope")
    s.add_argument("--checkpoint", required=True)
    s.add_argument("--spec", type=_json_arg, required=True)
    s.add_argument("--landscape", type=_json_arg, required=True, help="the 'landscape' config section")
    s.add_argument("--data-root", required=True)
    s.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]")
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_landscape)

    s = sub.add_parser("tables", help="write paper/tables/*.{csv,tex,md}")
    s.add_argument("--norms-init", required=True)
    s.add_argument("--norms-trained", required=True)
    s.add_argument("--metrics", nargs="+", required=True)
    s.add_argument("--theory", nargs="+", required=True)
    s.add_argument("--out-dir", required=True)
    s.set_defaults(func=cmd_tables)

    s = sub.add_parser("summary", help="write paper/summary.json")
    s.add_argument("--config-hash", required=True)
    s.add_argument("--norms", nargs="+", required=True)
    s.add_argument("--metrics", nargs="+", required=True)
    s.add_argument("--landscape", required=True)
    s.add_argument("--theory", nargs="+", required=True)
    s.add_argument("--figures", nargs="+", default=[])
    s.add_argument("--tables", nargs="+", default=[])
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_summary)

    s = sub.add_parser("bench", help="benchmarks (see `bench hessian --help`)")
    bsub = s.add_subparsers(dest="bench", required=True)
    b = bsub.add_parser("hessian", help="time dense Hessian extraction: curvlinops, torch.func, closed form, pipeline")
    b.add_argument("--widths", type=int, nargs="+", default=[8, 16, 32])
    b.add_argument("--batch-size", type=int, default=64)
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--memory-cap-gib", type=float, default=8.0)
    b.add_argument("--timeout", type=float, default=600.0, help="seconds per method and size")
    b.add_argument("--out-dir", default="results/bench")
    s.set_defaults(func=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    set_threads(args.threads)
    from .checkpoints import CheckpointError
    from .config import ConfigError
    from .data import DataError
    from .train import TrainingError

    try:
        args.func(args)
    except (DataError, ConfigError, TrainingError, CheckpointError, ValueError, FileNotFoundError) as err:
        print(f"transformer-hessian {args.command}: error: {err}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"transformer-hessian {args.command}: error: out of memory; lower the model sizes "
              "(experiments.<name>.model.*) or the batch sizes in the config", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"transformer-hessian {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
