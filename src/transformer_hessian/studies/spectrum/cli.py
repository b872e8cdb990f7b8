"""The ``transformer-hessian spectrum`` command, added to the package's parser by :func:`add_parser`."""

from __future__ import annotations

__all__ = ["add_parser"]


def _run(a) -> None:
    """Rule spectrum_compute: matrix-free top eigenvalues, traces, densities and block-pair norms."""
    from ...config.settings import Experiment, Spectrum
    from .step import run_step

    spectrum = Spectrum.from_dict(a.spectrum)
    spec = Experiment.from_dict(a.spec, f"experiments.{spectrum.experiment or '<spectrum.experiment>'}")
    run_step(a.checkpoint, spec, spectrum, a.data_root, a.out, summary_out=a.summary_out, device=a.device)


def add_parser(sub, json_arg, data_root_help: str) -> None:
    """Add ``spectrum`` to the subparsers ``sub``."""
    s = sub.add_parser(
        "spectrum", help="matrix-free Hessian spectrum per block and of the whole model (Lanczos, Hutchinson, SLQ)"
    )
    s.add_argument("--checkpoint", required=True, help="trained checkpoint (final.pt)")
    s.add_argument("--spec", type=json_arg, required=True, help="the experiment's config section as JSON")
    s.add_argument("--spectrum", type=json_arg, required=True, help="the 'spectrum' config section")
    s.add_argument("--data-root", required=True, help=data_root_help)
    s.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]; float64 throughout")
    s.add_argument("--out", required=True, help="output JSON (results/spectrum/<exp>.json)")
    s.add_argument(
        "--summary-out", default=None, help="also the summary section (JSON) for the summary rule's --section"
    )
    s.set_defaults(func=_run)
