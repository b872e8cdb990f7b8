"""The loss differences ``D_k = |L_{k+1} - L_k|`` over random orderings of the samples.

With per-sample losses ``l_1 .. l_n`` taken in the order of a permutation ``pi``, the
empirical loss over the first ``k`` samples is ``L_k = (1/k) sum_{i<=k} l_{pi(i)}`` and

    D_k = |L_{k+1} - L_k| = |l_{pi(k+1)} - L_k| / (k + 1),    k = 1 .. n-1,

the exact identity behind the paper's Theorem 7 (arXiv 2510.16927, Figure 6). It is
evaluated from a cumulative sum of the centred losses (``D_k`` is unchanged by a common
shift), vectorised over ``R`` orderings drawn by one seeded :class:`numpy.random.Generator`
(:func:`orderings`).

Batch granularity: the same orderings cut into ``m = n // b`` consecutive batches of ``b``
samples (a last partial batch is dropped) give

    D^b_j = |L_((j+1)b) - L_(jb)| = |mean of batch j+1 - L_(jb)| / (j + 1),    j = 1 .. m-1,

drawn against ``k = j b`` samples (:func:`batch_loss_differences`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._validate import _as_losses, _check_positive_int

__all__ = ["batch_loss_differences", "loss_differences", "orderings"]


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
