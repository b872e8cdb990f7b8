"""The rule's step of the dynamics study (``transformer-hessian dynamics``): replay, check the
step-0 Hessian against the hessian rule's, write the snapshots."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...util.files import log

if TYPE_CHECKING:
    from ...config.settings import Dynamics, Experiment, Hessian

__all__ = ["run_step"]


def run_step(
    checkpoint: str,
    spec: Experiment,
    hessian: Hessian,
    dynamics: Dynamics,
    data_root: str,
    out_npz: str,
    out_json: str,
    saved_init_hessian: str | None = None,
    tolerance: float | None = None,
    device: str = "auto",
) -> dict[str, Any]:
    """Rule dynamics: replay the first training steps from ``checkpoint`` (init.pt) and write the
    snapshots of Figures 7-11 (:func:`.result.save_dynamics`). With ``saved_init_hessian`` the replay's
    step-0 Hessian must equal the hessian rule's to relative error ``tolerance`` (else
    :class:`ValueError`, after writing); ``tolerance`` left as None is the schema's ``theory.tolerance``."""
    from ...config.settings import Theory
    from ...train import check_model_matches
    from ...train.checkpoints import load_checkpoint
    from ...util.io import load_hessian
    from .compute import check_against_saved, record_dynamics
    from .result import save_dynamics

    check_model_matches(load_checkpoint(checkpoint)["model_config"], spec, hessian.experiment, checkpoint)

    arrays, summary, H0 = record_dynamics(
        spec,
        data_root,
        checkpoint,
        hessian,
        dynamics,
        device=device,
        checkpoint_dir=Path(checkpoint).parent,
    )
    summary["experiment"] = hessian.experiment
    summary["dataset"] = spec.dataset
    summary["model"] = spec.model.to_dict()
    if saved_init_hessian:
        if tolerance is None:
            tolerance = Theory.with_defaults({}).tolerance
        chk = check_against_saved(H0, load_hessian(saved_init_hessian))
        chk["tolerance"] = tolerance
        chk["passed"] = bool(chk["rel_error"] <= tolerance)
        summary["init_hessian_check"] = chk
    save_dynamics(out_npz, out_json, arrays, summary)
    log.info(
        "dynamics: %d snapshots over %d steps in %.1f s (Hessians %.1f s via %s)",
        len(summary["steps"]),
        summary["steps"][-1],
        summary["seconds"],
        summary["hessian_seconds"],
        summary["hessian_method"],
    )
    if summary["capped"]:
        log.warning(
            "dynamics: dynamics.steps=%d exceeds the run's %d steps; recorded those",
            summary["requested_steps"],
            summary["replayed_steps"],
        )
    bad = [c["epoch"] for c in summary["epoch_checks"] if c["identical"] is False]
    if bad:
        log.warning("dynamics: the replay differs from the saved epoch checkpoint(s) %s", bad)
    if saved_init_hessian and not summary["init_hessian_check"]["passed"]:
        raise ValueError(
            f"dynamics: the step-0 Hessian differs from {saved_init_hessian} by relative error "
            f"{summary['init_hessian_check']['rel_error']:.3e} > theory.tolerance={tolerance:g}"
        )
    return summary
