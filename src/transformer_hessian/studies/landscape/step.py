"""The rule's step of the landscape study (``transformer-hessian landscape``): per-sample losses of
the trained model at w*, Figure 6's analysis, the result file and a log line per curve."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...util.files import log

if TYPE_CHECKING:
    from ...config.settings import Experiment, Landscape

__all__ = ["log_landscape", "run_step"]


def run_step(
    checkpoint: str,
    spec: Experiment,
    landscape: Landscape,
    data_root: str,
    out: str,
    device: str = "auto",
    metrics: str | None = None,
    claims_out: str | None = None,
) -> dict[str, Any]:
    """Rule landscape: per-sample losses at w* on the first ``landscape.max_samples`` training samples
    (all when unset), D_k over orderings and the fitted slope (:func:`.compute.analyse_landscape`);
    written with :func:`.result.save_landscape`. Warns when the slope's 95% interval excludes -1. With
    ``claims_out`` (and ``metrics``, the experiment's training metrics) also the study's claim rows
    (:func:`.claims.landscape_claim_rows`) as a JSON list."""
    from ...core.landscape import analyse_landscape
    from ...train import load_experiment_data, load_model, per_sample_losses
    from ...util.env import resolve_device
    from .result import save_landscape

    data = load_experiment_data(spec, data_root)
    model = load_model(checkpoint, device=resolve_device(device), spec=spec, experiment=landscape.experiment)
    x, y = data["train_x"], data["train_y"]
    if landscape.max_samples:
        x, y = x[: landscape.max_samples], y[: landscape.max_samples]
    losses = per_sample_losses(model, x, y)
    L = landscape
    result = analyse_landscape(
        losses,
        n_orderings=L.n_orderings,
        seed=L.seed,
        ema_factor=L.ema_factor,
        k_min=L.k_min,
        n_bootstrap=L.n_bootstrap,
        granularity=L.granularity,
        batch_size=L.batch_size,
    )
    result["experiment"] = L.experiment
    save_landscape(out, result)
    log_landscape(result)
    if claims_out:
        from ...util.io import load_metrics, write_json
        from ..curve_claims import landscape_claim_rows

        write_json(landscape_claim_rows(result, load_metrics(metrics), evidence=out), claims_out)
    return result


def log_landscape(result: dict[str, Any]) -> None:
    """Log both Figure 6 curves (slope, 95% interval) and name the one behind the ``fig6_slope``
    verdict (``landscape.granularity``); warn when that curve's interval excludes -1."""
    from ...util.numfmt import fmt, fmt_interval
    from .result import PAPER_GRANULARITY, verdict_curve

    granularity, cur = verdict_curve(result)
    curves = {"sample": result, "batch": result.get("batch")}
    for name, c in curves.items():
        if not c:
            continue
        what = "sample-by-sample" if name == "sample" else f"batch-by-batch (b = {c['batch_size']})"
        log.info(
            "landscape: %s curve%s: slope %s, 95%% CI %s over k in [%d, %d]%s",
            what,
            " (the paper's definition)" if name == PAPER_GRANULARITY else "",
            fmt(c["slope"], avoid=-1),
            fmt_interval(*c["slope_ci95"], reference=-1),
            int(c["fit_k_min"]),
            int(c["fit_k_max"]),
            "; the fig6_slope verdict uses this curve (landscape.granularity)" if c is cur else "",
        )
    if not (cur["slope_ci95"][0] <= -1.0 <= cur["slope_ci95"][1]):
        log.warning(
            "landscape: the 95%% interval %s of the %s curve's fitted slope excludes -1, the paper's "
            "O(1/k) rate (Theorem 7's bound itself %s)",
            fmt_interval(*cur["slope_ci95"], reference=-1),
            granularity,
            "holds" if cur["bound_holds"] else "is violated",
        )
