"""Command line of the reproduction pipeline; one command per Snakemake rule (see each command's --help).

Each Snakemake rule calls exactly one of these commands. Settings arrive as JSON (the
validated config section of the rule; inline, or ``@FILE`` for a JSON file, as the rules pass them), so the rule's ``params`` are the single source of truth;
each command parses a section once into its frozen dataclass (:mod:`.settings`, e.g.
``Experiment.from_dict``) and passes the typed object on.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys

# Many small kernels per job: idle OpenMP threads must sleep, not spin, or jobs that share the
# cores (snakemake runs several at once) slow each other down several-fold.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from ..util.env import set_threads, setup_logging
from ..util.files import log
from . import commands as commands

DATA_ROOT_HELP = "data root (data.root); the data set lies in DATA_ROOT/DATASET/"


def _json_arg(text: str) -> dict:
    """A settings argument: inline JSON, or ``@FILE`` for a JSON file (what the rules pass, so that
    their command lines stay short; see ``settings_file`` in workflow/rules/common.smk)."""
    source = "inline JSON"
    if text.startswith("@"):
        source = text[1:]
        try:
            with open(source, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as err:
            raise argparse.ArgumentTypeError(f"cannot read the settings file {source!r}: {err.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON ({source}): {err}") from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command (imports nothing heavy, so --help is instant)."""
    p = argparse.ArgumentParser(
        prog="transformer-hessian",
        description=__doc__.splitlines()[0],
        epilog="Options that take a config section as JSON also take @FILE, a JSON file holding it.",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    sub = p.add_subparsers(dest="command", required=True)
    for add in (
        _add_data_parsers,
        _add_report_parsers,
        _add_claims_parsers,
        _add_bench_parsers,
    ):
        add(sub)
    from ..scale.command import add_parser as add_curvature

    add_curvature(sub, _json_arg)
    from ..studies import study_parts

    for study in study_parts("cli"):  # every studies/<name>/cli.py, sorted by name: no edit here per study
        study.add_parser(sub, _json_arg, DATA_ROOT_HELP)
    return p


def _add_data_parsers(sub) -> None:
    """The subcommands download and train (``sub``: the command subparsers)."""
    s = sub.add_parser("download", help="fetch and verify a data set (digits needs no download)")
    s.add_argument("--dataset", required=True, help="digits, mnist or cifar100")
    s.add_argument(
        "--root", default=None, help="data root; files go to ROOT/DATASET/ (default: two levels above --manifest)"
    )
    s.add_argument("--mirror", default=None, help="base URL of a mirror to use instead of torchvision's ('' = none)")
    s.add_argument("--deadline", type=float, default=3600.0, help="seconds one file may take in all")
    s.add_argument(
        "--local", default=None, help="folder holding the files already (config key data.local; '' = none): no network"
    )
    s.add_argument("--manifest", required=True, help="JSON manifest written on success (ROOT/DATASET/manifest.json)")
    s.set_defaults(func=commands.cmd_download)

    s = sub.add_parser("train", help="train one experiment (resumes from its last epoch checkpoint)")
    s.add_argument("--experiment", required=True, help="experiment name (a key under experiments: in the config)")
    s.add_argument("--spec", type=_json_arg, required=True, help="the experiment's config section as JSON")
    s.add_argument("--data-root", required=True, help=DATA_ROOT_HELP)
    s.add_argument("--out", required=True, help="output folder of the experiment")
    s.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]")
    s.set_defaults(func=commands.cmd_train)


