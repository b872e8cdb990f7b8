"""Input checks shared by the modules of :mod:`transformer_hessian.landscape` (private).

``_as_losses``: a 1-D float64 array of ``n >= 2`` finite per-sample losses ``l_1 .. l_n``;
``_check_positive_int``: an integer ``>= minimum`` (booleans refused).
"""

from __future__ import annotations

from typing import Any

import numpy as np


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
