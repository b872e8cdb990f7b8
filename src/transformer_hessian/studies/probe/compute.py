"""The whole probe protocol on a trained model (the ``probe`` rule): settings, sample subset,
:func:`run_probe`.

The protocol of :func:`run_probe`:

1. Samples: a seeded subset of ``max_samples`` training samples (all when null); ``L``
   = their largest loss at ``w*``.
2. Directions: ``u``, the top eigenvector of the Hessian of the mean loss over the first
   ``hessian_samples`` of them (Lanczos, ``lanczos_iters`` HVPs), and
   ``n_random_directions`` seeded Gaussian unit vectors.
3. Grid: per direction ``d``, ``t_max = sqrt(2 loss_rise / c_d)`` with ``c_d = d^T H d``
   (mean over the samples), i.e. the distance at which the quadratic model predicts a
   rise of ``loss_rise``; ``t = 0, +-t_max * geomspace(t_min_frac, 1, n_t)`` together with
   ``t_max * linspace(-1, 1, n_t_linear)`` (log-spaced for rates, linear for Figure 1).
4. ``M = max(M_star, M_path)``: ``M_star = max ||H_i(w*)||_2`` over the
   ``curvature_samples`` samples of highest loss at ``w*`` (batched Lanczos; for
   cross-entropy the softmax factor ``p (1 - p)`` is largest there), ``M_path`` the
   largest secant curvature ``2 |l_i(t) - l_i(0) - t a_i| / t^2`` over samples, directions
   and grid points (by Taylor's theorem it equals ``|d^T H_i(w* + s d) d|`` at some ``s``
   between 0 and ``t``: the smallest constant for which the Lagrange remainder bound
   holds at every evaluated point).
5. Theorem 7 (:func:`theorem7_check`), the Taylor model (:func:`taylor_check`), Figure 1
   curves, Assumption 1 (:func:`assumption1_analysis`, also at ``init_model`` when
   given) and the minimiser shift (:func:`minimiser_shift`, ``lr = shift_lr_scale / M``).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ...core.assumption1 import assumption1_analysis, gradient_norms, minimiser_shift, per_sample_gradients
from ...core.krylov import FlatModel, per_sample_spectral_norms, top_eigenpair
from ...core.stats import log_grid
from ...core.theorem7 import landscape_bound, landscape_bound_tight, loss_differences, orderings
from .theorem7 import (
    BOUND_RTOL,
    directional_derivatives,
    path_losses,
    prefix_means,
    taylor_check,
    theorem7_check,
)

if TYPE_CHECKING:
    from ...config.settings import Probe

# ----------------------------------------------------------------------------- protocol


def _subset(n_total: int, size: int | None, seed: int) -> np.ndarray:
    gen = np.random.default_rng([int(seed), 0x9E0B])
    idx = gen.permutation(n_total)
    return np.sort(idx[: min(size, n_total)] if size else idx)


def run_probe(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    probe: Probe,
    init_model: torch.nn.Module | None = None,
) -> dict[str, Any]:
    """The whole protocol on the trained ``model`` (its weights are ``w*``); JSON-ready dict.
    ``probe`` is the typed ``probe:`` config section (:class:`.settings.Probe`; its defaults live
    in the schema); the result's ``settings`` is ``probe.to_dict()``. The protocol's steps: the module docstring.
    """
    s = probe
    t_start = time.perf_counter()
    timings: dict[str, float] = {}

    def lap(name: str, t0: float) -> float:
        now = time.perf_counter()
        timings[name] = now - t0
        return now

    model = model.to(torch.float64).eval()
    fm = FlatModel.of(model)
    sel = torch.as_tensor(_subset(len(x), s.max_samples, s.seed))
    xs, ys = x[sel].to(device=fm.w0.device, dtype=torch.float64), y[sel].to(fm.w0.device)
    n = len(xs)
    if n < 4:
        raise ValueError(f"probe needs at least 4 samples, got {n}")
    perms = orderings(n, int(s.n_orderings), s.seed)
    t0 = time.perf_counter()

    # -- directions
    nh = min(n, s.hessian_samples or n)
    lam, lam_resid, dirs = _directions(fm, xs[:nh], ys[:nh], s)
    t0 = lap("top_eigenpair", t0)

    # -- per-sample curvature at w*, on the samples of highest loss
    nc = min(n, s.curvature_samples)
    spec_norms = _curvature_at_wstar(fm, xs, ys, nc, s)
    M_star = float(spec_norms.max())
    t0 = lap("per_sample_spectral_norms", t0)

    # -- directional derivatives and path losses
    w_norm = float(fm.w0.norm())
    per_dir, M_path = _paths(fm, xs, ys, dirs, s, w_norm)
    t0 = lap("paths", t0)
    M = max(M_star, M_path)
    i0 = int(np.flatnonzero(per_dir["top eigenvector u"]["ts"] == 0)[0])
    loss_max = float(per_dir["top eigenvector u"]["losses"][i0].max())

    result = {
        "settings": s.to_dict(),
        "n_samples": int(n),
        "n_params": fm.dim,
        "w_star_norm": w_norm,
        "loss_max": loss_max,
        "loss_mean": float(per_dir["top eigenvector u"]["l0"].mean()),
        "top_eigenvalue": lam,
        "top_eigenvalue_residual": lam_resid,
        "hessian_samples": int(nh),
        "M": M,
        "M_star": M_star,
        "M_path": M_path,
        "M_star_selection": "highest loss at w*",
        "M_star_samples": int(nc),
        "per_sample_spectral_norms": {
            "max": M_star,
            "median": float(np.median(spec_norms)),
            "mean": float(spec_norms.mean()),
        },
        "directions": {
            d: {"t_max": v["t_max"], "curvature": v["c_mean"], "grad_component": float(v["a"].mean())}
            for d, v in per_dir.items()
        },
    }
    # -- Theorem 7 off w* and the Taylor model, Assumption 1, the minimiser shift
    result.update(_analyses(fm, xs, ys, perms, s, per_dir, i0, loss_max, M, init_model, lap, t0))
    timings["total"] = time.perf_counter() - t_start
    result["timings"] = timings
    return result


def _analyses(fm: FlatModel, xs, ys, perms, s: Probe, per_dir, i0, loss_max, M, init_model, lap, t0) -> dict:
    """Step 5 of the protocol, as the result's entries ``k_store`` .. ``minimiser_shift`` (in that order)."""
    n = len(xs)
    k_store = log_grid(1, n - 1, 40)
    k_small = int(min(s.k_small, n - 1))
    theorem7, taylor, fig1 = _theorem7_taylor(per_dir, loss_max, M, perms, s, k_store, k_small)
    t0 = lap("theorem7_taylor", t0)
    summary = _theorem7_summary(
        theorem7, per_dir["top eigenvector u"]["losses"][i0], loss_max, int(s.n_orderings), s.seed
    )
    breaks = _taylor_breaks(taylor, per_dir)
    a1 = _assumption1(fm, xs, ys, perms, s, init_model)
    t0 = lap("assumption1", t0)
    shift = _shift(fm, xs, ys, perms, s, M)
    lap("minimiser_shift", t0)
    return {
        "k_store": k_store.tolist(),
        "theorem7": theorem7,
        "theorem7_summary": summary,
        "taylor": taylor,
        "taylor_breaks": breaks,
        "fig1": {"k_small": k_small, "k_large": int(n - 1), "directions": fig1},
        "assumption1": a1,
        "minimiser_shift": shift,
    }


