"""Smoothing and storage of a ``D_k`` curve: EMA, log-binned median, log-spaced thinning.

* :func:`ema`: exponential moving average along ``k`` started at the first value,
  ``ema_1 = x_1``, ``ema_k = f ema_{k-1} + (1 - f) x_k`` (the paper's earlier code, ``f =
  0.99``); no bias correction ``/(1 - f^k)``, which is only right for an average started at 0.
* :func:`log_binned_median`: the median of the positive ``D_k`` in bins ``[10^(i/p),
  10^((i+1)/p))`` of ``k`` (``p`` bins per decade), placed at the geometric mean of the bin's
  ``k``; the display smoother of Figure 6 (a median inside a bin cannot lag the curve).
* :func:`thin_indices`: a log-spaced subset of at most :data:`MAX_JSON_POINTS` indices of a
  curve (always with its first and last index) for the JSON result; fits use the full curve.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import signal

from ._validate import _check_positive_int

__all__ = ["MAX_JSON_POINTS", "ema", "log_binned_median", "thin_indices"]

#: Most points of a curve written to the JSON result (the fit always uses the full curve).
MAX_JSON_POINTS = 2000


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
