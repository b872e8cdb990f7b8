"""Spectra of symmetric operators known only through matrix-vector products (for example the loss
Hessian through Hessian-vector products, :func:`.krylov.hvp_operator`), never formed:

* :func:`batched_hvp` - Hessian-vector products of a scalar loss, vectorised over a batch of vectors;
* :func:`lanczos_tridiagonal` - batched Lanczos with full reorthogonalisation that returns the
  tridiagonal ``T = Q^T A Q`` (:func:`.krylov.lanczos` returns one Ritz pair only; top-k eigenvalues
  and quadrature need the whole ``T``), :func:`ritz` its eigenpairs, :func:`lanczos_runs` seeded runs;
* :func:`top_eigenvalues` - the k largest (and the smallest) Ritz values;
* :func:`hutchinson_trace` - ``tr(A) ~ mean_i z_i^T A z_i`` over Rademacher probes, with its
  standard error;
* :func:`slq_density` / :func:`broadened_density` / :func:`density_grid` - the spectral density by
  stochastic Lanczos quadrature, Gaussian-broadened;
* :func:`pair_spectral_norms` - ``||H_ab||_2`` for every pair of parameter groups.

Each is validated against a dense Hessian in ``tests/studies/test_spectrum.py``; the spectrum study
(:mod:`transformer_hessian.studies.spectrum`) runs them on a block and on a whole model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.func import vmap

from .krylov import hvp_operator, lanczos_basis

Matvec = Callable[[torch.Tensor], torch.Tensor]


def batched_hvp(loss: Callable[[torch.Tensor], torch.Tensor], w: torch.Tensor, chunk: int = 32) -> Matvec:
    """``V (B, P) -> V H`` (row ``i`` is ``H v_i``), ``H`` the Hessian of ``loss`` at ``w``;
    ``krylov.hvp_operator`` vmapped over ``chunk`` rows at a time."""
    hv = vmap(hvp_operator(loss, w))

    def matvec(V: torch.Tensor) -> torch.Tensor:
        return torch.cat([hv(V[i : i + chunk]) for i in range(0, len(V), chunk)], dim=0)

    return matvec


def lanczos_tridiagonal(matvec: Matvec, v0: torch.Tensor, steps: int, seed: int = 0, *, resume=None, save=None):
    """Lanczos with full reorthogonalisation on ``B`` symmetric operators at once.

    ``v0`` is ``(B, P)``; ``matvec`` maps ``(B, P) -> (B, P)`` row by row. ``m = min(steps, P)``
    steps build orthonormal ``Q = [q_1 .. q_m]`` with ``q_1 = v0 / ||v0||`` (each new vector
    Gram-Schmidt orthogonalised twice against all previous ones) and the tridiagonal
    ``T = Q^T A Q`` with diagonal ``alpha`` and off-diagonal ``beta[:, :m-1]``. ``beta[:, m-1]``
    is the norm of the next residual: ``|beta_m s_mi|`` bounds ``||A y_i - theta_i y_i||`` for
    the Ritz pair ``(theta_i, y_i = Q s_i)``. On breakdown (invariant subspace) the basis continues
    with a random vector orthogonal to it and ``beta = 0``: ``T`` decouples, its eigenvalues stay
    eigenvalues of ``A`` and the first components of the eigenvectors of the new block are 0, so
    the quadrature of :func:`slq_density` is unchanged. With ``m = P`` the Ritz values are the
    eigenvalues of ``A`` up to rounding. Returns ``(alpha, beta)``, each ``(B, m)``.

    ``save(state)``, when given, is called after every step with the whole state (a dict: steps
    done ``j``, ``Q``, ``alpha``, ``beta``, the next ``q`` and the generator's state); ``resume``,
    such a state, continues from it to the same numbers as a run that was never stopped. The
    basis is then in ``state["Q"]`` (the Ritz vectors are ``Q^T s``).
    """
    gen = torch.Generator().manual_seed(int(seed) + 104729)
    _, alpha, beta = lanczos_basis(matvec, v0, steps, gen, resume=resume, save=save, who="lanczos_tridiagonal")
    return alpha, beta


def ritz(alpha: torch.Tensor, beta: torch.Tensor):
    """Eigen-decomposition of the tridiagonal ``T`` of :func:`lanczos_tridiagonal`.

    Returns ``(theta (B, m) ascending, S (B, m, m) with eigenvectors in columns, residual (B, m)
    = |beta_m S[m-1, i]|)``.
    """
    T = torch.diag_embed(alpha) + torch.diag_embed(beta[:, :-1], 1) + torch.diag_embed(beta[:, :-1], -1)
    theta, S = torch.linalg.eigh(T)
    return theta, S, (beta[:, -1:] * S[:, -1, :]).abs()


def as_matvec(matvec, w: torch.Tensor | None) -> tuple[Matvec, torch.Tensor]:
    """(rows matvec, a vector like the operator's) from a row-wise ``matvec`` and ``w``, or from an
    operator with ``shape``, ``dtype``, ``device`` and ``@`` (``transformer_hessian.HessianOperator``:
    any model's exact Hessian, ``w`` may then be None)."""
    if hasattr(matvec, "shape") and hasattr(matvec, "__matmul__") and not callable(matvec):
        op = matvec
        like = torch.zeros(op.shape[1], dtype=op.dtype, device=op.device) if w is None else w
        return (lambda V: (op @ V.T).T), like
    if w is None:
        raise ValueError("w: needed with a plain matvec (only an operator with a shape can go without)")
    return matvec, w


def _gaussian(n: int, P: int, seed: int, like: torch.Tensor) -> torch.Tensor:
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randn(n, P, generator=gen, dtype=like.dtype).to(like.device)


def lanczos_runs(matvec: Matvec, w: torch.Tensor, n: int, steps: int, seed: int = 0, **resumable):
    """:func:`ritz` of ``n`` Lanczos runs from seeded Gaussian starts (one batched run): the runs
    behind both :func:`top_eigenvalues` and :func:`slq_density`, so one set serves both.
    ``resumable``: ``resume`` and ``save`` of :func:`lanczos_tridiagonal`."""
    matvec, w = as_matvec(matvec, w)
    alpha, beta = lanczos_tridiagonal(
        matvec, _gaussian(int(n), w.numel(), int(seed) + 271, w), steps, seed, **resumable
    )
    return ritz(alpha, beta)


def best_run(theta: torch.Tensor, rtol: float = 0.0) -> int:
    """The run whose top Ritz value is largest; of runs within ``rtol`` of it (converged to the same
    eigenvalue, apart only by rounding) the first: with ``rtol`` 1e-9, runs whose products differ in
    the last bits (one process against many) choose the same run. ``rtol`` 0: ``argmax``."""
    top = theta[:, -1]
    m = float(top.max())
    return int(torch.nonzero(top >= m - rtol * max(abs(m), 1e-300))[0, 0])


def top_eigenvalues(
    matvec: Matvec,
    w: torch.Tensor,
    k: int,
    steps: int,
    seed: int = 0,
    n_starts: int = 1,
    runs=None,
    tie_rtol: float = 0.0,
) -> dict[str, Any]:
    """The ``k`` largest eigenvalues of the symmetric ``A`` (operator on vectors like ``w``).

    Lanczos (:func:`lanczos_runs`, or the given ``runs``) from ``n_starts`` seeded Gaussian
    starts; the i-th largest Ritz value of every run is a lower bound of ``lambda_i(A)`` (Cauchy
    interlacing) that converges from below, and the run with the largest top Ritz value is
    reported (of runs within ``tie_rtol`` of it, the first: :func:`best_run`). Returns ``eigenvalues`` (k largest Ritz values, descending), ``residuals``
    (``||A y - theta y||`` of each), ``smallest`` (the smallest Ritz value over all runs, an upper
    bound of ``lambda_min(A)``) and ``steps`` (``m``).
    """
    theta, _, res = runs if runs is not None else lanczos_runs(matvec, w, n_starts, steps, seed)
    best = best_run(theta, tie_rtol)
    order = torch.argsort(theta[best], descending=True)[: int(k)]
    return {
        "eigenvalues": theta[best, order].tolist(),
        "residuals": res[best, order].tolist(),
        "smallest": float(theta[:, 0].min()),
        "steps": int(theta.shape[1]),
    }


def hutchinson_trace(
    matvec: Matvec, w: torch.Tensor, n_probes: int, seed: int = 0, *, chunk: int | None = None, resume=None, save=None
) -> dict[str, Any]:
    """Hutchinson's estimate ``tr(A) ~ (1/n) sum_i z_i^T A z_i``, ``z_i`` i.i.d. Rademacher.

    Each term is unbiased (``E[z z^T] = I``); ``stderr = std(z_i^T A z_i, ddof=1) / sqrt(n)``
    is the standard error of the mean. Returns ``mean``, ``stderr``, ``n_probes``.
    ``chunk``: probes per product (default all at once); ``save(state)`` is called after each
    chunk with the terms so far (``{"done", "terms"}``) and ``resume`` continues from such a state.
    """
    matvec, w = as_matvec(matvec, w)
    if n_probes < 2:
        raise ValueError(f"spectrum.n_probes: Hutchinson needs at least 2 probes for a standard error, got {n_probes}")
    gen = torch.Generator().manual_seed(int(seed) + 31337)
    Z = (torch.randint(0, 2, (int(n_probes), w.numel()), generator=gen) * 2 - 1).to(w.device, w.dtype)
    step = int(n_probes) if chunk is None else max(1, int(chunk))
    done, terms = (0, []) if resume is None else (int(resume["done"]), list(resume["terms"]))
    while done < int(n_probes):
        Zc = Z[done : done + step]
        terms.extend((Zc * matvec(Zc)).sum(dim=1).cpu().tolist())
        done += len(Zc)
        if save is not None:
            save({"done": done, "terms": list(terms)})
    vals = np.asarray(terms, dtype=np.float64)
    return {
        "mean": float(vals.mean()),
        "stderr": float(vals.std(ddof=1) / math.sqrt(len(vals))),
        "n_probes": int(n_probes),
    }


def slq_density(
    matvec: Matvec, w: torch.Tensor, n_probes: int, steps: int, seed: int = 0, runs=None
) -> dict[str, np.ndarray]:
    """Stochastic Lanczos quadrature of the spectral measure ``mu = (1/P) sum_j delta(lambda_j)``.

    For each unit Gaussian probe ``v_i`` Lanczos gives ``T_i = S diag(theta) S^T``; the
    ``m``-node Gauss quadrature of ``v_i^T f(A) v_i`` has nodes ``theta_ij`` and weights
    ``tau_ij = S[0, j]^2`` (summing to 1) and is exact for polynomials of degree ``< 2m``. Since
    ``E[v v^T] = I / P``, ``mu ~ (1/n) sum_i sum_j tau_ij delta(theta_ij)``; in particular its
    mean ``(1/n) sum_ij tau_ij theta_ij = (1/n) sum_i v_i^T A v_i`` estimates ``tr(A) / P``.
    ``runs``: the :func:`lanczos_runs` to use (default: new ones). Returns ``nodes`` and
    ``weights``, both ``(n, m)``.
    """
    theta, S, _ = runs if runs is not None else lanczos_runs(matvec, w, n_probes, steps, seed)
    return {"nodes": theta.cpu().numpy(), "weights": (S[:, 0, :] ** 2).cpu().numpy()}


def broadened_density(nodes: np.ndarray, weights: np.ndarray, grid: np.ndarray, sigma: float) -> np.ndarray:
    """``rho(t) = (1/n) sum_ij tau_ij N(t; theta_ij, sigma^2)`` on ``grid`` (integrates to 1 over R)."""
    nodes, weights = np.asarray(nodes).ravel(), np.asarray(weights).ravel() / np.asarray(nodes).shape[0]
    z = (np.asarray(grid)[:, None] - nodes[None, :]) / sigma
    return (np.exp(-0.5 * z**2) @ weights) / (sigma * math.sqrt(2 * math.pi))


def density_grid(nodes: np.ndarray, n_points: int, sigma_frac: float) -> tuple[np.ndarray, float]:
    """Grid over ``[min - 6 sigma, max + 6 sigma]`` of the nodes, ``sigma = sigma_frac (max - min)``."""
    lo, hi = float(np.min(nodes)), float(np.max(nodes))
    sigma = sigma_frac * (hi - lo) if hi > lo else max(abs(hi), 1.0) * sigma_frac
    return np.linspace(lo - 6 * sigma, hi + 6 * sigma, int(n_points)), float(sigma)


def pair_spectral_norms(matvec: Matvec, w: torch.Tensor, offsets, steps: int, seed: int = 0) -> np.ndarray:
    """``N[a, b] = ||H_ab||_2`` for every pair of groups, ``H_ab = H[off_a:off_a+1, off_b:off_b+1]``.

    ``||H_ab||_2^2 = lambda_max(H_ab^T H_ab)`` and ``H_ab^T H_ab`` is the restriction to group
    ``b`` of the symmetric positive semi-definite ``x -> P_b H P_a H P_b x`` (``P_g`` zeroes
    every coordinate outside group ``g``; one HVP with a vector supported on ``b`` read out on
    ``a``, then one with that vector on ``a`` read out on ``b``). Its top eigenvalue comes from
    Lanczos on all pairs ``a <= b`` at once (Krylov-accelerated power iteration; plain power
    iteration converges like ``(sigma_2/sigma_1)^(2k)``, too slowly for close singular values);
    ``N[b, a] = N[a, b]`` since ``H_ba = H_ab^T``.
    """
    off = np.asarray(offsets)
    n = len(off) - 1
    pairs = [(a, b) for a in range(n) for b in range(a, n)]
    P = w.numel()
    mask = w.new_zeros(n, P)
    for g in range(n):
        mask[g, off[g] : off[g + 1]] = 1.0
    Ma, Mb = mask[[a for a, _ in pairs]], mask[[b for _, b in pairs]]

    def op(X):
        return matvec(matvec(X * Mb) * Ma) * Mb

    alpha, beta = lanczos_tridiagonal(op, _gaussian(len(pairs), P, int(seed) + 59, w) * Mb, steps, seed)
    top = ritz(alpha, beta)[0][:, -1].clamp_min(0).sqrt().cpu().numpy()
    N = np.zeros((n, n))
    for (a, b), s in zip(pairs, top):
        N[a, b] = N[b, a] = s
    return N
