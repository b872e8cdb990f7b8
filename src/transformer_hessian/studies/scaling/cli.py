"""The ``transformer-hessian scaling`` command (``models`` and ``aggregate``), added to the package's
parser by :func:`add_parser`."""

from __future__ import annotations

__all__ = ["add_parser"]


def _models(a) -> None:
    """Rule scaling_models: train and measure part ``--part`` of ``--jobs`` of the sweep's models."""
    from ...config.settings import Scaling
    from .step import models_step

    models_step(Scaling.from_dict(a.scaling), a.part, a.jobs, a.data_root, a.cache_dir, a.out, device=a.device)


def _aggregate(a) -> None:
    """Rule scaling: power laws across the sweep's models -> results/scaling/scaling.json."""
    from ...config.settings import Scaling
    from .step import aggregate_step

    aggregate_step(Scaling.from_dict(a.scaling), a.parts, a.out, summary_out=a.summary_out)


def add_parser(sub, json_arg, data_root_help: str) -> None:
    """Add ``scaling models`` / ``scaling aggregate`` to the subparsers ``sub``."""
    s = sub.add_parser("scaling", help="scaling study: D_k slope, k*, top Hessian eigenvalue across model sizes")
    ssub = s.add_subparsers(dest="scaling_command", required=True)
    m = ssub.add_parser("models", help="train and measure one part of the sweep's models (cached per model)")
    m.add_argument("--scaling", type=json_arg, required=True, help="the validated 'scaling' config section")
    m.add_argument("--part", type=int, default=0, help="this job's part (0-based): models part, part+jobs, ...")
    m.add_argument("--jobs", type=int, default=1, help="number of parts the sweep is split into")
    m.add_argument("--data-root", required=True, help=data_root_help)
    m.add_argument("--cache-dir", required=True, help="per-model results <id>.json and checkpoints <id>/")
    m.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]")
    m.add_argument("--out", required=True, help="output JSON: this part's model results")
    m.set_defaults(func=_models)
    g = ssub.add_parser("aggregate", help="power laws in the parameter count across all parts")
    g.add_argument("--scaling", type=json_arg, required=True, help="the validated 'scaling' config section")
    g.add_argument("--parts", nargs="+", required=True, help="the JSON of every part (scaling models)")
    g.add_argument("--out", required=True, help="output JSON (results/scaling/scaling.json)")
    g.add_argument(
        "--summary-out", default=None, help="also the summary section (JSON) for the summary rule's --section"
    )
    g.set_defaults(func=_aggregate)