def _directions(fm: FlatModel, xh, yh, s: Probe) -> tuple[float, float, dict[str, torch.Tensor]]:
    """``(lambda, residual, directions)``: the top eigenpair of the Hessian of the mean loss over
    ``(xh, yh)`` and the directions, ``u`` then ``n_random_directions`` seeded Gaussian unit vectors."""
    lam, u, lam_resid = top_eigenpair(fm, xh, yh, s.lanczos_iters, seed=s.seed)
    gen = torch.Generator().manual_seed(int(s.seed) + 12345)
    dirs = {"top eigenvector u": u}
    for j in range(int(s.n_random_directions)):
        r = torch.randn(fm.dim, generator=gen, dtype=torch.float64).to(fm.w0.device)
        dirs[f"random {j + 1}"] = r / r.norm()
    return lam, lam_resid, dirs


def _curvature_at_wstar(fm: FlatModel, xs, ys, nc: int, s: Probe) -> np.ndarray:
    """Spectral norms of the per-sample Hessians at ``w*`` of the ``nc`` samples of highest loss."""
    with torch.no_grad():
        l_star = fm.per_sample_losses(fm.w0, xs, ys).cpu().numpy()
    top = torch.as_tensor(np.argsort(-l_star, kind="stable")[:nc])
    return per_sample_spectral_norms(fm, xs[top], ys[top], s.lanczos_iters, seed=s.seed)


