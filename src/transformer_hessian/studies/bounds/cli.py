"""The ``transformer-hessian bounds`` command (``bounds evaluate``, ``bounds table``), added to the
package's parser by :func:`add_parser`."""

from __future__ import annotations

__all__ = ["add_parser"]


def _evaluate(a) -> None:
    """Rule bounds: measured norms against the project's and the paper's bounds, one stage."""
    from ...config.settings import Bounds, Experiment, Hessian
    from .step import evaluate_step

    hessian = Hessian.from_dict(a.hessian)
    evaluate_step(
        checkpoint=a.checkpoint,
        stage=a.stage,
        spec=Experiment.from_dict(a.spec, f"experiments.{hessian.experiment}"),
        hessian=hessian,
        bounds=Bounds.from_dict(a.bounds),
        data_root=a.data_root,
        norms=a.norms,
        out=a.out,
        hessian_npz=a.hessian_npz,
        device=a.device,
    )


def _table(a) -> None:
    """Rule bounds_table: paper/tables/bounds.* and the bound claim rows."""
    from .step import table_step

    table_step(a.results, a.out_dir, claims_out=a.claims_out, summary_out=a.summary_out)


def add_parser(sub, json_arg, data_root_help: str) -> None:
    """Add ``bounds`` (with its subcommands ``evaluate`` and ``table``) to the subparsers ``sub``."""
    s = sub.add_parser("bounds", help="Hessian bounds (Theorems 1, 6, Lemma 4) vs measured curvature")
    bsub = s.add_subparsers(dest="bounds_command", required=True)
    e = bsub.add_parser("evaluate", help="one stage: measured norms, project and paper bounds -> JSON")
    e.add_argument("--checkpoint", required=True, help="model checkpoint (init.pt or final.pt)")
    e.add_argument("--stage", required=True, choices=["init", "trained"], help="which checkpoint this is")
    e.add_argument("--spec", type=json_arg, required=True, help="the experiment's config section")
    e.add_argument("--hessian", type=json_arg, required=True, help="the 'hessian' config section")
    e.add_argument("--bounds", type=json_arg, required=True, help="the 'bounds' config section")
    e.add_argument("--data-root", required=True, help=data_root_help)
    e.add_argument("--norms", required=True, help="the hessian rule's <stage>_norms.json (measured CE blocks)")
    e.add_argument("--hessian-npz", default=None, help="the hessian rule's <stage>.npz (for the total norm)")
    e.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]")
    e.add_argument("--out", required=True, help="output JSON (results/<exp>/bounds/<stage>.json)")
    e.set_defaults(func=_evaluate)
    t = bsub.add_parser("table", help="paper/tables/bounds.{csv,tex,md}")
    t.add_argument("--results", nargs="+", required=True, help="the bounds rule's JSON of each stage")
    t.add_argument("--out-dir", required=True, help="folder for the table (paper/tables)")
    t.add_argument("--claims-out", default=None, help="also write the claim rows (JSON list) here")
    t.add_argument("--summary-out", default=None, help="also write the study's summary.json section (JSON) here")
    t.set_defaults(func=_table)
