"""The ``transformer-hessian dynamics`` command, added to the package's parser by :func:`add_parser`."""

from __future__ import annotations

__all__ = ["add_parser"]


def _run(a) -> None:
    """Rule dynamics: replay the first training steps and record the snapshots of Figures 7-11."""
    from ...config.settings import Dynamics, Experiment, Hessian
    from .step import run_step

    hessian = Hessian.from_dict(a.hessian)
    run_step(
        a.checkpoint,
        Experiment.from_dict(a.spec, f"experiments.{hessian.experiment}"),
        hessian,
        Dynamics.from_dict(a.dynamics),
        a.data_root,
        a.out_npz,
        a.out_json,
        saved_init_hessian=a.saved_init_hessian,
        tolerance=a.tolerance,
        device=a.device,
    )


def add_parser(sub, json_arg, data_root_help: str) -> None:
    """Add ``dynamics`` to the subparsers ``sub``."""
    s = sub.add_parser("dynamics", help="replay the first training steps; weights, norms, Hessian blocks (App. A.1)")
    s.add_argument("--checkpoint", required=True, help="the run's init.pt (epoch checkpoints beside it are compared)")
    s.add_argument("--spec", type=json_arg, required=True, help="the experiment's config section")
    s.add_argument("--hessian", type=json_arg, required=True, help="the 'hessian' config section")
    s.add_argument("--dynamics", type=json_arg, required=True, help="the 'dynamics' config section")
    s.add_argument("--data-root", required=True, help=data_root_help)
    s.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]")
    s.add_argument("--saved-init-hessian", default=None, help="hessian rule's init .npz: must equal step 0")
    s.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="largest relative error of the replayed step-0 Hessian vs the saved init Hessian "
        "(default: the schema's theory.tolerance)",
    )
    s.add_argument("--out-npz", required=True, help="snapshots: weights and diagonal Hessian blocks (.npz)")
    s.add_argument("--out-json", required=True, help="snapshots: norms and Hessian block norms (JSON)")
    s.set_defaults(func=_run)