def _paths(fm: FlatModel, xs, ys, dirs: dict, s: Probe, w_norm: float) -> tuple[dict[str, dict[str, Any]], float]:
    """Per direction: derivatives at ``w*``, the ``t`` grid and the path losses; and ``M_path``."""
    fracs = np.geomspace(s.t_min_frac, 1.0, int(s.n_t))
    per_dir: dict[str, dict[str, Any]] = {}
    M_path = 0.0
    for name, d in dirs.items():
        l0, a, c = directional_derivatives(fm, xs, ys, d)
        c_mean = float(c.mean())
        t_max = math.sqrt(2.0 * s.loss_rise / c_mean) if c_mean > 0 else w_norm
        lin = np.linspace(-1.0, 1.0, int(s.n_t_linear)) if s.n_t_linear > 1 else np.zeros(1)
        ts = t_max * np.unique(np.concatenate([-fracs, [0.0], fracs, lin]))
        losses = path_losses(fm, xs, ys, d, ts)
        nzt = ts != 0
        secant = 2.0 * np.abs(losses[nzt] - l0[None] - ts[nzt, None] * a[None]) / ts[nzt, None] ** 2
        M_path = max(M_path, float(np.abs(c).max()), float(secant.max()))
        per_dir[name] = {
            "l0": l0,
            "a": a,
            "c": c,
            "ts": ts,
            "losses": losses,
            "t_max": t_max,
            "c_mean": c_mean,
            "secant_max": float(secant.max()),
        }
    return per_dir, M_path


def _theorem7_taylor(per_dir: dict, loss_max: float, M: float, perms, s: Probe, k_store, k_small: int):
    """``(theorem7, taylor, fig1)``: Theorem 7 off ``w*``, the Taylor model and Figure 1's curves per direction."""
    n = perms.shape[1]
    R = int(s.n_orderings)
    k_report = log_grid(max(2, min(s.k_small, n)), n, 8)
    theorem7: dict[str, Any] = {}
    taylor: dict[str, Any] = {}
    fig1: dict[str, Any] = {}
    for name, dd in per_dir.items():
        theorem7[name] = theorem7_check(dd["losses"], dd["ts"], loss_max, M, R, s.seed, k_store)
        theorem7[name]["t_max"] = dd["t_max"]
        theorem7[name]["c_mean"] = dd["c_mean"]
        taylor[name] = taylor_check(
            dd["losses"], dd["ts"], dd["l0"], dd["a"], dd["c"], perms, k_report, s.taylor_tolerance
        )
        Lk = prefix_means(dd["losses"], perms[:1])[:, 0, :]  # (T, n) on ordering 0
        gaps = {}
        for kk in (k_small, n - 1):
            D = np.stack([loss_differences(dd["losses"][ti], R, s.seed)[:, kk - 1] for ti in range(len(dd["ts"]))])
            gaps[str(kk)] = {
                "L_k": Lk[:, kk - 1].tolist(),
                "L_k1": Lk[:, kk].tolist(),
                "gap_mean": D.mean(axis=1).tolist(),
                "gap_ordering0": np.abs(Lk[:, kk] - Lk[:, kk - 1]).tolist(),
            }
        fig1[name] = {"t": dd["ts"].tolist(), "curves": gaps}
    return theorem7, taylor, fig1


