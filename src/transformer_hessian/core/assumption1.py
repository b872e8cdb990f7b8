"""Assumption 1 (arXiv 2510.16927): ``||grad L_k(w*)||`` against ``k`` from the Gram matrix of
per-sample gradients (Figure 12), and the minimiser shift ``||w*_k - w*_{k+1}||``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.func import grad, vmap

from .krylov import FlatModel
from .stats import bootstrap_slope_ci, fit_loglog_slope

# ----------------------------------------------------------------------------- Assumption 1


def per_sample_gradients(
    fm: FlatModel, x: torch.Tensor, y: torch.Tensor, chunk: int = 256, w: torch.Tensor | None = None
) -> torch.Tensor:
    """``(n, P)`` matrix of per-sample gradients ``grad l_i(w)`` (vmapped ``torch.func.grad``)."""
    w = fm.w0 if w is None else w
    g1 = vmap(grad(fm.sample_loss), in_dims=(None, 0, 0))
    return torch.cat([g1(w, x[i : i + chunk], y[i : i + chunk]) for i in range(0, len(x), chunk)]).detach()


def gradient_norms(gram: np.ndarray, perms: np.ndarray) -> np.ndarray:
    """``||grad L_k|| = ||(1/k) sum_{i<=k} g_{pi(i)}||`` for every ordering and every ``k``.

    ``gram`` is ``G G^T`` of the per-sample gradients; the squared norm of a prefix sum is the
    sum of the top-left ``k x k`` block of the permuted Gram matrix, accumulated as
    ``S_k = S_{k-1} + 2 sum_{i<k} K_{ik} + K_kk``. Returns ``(R, n)``; column ``k-1`` is ``k``.
    """
    K = np.asarray(gram, dtype=np.float64)
    R, n = perms.shape
    out = np.empty((R, n))
    for r, p in enumerate(perms):
        Kp = K[np.ix_(p, p)]
        # row-wise cumulative sums of the strictly lower triangle give sum_{i<k} K_ik
        lower = np.tril(Kp, -1).sum(axis=1)
        S = np.cumsum(2.0 * lower + np.diag(Kp))
        out[r] = np.sqrt(np.maximum(S, 0.0)) / np.arange(1, n + 1)
    return out


def expected_sq_grad_norm(gram: np.ndarray, k: Any) -> np.ndarray:
    """``E ||grad L_k||^2`` over uniformly random ``k``-subsets (sampling without replacement).

    With ``gbar`` the mean and ``s2 = (1/n) sum ||g_i - gbar||^2`` the spread of the ``n``
    per-sample gradients: ``E = ||gbar||^2 + (s2/k) (n-k)/(n-1)``. A mean of ``k`` gradients
    shrinks like ``k^{-1/2}`` towards ``||gbar||`` whatever ``w`` is; this is the reference
    against which the measured curve of Figure 12 is read.
    """
    K = np.asarray(gram, dtype=np.float64)
    n = K.shape[0]
    k = np.asarray(k, dtype=np.float64)
    gbar2 = K.sum() / n**2
    s2 = np.trace(K) / n - gbar2
    fpc = (n - k) / (n - 1) if n > 1 else np.zeros_like(k)
    return gbar2 + s2 / k * fpc


#: Sign flips of :func:`zero_gradient_test` (its smallest p-value is 1/(N_FLIPS + 1)).
N_FLIPS = 4000
#: Level of the test of Assumption 1 (``grad L(w*) = 0``) in :func:`zero_gradient_test`.
ALPHA = 0.05


def zero_gradient_test(gram: np.ndarray, n_flips: int = N_FLIPS, seed: int = 0) -> dict[str, Any]:
    """Is the mean gradient at ``w*`` distinguishable from 0 against sampling noise?

    Assumption 1 says ``grad L(w*) = 0`` for every sample set; with per-sample gradients ``g_i``
    (i.i.d. with mean ``g`` and covariance ``Sigma``), ``E ||mean of k||^2 = ||g||^2 + tr(Sigma)/k``,
    so a mean gradient norm that falls with ``k`` only shows the noise term fading; the
    assumption is about the floor ``||g||``. Null hypothesis ``g = 0``; statistic
    ``T = ||sum_i g_i||^2 = 1^T K 1`` (``K = gram``); reference distribution: ``e^T K e`` over
    ``n_flips`` random sign vectors ``e`` (the sign-flip test: exact when the ``g_i`` are
    symmetric about 0, and with the same mean ``tr K`` as ``T`` under the null for any
    distribution). Returns ``p_value`` (``(1 + #{e^T K e >= T}) / (n_flips + 1)``),
    ``ratio`` (``T / tr K = n ||gbar||^2 / mean ||g_i||^2``, about 1 under the null, ``n`` times
    the squared signal-to-noise ratio otherwise), ``floor`` (``||gbar||``, the curve's value
    at ``k = n``), ``noise_at_n`` (``sqrt(s^2 / n)``, the noise-only level at ``k = n`` with ``s^2``
    the unbiased ``tr Sigma`` estimate), ``floor_unbiased`` (``sqrt(max(0, ||gbar||^2 -
    s^2/n))``, the estimate of ``||g||``), ``n_flips``, ``alpha`` and ``vanishes``
    (``p_value >= alpha``: no evidence against ``g = 0``)."""
    K = np.asarray(gram, dtype=np.float64)
    n = K.shape[0]
    if n < 2:
        raise ValueError(f"zero_gradient_test needs at least 2 samples, got {n}")
    T = float(K.sum())
    trace = float(np.trace(K))
    gbar2 = T / n**2
    s2 = max(0.0, (trace - n * gbar2) / (n - 1))  # unbiased estimate of tr(Sigma)
    rng = np.random.default_rng([int(seed), 0x5F1B])
    exceed = 0
    chunk = max(1, min(int(n_flips), int(4e6 // max(n, 1))))
    done = 0
    while done < n_flips:
        b = min(chunk, n_flips - done)
        e = rng.choice(np.array([-1.0, 1.0]), size=(b, n))
        exceed += int(np.count_nonzero(np.einsum("bi,ij,bj->b", e, K, e, optimize=True) >= T * (1 - 1e-12)))
        done += b
    p = (1 + exceed) / (n_flips + 1)
    return {
        "p_value": p,
        "ratio": T / trace if trace > 0 else float("nan"),
        "floor": float(np.sqrt(max(gbar2, 0.0))),
        "noise_at_n": float(np.sqrt(s2 / n)),
        "floor_unbiased": float(np.sqrt(max(0.0, gbar2 - s2 / n))),
        "n_flips": int(n_flips),
        "alpha": ALPHA,
        "vanishes": bool(p >= ALPHA),
    }


def assumption1_analysis(
    norms: np.ndarray, gram: np.ndarray, k_grid: np.ndarray, n_bootstrap: int, seed: int
) -> dict[str, Any]:
    """Figure 12 numbers from :func:`gradient_norms` output ``norms`` (``(R, n)``).

    At the log-spaced ``k_grid`` (``k >= 2``): mean, 10% and 90% quantiles over orderings of
    ``||grad L_k||`` and ``||grad L_{k-1}||``, the sampling reference
    ``sqrt(E ||grad L_k||^2)`` (:func:`expected_sq_grad_norm`), the least-squares log-log
    slope of the mean ``||grad L_k||`` over ``k_grid`` and its percentile-bootstrap 95%
    interval over orderings (:func:`transformer_hessian.core.stats.bootstrap_slope_ci`) and
    ``zero_gradient_test`` (:func:`zero_gradient_test`: is the floor ``||grad L_n(w*)||``
    distinguishable from 0 against sampling noise).
    """
    k_grid = np.asarray(k_grid, dtype=np.int64)
    cur = norms[:, k_grid - 1]
    prev = norms[:, k_grid - 2]
    mean = cur.mean(axis=0)
    median = np.median(cur, axis=0)
    rms = np.sqrt((cur**2).mean(axis=0))
    slope, intercept = fit_loglog_slope(k_grid, mean, k_min=int(k_grid[0]))
    slope_median = fit_loglog_slope(k_grid, median, k_min=int(k_grid[0]))[0]
    slope_rms = fit_loglog_slope(k_grid, rms, k_min=int(k_grid[0]))[0]
    lo, hi, _ = bootstrap_slope_ci(cur, k_grid, k_min=int(k_grid[0]), n_bootstrap=n_bootstrap, seed=seed)
    n = norms.shape[1]
    return {
        "k": k_grid.tolist(),
        "grad_norm_k_mean": mean.tolist(),
        "grad_norm_k_q10": np.quantile(cur, 0.1, axis=0).tolist(),
        "grad_norm_k_q90": np.quantile(cur, 0.9, axis=0).tolist(),
        "grad_norm_k_median": median.tolist(),
        "grad_norm_k_rms": rms.tolist(),
        "slope_median": slope_median,
        "slope_rms": slope_rms,
        "grad_norm_km1_mean": prev.mean(axis=0).tolist(),
        "sampling_reference": np.sqrt(expected_sq_grad_norm(gram, k_grid)).tolist(),
        "full_grad_norm": float(np.sqrt(max(gram.sum(), 0.0)) / n),
        "mean_per_sample_grad_norm": float(np.mean(np.sqrt(np.maximum(np.diag(gram), 0.0)))),
        "slope": slope,
        "intercept": intercept,
        "slope_ci95": [lo, hi],
        "n_orderings": int(norms.shape[0]),
        "zero_gradient_test": zero_gradient_test(gram, seed=seed),
    }


def minimiser_shift(
    fm: FlatModel, x: torch.Tensor, y: torch.Tensor, perm: np.ndarray, ks: list[int], steps: int, lr: float
) -> dict[str, Any]:
    """``||w*_k - w*_{k+1}||`` by short full-batch gradient-descent fine-tunes from ``w*``.

    ``w*_k`` is the result of ``steps`` steps ``w <- w - lr grad L_k(w)`` started at ``w0``
    (no weight decay, all parameters), ``L_k`` being the mean loss over the first ``k``
    samples of ``perm``; ``w*_{k+1}`` is the same with sample ``k+1`` added. Reported per
    ``k``: the shift, ``||w*_k - w*||``, ``L_k`` and ``||grad L_k||`` before and after.
    """
    g = grad(fm.mean_loss)
    rows = []
    for k in ks:
        ends = {}
        for kk in (k, k + 1):
            idx = torch.as_tensor(perm[:kk])
            xs, ys = x[idx], y[idx]
            w = fm.w0.clone()
            with torch.no_grad():
                loss_before = float(fm.mean_loss(w, xs, ys))
            gnorm_before = float(g(w, xs, ys).norm())
            for _ in range(steps):
                w = w - lr * g(w, xs, ys)
            with torch.no_grad():
                loss_after = float(fm.mean_loss(w, xs, ys))
            ends[kk] = (w, loss_before, loss_after, gnorm_before, float(g(w, xs, ys).norm()))
        wk, lb, la, gb, ga = ends[k]
        rows.append(
            {
                "k": int(k),
                "shift": float((wk - ends[k + 1][0]).norm()),
                "move": float((wk - fm.w0).norm()),
                "loss_before": lb,
                "loss_after": la,
                "grad_norm_before": gb,
                "grad_norm_after": ga,
                "descended": bool(la <= lb),
            }
        )
    return {"steps": int(steps), "lr": float(lr), "rows": rows}
