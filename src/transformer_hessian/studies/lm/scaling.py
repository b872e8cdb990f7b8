"""The language study's scaling grid: decoders of ``lm.scaling.widths`` x ``depths``, each trained
on ``train_sequences`` of the corpus for the same number of AdamW steps and kept at the step of its
lowest validation loss (early stopping, ``lm.scaling.eval_every``); per model the validation
loss, the D_k curve on its own training set (slope, prefactor, k* at ``lm.tolerance``), the top
Hessian eigenvalue (Lanczos on :class:`transformer_hessian.engine.api.HessianOperator`) and the
largest spectral norm of a diagonal weight block; across models the law
``L(N, D) = E + A N^-alpha + B D^-beta`` (N: non-embedding parameters, D: training tokens) with a
pairs-bootstrap interval per constant, and power laws in N.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...util.files import log

if TYPE_CHECKING:
    from ...config.settings import Lm

__all__ = ["LAW_NAMES", "fit_scaling_law", "grid_points", "law_value", "run_point", "stationarity_verdict"]

#: The constants of the fitted law, under the names of its formula.
LAW_NAMES = ("E", "A", "alpha", "B", "beta")
#: the least squares' upper bound of alpha and beta (an exponent there means no power law was found)
EXPONENT_BOUND = 4.0


def grid_points(s: Lm) -> list[dict[str, int]]:
    """Every (width, depth, training sequences) of the grid, in a fixed order."""
    g = s.scaling
    return [{"width": w, "depth": d, "sequences": n} for d in g.depths for w in g.widths for n in g.train_sequences]


def point_id(p: dict[str, int]) -> str:
    """``w16_d2_n1024``: one model of the grid."""
    return f"w{p['width']}_d{p['depth']}_n{p['sequences']}"


def non_embedding(model) -> int:
    """Parameters outside the token and position embeddings (N of the law)."""
    return sum(p.numel() for n, p in model.named_parameters() if not n.startswith(("tok.", "pos.")))


def train_steps(
    model, seqs, steps: int, batch_size: int, lr: float, seed: int, val_seqs=None, eval_every: int = 0
) -> dict[str, Any]:
    """AdamW on the causal LM loss for ``steps`` steps, batches drawn without replacement from
    ``seqs`` (a new seeded permutation every pass). With ``val_seqs`` and ``eval_every``, the
    validation loss every ``eval_every`` steps and at the end, and the model is left at the
    weights of the lowest one (early stopping: on a small training set many steps memorise it).
    Returns ``{"last_loss", "best_step", "best_val_loss", "val_curve": [[step, loss], ...]}``."""
    import copy

    import torch

    from ...engine.ops.losses import causal_lm
    from .compute import per_sequence_losses

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(int(seed))
    order, pos, last = torch.randperm(len(seqs), generator=gen), 0, float("nan")
    b = min(batch_size, len(seqs))
    best, curve = (math.inf, 0, None), []

    def evaluate(step: int):
        nonlocal best
        model.eval()
        v = float(per_sequence_losses(model, val_seqs).mean())
        model.train()
        curve.append([step, v])
        if v < best[0]:
            best = (v, step, copy.deepcopy(model.state_dict()))

    for step in range(1, steps + 1):
        if pos + b > len(order):
            order, pos = torch.randperm(len(seqs), generator=gen), 0
        ids = seqs[order[pos : pos + b]]
        pos += b
        loss = causal_lm(model(ids), ids)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        last = float(loss)
        if val_seqs is not None and eval_every and (step % eval_every == 0 or step == steps):
            evaluate(step)
    if best[2] is not None:
        model.load_state_dict(best[2])
    return {"last_loss": last, "best_step": best[1], "best_val_loss": best[0], "val_curve": curve}


def _lanczos_extremes(matvec_rows, n: int, steps: int, seed: int) -> tuple[float, float]:
    """(smallest, largest) Ritz value of the symmetric operator on R^n."""
    import torch

    from ...core.spectral import lanczos_runs

    theta, _, _ = lanczos_runs(matvec_rows, torch.zeros(n, dtype=torch.float64), 1, min(steps, n), seed)
    return float(theta[0, 0]), float(theta[0, -1])


def curvature(model, batch, depth: int, steps: int, seed: int) -> dict[str, Any]:
    """Top eigenvalue of the Hessian of the causal LM loss on ``batch`` w.r.t. the weight matrices
    and the token embedding, and the spectral norm of each diagonal block (Lanczos through one
    :class:`~transformer_hessian.engine.api.HessianOperator`, float64)."""
    import torch

    from ...engine.api import HessianOperator
    from .compute import hessian_params

    names = hessian_params(depth)
    m = model.double()
    op = HessianOperator(m, batch, batch, loss="causal_lm", params=names)
    P = op.shape[0]

    def full(V):
        return (op @ V.T).T

    lo, hi = _lanczos_extremes(full, P, steps, seed)
    sizes = [dict(m.named_parameters())[n].numel() for n in names]
    blocks, off = {}, 0
    for name, size in zip(names, sizes):
        sl = slice(off, off + size)

        def rows(V, sl=sl):
            pad = torch.zeros(V.shape[0], P, dtype=V.dtype)
            pad[:, sl] = V
            return (op @ pad.T).T[:, sl]

        b_lo, b_hi = _lanczos_extremes(rows, size, steps, seed)
        blocks[name] = max(abs(b_lo), abs(b_hi))
        off += size
    top = max(blocks, key=blocks.get)
    return {"lambda_max": hi, "lambda_min": lo, "block_spectral": blocks, "largest_block": top}


def run_point(p: dict[str, int], s: Lm, train_seqs, val_seqs, cache_dir: str | Path) -> dict[str, Any]:
    """Train and measure one model of the grid (cached in ``cache_dir/<id>.json`` under the hash of
    everything that determines it)."""
    import torch

    from ...config.validate import config_hash
    from ...core.gpt import GPT
    from ...core.stats import bootstrap_slope_ci, fit_loglog_slope, k_star_fitted, k_star_measured
    from ...core.theorem7 import loss_differences
    from .compute import gpt_config, per_sequence_losses

    g = s.scaling
    key = config_hash({"point": p, "lm": s.to_dict()})
    cache = Path(cache_dir) / f"{point_id(p)}.json"
    if cache.exists():
        old = json.loads(cache.read_text())
        if old.get("key") == key:
            return old
    t0 = time.perf_counter()
    cfg = gpt_config(s, p["width"], p["depth"])
    torch.manual_seed(s.train.seed)
    model = GPT(cfg)
    seqs = train_seqs[: p["sequences"]]
    trained = train_steps(model, seqs, g.steps, g.batch_size, g.lr, s.train.seed, val_seqs, g.eval_every)
    model.eval()
    val = per_sequence_losses(model, val_seqs)
    train = per_sequence_losses(model, seqs)
    diffs = loss_differences(train, s.n_orderings, s.seed)
    k = np.arange(1, len(train), dtype=np.float64)
    d_mean = diffs.mean(axis=0)
    k_min = min(s.k_min, max(1, len(train) // 4))
    slope, intercept = fit_loglog_slope(k, d_mean, k_min=k_min)
    lo, hi, _ = bootstrap_slope_ci(diffs, k, k_min=k_min, n_bootstrap=s.n_bootstrap, seed=s.seed)
    prefactor = math.exp(intercept)
    batch = seqs[: s.hessian_sequences]
    curv = curvature(model, batch, p["depth"], g.lanczos_iters, s.seed)
    out = {
        "key": key,
        "id": point_id(p),
        **p,
        "tokens": int(p["sequences"] * s.context),
        "P": int(sum(t.numel() for t in model.parameters())),
        "N": int(non_embedding(model)),
        "val_loss": float(val.mean()),
        "train_loss": float(train.mean()),
        "last_step_loss": trained["last_loss"],
        "best_step": trained["best_step"],
        "val_curve": trained["val_curve"],
        "slope": slope,
        "slope_ci95": [lo, hi],
        "prefactor": prefactor,
        "k_star": k_star_measured(k, d_mean, s.tolerance),
        "k_star_fitted": k_star_fitted(prefactor, slope, s.tolerance),
        "k_min": int(k_min),
        **curv,
        "seconds": time.perf_counter() - t0,
    }
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(out, indent=1))
    log.info(
        "lm scaling %s: N %d, val loss %.4f, D_k slope %.2f, k* %s, lambda_max %.3g (%.1f s)",
        out["id"],
        out["N"],
        out["val_loss"],
        slope,
        out["k_star"],
        out["lambda_max"],
        out["seconds"],
    )
    return out


def law_value(theta, N, D):
    """``E + A N^-alpha + B D^-beta`` at ``theta = (E, A, alpha, B, beta)``."""
    E, A, alpha, B, beta = theta
    return E + A * np.power(N, -alpha) + B * np.power(D, -beta)


def _fit_once(N, D, L) -> np.ndarray | None:
    from scipy.optimize import least_squares

    best = None
    for a0 in (0.3, 1.0):
        for b0 in (0.3, 1.0):
            x0 = np.array([max(L.min() - 0.1, 0.0), math.log(1.0), a0, math.log(1.0), b0])

            def resid(x):
                th = (x[0], math.exp(x[1]), x[2], math.exp(x[3]), x[4])
                return law_value(th, N, D) - L

            try:
                r = least_squares(
                    resid, x0, bounds=([0, -30, 0, -30, 0], [np.inf, 30, EXPONENT_BOUND, 30, EXPONENT_BOUND])
                )
            except (ValueError, FloatingPointError):
                continue
            if best is None or r.cost < best.cost:
                best = r
    if best is None:
        return None
    x = best.x
    return np.array([x[0], math.exp(x[1]), x[2], math.exp(x[3]), x[4]])


def fit_scaling_law(rows: list[dict[str, Any]], n_bootstrap: int, seed: int) -> dict[str, Any]:
    """Least squares of ``L(N, D) = E + A N^-alpha + B D^-beta`` on the models' validation losses
    (``N`` non-embedding parameters, ``D`` training tokens), with percentile 95% intervals from a
    pairs bootstrap over the models; the root-mean-square residual."""
    N = np.array([r["N"] for r in rows], dtype=np.float64)
    D = np.array([r["tokens"] for r in rows], dtype=np.float64)
    L = np.array([r["val_loss"] for r in rows], dtype=np.float64)
    theta = _fit_once(N, D, L)
    if theta is None:
        return {"fitted": False, "why": "least squares failed"}
    rng = np.random.default_rng([int(seed), 0x1A])
    boots = []
    for _ in range(int(n_bootstrap)):
        idx = rng.integers(0, len(L), len(L))
        if len(np.unique(N[idx])) < 2 or len(np.unique(D[idx])) < 2:
            continue
        t = _fit_once(N[idx], D[idx], L[idx])
        if t is not None:
            boots.append(t)
    boots = np.array(boots)
    out: dict[str, Any] = {"fitted": True, "n_models": int(len(L)), "n_bootstrap": int(len(boots))}
    for i, name in enumerate(LAW_NAMES):
        out[name] = float(theta[i])
        out[f"{name}_ci95"] = np.quantile(boots[:, i], [0.025, 0.975]).tolist() if len(boots) >= 10 else None
    out["rms_residual"] = float(np.sqrt(np.mean((law_value(theta, N, D) - L) ** 2)))
    return out


def stationarity_verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The paper's reading ("switch from data scaling to model scaling near curvature
    stationarity") on the grid: at each model with a larger data size and a larger model at the
    same depth next to it, the gain in validation loss from the next data size (``gain_D``) and
    from the next width (``gain_N``). The reading predicts ``gain_N > gain_D`` where the training
    set is past stationarity (``k*`` measured and at most the model's sequences) and
    ``gain_D > gain_N`` before it. Returns the counts of cells where the prediction holds, per side."""
    by = {(r["width"], r["depth"], r["sequences"]): r for r in rows}
    widths = sorted({r["width"] for r in rows})
    seqs = sorted({r["sequences"] for r in rows})
    cells = []
    for (w, d, n), r in sorted(by.items()):
        wi, ni = widths.index(w), seqs.index(n)
        if wi + 1 >= len(widths) or ni + 1 >= len(seqs):
            continue
        nxt_w, nxt_n = by.get((widths[wi + 1], d, n)), by.get((w, d, seqs[ni + 1]))
        if nxt_w is None or nxt_n is None:
            continue
        stationary = r["k_star"] is not None and r["k_star"] <= n
        gain_n, gain_d = r["val_loss"] - nxt_w["val_loss"], r["val_loss"] - nxt_n["val_loss"]
        predicted = gain_n > gain_d if stationary else gain_d > gain_n
        cells.append(
            {"id": r["id"], "stationary": stationary, "gain_N": gain_n, "gain_D": gain_d, "holds": bool(predicted)}
        )
    side = {
        name: {
            "cells": sum(1 for c in cells if c["stationary"] == flag),
            "holds": sum(1 for c in cells if c["stationary"] == flag and c["holds"]),
        }
        for name, flag in (("stationary", True), ("before", False))
    }
    return {"cells": cells, **side}