def _add_report_parsers(sub) -> None:
    """The subcommands tables, summary and report-pages (``sub``: the command subparsers)."""
    s = sub.add_parser("tables", help="write paper/tables/run_summary.{csv,tex,md}")
    s.add_argument("--metrics", nargs="+", required=True, help="metrics.json of each experiment (train rule)")
    s.add_argument("--out-dir", required=True, help="folder for the tables (paper/tables)")
    s.set_defaults(func=commands.cmd_tables)

    s = sub.add_parser("summary", help="write paper/summary.json")
    s.add_argument("--config-hash", required=True, help="hash of the validated config the results came from")
    s.add_argument("--metrics", nargs="+", required=True, help="metrics.json of each experiment (train rule)")
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
    s.add_argument(
        "--section", action="append", default=[], help="NAME=PATH: a study's summary section (JSON), as key NAME"
    )
    s.add_argument(
        "--sections",
        type=_json_arg,
        default=None,
        help="the studies' summary sections as a JSON object {NAME: PATH} (or @FILE; the rule's form), as --section",
    )
    s.add_argument("--out", required=True, help="output JSON (paper/summary.json)")
    s.set_defaults(func=commands.cmd_summary)

    s = sub.add_parser("report-pages", help="HTML pages of the review report (snakemake --report)")
    s.add_argument("--claims", required=True, help="paper/claims.json (claims rule)")
    s.add_argument("--summary", required=True, help="paper/summary.json (summary rule): provenance")
    s.add_argument("--tables", nargs="*", default=[], help="paper/tables/*.csv: one page each")
    s.add_argument("--config", type=_json_arg, required=True, help="the validated config as JSON (or @FILE)")
    s.add_argument("--out-dir", required=True, help="folder of the pages (results/report)")
    s.set_defaults(func=commands.cmd_report_pages)


def _add_claims_parsers(sub) -> None:
    """The subcommands claims, claims-readme, claims-compare and registry (``sub``: the command subparsers)."""
    s = sub.add_parser("claims", help="a verdict on each empirical claim of the paper -> claims.{md,json}")
    s.add_argument("--metrics-hessian", required=True, help="metrics.json of the Hessian experiment")
    s.add_argument("--metrics-landscape", required=True, help="metrics.json of the landscape experiment")
    s.add_argument(
        "--rows", action="append", default=[], metavar="PATH", help="JSON list of finished claim rows to append"
    )
    s.add_argument(
        "--own-rows-at",
        type=int,
        default=None,
        help="put the pipeline's own rows (training accuracy) after this many --rows files (default: last)",
    )
    s.add_argument("--config-hash", default=None, help="hash of the config the results came from")
    s.add_argument("--out-md", required=True, help="paper/claims.md")
    s.add_argument("--out-json", required=True, help="paper/claims.json")
    s.set_defaults(func=commands.cmd_claims)

    s = sub.add_parser(
        "claims-readme",
        help="refresh (or --check) the generated claims tables (docs/claims.md) and the README's summary",
    )
    s.add_argument("--claims", required=True, help="claims JSON (paper/claims.json or docs/claims_default.json)")
    s.add_argument("--readme", default="README.md", help="the README whose claims summary is refreshed")
    s.add_argument("--doc", default="docs/claims.md", help="the page with the full verdict tables")
    s.add_argument("--check", action="store_true", help="fail if the section differs instead of writing")
    s.add_argument(
        "--tag", default="claims", help="which table: claims (the default's) or claims-mnist (docs/claims_mnist.json)"
    )
    s.set_defaults(func=commands.cmd_claims_readme)

    s = sub.add_parser("claims-compare", help="fail if the verdicts of a run differ from a committed snapshot")
    s.add_argument("--claims", required=True, help="the run's claims JSON (paper/claims.json)")
    s.add_argument("--snapshot", required=True, help="the committed snapshot (docs/claims_mnist.json)")
    s.set_defaults(func=commands.cmd_claims_compare)

    s = sub.add_parser(
        "notebook",
        help="run a figure notebook in this process (what the figure rules do; papermill runs it as well)",
    )
    s.add_argument("notebook", help="the notebook (notebooks/<name>.ipynb)")
    s.add_argument("executed", help="where to write the executed notebook")
    s.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "VALUE"),
        help="a notebook parameter, typed as papermill's -p types it (repeat for each)",
    )
    s.set_defaults(func=commands.cmd_notebook)

    s = sub.add_parser("registry", help="list the figure registry, or write/check paper/README.md from it")
    s.add_argument("--write-readme", action="store_true", help="write paper/README.md from the registry")
    s.add_argument("--check", action="store_true", help="fail if paper/README.md differs from the registry")
    s.add_argument("--path", default="paper/README.md", help="path of the generated paper README")
    s.set_defaults(func=commands.cmd_registry)


