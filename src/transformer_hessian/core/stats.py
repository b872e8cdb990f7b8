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

import math
from typing import Any

import numpy as np

__all__ = [
    "MAX_JSON_POINTS",
    "RTOL",
    "fit_power_law",
    "k_star_fitted",
    "k_star_measured",
    "log_grid",
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


#: Relative slack when comparing D_k with the tolerance (rounding only).
RTOL = 1e-12


def log_grid(k_lo: int, k_hi: int, n_points: int) -> np.ndarray:
    """Sorted distinct integers from ``k_lo`` to ``k_hi`` (both included), about log-spaced."""
    if k_hi < k_lo:
        raise ValueError(f"empty k range [{k_lo}, {k_hi}]")
    return np.unique(np.rint(np.geomspace(k_lo, k_hi, max(2, n_points))).astype(np.int64))


def k_star_measured(k: Any, d: Any, tolerance: float) -> int | None:
    """Smallest ``k`` with ``d_j <= tolerance`` for every ``j >= k`` of the curve; None if the
    last point is above it. For ``d_k = c/k`` (k = 1..n) this is ``ceil(c/tolerance)``."""
    k_arr, d_arr = np.asarray(k), np.asarray(d, dtype=np.float64)
    above = ~(d_arr <= tolerance * (1.0 + RTOL))
    if above[-1]:
        return None
    return int(k_arr[np.flatnonzero(above)[-1] + 1]) if above.any() else int(k_arr[0])


def k_star_fitted(prefactor: float, slope: float, tolerance: float, k_cap: float = 1e15) -> int | None:
    """Smallest integer ``k >= 1`` with ``prefactor * k^slope <= tolerance``; None when the
    fitted curve never gets there (``slope >= 0``) or only beyond ``k_cap``."""
    a, b, tol = float(prefactor), float(slope), float(tolerance)

    def ok(kk: int) -> bool:
        return a * float(kk) ** b <= tol * (1.0 + RTOL)

    if ok(1):
        return 1
    if b >= 0:
        return None
    log_x = (math.log(tol) - math.log(a)) / b
    if not log_x <= math.log(k_cap):
        return None
    x = math.exp(log_x)
    kk = max(1, math.ceil(x))
    while kk > 1 and ok(kk - 1):  # guard against rounding in the power
        kk -= 1
    while not ok(kk):
        kk += 1
    return kk


def fit_power_law(p: Any, y: Any, n_bootstrap: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """``y = a * P^b`` by least squares of ``log y`` on ``log P`` (points with ``y > 0``), with a
    pairs bootstrap over the points: ``exponent`` b, ``prefactor`` a, their percentile intervals
    ``exponent_ci``/``prefactor_ci`` at ``level``, and ``band_P``/``band_lo``/``band_hi``, the
    pointwise interval of the fitted curve on a grid of P. Needs 2 distinct P; the intervals
    (None otherwise) 3, as every replicate of 2 points is the same line."""
    P, Y = np.asarray(p, dtype=np.float64), np.asarray(y, dtype=np.float64)
    ok = np.isfinite(Y) & (Y > 0) & (P > 0)
    P, Y = P[ok], Y[ok]
    b, ln_a = fit_loglog_slope(P, Y, k_min=float(P.min()) if P.size else 0.0)
    x, z = np.log(P), np.log(Y)
    rng = np.random.default_rng([int(seed), 0x5CA1E])
    idx = rng.integers(0, x.size, size=(int(n_bootstrap), x.size))
    xb, zb = x[idx], z[idx]
    xc = xb - xb.mean(axis=1, keepdims=True)
    sxx = (xc * xc).sum(axis=1)
    good = sxx > 1e-12 * max(1.0, float(np.ptp(x)) ** 2)  # replicates with 2 distinct P
    slopes = (xc * (zb - zb.mean(axis=1, keepdims=True))).sum(axis=1)[good] / sxx[good]
    inters = zb.mean(axis=1)[good] - slopes * xb.mean(axis=1)[good]
    alpha = (1.0 - level) / 2.0
    grid = np.geomspace(P.min(), P.max(), 50)
    out = {
        "exponent": b,
        "prefactor": math.exp(ln_a),
        "n_points": int(P.size),
        "n_bootstrap": int(good.sum()),
        "level": level,
        "band_P": grid.tolist(),
        "exponent_ci": None,
        "prefactor_ci": None,
        "band_lo": None,
        "band_hi": None,
    }
    if np.unique(x).size >= 3 and slopes.size >= 10:  # with 2 points every replicate is the same line
        lines = inters[:, None] + slopes[:, None] * np.log(grid)[None, :]
        out["exponent_ci"] = np.quantile(slopes, [alpha, 1 - alpha]).tolist()
        out["prefactor_ci"] = np.exp(np.quantile(inters, [alpha, 1 - alpha])).tolist()
        out["band_lo"] = np.exp(np.quantile(lines, alpha, axis=0)).tolist()
        out["band_hi"] = np.exp(np.quantile(lines, 1 - alpha, axis=0)).tolist()
    return out
