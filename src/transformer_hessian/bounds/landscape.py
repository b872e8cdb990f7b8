"""Theorem 7 of arXiv 2510.16927 (convergence of the empirical loss as samples are added).

With ``L_k(w) = (1/k) sum_{i<=k} l_i(w)`` and per-sample losses bounded at ``w*`` by
``0 <= l_i(w*) <= L``, Theorem 7 states

    |L_{k+1}(w) - L_k(w)| <= 2L/(k+1) + M ||w - w*||_2^2 / (k+1),

where ``M`` bounds the per-sample Hessians at ``w*`` (``||H_i(w*)||_2 <= M``). The proof
(App. C.7) starts from the exact identity ``L_{k+1} - L_k = (l_{k+1} - L_k)/(k+1)`` and a
second-order Taylor model of every ``l_i`` around ``w*`` with vanishing gradients
(Assumption 1).

At ``w = w*`` the identity gives more than the printed bound: for ``0 <= l_i <= L`` both
``l_{k+1}`` and ``L_k`` lie in ``[0, L]``, so ``|L_{k+1} - L_k| <= L/(k+1)``, attained when
``l_{k+1} = L`` and ``l_1 = .. = l_k = 0`` (:func:`landscape_bound_tight`). The factor 2 of the
printed form is what signed losses ``|l_i| <= L`` need (attained by ``l_{k+1} = L``,
``l_1 = .. = l_k = -L``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["landscape_bound", "landscape_bound_tight", "theorem7_rhs"]


def _check(k: Any, loss_max: Any, M: Any, dist2: Any) -> tuple[np.ndarray, ...]:
    k_arr = np.asarray(k, dtype=np.float64)
    if np.any(~np.isfinite(k_arr)) or np.any(k_arr < 1):
        raise ValueError(f"k must be >= 1 (the number of samples in L_k), got {k!r}")
    out = [k_arr]
    for name, value in (("loss_max", loss_max), ("M", M), ("dist2", dist2)):
        arr = np.asarray(value, dtype=np.float64)
        if np.any(~np.isfinite(arr)) or np.any(arr < 0):
            raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
        out.append(arr)
    return tuple(out)


def _result(value: np.ndarray) -> float | np.ndarray:
    return float(value) if value.ndim == 0 else value


def theorem7_rhs(k: Any, loss_max: Any, M: Any = 0.0, dist2: Any = 0.0) -> Any:
    """Theorem 7's right-hand side as printed, ``(2 L + M ||w - w*||^2)/(k+1)``, without argument checks:
    the one place the formula is typed (:func:`landscape_bound` checks its arguments first;
    ``landscape.analyse`` evaluates it at ``w*``, ``M ||w - w*||^2 = 0``, on its own curves)."""
    return (2.0 * loss_max + M * dist2) / (k + 1.0)


def landscape_bound(k: Any, loss_max: Any, M: Any, dist2: Any) -> float | np.ndarray:
    """Theorem 7's right-hand side as printed: ``2 L/(k+1) + M ||w - w*||^2/(k+1)``.

    ``k`` is the number of samples of ``L_k`` (>= 1), ``loss_max`` the bound ``L`` of the
    per-sample losses at ``w*``, ``M`` the bound of the per-sample Hessian spectral norms and
    ``dist2 = ||w - w*||_2^2``. Arguments broadcast (NumPy rules); a float is returned when
    all are scalars.
    """
    k_arr, L, m, d2 = _check(k, loss_max, M, dist2)
    return _result(theorem7_rhs(k_arr, L, m, d2))


def landscape_bound_tight(k: Any, loss_max: Any, M: Any = 0.0, dist2: Any = 0.0) -> float | np.ndarray:
    """The bound the proof gives for nonnegative losses: ``(L + M ||w - w*||^2)/(k+1)``.

    At ``w = w*`` (``dist2 = 0``) this is ``L/(k+1)``, the exact worst case of
    ``|L_{k+1} - L_k|`` over losses in ``[0, L]``. Off ``w*`` it keeps the proof's Taylor term
    (second-order model with zero gradients, Assumption 1) and is valid only where that
    model is.
    """
    k_arr, L, m, d2 = _check(k, loss_max, M, dist2)
    return _result((L + m * d2) / (k_arr + 1.0))
