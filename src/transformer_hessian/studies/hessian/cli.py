"""The ``transformer-hessian hessian`` and ``transformer-hessian theory`` commands, added to the
package's parser by :func:`add_parser`."""

from __future__ import annotations

__all__ = ["add_parser"]


def _run_hessian(a) -> None:
    """Rule hessian: dense Hessian of one block's five groups and its block norms."""
    from ...config.settings import Experiment, Hessian
    from .step import hessian_step

    hessian = Hessian.from_dict(a.hessian)
    spec = Experiment.from_dict(a.spec, f"experiments.{hessian.experiment}")
    hessian_step(a.checkpoint, a.stage, spec, hessian, a.data_root, a.out_npz, a.out_norms, device=a.device)


def _run_theory(a) -> None:
    """Rule theory: check the saved Hessian against curvlinops products; fail above the tolerance."""
    from ...config.settings import Experiment, Hessian
    from .step import theory_step

    hessian = Hessian.from_dict(a.hessian)
    theory_step(
        a.checkpoint,
        a.stage,
        Experiment.from_dict(a.spec, f"experiments.{hessian.experiment}"),
        hessian,
        a.data_root,
        a.hessian_npz,
        a.out,
        norms=a.norms,
        probes=a.probes,
        tolerance=a.tolerance,
        device=a.device,
    )


def _run_report(a) -> None:
    """Rule hessian_report: the study's tables, claim rows and summary sections."""
    from .step import report_step

    report_step(
        a.hessian_init,
        a.norms,
        a.theory,
        a.metrics,
        a.tables_dir,
        a.claims_out,
        a.hessian_section_out,
        a.theory_section_out,
    )


def add_parser(sub, json_arg, data_root_help: str) -> None:
    """Add ``hessian``, ``theory`` and ``hessian-report`` to the subparsers ``sub``."""
    s = sub.add_parser("hessian-report", help="the Hessian study's tables, claim rows and summary.json sections")
    s.add_argument("--hessian-init", required=True, help="the Hessian at initialisation (hessian rule, init.npz)")
    s.add_argument("--norms", nargs=2, required=True, help="the norms JSON of both stages (hessian rule)")
    s.add_argument("--theory", nargs=2, required=True, help="the check of both stages (theory rule)")
    s.add_argument("--metrics", required=True, help="metrics.json of the Hessian experiment (train rule)")
    s.add_argument(
        "--tables-dir", required=True, help="folder for block_norms.* and closed_form_check.* (paper/tables)"
    )
    s.add_argument("--claims-out", required=True, help="the claim rows of Figures 3-5 (JSON list)")
    s.add_argument("--hessian-section-out", required=True, help="summary.json section 'hessian' (JSON)")
    s.add_argument("--theory-section-out", required=True, help="summary.json section 'theory' (JSON)")
    s.set_defaults(func=_run_report)
    for name, helptext in (
        ("hessian", "exact dense Hessian of one block's five weight groups"),
        ("theory", "closed-form Hessian vs curvlinops on the same batch"),
    ):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("--checkpoint", required=True, help="model checkpoint (init.pt or final.pt)")
        s.add_argument("--stage", required=True, choices=["init", "trained"], help="which checkpoint this is")
        s.add_argument("--spec", type=json_arg, required=True, help="the experiment's config section")
        s.add_argument("--hessian", type=json_arg, required=True, help="the 'hessian' config section")
        s.add_argument("--data-root", required=True, help=data_root_help)
        s.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]; float64 throughout")
        if name == "hessian":
            s.add_argument("--out-npz", required=True, help="dense Hessian with group names, shapes, offsets")
            s.add_argument("--out-norms", required=True, help="JSON of block and weight norms")
            s.set_defaults(func=_run_hessian)
        else:
            s.add_argument(
                "--tolerance",
                type=float,
                default=None,
                help="largest relative error that passes (default: the schema's theory.tolerance)",
            )
            s.add_argument("--hessian-npz", required=True, help="the Hessian the hessian rule saved (.npz)")
            s.add_argument("--norms", default=None, help="its norms JSON (names the method that computed it)")
            s.add_argument(
                "--probes",
                type=int,
                default=None,
                help="random probe vectors per parameter group (default: the schema's theory.probes)",
            )
            s.add_argument("--out", required=True, help="JSON of errors per block pair")
            s.set_defaults(func=_run_theory)
