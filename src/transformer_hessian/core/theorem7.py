"""Theorem 7 of arXiv 2510.16927 (convergence of the empirical loss as samples are added): the
loss differences it bounds, on random orderings of the samples, and its right-hand side. The
landscape study (Figure 6, at ``w*``) and the probe study (off ``w*``) both use them.

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

The loss differences. With per-sample losses ``l_1 .. l_n`` taken in the order of a permutation
``pi``, the empirical loss over the first ``k`` samples is ``L_k = (1/k) sum_{i<=k} l_{pi(i)}`` and

    D_k = |L_{k+1} - L_k| = |l_{pi(k+1)} - L_k| / (k + 1),    k = 1 .. n-1,

the exact identity above. It is evaluated from a cumulative sum of the centred losses (``D_k``
is unchanged by a common shift), vectorised over ``R`` orderings drawn by one seeded
:class:`numpy.random.Generator` (:func:`orderings`). Batch granularity: the same orderings cut
into ``m = n // b`` consecutive batches of ``b`` samples (a last partial batch is dropped) give

    D^b_j = |L_((j+1)b) - L_(jb)| = |mean of batch j+1 - L_(jb)| / (j + 1),    j = 1 .. m-1,

drawn against ``k = j b`` samples (:func:`batch_loss_differences`).

Pure NumPy; nothing here needs PyTorch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .stats import check_positive_int

__all__ = [
    "as_losses",
    "batch_loss_differences",
    "landscape_bound",
    "landscape_bound_tight",
    "loss_differences",
    "orderings",
    "theorem7_rhs",
]


def as_losses(losses: Any) -> np.ndarray:
    """``losses`` as a 1-D float64 array of ``n >= 2`` finite per-sample losses ``l_1 .. l_n``;
    ``ValueError`` saying what is wrong otherwise."""
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
    x = as_losses(losses)
    r = check_positive_int(n_orderings, "n_orderings")
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
    x = as_losses(losses)
    r = check_positive_int(n_orderings, "n_orderings")
    b = check_positive_int(batch_size, "batch_size")
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


# ----------------------------------------------------------------------------- the right-hand side


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
    ``core.landscape`` evaluates it at ``w*``, ``M ||w - w*||^2 = 0``, on its own curves)."""
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
