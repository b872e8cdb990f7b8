"""Smoothing of a ``D_k`` curve: :func:`ema`, the exponential moving average along ``k`` started at
the first value, ``ema_1 = x_1``, ``ema_k = f ema_{k-1} + (1 - f) x_k`` (the paper's earlier code,
``f = 0.99``); no bias correction ``/(1 - f^k)``, which is only right for an average started at 0.
The log-binned median and the thinning for the JSON result are in :mod:`transformer_hessian.stats`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import signal

__all__ = ["ema"]


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
