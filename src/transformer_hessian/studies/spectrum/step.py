"""The rule's step of the spectrum study (``transformer-hessian spectrum``): load the model and the
fixed batch, run the estimators, write the result and the summary section."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...util.files import log

if TYPE_CHECKING:
    from ...config.settings import Experiment, Spectrum

__all__ = ["run_step"]


def run_step(
    checkpoint: str,
    spec: Experiment,
    spectrum: Spectrum,
    data_root: str,
    out: str,
    summary_out: str | None = None,
    device: str = "auto",
) -> dict[str, Any]:
    """Rule spectrum_compute: :func:`.compute.run_spectrum` (top eigenvalues, Hutchinson traces,
    SLQ densities, block-pair norms) of the trained model on one fixed training batch, float64,
    written to ``out``, and its summary section (:func:`.compute.summary_section`) to
    ``summary_out`` when given; warns when the whole-model top Ritz value lies below a block's
    (Lanczos not converged)."""
    import torch

    from ...core.hessian import fixed_batch
    from ...train import load_experiment_data, load_model
    from ...util.env import resolve_device
    from .compute import run_spectrum, summary_section
    from .result import save_result, save_summary

    s = spectrum
    dev = resolve_device(device)
    data = load_experiment_data(spec, data_root)
    images, labels = fixed_batch(data["train_x"], data["train_y"], s.batch_size, s.seed)
    name = s.experiment or "<spectrum.experiment>"
    model = load_model(checkpoint, device=dev, dtype=torch.float64, spec=spec, experiment=name)
    result = run_spectrum(model, images.to(device=dev, dtype=torch.float64), labels.to(dev), s)
    result["experiment"] = s.experiment
    result["dataset"] = spec.dataset
    result["device"] = str(dev)
    save_result(out, result)
    if summary_out is not None:
        save_summary(summary_out, summary_section(result))
    log.info(
        "spectrum: whole-model lambda_max %.4g, trace %.4g +- %.2g; %d blocks; %.1f s",
        result["whole_model"]["top"]["eigenvalues"][0],
        result["whole_model"]["trace"]["mean"],
        result["whole_model"]["trace"]["stderr"],
        len(result["blocks"]),
        result["seconds"],
    )
    if not result["interlacing"]["holds"]:
        log.warning(
            "spectrum: the whole-model top Ritz value lies below a block's (gaps %s): Lanczos has not "
            "converged; raise spectrum.lanczos_steps",
            result["interlacing"]["gap"],
        )
    return result
