"""The log-log slope of a ``D_k`` curve and its bootstrap interval over orderings.

* :func:`fit_loglog_slope`: ordinary least squares of ``y = log d`` on ``x = log k``
  (natural logarithms) over the points with ``k_min <= k <= k_max`` and ``d > 0``,

      slope = sum (x - x_mean)(y - y_mean) / sum (x - x_mean)^2,
      intercept = y_mean - slope * x_mean,

  so the fitted curve is ``exp(intercept) k^slope``. Theorem 7 of the paper (arXiv
  2510.16927) predicts ``D_k = O(1/k)``, a slope near -1.
* :func:`bootstrap_slope_ci`: percentile bootstrap over orderings. Each of ``B`` replicates
  draws ``R`` rows of the ``(R, m)`` matrix of ``D_k`` with replacement, averages them and
  refits the slope (points where the replicate's mean is 0 are left out); the interval is the
  ``(1 - level)/2`` and ``(1 + level)/2`` quantiles of the ``B`` slopes. It measures how much
  the slope depends on the orderings drawn, not the sampling of the data set.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._validate import _check_positive_int

__all__ = ["bootstrap_slope_ci", "fit_loglog_slope"]

#: Salt mixed into the seed of the bootstrap generator so that it is independent of the
#: generator that draws the orderings.
_BOOTSTRAP_SALT = 0xB007


def _fit_mask(k: np.ndarray, d: np.ndarray, k_min: float, k_max: float | None) -> np.ndarray:
    mask = (k >= k_min) & np.isfinite(d) & (d > 0)
    if k_max is not None:
        mask &= k <= k_max
    return mask


def fit_loglog_slope(k: Any, d: Any, k_min: float = 10, k_max: float | None = None) -> tuple[float, float]:
    """Least-squares line ``log d = intercept + slope * log k`` (natural logs).

    Only points with ``k_min <= k <= k_max`` (``k_max=None``: no upper limit) and ``d > 0``
    are used. Returns ``(slope, intercept)``; the fitted curve is ``exp(intercept) * k**slope``.
    """
    k_arr = np.asarray(k, dtype=np.float64)
    d_arr = np.asarray(d, dtype=np.float64)
    if k_arr.shape != d_arr.shape or k_arr.ndim != 1:
        raise ValueError(f"k and d must be 1-D arrays of the same length, got shapes {k_arr.shape} and {d_arr.shape}")
    if np.any(k_arr <= 0):
        raise ValueError("k must be positive for a log-log fit")
    mask = _fit_mask(k_arr, d_arr, k_min, k_max)
    x = np.log(k_arr[mask])
    if x.size < 2 or np.ptp(x) == 0:
        raise ValueError(
            f"the log-log fit needs at least 2 distinct k with d > 0 in the fit range "
            f"[k_min={k_min}, k_max={k_max}], found {np.unique(x).size}; lower k_min or use "
            f"more samples"
        )
    y = np.log(d_arr[mask])
    x_mean = x.mean()
    xc = x - x_mean
    slope = float(np.dot(xc, y - y.mean()) / np.dot(xc, xc))
    intercept = float(y.mean() - slope * x_mean)
    return slope, intercept


def bootstrap_slope_ci(
    differences: Any,
    k: Any,
    k_min: float = 10,
    k_max: float | None = None,
    n_bootstrap: int = 200,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float, np.ndarray]:
    """Percentile bootstrap interval of the log-log slope, resampling orderings.

    ``differences`` is the ``(R, m)`` matrix of :func:`loss_differences` (rows: orderings)
    and ``k`` its ``m`` abscissae. Each replicate averages ``R`` rows drawn with replacement
    and refits the slope over the fit range (points where the replicate's mean is 0 are
    left out, as in :func:`fit_loglog_slope`). Returns ``(lo, hi, slopes)``.
    """
    diffs = np.asarray(differences, dtype=np.float64)
    k_arr = np.asarray(k, dtype=np.float64)
    if diffs.ndim != 2 or diffs.shape[1] != k_arr.size:
        raise ValueError(f"differences must have shape (n_orderings, len(k)) = (R, {k_arr.size}), got {diffs.shape}")
    b_total = _check_positive_int(n_bootstrap, "n_bootstrap")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    r = diffs.shape[0]
    cols = k_arr >= k_min
    if k_max is not None:
        cols &= k_arr <= k_max
    if cols.sum() < 2:
        raise ValueError(f"the bootstrap fit needs at least 2 k in [k_min={k_min}, k_max={k_max}]")
    sub = diffs[:, cols]
    x = np.log(k_arr[cols])
    x = x - x.mean()  # the slope is shift-invariant; centring keeps the sums well conditioned
    rng = np.random.default_rng([int(seed), _BOOTSTRAP_SALT])
    slopes = np.empty(b_total)
    # Chunk the replicates so that the (chunk, m) matrix of means stays small.
    chunk = max(1, min(b_total, int(2e7 // max(sub.shape[1], 1))))
    for start in range(0, b_total, chunk):
        b = min(chunk, b_total - start)
        draws = rng.integers(0, r, size=(b, r))
        counts = np.bincount((draws + r * np.arange(b)[:, None]).ravel(), minlength=b * r).reshape(b, r)
        means = (counts / r) @ sub  # (b, m): mean curve of each replicate
        w = (means > 0).astype(np.float64)
        y = np.log(np.where(means > 0, means, 1.0))
        sw = w.sum(axis=1)
        sx = w @ x
        sy = (w * y).sum(axis=1)
        sxx = w @ (x * x)
        sxy = (w * y) @ x
        denom = sw * sxx - sx * sx
        with np.errstate(invalid="ignore", divide="ignore"):
            slopes[start : start + b] = np.where((sw >= 2) & (denom > 0), (sw * sxy - sx * sy) / denom, np.nan)
    finite = slopes[np.isfinite(slopes)]
    if finite.size == 0:
        raise ValueError("no bootstrap replicate had 2 or more points with D > 0 to fit")
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(finite, [alpha, 1.0 - alpha])
    return float(lo), float(hi), slopes
