"""The ``transformer-hessian landscape`` command, added to the package's parser by :func:`add_parser`."""

from __future__ import annotations

__all__ = ["add_parser"]


def _run(a) -> None:
    """Rule landscape: per-sample losses at w*, D_k over orderings and the fitted slope."""
    from ...config.settings import Experiment, Landscape
    from .step import run_step

    landscape = Landscape.from_dict(a.landscape)
    spec = Experiment.from_dict(a.spec, f"experiments.{landscape.experiment}")
    run_step(
        a.checkpoint, spec, landscape, a.data_root, a.out, device=a.device, metrics=a.metrics, claims_out=a.claims_out
    )


def add_parser(sub, json_arg, data_root_help: str) -> None:
    """Add ``landscape`` to the subparsers ``sub``."""
    s = sub.add_parser("landscape", help="per-sample losses at w*, |L_{k+1}-L_k| and its log-log slope")
    s.add_argument("--checkpoint", required=True, help="trained checkpoint w* (final.pt)")
    s.add_argument("--spec", type=json_arg, required=True, help="the experiment's config section as JSON")
    s.add_argument("--landscape", type=json_arg, required=True, help="the 'landscape' config section")
    s.add_argument("--data-root", required=True, help=data_root_help)
    s.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]")
    s.add_argument("--out", required=True, help="output JSON (landscape.json)")
    s.add_argument("--metrics", default=None, help="the experiment's metrics.json (train rule), for the claim rows")
    s.add_argument("--claims-out", default=None, help="also write the claim rows (JSON list) here (needs --metrics)")
    s.set_defaults(func=_run)
