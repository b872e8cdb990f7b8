"""The ``transformer-hessian table1`` command, added to the package's parser by :func:`add_parser`."""

from __future__ import annotations

__all__ = ["add_parser"]


def _run(a) -> None:
    """Rule table1: Table 1 from the config and the runs' metrics."""
    from ...config.settings import Experiment, Hessian, Landscape
    from .step import run_step

    experiments = {n: Experiment.from_dict(e, f"experiments.{n}") for n, e in a.config["experiments"].items()}
    roles = {
        "hessian": Hessian.from_dict(a.config["hessian"]).experiment,
        "landscape": Landscape.from_dict(a.config["landscape"]).experiment,
    }
    run_step(experiments, roles, a.metrics, a.out_dir)


def add_parser(sub, json_arg, data_root_help: str) -> None:
    """Add ``table1`` to the subparsers ``sub`` (``data_root_help`` unused: Table 1 reads no data)."""
    s = sub.add_parser("table1", help="write paper/tables/table1.{csv,tex,md} (Table 1 of the paper)")
    s.add_argument("--config", type=json_arg, required=True, help="the whole validated config as JSON")
    s.add_argument("--metrics", nargs="+", required=True, help="metrics.json of each experiment (train rule)")
    s.add_argument("--out-dir", required=True, help="folder for the table (paper/tables)")
    s.set_defaults(func=_run)
