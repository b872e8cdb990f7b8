"""The rule's step of the probe study (``transformer-hessian probe``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...util.files import log

if TYPE_CHECKING:
    from ...config.settings import Experiment, Probe

__all__ = ["run_step"]


def run_step(
    checkpoint: str,
    spec: Experiment,
    probe: Probe,
    data_root: str,
    out: str,
    init_checkpoint: str | None = None,
    device: str = "auto",
    experiment: str | None = None,
    claims_out: str | None = None,
) -> dict[str, Any]:
    """Rule probe: Theorem 7 off w*, the Taylor model and Assumption 1 around w*
    (:func:`.compute.run_probe`, float64), written with :func:`.result.save_probe`, and its claim
    rows (:func:`.verdicts.claim_rows` of the file as read back) to ``claims_out`` when given; warns
    on violations. ``experiment`` names the experiment ``spec`` is (``landscape.experiment`` in the
    workflow)."""
    import torch

    from ...train import load_experiment_data, load_model
    from ...util.env import resolve_device
    from ...util.io import write_json
    from .compute import run_probe
    from .result import load_probe, save_probe
    from .verdicts import claim_rows

    dev = resolve_device(device)
    data = load_experiment_data(spec, data_root)
    name = experiment or "<landscape.experiment>"
    model = load_model(checkpoint, device=dev, dtype=torch.float64, spec=spec, experiment=name)
    init = (
        load_model(init_checkpoint, device=dev, dtype=torch.float64, spec=spec, experiment=name)
        if init_checkpoint
        else None
    )
    result = run_probe(model, data["train_x"], data["train_y"], probe, init_model=init)
    result["experiment"] = experiment
    result["dataset"] = spec.dataset
    save_probe(out, result)
    if claims_out is not None:
        write_json(claim_rows(load_probe(out)), claims_out)
    s = result["theorem7_summary"]
    log.info(
        "probe: Theorem 7 off w* held in %.4f%% of %d comparisons (M = %.3g); Assumption 1: "
        "||grad L_n(w*)|| = %.3g against the noise-only level %.3g, sign-flip p = %.3g (mean-norm slope %.3f "
        "[%.3f, %.3f]); %.1f s",
        100 * s["held_fraction"],
        s["n_comparisons"],
        result["M"],
        result["assumption1"]["zero_gradient_test"]["floor"],
        result["assumption1"]["zero_gradient_test"]["noise_at_n"],
        result["assumption1"]["zero_gradient_test"]["p_value"],
        result["assumption1"]["slope"],
        *result["assumption1"]["slope_ci95"],
        result["timings"]["total"],
    )
    if s["n_violations"]:
        w = s["worst"]
        log.warning(
            "probe: Theorem 7's bound fails in %d comparisons; worst lhs/rhs = %.3g (%s, t = %.3g, k = %d)",
            s["n_violations"],
            w["ratio"],
            w["direction"],
            w["t"],
            w["k"],
        )
    return result