def _add_bench_parsers(sub) -> None:
    """The subcommand bench with its own subcommands (``sub``: the command subparsers)."""
    s = sub.add_parser("bench", help="benchmarks (see `bench hessian --help`)")
    bsub = s.add_subparsers(dest="bench", required=True)
    b = bsub.add_parser("hessian", help="time dense Hessian extraction: curvlinops, torch.func, closed form, pipeline")
    b.add_argument(
        "--widths", type=int, nargs="+", default=None, help="model widths d to time (default 8 16 32; paper shape 16)"
    )
    b.add_argument(
        "--batch-size", type=int, default=None, help="samples in the Hessian batch (default 64; paper shape 128)"
    )
    b.add_argument("--repeats", type=int, default=3, help="timed runs per method after one warm-up")
    b.add_argument(
        "--memory-cap-gib",
        type=float,
        default=None,
        help="address-space cap of each method's process (GiB; default 8, paper shape 16)",
    )
    b.add_argument(
        "--timeout", type=float, default=None, help="seconds per method and size (default 600; paper shape 3600)"
    )
    b.add_argument("--out-dir", default="results/bench", help="folder for hessian_bench.{json,md}")
    b.add_argument(
        "--paper-shape",
        action="store_true",
        help="the paper's Hessian problem: 28x28 images, patch 4 (49 tokens), d=16, d_ff=64, batch 128; "
        "curvlinops (a) once vs the closed form (c) unless --widths/--batch-size/--methods say otherwise",
    )
    b.add_argument("--methods", nargs="+", default=None, help="method labels to run (a-e; default all)")
    b.add_argument("--device", default=None, help="cpu (default), cuda, or auto (cuda when available)")
    b.add_argument("--reference-cache", default=None, help="folder caching the reference Hessian and its timing")
    b.add_argument(
        "--reference-repeats",
        type=int,
        default=None,
        help="timed runs of the reference (a) (default --repeats; paper shape 1, without warm-up): "
        "the speed-ups divide by its median, so more runs make them steadier",
    )
    b = bsub.add_parser("train", help="training throughput: images/s, data-loading share, TFLOP/s per experiment")
    b.add_argument("--config", nargs="+", default=["config/config.yaml"], help="config(s) whose experiments are timed")
    b.add_argument("--experiments", nargs="+", default=None, help="experiment names (default: all)")
    b.add_argument("--steps", type=int, default=20, help="timed training steps per experiment")
    b.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    b.add_argument("--synthetic", action="store_true", help="random tensors of the data set's shape, not the files")
    b.add_argument("--device", default=None, help="auto, cpu or cuda[:N] (default: the config's device)")
    b.add_argument("--out-dir", default="results/bench", help="folder for train_bench.{json,md}")
    b = bsub.add_parser("encoder", help="exact_hessian of torch encoder layers vs curvlinops and autograd")
    b.add_argument("--shapes", nargs="+", default=["paper", "gpt", "stack2"], help="paper, gpt, stack2")
    b.add_argument(
        "--methods", nargs="+", default=["exact", "curvlinops", "autograd"], help="exact curvlinops autograd"
    )
    b.add_argument("--batch-size", type=int, default=None, help="override every shape's batch size")
    b.add_argument("--repeats", type=int, default=3, help="timed runs of exact_hessian (the references run once)")
    b.add_argument("--timeout", type=float, default=3600.0, help="seconds per method and shape")
    b.add_argument("--out-dir", default="results/bench", help="folder for encoder_bench.{json,md}")
    b.add_argument(
        "--growth",
        action="store_true",
        help="instead: exact_hessian's time and memory vs d, nhead, T, layers (encoder_growth.{json,md})",
    )
    b.add_argument("--quick", action="store_true", help="with --growth: a seconds-long sweep at toy sizes")
    b.add_argument("--factors", nargs="+", default=None, help="with --growth: the sweeps to run (d nhead T layers)")
    b = bsub.add_parser("models", help="the engine's dense Hessian and HVPs of language models vs every correct peer")
    b.add_argument("--cases", nargs="+", default=["gpt2-like", "llama-like"], help="gpt2-like llama-like tiny")
    b.add_argument("--rows", type=int, default=256, help="rows of H each peer computes (its time is scaled to P rows)")
    b.add_argument("--hvps", type=int, default=8, help="Hessian-vector products timed per method")
    b.add_argument("--out-dir", default="results/bench", help="folder for models_bench.{json,md}")
    b.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N: where the models, peers and H live")
    b.add_argument("--block-mib", type=int, default=0, help="the engine's block of tangents in MiB (0: the default)")
    b.add_argument(
        "--peer-chunk", type=int, default=64, help="rows per call of the vmapped peers (torch.func, autograd)"
    )
    _add_bench_scale_parser(bsub)
    s.set_defaults(func=commands.cmd_bench)