def _theorem7_summary(theorem7: dict, losses_at_wstar: np.ndarray, loss_max: float, R: int, seed: int) -> dict:
    """Theorem 7's counts over directions, the worst case, and the check at ``w*`` itself."""
    held = {key: sum(theorem7[d]["held"][key] for d in theorem7) for key in ("bound", "tight", "no_curvature")}
    held_k = {key: sum(theorem7[d]["held_all_orderings"][key] for d in theorem7) for key in held}
    total = sum(theorem7[d]["n_comparisons"] for d in theorem7)
    total_k = sum(theorem7[d]["n_k_t"] for d in theorem7)
    worst = max((dict(theorem7[d]["worst"], direction=d) for d in theorem7), key=lambda r: r["ratio"])
    # at w* itself (t = 0): the printed 2L/(k+1) and the tight L/(k+1)
    D0 = loss_differences(losses_at_wstar, R, seed)
    k_all = np.arange(1, losses_at_wstar.shape[0], dtype=np.float64)
    at_wstar = {
        "holds_printed": bool(np.all(D0 <= landscape_bound(k_all, loss_max, 0.0, 0.0) * (1 + BOUND_RTOL))),
        "holds_tight": bool(np.all(D0 <= landscape_bound_tight(k_all, loss_max) * (1 + BOUND_RTOL))),
        "max_ratio_printed": float(np.max(D0 * (k_all + 1) / (2 * loss_max))) if loss_max > 0 else None,
        "n_comparisons": int(D0.size),
    }
    return {
        "held_fraction": held["bound"] / total,
        "held_fraction_tight": held["tight"] / total,
        "held_fraction_no_curvature": held["no_curvature"] / total,
        "held_fraction_k_t_direction": held_k["bound"] / total_k,
        "n_comparisons": int(total),
        "n_k_t_direction": int(total_k),
        "n_violations": int(total - held["bound"]),
        "n_violations_tight": int(total - held["tight"]),
        "worst": worst,
        "at_w_star": at_wstar,
    }


def _taylor_breaks(taylor: dict, per_dir: dict) -> dict:
    """Per direction: where the full and the paper's Taylor model break on the largest k."""
    return {
        d: {
            "full": taylor[d]["full"]["t_break"][-1],
            "paper": taylor[d]["paper"]["t_break"][-1],
            "full_break": taylor[d]["full"]["breaks"][-1],
            "paper_break": taylor[d]["paper"]["breaks"][-1],
            "paper_within": taylor[d]["paper"]["t_within"][-1],
            "t_max": per_dir[d]["t_max"],
            "t_min": float(np.min(np.abs(per_dir[d]["ts"][per_dir[d]["ts"] != 0]))),
        }
        for d in taylor
    }


def _assumption1(fm: FlatModel, xs, ys, perms, s: Probe, init_model) -> dict:
    """Assumption 1 (gradient norms vs k) at ``w*`` and, when given, at ``init_model``."""
    n = len(xs)
    G = per_sample_gradients(fm, xs, ys)
    gram = (G @ G.T).cpu().numpy()
    del G
    k_grid = np.union1d(log_grid(2, n, 30), [k for k in s.shift_ks if 2 <= int(k) <= n - 1]).astype(np.int64)
    a1 = assumption1_analysis(gradient_norms(gram, perms), gram, k_grid, s.n_bootstrap, s.seed)
    if init_model is not None:
        fmi = FlatModel.of(init_model.to(torch.float64).eval())
        Gi = per_sample_gradients(fmi, xs, ys)
        gram_i = (Gi @ Gi.T).cpu().numpy()
        del Gi
        a1["init"] = assumption1_analysis(gradient_norms(gram_i, perms), gram_i, k_grid, s.n_bootstrap, s.seed)
    return a1


def _shift(fm: FlatModel, xs, ys, perms, s: Probe, M: float) -> dict:
    """The minimiser shift after ``shift_steps`` steps on k samples, ``lr = shift_lr_scale / M``."""
    n = len(xs)
    R = int(s.n_orderings)
    ks = [int(k) for k in s.shift_ks if 1 <= int(k) <= n - 1]
    lr = float(s.shift_lr_scale) / M
    runs = [
        minimiser_shift(fm, xs, ys, perms[r], ks, int(s.shift_steps), lr) for r in range(min(R, int(s.shift_orderings)))
    ]
    shift = {"steps": int(s.shift_steps), "lr": lr, "n_orderings": len(runs), "rows": []}
    for j, k in enumerate(ks):
        per = [run["rows"][j] for run in runs]
        shift["rows"].append(
            {
                "k": k,
                "shift": float(np.mean([p["shift"] for p in per])),
                "shift_each": [p["shift"] for p in per],
                "move": float(np.mean([p["move"] for p in per])),
                "descended": bool(all(p["descended"] for p in per)),
                "grad_norm_before": float(np.mean([p["grad_norm_before"] for p in per])),
                "grad_norm_after": float(np.mean([p["grad_norm_after"] for p in per])),
            }
        )
    return shift
