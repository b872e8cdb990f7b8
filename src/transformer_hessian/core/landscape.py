"""Figure 6's analysis of per-sample losses at ``w*`` (the ``landscape`` rule's result).

:func:`analyse_landscape` computes ``D_k = |L_{k+1} - L_k|`` on ``R`` orderings
(:mod:`transformer_hessian.core.theorem7`), their mean ``D_mean`` over orderings, its EMA
(:func:`ema`) and log-binned median, the log-log least-squares slope of ``D_mean`` against ``k``
over ``k >= k_min`` with its percentile bootstrap interval over orderings
(:mod:`transformer_hessian.core.stats`), and the check of Theorem 7 at ``w = w*`` (arXiv
2510.16927): with ``0 <= l_i <= L``, ``L = max_i l_i``,

    D_k <= 2L / (k + 1)    on every ordering and every k

(the identity of :mod:`transformer_hessian.core.theorem7` even gives ``L/(k+1)``, so
``bound_max_ratio`` is at most 1/2). With a batch size ``b`` the same is done for the batch-wise
curve ``D^b_j``, whose bound is ``2L/(j+1)`` in the number of batches ``j``.

:func:`ema`: exponential moving average along ``k`` started at the first value, ``ema_1 = x_1``,
``ema_k = f ema_{k-1} + (1 - f) x_k`` (the paper's earlier code, ``f = 0.99``); no bias
correction ``/(1 - f^k)``, which is only right for an average started at 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .stats import (
    bootstrap_slope_ci,
    check_positive_int,
    fit_loglog_slope,
    fit_mask,
    log_binned_median,
    thin_indices,
)
from .theorem7 import as_losses, batch_loss_differences, loss_differences, theorem7_rhs

__all__ = ["PAPER_GRANULARITY", "analyse_landscape", "ema", "verdict_curve"]


def ema(x: Any, factor: float = 0.99) -> np.ndarray:
    """Exponential moving average along the last axis, started at the first value.

    ``ema_1 = x_1`` and ``ema_k = factor * ema_{k-1} + (1 - factor) * x_k``; no bias
    correction (none is needed when the average starts at ``x_1`` rather than at 0).
    ``factor = 0`` returns ``x`` unchanged.
    """
    arr = np.asarray(x, dtype=np.float64)
    f = float(factor)
    if not 0.0 <= f < 1.0:
        raise ValueError(f"ema factor must lie in [0, 1), got {factor!r}")
    if arr.ndim == 0:
        raise ValueError("ema needs an array with at least one axis")
    if arr.shape[-1] == 0:
        return arr.copy()
    b = np.array([1.0 - f])
    a = np.array([1.0, -f])
    # Transposed direct form II: the initial state f*x_1 makes the first output x_1.
    zi = f * arr[..., :1]
    from scipy import signal  # here: importing scipy.signal takes ~0.8 s, paid by every snakemake start

    out, _ = signal.lfilter(b, a, arr, axis=-1, zi=zi)
    return out


def _rate_reference_slope(k: np.ndarray, steps: np.ndarray, k_lo: float, k_hi: float | None) -> float:
    """Log-log least-squares slope, against ``k`` over ``k_lo <= k <= k_hi``, of Theorem 7's own
    rate ``1/(steps + 1)`` (``steps`` = k for the per-sample curve, j for the batch curve): the
    slope the bound's shape has over the same fit points (-1 only asymptotically)."""
    return fit_loglog_slope(k, 1.0 / (steps + 1.0), k_min=k_lo, k_max=k_hi)[0]


def _check_sizes(n: int, n_orderings, n_bootstrap, k_min, k_max) -> tuple[int, int, int, int]:
    """``(orderings, bootstrap draws, k_min, k_max)`` of :func:`analyse_landscape` for ``n`` losses,
    checked: positive integers, and a fit range ``[k_min, k_max]`` (k_max None: n-1) of >= 2 k."""
    r = check_positive_int(n_orderings, "n_orderings")
    b = check_positive_int(n_bootstrap, "n_bootstrap")
    k_min = check_positive_int(k_min, "k_min")
    fit_k_max = n - 1 if k_max is None else int(k_max)
    if fit_k_max > n - 1:
        raise ValueError(f"k_max={k_max} exceeds the largest k = n-1 = {n - 1}")
    if fit_k_max - k_min < 1:
        raise ValueError(
            f"fit range [k_min={k_min}, k_max={fit_k_max}] holds fewer than 2 values of k "
            f"(n = {n} samples); lower k_min or use more samples"
        )
    return r, b, k_min, fit_k_max


def _theorem7_at_wstar(diffs: np.ndarray, k: np.ndarray, loss_max: float) -> tuple[np.ndarray, bool, float | None]:
    """Theorem 7 at w*: ``(2L/(k+1) at k, whether D_k <= 2L/(k+1) for every ordering and k (relative
    tolerance 1e-12), the largest D_k (k+1)/(2L) or None when L = 0)``."""
    bound_full = theorem7_rhs(k, loss_max)  # 2L/(k+1): Theorem 7 at w*
    bound_holds = bool(np.all(diffs <= bound_full * (1.0 + 1e-12)))
    if loss_max > 0:
        bound_max_ratio: float | None = float(np.max(diffs.max(axis=0) / bound_full))
    else:
        bound_max_ratio = None
    return bound_full, bound_holds, bound_max_ratio


