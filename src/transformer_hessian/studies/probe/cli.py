"""The ``transformer-hessian probe`` command, added to the package's parser by :func:`add_parser`."""

from __future__ import annotations

__all__ = ["add_parser"]


def _run(a) -> None:
    """Rule probe: Theorem 7 off w*, the Taylor model and Assumption 1 around w*."""
    from ...config.settings import Experiment, Probe
    from .step import run_step

    run_step(
        a.checkpoint,
        Experiment.from_dict(a.spec, f"experiments.{a.experiment or '<landscape.experiment>'}"),
        Probe.from_dict(a.probe),
        a.data_root,
        a.out,
        init_checkpoint=a.init_checkpoint,
        device=a.device,
        experiment=a.experiment,
        claims_out=a.claims_out,
    )


def add_parser(sub, json_arg, data_root_help: str) -> None:
    """Add ``probe`` to the subparsers ``sub``."""
    s = sub.add_parser("probe", help="landscape probes at w*: Theorem 7 off w*, Taylor model, Assumption 1")
    s.add_argument(
        "--experiment", default=None, help="the experiment's name (landscape.experiment), for messages and the result"
    )
    s.add_argument("--checkpoint", required=True, help="trained checkpoint w* (final.pt)")
    s.add_argument("--init-checkpoint", default=None, help="weights at initialisation (Assumption 1 control)")
    s.add_argument("--spec", type=json_arg, required=True, help="the experiment's config section as JSON")
    s.add_argument("--probe", type=json_arg, required=True, help="the 'probe' config section")
    s.add_argument("--data-root", required=True, help=data_root_help)
    s.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]; float64 throughout")
    s.add_argument("--out", required=True, help="output JSON (results/<exp>/probe/probe.json)")
    s.add_argument("--claims-out", default=None, help="also its claim rows (JSON list) for the claims rule's --rows")
    s.set_defaults(func=_run)
