"""Statistics of a decreasing curve ``d_k`` on log-log axes, shared by the studies (landscape,
probe, scaling): the log-log least-squares slope and its bootstrap interval over orderings, the
median in log-spaced bins, and a log-spaced subset of a long curve for a JSON result.

* :func:`fit_loglog_slope`: ordinary least squares of ``y = log d`` on ``x = log k``
  (natural logarithms) over the points with ``k_min <= k <= k_max`` and ``d > 0``
  (:func:`fit_mask`),

      slope = sum (x - x_mean)(y - y_mean) / sum (x - x_mean)^2,
      intercept = y_mean - slope * x_mean,

  so the fitted curve is ``exp(intercept) k^slope``. Theorem 7 of the paper (arXiv
  2510.16927) predicts ``D_k = O(1/k)``, a slope near -1.
* :func:`bootstrap_slope_ci`: percentile bootstrap over orderings. Each of ``B`` replicates
  draws ``R`` rows of the ``(R, m)`` matrix of ``D_k`` with replacement, averages them and
  refits the slope (points where the replicate's mean is 0 are left out); the interval is the
  ``(1 - level)/2`` and ``(1 + level)/2`` quantiles of the ``B`` slopes. It measures how much
  the slope depends on the orderings drawn, not the sampling of the data set.
* :func:`log_binned_median`: the median of the positive ``d_k`` in bins ``[10^(i/p),
  10^((i+1)/p))`` of ``k`` (``p`` bins per decade), placed at the geometric mean of the bin's
  ``k``; the display smoother of Figure 6 (a median inside a bin cannot lag the curve).
* :func:`thin_indices`: a log-spaced subset of at most :data:`MAX_JSON_POINTS` indices of a
  curve (always with its first and last index) for the JSON result; fits use the full curve.
* :func:`check_positive_int`: an integer ``>= minimum`` (booleans refused), the argument check
  these functions and :mod:`.theorem7` share.

Pure NumPy; nothing here needs PyTorch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "MAX_JSON_POINTS",
    "bootstrap_slope_ci",
    "check_positive_int",
    "fit_loglog_slope",
    "fit_mask",
    "log_binned_median",
    "thin_indices",
]

#: Most points of a curve written to the JSON result (the fit always uses the full curve).
MAX_JSON_POINTS = 2000


def check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    """``value`` as an int; ``ValueError`` naming ``name`` unless it is an integer ``>= minimum``
    (booleans refused)."""
    if isinstance(value, bool) or int(value) != value or int(value) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


#: Salt mixed into the seed of the bootstrap generator so that it is independent of the
#: generator that draws the orderings.
_BOOTSTRAP_SALT = 0xB007


def fit_mask(k: np.ndarray, d: np.ndarray, k_min: float, k_max: float | None) -> np.ndarray:
    """The points :func:`fit_loglog_slope` uses: ``k_min <= k <= k_max`` (``k_max`` None: no upper
    limit) and ``d`` finite and positive."""
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
    mask = fit_mask(k_arr, d_arr, k_min, k_max)
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

    ``differences`` is the ``(R, m)`` matrix of :func:`.theorem7.loss_differences` (rows: orderings)
    and ``k`` its ``m`` abscissae. Each replicate averages ``R`` rows drawn with replacement
    and refits the slope over the fit range (points where the replicate's mean is 0 are
    left out, as in :func:`fit_loglog_slope`). Returns ``(lo, hi, slopes)``.
    """
    diffs = np.asarray(differences, dtype=np.float64)
    k_arr = np.asarray(k, dtype=np.float64)
    if diffs.ndim != 2 or diffs.shape[1] != k_arr.size:
        raise ValueError(f"differences must have shape (n_orderings, len(k)) = (R, {k_arr.size}), got {diffs.shape}")
    b_total = check_positive_int(n_bootstrap, "n_bootstrap")
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


def log_binned_median(k: Any, d: Any, bins_per_decade: int = 8, min_points: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Median of ``d`` in log-spaced bins of ``k`` (a smoother for log-log plots).

    Bin edges are ``10**(i / bins_per_decade)``; bins with fewer than ``min_points`` points
    with ``d > 0`` are skipped. Returns ``(k_centre, median)``: for each kept bin the geometric
    mean of its ``k`` and the median of its positive ``d``.
    """
    k_arr = np.asarray(k, dtype=np.float64)
    d_arr = np.asarray(d, dtype=np.float64)
    if k_arr.shape != d_arr.shape or k_arr.ndim != 1:
        raise ValueError("k and d must be 1-D arrays of the same length")
    if np.any(k_arr <= 0):
        raise ValueError("k must be positive for log-spaced bins")
    per = check_positive_int(bins_per_decade, "bins_per_decade")
    ok = np.isfinite(d_arr) & (d_arr > 0)
    idx = np.floor(np.log10(k_arr) * per + 1e-9).astype(np.int64)
    centres, medians = [], []
    for b in np.unique(idx[ok]):
        sel = ok & (idx == b)
        if sel.sum() >= min_points:
            centres.append(float(np.exp(np.mean(np.log(k_arr[sel])))))
            medians.append(float(np.median(d_arr[sel])))
    return np.asarray(centres), np.asarray(medians)


def thin_indices(n_points: int, max_points: int = MAX_JSON_POINTS, include: Any = ()) -> np.ndarray:
    """Sorted indices of a log-spaced subset of ``range(n_points)``.

    Always contains the first and last index and every index in ``include``; has at most
    ``max_points`` entries (when ``include`` holds at most 2 more) and is all of
    ``range(n_points)`` when that is short enough.
    """
    if n_points <= max_points:
        return np.arange(n_points)
    extra = np.asarray(list(include), dtype=np.int64)
    extra = extra[(extra >= 0) & (extra < n_points)]
    budget = max(2, max_points - extra.size)

    def subset(n_geom: int) -> np.ndarray:
        geom = np.rint(np.geomspace(1, n_points, n_geom)).astype(np.int64) - 1
        return np.unique(np.concatenate([geom, [0, n_points - 1]]))

    # Rounding merges the dense start of the log grid, so ask for more grid points until the
    # distinct indices fill the budget.
    n_geom, best = budget, subset(budget)
    for _ in range(30):
        n_geom += budget - best.size
        trial = subset(n_geom)
        if trial.size > budget or trial.size == best.size:
            break
        best = trial
    return np.union1d(best, extra)