def analyse_landscape(
    losses: Any,
    n_orderings: int = 50,  # = the schema's landscape.n_orderings (tests/config/test_settings.py checks they agree)
    seed: int = 0,
    ema_factor: float = 0.99,
    k_min: int = 10,
    n_bootstrap: int = 200,
    k_max: int | None = None,
    granularity: str = "sample",
    batch_size: int | None = None,
    bins_per_decade: int = 8,
) -> dict[str, Any]:
    """Full Figure 6 analysis of per-sample losses at ``w*``; returns a JSON-ready dict.

    Keys: ``n_samples``, ``n_orderings``, ``seed``, ``ema_factor``, ``ema_bias_corrected``
    (always False), ``k`` (the k of the stored curve points; a log-spaced subset of at most
    :data:`MAX_JSON_POINTS` when ``n`` is large, always with the first and last k and the fit
    limits), ``D_mean`` (mean of D_k over orderings), ``D_ema`` (EMA of the full ``D_mean``,
    sampled at ``k``), ``slope``, ``intercept`` (natural logs, fitted on the full curve),
    ``slope_ci95`` ([lo, hi], bootstrap over orderings), ``n_bootstrap``, ``fit_k_min``,
    ``fit_k_max``, ``fit_n_points``, ``rate_reference_slope`` (the log-log slope of Theorem 7's
    rate ``1/(k+1)`` over the same fit points; ``1/(j+1)`` for the batch curve), ``loss_mean``, ``loss_min``, ``loss_max``,
    ``theorem7_bound_2L`` (``2 max(l)/(k+1)`` at ``k``), ``bound_holds`` (``D_k <= 2L/(k+1)``
    for every ordering and every k, to a relative tolerance of 1e-12) and
    ``bound_max_ratio`` (largest ``D_k (k+1)/(2L)``; None when ``L = 0``),
    ``D_binned_k`` / ``D_binned`` (:func:`log_binned_median` of the full ``D_mean``, the
    display smoother), ``granularity`` (``"sample"`` or ``"batch"``: which curve Figure 6
    draws and the claims use) and, when ``batch_size`` is given, ``batch``: the batch-wise
    curve of :func:`batch_loss_differences` on the same orderings (None when fewer than two
    full batches fit and the per-sample curve is the one drawn), with ``batch_size``,
    ``n_batches``, ``j`` (batches seen), ``k`` (= ``j b`` samples), ``D_mean``, ``D_binned_k``,
    ``D_binned``, ``slope``, ``intercept`` (fitted against ``k`` over ``k >= k_min``),
    ``slope_ci95``, ``ci95_contains_minus_one``, ``fit_n_points``, ``rate_reference_slope``, ``theorem7_bound_2L``
    (``2L/(j+1)``), ``bound_holds`` and ``bound_max_ratio``.
    """
    if granularity not in ("sample", "batch"):
        raise ValueError(f"granularity must be 'sample' or 'batch', got {granularity!r}")
    if granularity == "batch" and batch_size is None:
        raise ValueError("granularity 'batch' needs a batch_size")
    x = as_losses(losses)
    n = x.size
    r, b, k_min, fit_k_max = _check_sizes(n, n_orderings, n_bootstrap, k_min, k_max)

    diffs = loss_differences(x, r, seed)  # (R, n-1)
    k = np.arange(1, n, dtype=np.float64)
    d_mean = diffs.mean(axis=0)
    d_ema = ema(d_mean, ema_factor)
    keep = thin_indices(n - 1, include=(k_min - 1, fit_k_max - 1))
    binned_k, binned = log_binned_median(k, d_mean, bins_per_decade)
    batch = None
    if batch_size is not None and (granularity == "batch" or n // int(batch_size) >= 2):
        batch = _analyse_batches(x, r, seed, int(batch_size), k_min, b, bins_per_decade, float(x.max()))
    return {
        "granularity": granularity,
        "D_binned_k": binned_k.tolist(),
        "D_binned": binned.tolist(),
        "bins_per_decade": int(bins_per_decade),
        "batch": batch,
        "n_samples": int(n),
        "n_orderings": int(r),
        "seed": int(seed),
        "ema_factor": float(ema_factor),
        "ema_bias_corrected": False,
        "k": [int(v) for v in k[keep]],
        "D_mean": d_mean[keep].tolist(),
        "D_ema": d_ema[keep].tolist(),
        **_fit_and_bound(x, diffs, k, d_mean, (k_min, fit_k_max), b, seed, keep),
    }


def _fit_and_bound(x, diffs, k, d_mean, fit_range: tuple[int, int], b: int, seed: int, keep) -> dict[str, Any]:
    """The per-sample curve's fit over ``fit_range`` = (k_min, k_max), its bootstrap interval (``b``
    draws) and Theorem 7's check at w* (stored at the indices ``keep``): the keys of
    :func:`analyse_landscape` from ``slope`` on."""
    k_min, fit_k_max = fit_range
    slope, intercept = fit_loglog_slope(k, d_mean, k_min=k_min, k_max=fit_k_max)
    lo, hi, _ = bootstrap_slope_ci(diffs, k, k_min=k_min, k_max=fit_k_max, n_bootstrap=b, seed=seed)
    loss_max = float(x.max())
    bound_full, bound_holds, bound_max_ratio = _theorem7_at_wstar(diffs, k, loss_max)
    return {
        "slope": slope,
        "intercept": intercept,
        "slope_ci95": [lo, hi],
        # The paper's claim is O(1/k): does the interval contain slope -1?
        "ci95_contains_minus_one": bool(lo <= -1.0 <= hi),
        "n_bootstrap": int(b),
        "fit_k_min": k_min,
        "fit_k_max": int(fit_k_max),
        "fit_n_points": int(np.count_nonzero(fit_mask(k, d_mean, k_min, fit_k_max))),
        "rate_reference_slope": _rate_reference_slope(k, k, k_min, fit_k_max),
        "loss_mean": float(x.mean()),
        "loss_min": float(x.min()),
        "loss_max": loss_max,
        "theorem7_bound_2L": bound_full[keep].tolist(),
        "bound_holds": bound_holds,
        "bound_max_ratio": bound_max_ratio,
    }


def _analyse_batches(
    x: np.ndarray,
    r: int,
    seed: int,
    batch_size: int,
    k_min: int,
    n_boot: int,
    bins_per_decade: int,
    loss_max: float,
) -> dict[str, Any]:
    """The ``batch`` entry of :func:`analyse_landscape` (see there)."""
    diffs = batch_loss_differences(x, r, seed, batch_size)  # (R, m-1)
    m = x.size // batch_size
    j = np.arange(1, m, dtype=np.float64)
    k = j * batch_size
    d_mean = diffs.mean(axis=0)
    k_lo = float(max(k_min, batch_size))  # at least the first batch boundary
    if np.count_nonzero(k >= k_lo) < 2:
        k_lo = float(k[0])
    slope, intercept = fit_loglog_slope(k, d_mean, k_min=k_lo)
    lo, hi, _ = bootstrap_slope_ci(diffs, k, k_min=k_lo, n_bootstrap=n_boot, seed=seed)
    bound = theorem7_rhs(j, loss_max)  # 2L/(j+1)
    binned_k, binned = log_binned_median(k, d_mean, bins_per_decade)
    return {
        "batch_size": int(batch_size),
        "n_batches": int(m),
        "j": [int(v) for v in j],
        "k": [int(v) for v in k],
        "D_mean": d_mean.tolist(),
        "D_binned_k": binned_k.tolist(),
        "D_binned": binned.tolist(),
        "slope": slope,
        "intercept": intercept,
        "slope_ci95": [lo, hi],
        "ci95_contains_minus_one": bool(lo <= -1.0 <= hi),
        "fit_k_min": k_lo,
        "fit_k_max": float(k[-1]),
        "fit_n_points": int(np.count_nonzero(fit_mask(k, d_mean, k_lo, None))),
        "rate_reference_slope": _rate_reference_slope(k, j, k_lo, None),
        "theorem7_bound_2L": bound.tolist(),
        "bound_holds": bool(np.all(diffs <= bound * (1.0 + 1e-12))),
        "bound_max_ratio": float(np.max(diffs.max(axis=0) / bound)) if loss_max > 0 else None,
    }


#: How the paper builds Figure 6 (Sec. 5, steps 1-3 and the caption): data added batch by batch,
#: ``|L_(k+1) - L_k|`` plotted against the number of training samples, i.e. the batch-wise curve
#: ``D^b_j`` against ``k = j b`` (``granularity: batch``).
PAPER_GRANULARITY = "batch"


def verdict_curve(result: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(granularity, curve)``: the curve of a landscape ``result`` that Figure 6 draws and the
    ``fig6_slope`` verdict uses, as its ``granularity`` says: the result itself (``"sample"``)
    or its ``"batch"`` entry: the one place the choice is made (the figure and the claim use it; the
    default granularity is the schema's ``landscape.granularity``, which the result records).
    ``KeyError`` when the result names no granularity, or the batch curve is asked for but absent."""
    if "granularity" not in result:
        raise KeyError(
            "landscape result has no 'granularity' entry (written by an older version); rerun the landscape rule"
        )
    granularity = result["granularity"]
    if granularity == "batch":
        if not result.get("batch"):
            raise KeyError("landscape result has granularity 'batch' but no 'batch' entry; rerun the landscape rule")
        return granularity, result["batch"]
    return granularity, result
