"""The rules' steps of the scaling study (``transformer-hessian scaling models`` / ``aggregate``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...util.files import log

if TYPE_CHECKING:
    from ...config.settings import Scaling

__all__ = ["aggregate_step", "models_step"]


def models_step(
    scaling: Scaling, part: int, jobs: int, data_root: str, cache_dir: str, out: str, device: str = "auto"
) -> dict[str, Any]:
    """Rule scaling_models: train and measure models ``part, part + jobs, ...`` of the sweep
    (:func:`.compute.sweep_models`; per-model results cached in ``cache_dir``) and write
    ``{"part", "jobs", "models": [...]}`` to ``out``."""
    from .compute import run_models, sweep_models
    from .result import save_scaling_part

    points = sweep_models(scaling)[part::jobs]
    models = run_models(points, scaling, data_root, cache_dir, device=device)
    save_scaling_part(out, part, jobs, models)
    return {"part": part, "jobs": jobs, "models": models}


def aggregate_step(scaling: Scaling, parts: Sequence[str], out: str, summary_out: str | None = None) -> dict[str, Any]:
    """Rule scaling: power laws in the parameter count across every part's models
    (:func:`.compute.aggregate`) -> ``out`` and its summary section -> ``summary_out``; logs each fitted exponent with its interval."""
    from .compute import aggregate
    from .result import load_scaling, load_scaling_part, save_scaling, save_summary, summary_section

    results = [m for path in parts for m in load_scaling_part(path)["models"]]
    agg = aggregate(results, scaling)
    save_scaling(out, agg)
    if summary_out is not None:  # as read back from ``out`` (JSON numbers), like every summary section
        save_summary(summary_out, summary_section(load_scaling(out)))
    for size, by_series in agg["fits"].items():
        for series, fits in by_series.items():
            for q, f in fits.items():
                if "exponent" in f:
                    lo_hi = f["exponent_ci"]
                    ci = (
                        f"95% CI [{lo_hi[0]:.3f}, {lo_hi[1]:.3f}]" if lo_hi else f"no interval ({f['n_points']} models)"
                    )
                    log.info("scaling (n = %s, %s series): %s ~ P^%.3f, %s", size, series, q, f["exponent"], ci)
                else:
                    log.info("scaling (n = %s, %s series): %s not fitted: %s", size, series, q, f["skipped"])
    return agg
