"""The ``transformer-hessian architectures`` command (``run`` and ``report``), added to the
package's parser by :func:`add_parser`."""

from __future__ import annotations

__all__ = ["add_parser"]


def _run(a) -> None:
    from ...config.settings import Architectures, Experiment
    from .step import run_step

    run_step(
        spec=Experiment.from_dict(a.spec, f"experiments.{a.experiment}"),
        experiment=a.experiment,
        section=Architectures.from_dict(a.architectures).to_dict(),  # exact keys, the error names one
        data_root=a.data_root,
        out=a.out,
    )


def _report(a) -> None:
    from .step import report_step

    report_step(a.result, a.out_dir, a.claims_out, a.summary_out)


def add_parser(sub, json_arg, data_root_help: str) -> None:
    """Add ``architectures run`` / ``architectures report`` to the subparsers ``sub``."""
    s = sub.add_parser("architectures", help="architecture study (beyond the paper): Hessian blocks of torch encoders")
    asub = s.add_subparsers(dest="architectures_command", required=True)
    r = asub.add_parser("run", help="train every architecture and measure its Hessian -> JSON")
    r.add_argument("--experiment", required=True, help="the Hessian experiment's name (hessian.experiment)")
    r.add_argument("--spec", type=json_arg, required=True, help="that experiment's config section (its data)")
    r.add_argument("--architectures", type=json_arg, required=True, help="the 'architectures' config section")
    r.add_argument("--data-root", required=True, help=data_root_help)
    r.add_argument("--out", required=True, help="output JSON (results/architectures/<exp>/architectures.json)")
    r.set_defaults(func=_run)
    t = asub.add_parser("report", help="paper/tables/architectures.*, claim rows and the summary section")
    t.add_argument("--result", required=True, help="the architectures rule's JSON")
    t.add_argument("--out-dir", required=True, help="folder for the table (paper/tables)")
    t.add_argument("--claims-out", required=True, help="claim rows (JSON list) for the claims rule")
    t.add_argument("--summary-out", required=True, help="summary section (JSON) for the summary rule")
    t.set_defaults(func=_report)