def _add_bench_scale_parser(bsub) -> None:
    """``bench scale`` (``bsub``: the bench subparsers)."""
    b = bsub.add_parser(
        "scale", help="GPT-2 small: the engine's HVP vs autograd and curvlinops; a data set on one and two processes"
    )
    b.add_argument("--tokens", type=int, nargs="+", default=None, help="sequence lengths (default 128 1024)")
    b.add_argument("--repeats", type=int, default=3, help="timed products per method after one warm-up (median)")
    b.add_argument("--quick", action="store_true", help="a tiny GPT-2 in float64 at short lengths (seconds)")
    b.add_argument("--dtype", default=None, choices=["float32", "float64"], help="default float32 (--quick float64)")
    b.add_argument("--data-batches", type=int, default=4, help="batches of the data-set part")
    b.add_argument("--data-tokens", type=int, default=None, help="tokens a batch of the data-set part (default 128)")
    b.add_argument("--parts", nargs="+", default=["methods", "data"], choices=["methods", "data"], help="what to run")
    b.add_argument("--timeout", type=float, default=1800.0, help="seconds per method and length, per data-set run")
    b.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    b.add_argument("--out-dir", default="results/bench", help="folder for scale_bench.{json,md}")
    b = bsub.add_parser("precision", help="a float32 / bfloat16 model's data-set products against float64")
    b.add_argument("--out-dir", default="results/bench", help="folder for precision_bench.{json,md}")


def main(argv: list[str] | None = None) -> int:
    """Run one command; the package's expected errors end in one line on stderr and exit status 1."""
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    set_threads(args.threads)
    try:
        args.func(args)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        # The package's own errors (errors.EXPECTED: ConfigError is a ValueError; DataError, TrainingError,
        # CheckpointError are RuntimeErrors) get one line; other RuntimeErrors propagate. errors.py imports
        # nothing, so light commands (claims, registry) still do not import torch.
        from ..errors import EXPECTED

        if isinstance(err, RuntimeError) and not isinstance(err, EXPECTED):
            raise
        log.debug("traceback of the error below", exc_info=True)  # -v: the traceback in the log
        print(f"transformer-hessian {args.command}: error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        # a full disk, a name too long, no permission: one line naming the file and what to do
        log.debug("traceback of the error below", exc_info=True)
        where = f" ({err.filename})" if err.filename else ""
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            what = f"the disk is full{where}; free some space and run again (finished steps are kept; the run resumes)"
        else:
            what = f"{err.strerror or err}{where}; check the path and its permissions"
        print(f"transformer-hessian {args.command}: error: {what}", file=sys.stderr)
        return 1
    except MemoryError:
        log.debug("traceback of the error below", exc_info=True)
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
