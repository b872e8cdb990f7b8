"""Convergence of the empirical loss as data are added (paper's Figure 6, Theorem 7).

Protocol
--------
Given the per-sample losses ``l_1 .. l_n`` of a trained model at its weights ``w*``, the
empirical loss over the first ``k`` samples of an ordering is ``L_k = (1/k) sum_{i<=k} l_i``
and the quantity the paper plots is ``D_k = |L_{k+1} - L_k|`` for ``k = 1 .. n-1``.

* ``D_k`` is computed for ``R`` random orderings of the samples (one seeded
  :class:`numpy.random.Generator`), through the exact identity behind Theorem 7,

      L_{k+1} - L_k = (l_{k+1} - L_k) / (k + 1),

  with ``L_k`` from a cumulative sum of the centred losses (``D_k`` does not change when
  every loss is shifted by the same amount). This is vectorised over orderings and is more
  accurate than subtracting two nearly equal running means.
* The curve that is analysed is the mean of ``D_k`` over the orderings (``D_mean``).
* The paper's earlier code smoothed the curve with an exponential moving average of factor
  0.99. :func:`ema` reproduces it on ``D_mean``: ``ema_1 = x_1`` and
  ``ema_k = f ema_{k-1} + (1 - f) x_k``. Because the average starts at the first value instead
  of at zero there is no start-up bias towards zero, so **no bias correction** is applied (the
  Adam-style correction ``/(1 - f^k)`` is only right for a zero-initialised average). Note that
  an EMA over the index ``k`` lags a steeply falling curve: for ``k`` below roughly
  ``1/(1-f)`` (100 for ``f = 0.99``) it is dominated by the first values and sits above the
  raw mean. The EMA is stored (``D_ema``) but Figure 6 no longer draws it (see
  :func:`log_binned_median`); the fit uses the raw mean.
* The rate is a least-squares fit of ``log D_mean`` against ``log k`` (natural logarithms)
  over ``k_min <= k <= k_max`` (default ``k >= 10``: the first few points are dominated by the
  first samples' individual losses). Points where ``D_mean`` is 0 are left out of the fit.
  Every ``k`` of the full curve is used, so large ``k`` dominate the fit, which is where the
  asymptotic rate is defined. Theorem 7 predicts ``D_k = O(1/k)``, i.e. a slope near -1.
* Uncertainty: a percentile bootstrap over orderings. Each of ``B`` replicates draws ``R``
  orderings with replacement, averages their ``D_k`` curves, and refits; the interval is the
  2.5 and 97.5 percentiles of the ``B`` slopes. It therefore measures how much the slope
  depends on the particular orderings drawn (not the sampling of the data set itself).
* Theorem 7 at ``w = w*``: with ``0 <= l_i <= L`` the Taylor term ``M ||w - w*||^2`` vanishes
  and ``D_k <= 2L/(k+1)``; ``L`` is taken as ``max_i l_i``. The check is made on every
  ordering and every ``k``. (From the identity above, nonnegative losses even give
  ``D_k <= L/(k+1)``: ``bound_max_ratio``, the largest ``D_k (k+1) / (2L)``, is at most 1/2.)

* Batch granularity (the paper's "add data batch-by-batch"): with batch size ``b`` the
  same orderings are cut into ``m = n // b`` consecutive batches (a last partial batch is
  dropped); after ``j`` batches the empirical loss is the mean over the first ``j b`` samples,
  ``L_(jb)``, and the batch-wise curve is ``D^b_j = |L_((j+1)b) - L_(jb)|`` for
  ``j = 1 .. m-1``, drawn against the number of samples ``k = j b``.
  :func:`batch_loss_differences` computes it; :func:`analyse_landscape` stores it under
  ``"batch"`` next to the per-sample curve, with its own fit and bootstrap interval (fit
  over ``j b >= k_min``). The identity above becomes
  ``L_((j+1)b) - L_(jb) = (mean of batch j+1 - L_(jb)) / (j + 1)``, so at ``w*`` the
  Theorem 7 bound reads ``D^b_j <= 2L/(j+1)`` in the number of batches ``j``.
* Display smoother: :func:`log_binned_median`, the median of ``D_mean`` in log-spaced bins of
  ``k``. It is honest on log axes (every decade gets the same number of bins, and a median
  inside a bin cannot lag the curve), unlike the EMA over the index ``k``.

All functions are pure NumPy/SciPy; nothing here needs PyTorch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import signal

__all__ = [
    "analyse_landscape",
    "batch_loss_differences",
    "bootstrap_slope_ci",
    "log_binned_median",
    "ema",
    "fit_loglog_slope",
    "loss_differences",
    "orderings",
    "thin_indices",
]

#: Most points of a curve written to the JSON result (the fit always uses the full curve).
MAX_JSON_POINTS = 2000

#: Salt mixed into the seed of the bootstrap generator so that it is independent of the
#: generator that draws the orderings.
_BOOTSTRAP_SALT = 0xB007


def _as_losses(losses: Any) -> np.ndarray:
    arr = np.asarray(losses, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"losses must be a 1-D array of per-sample losses, got an array of shape {arr.shape}")
    if arr.size < 2:
        raise ValueError(f"need at least 2 per-sample losses to form |L_(k+1) - L_k|, got {arr.size}")
    finite = np.isfinite(arr)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise ValueError(
            f"losses contain {bad.size} non-finite value(s) (first at index {bad[0]}: "
            f"{arr[bad[0]]}); check the model evaluation that produced them"
        )
    return arr


def _check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def orderings(n: int, n_orderings: int, seed: int) -> np.ndarray:
    """The orderings :func:`loss_differences` uses for ``seed``.

    ``(n_orderings, n)`` integer array whose rows are independent uniformly random
    permutations of ``0 .. n-1``, drawn by ``numpy.random.default_rng(seed)``.
    """
    rng = np.random.default_rng(seed)
    return rng.permuted(np.tile(np.arange(n), (n_orderings, 1)), axis=1)


def loss_differences(losses: Any, n_orderings: int, seed: int) -> np.ndarray:
    """``D_k = |L_{k+1} - L_k|`` for ``k = 1 .. n-1`` on ``n_orderings`` random orderings.

    Parameters
    ----------
    losses:
        Per-sample losses ``l_i`` (1-D, length ``n >= 2``, finite).
    n_orderings:
        Number ``R`` of random orderings.
    seed:
        Seed of the :func:`numpy.random.default_rng` generator that draws the orderings; the
        same seed gives the same orderings.

    Returns:
    -------
    numpy.ndarray
        Shape ``(R, n - 1)``; column ``k - 1`` holds ``D_k``.
    """
    x = _as_losses(losses)
    r = _check_positive_int(n_orderings, "n_orderings")
    n = x.size
    # D_k is unchanged by a common shift of the losses; centring first keeps the rounding
    # error of the running sums at the scale of the spread of the losses, not of their size.
    centred = x - x.mean()
    ordered = centred[orderings(n, r, seed)]  # (R, n): row r is l_{pi_r(1)} .. l_{pi_r(n)}
    running_mean = np.cumsum(ordered, axis=1)
    running_mean /= np.arange(1, n + 1, dtype=np.float64)  # L_1 .. L_n
    k = np.arange(1, n, dtype=np.float64)
    # L_{k+1} - L_k = (l_{k+1} - L_k) / (k + 1)
    diff = ordered[:, 1:] - running_mean[:, :-1]
    np.abs(diff, out=diff)
    diff /= k + 1.0
    return diff


def batch_loss_differences(losses: Any, n_orderings: int, seed: int, batch_size: int) -> np.ndarray:
    """Batch-wise ``D^b_j = |L_((j+1)b) - L_(jb)|`` for ``j = 1 .. m-1``, ``m = n // b``.

    The orderings are those of :func:`orderings` for ``seed`` (the same as
    :func:`loss_differences`); batch ``j`` of an ordering holds its samples ``(j-1)b+1 .. jb``
    and ``L_(jb)`` is the mean loss over the first ``j`` batches. Samples past ``m b`` are not
    used. Returns an ``(n_orderings, m - 1)`` array; column ``j - 1`` holds ``D^b_j``, whose
    abscissa in samples is ``k = j b``. Needs ``m >= 2``.
    """
    x = _as_losses(losses)
    r = _check_positive_int(n_orderings, "n_orderings")
    b = _check_positive_int(batch_size, "batch_size")
    n = x.size
    m = n // b
    if m < 2:
        raise ValueError(f"batch granularity needs at least 2 full batches: n = {n} samples, batch_size = {b}")
    centred = x - x.mean()  # D is shift-invariant; centring keeps the sums well conditioned
    ordered = centred[orderings(n, r, seed)][:, : m * b]
    batch_means = ordered.reshape(r, m, b).mean(axis=2)  # (R, m)
    running = np.cumsum(batch_means, axis=1) / np.arange(1, m + 1, dtype=np.float64)
    j = np.arange(1, m, dtype=np.float64)
    # L_((j+1)b) - L_(jb) = (batch mean_(j+1) - L_(jb)) / (j + 1)
    diff = np.abs(batch_means[:, 1:] - running[:, :-1]) / (j + 1.0)
    return diff


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
    per = _check_positive_int(bins_per_decade, "bins_per_decade")
    ok = np.isfinite(d_arr) & (d_arr > 0)
    idx = np.floor(np.log10(k_arr) * per + 1e-9).astype(np.int64)
    centres, medians = [], []
    for b in np.unique(idx[ok]):
        sel = ok & (idx == b)
        if sel.sum() >= min_points:
            centres.append(float(np.exp(np.mean(np.log(k_arr[sel])))))
            medians.append(float(np.median(d_arr[sel])))
    return np.asarray(centres), np.asarray(medians)


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
    out, _ = signal.lfilter(b, a, arr, axis=-1, zi=zi)
    return out


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


def analyse_landscape(
    losses: Any,
    n_orderings: int = 50,  # = the schema's landscape.n_orderings (tests/test_landscape.py checks they agree)
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
    ``fit_k_max``, ``fit_n_points``, ``loss_mean``, ``loss_min``, ``loss_max``,
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
    ``slope_ci95``, ``ci95_contains_minus_one``, ``fit_n_points``, ``theorem7_bound_2L``
    (``2L/(j+1)``), ``bound_holds`` and ``bound_max_ratio``.
    """
    if granularity not in ("sample", "batch"):
        raise ValueError(f"granularity must be 'sample' or 'batch', got {granularity!r}")
    if granularity == "batch" and batch_size is None:
        raise ValueError("granularity 'batch' needs a batch_size")
    x = _as_losses(losses)
    n = x.size
    r = _check_positive_int(n_orderings, "n_orderings")
    b = _check_positive_int(n_bootstrap, "n_bootstrap")
    k_min = _check_positive_int(k_min, "k_min")
    fit_k_max = n - 1 if k_max is None else int(k_max)
    if fit_k_max > n - 1:
        raise ValueError(f"k_max={k_max} exceeds the largest k = n-1 = {n - 1}")
    if fit_k_max - k_min < 1:
        raise ValueError(
            f"fit range [k_min={k_min}, k_max={fit_k_max}] holds fewer than 2 values of k "
            f"(n = {n} samples); lower k_min or use more samples"
        )

    diffs = loss_differences(x, r, seed)  # (R, n-1)
    k = np.arange(1, n, dtype=np.float64)
    d_mean = diffs.mean(axis=0)
    d_ema = ema(d_mean, ema_factor)
    slope, intercept = fit_loglog_slope(k, d_mean, k_min=k_min, k_max=fit_k_max)
    lo, hi, _ = bootstrap_slope_ci(diffs, k, k_min=k_min, k_max=fit_k_max, n_bootstrap=b, seed=seed)

    loss_max = float(x.max())
    bound_full = 2.0 * loss_max / (k + 1.0)
    bound_holds = bool(np.all(diffs <= bound_full * (1.0 + 1e-12)))
    if loss_max > 0:
        bound_max_ratio: float | None = float(np.max(diffs.max(axis=0) / bound_full))
    else:
        bound_max_ratio = None
    fit_n_points = int(np.count_nonzero(_fit_mask(k, d_mean, k_min, fit_k_max)))

    keep = thin_indices(n - 1, include=(k_min - 1, fit_k_max - 1))
    binned_k, binned = log_binned_median(k, d_mean, bins_per_decade)
    batch = None
    if batch_size is not None and (granularity == "batch" or n // int(batch_size) >= 2):
        batch = _analyse_batches(x, r, seed, int(batch_size), k_min, b, bins_per_decade, loss_max)
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
        "slope": slope,
        "intercept": intercept,
        "slope_ci95": [lo, hi],
        # The paper's claim is O(1/k): does the interval contain slope -1?
        "ci95_contains_minus_one": bool(lo <= -1.0 <= hi),
        "n_bootstrap": int(b),
        "fit_k_min": k_min,
        "fit_k_max": int(fit_k_max),
        "fit_n_points": fit_n_points,
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
    bound = 2.0 * loss_max / (j + 1.0)
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
        "fit_n_points": int(np.count_nonzero(_fit_mask(k, d_mean, k_lo, None))),
        "theorem7_bound_2L": bound.tolist(),
        "bound_holds": bool(np.all(diffs <= bound * (1.0 + 1e-12))),
        "bound_max_ratio": float(np.max(diffs.max(axis=0) / bound)) if loss_max > 0 else None,
    }
