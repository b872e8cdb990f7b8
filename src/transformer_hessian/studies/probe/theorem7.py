"""Theorem 7 off ``w*`` (arXiv 2510.16927, Sec. 3) and the second-order Taylor model along a
direction: per-sample directional derivatives, losses on a path ``w* + t d`` and prefix means
over orderings."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch.func import grad, jvp, vmap

from ...core.krylov import FlatModel
from ...core.theorem7 import landscape_bound, landscape_bound_tight, loss_differences

#: Relative slack when comparing a measured value against a bound (rounding only).
BOUND_RTOL = 1e-12


# ----------------------------------------------------------------------------- directional


def directional_derivatives(
    fm: FlatModel,
    x: torch.Tensor,
    y: torch.Tensor,
    d: torch.Tensor,
    w: torch.Tensor | None = None,
    chunk: int = 128,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-sample ``l_i(w)``, ``a_i = grad l_i(w) . d`` and ``c_i = d^T H_i(w) d``.

    ``a_i`` and ``c_i`` are the first and second derivatives of ``t -> l_i(w + t d)`` at 0:
    ``(a_i, c_i) = jvp(p -> grad l_i(p) . d, (w,), (d,))``, vmapped over the samples
    (forward-over-reverse). Not forward-over-forward: in torch 2.14 the second-order forward
    mode of ``F.layer_norm`` with a weight is wrong (see ``docs/theory.md``).
    """
    w = fm.w0 if w is None else w
    g1 = grad(fm.sample_loss)

    def one(xi, yi):
        return jvp(lambda p: (g1(p, xi, yi) * d).sum(), (w,), (d,))

    a_parts, c_parts = [], []
    for i in range(0, len(x), chunk):
        a_i, c_i = vmap(one)(x[i : i + chunk], y[i : i + chunk])
        a_parts.append(a_i.detach())
        c_parts.append(c_i.detach())
    with torch.no_grad():
        l0 = fm.per_sample_losses(w, x, y)

    def np64(t):
        return t.cpu().numpy().astype(np.float64)

    return np64(l0), np64(torch.cat(a_parts)), np64(torch.cat(c_parts))


@torch.no_grad()
def path_losses(fm: FlatModel, x: torch.Tensor, y: torch.Tensor, d: torch.Tensor, ts: Any) -> np.ndarray:
    """``(len(ts), n)`` array of ``l_i(w0 + t d)`` for every ``t`` in ``ts`` and every sample."""
    return np.stack([fm.per_sample_losses(fm.w0 + float(t) * d, x, y).cpu().numpy() for t in ts]).astype(np.float64)


def prefix_means(values: Any, perms: np.ndarray) -> np.ndarray:
    """``out[r, k-1] = (1/k) sum_{i<=k} values[perms[r, i-1]]``: ``L_k`` on every ordering.

    ``values`` may carry leading axes: ``(..., n)`` gives ``(..., R, n)``.
    """
    v = np.asarray(values, dtype=np.float64)
    ordered = v[..., perms]  # (..., R, n)
    return np.cumsum(ordered, axis=-1) / np.arange(1, perms.shape[1] + 1, dtype=np.float64)


# ----------------------------------------------------------------------------- Theorem 7


def theorem7_check(
    losses: np.ndarray,
    ts: np.ndarray,
    loss_max: float,
    M: float,
    n_orderings: int,
    seed: int,
    k_store: np.ndarray,
) -> dict[str, Any]:
    """Theorem 7 on one direction: ``|L_{k+1}(w) - L_k(w)|`` at ``w = w* + t d`` vs its bound.

    ``losses`` is ``(T, n)``: per-sample losses at each ``t`` of ``ts`` (the distance
    ``||w - w*||_2 = |t|``, ``d`` being a unit vector). For every ``t``, every ordering (the
    ``n_orderings`` of :func:`transformer_hessian.core.theorem7.orderings` with ``seed``) and every
    ``k = 1 .. n-1`` the left-hand side is compared with

    * ``bound``: the printed right-hand side :func:`landscape_bound` ``(k, L, M, t^2)``;
    * ``tight``: :func:`landscape_bound_tight` ``(k, L, M, t^2) = (L + M t^2)/(k+1)``;
    * ``no_curvature``: ``2L/(k+1)`` alone (``M = 0``), to see whether the curvature term matters.

    Returns per-``t`` curves at ``k_store`` (mean and max over orderings of the left-hand
    side, the bound) and counts of the comparisons that held.
    """
    T, n = losses.shape
    k = np.arange(1, n, dtype=np.float64)
    store = np.asarray(k_store, dtype=np.int64) - 1
    out: dict[str, Any] = {
        "t": [float(t) for t in ts],
        "lhs_mean": [],
        "lhs_max": [],
        "bound": [],
        "tight": [],
        "ratio_max": [],
        "held_fraction_t": [],
        "worst": None,
    }
    counts = {"bound": 0, "tight": 0, "no_curvature": 0}
    held_all_orderings = {"bound": 0, "tight": 0, "no_curvature": 0}
    worst_ratio = -np.inf
    for ti, t in enumerate(ts):
        D = loss_differences(losses[ti], n_orderings, seed)  # (R, n-1)
        rhs = {
            "bound": landscape_bound(k, loss_max, M, t * t),
            "tight": landscape_bound_tight(k, loss_max, M, t * t),
            "no_curvature": landscape_bound(k, loss_max, 0.0, 0.0),
        }
        for key, b in rhs.items():
            ok = D <= b * (1.0 + BOUND_RTOL)
            counts[key] += int(ok.sum())
            held_all_orderings[key] += int(ok.all(axis=0).sum())
        ratio = D / rhs["bound"]
        r_idx = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        if ratio[r_idx] > worst_ratio:
            worst_ratio = float(ratio[r_idx])
            out["worst"] = {
                "t": float(t),
                "k": int(r_idx[1] + 1),
                "ordering": int(r_idx[0]),
                "lhs": float(D[r_idx]),
                "bound": float(rhs["bound"][r_idx[1]]),
                "ratio": worst_ratio,
            }
        out["lhs_mean"].append(D.mean(axis=0)[store].tolist())
        out["lhs_max"].append(D.max(axis=0)[store].tolist())
        out["bound"].append(rhs["bound"][store].tolist())
        out["tight"].append(rhs["tight"][store].tolist())
        out["ratio_max"].append(ratio.max(axis=0)[store].tolist())
        out["held_fraction_t"].append(float((D <= rhs["bound"] * (1 + BOUND_RTOL)).mean()))
    total = T * n_orderings * (n - 1)
    out["n_comparisons"] = int(total)
    out["held"] = {key: int(v) for key, v in counts.items()}
    out["held_all_orderings"] = {key: int(v) for key, v in held_all_orderings.items()}
    out["n_k_t"] = int(T * (n - 1))
    return out


def _crossing(t_a: float, t_b: float, e_a: float, e_b: float, tolerance: float) -> float:
    """``|t|`` in ``[t_a, t_b]`` where the log-log line through ``(t_a, e_a)``, ``(t_b, e_b)``
    reaches ``tolerance`` (``e_a <= tolerance < e_b``); ``t_b`` when ``e_b`` is not finite."""
    if not (np.isfinite(e_b) and e_a > 0 and e_b > e_a):
        return t_b
    frac = (math.log(tolerance) - math.log(e_a)) / (math.log(e_b) - math.log(e_a))
    return math.exp(math.log(t_a) + frac * (math.log(t_b) - math.log(t_a)))


def _side_break(abs_t: np.ndarray, err: np.ndarray, tolerance: float) -> dict[str, Any]:
    """One side of 0 (``abs_t`` ascending): the first and the final break (see :func:`taylor_break`)."""
    bad = ~(err <= tolerance)  # NaN (0/0) counts as above the tolerance
    out: dict[str, Any] = {}
    if not bad.any():
        out["first"] = out["final"] = {"status": "none", "t": None}
        return out
    j = int(np.argmax(bad))
    if j == 0:
        out["first"] = {"status": "below", "t": None}
    else:
        out["first"] = {"status": "crossing", "t": _crossing(abs_t[j - 1], abs_t[j], err[j - 1], err[j], tolerance)}
    ok = np.flatnonzero(~bad)
    if ok.size == 0:
        out["final"] = {"status": "below", "t": None}
    elif ok[-1] == abs_t.size - 1:
        out["final"] = {"status": "none", "t": None}
    else:
        i = int(ok[-1])
        out["final"] = {"status": "crossing", "t": _crossing(abs_t[i], abs_t[i + 1], err[i], err[i + 1], tolerance)}
    return out


def _combine(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The break of both sides together: the one closest to 0 (``below`` before any crossing)."""
    if any(p["status"] == "below" for p in parts):
        return {"status": "below", "t": None}
    crossings = [p["t"] for p in parts if p["status"] == "crossing"]
    return {"status": "crossing", "t": min(crossings)} if crossings else {"status": "none", "t": None}


def taylor_break(ts: Any, rel_error: Any, tolerance: float) -> dict[str, Any]:
    """Where a second-order model stops describing ``L_k`` along one direction.

    ``rel_error[i]`` is the model's relative error at ``ts[i]`` (NaN or None at ``t = 0``). On
    each side of 0, with the grid sorted by ``|t|``:

    * the *first* break is the smallest ``|t|`` where the error exceeds ``tolerance``:
      ``"crossing"`` at the ``|t|`` where the log-log interpolation between that grid point and
      the one before (within tolerance) reaches ``tolerance`` (exact for an error that is a power
      of ``|t|``, e.g. ``2 |e t| / C`` from a cubic ``e t^3``); ``"below"`` the probed range when
      the smallest ``|t|`` probed already exceeds it; ``"none"`` when no grid point does (not
      within the probed range);
    * the *final* break is where the error exceeds ``tolerance`` for good (at every larger grid
      ``|t|``), interpolated the same way from the last grid point within tolerance. On a smooth
      loss the two agree; on a ReLU network the kinks the Hessian at ``w*`` does not see can
      push single small-``|t|`` points over the tolerance, and then they differ.

    The two sides combine into the break closer to 0. Returns ``status`` / ``t_break`` (first
    break), ``final_status`` / ``t_break_final``, ``t_min``, ``t_max`` (smallest and largest
    ``|t|`` probed), ``tolerance`` and ``sides`` (``"+"``, ``"-"``: the same per side)."""
    t = np.asarray(ts, dtype=np.float64)
    err = np.asarray([np.nan if v is None else v for v in rel_error], dtype=np.float64)
    if t.shape != err.shape:
        raise ValueError(f"ts and rel_error must have the same length, got {t.shape} and {err.shape}")
    if not tolerance > 0:
        raise ValueError(f"tolerance must be > 0, got {tolerance!r}")
    nz = t != 0
    if not nz.any():
        raise ValueError("taylor_break needs at least one t != 0")
    sides = {}
    for name, sel in (("+", t > 0), ("-", t < 0)):
        if sel.any():
            order = np.argsort(np.abs(t[sel]))
            sides[name] = _side_break(np.abs(t[sel])[order], err[sel][order], tolerance)
    first = _combine([v["first"] for v in sides.values()])
    final = _combine([v["final"] for v in sides.values()])
    return {
        "status": first["status"],
        "t_break": first["t"],
        "final_status": final["status"],
        "t_break_final": final["t"],
        "t_min": float(np.min(np.abs(t[nz]))),
        "t_max": float(np.max(np.abs(t[nz]))),
        "tolerance": float(tolerance),
        "sides": sides,
    }


def describe_break(b: dict[str, Any]) -> str:
    """Text for a :func:`taylor_break` result: ``"|t| = 0.00880"``, ``"below the probed range
    (|t| < 0.0350)"`` or ``"not within the probed range (|t| <= 17.5)"``, followed by
    ``"(for good from |t| = 0.300)"`` when the final break is elsewhere."""
    from ...util.numfmt import fmt

    def one(status: str, t: float | None) -> str:
        if status == "crossing":
            return f"|t| = {fmt(t)}"
        if status == "below":
            return f"below the probed range (|t| < {fmt(b['t_min'])})"
        return f"not within the probed range (|t| <= {fmt(b['t_max'])})"

    text = one(b["status"], b["t_break"])
    if (b["final_status"], b["t_break_final"]) != (b["status"], b["t_break"]):
        final = one(b["final_status"], b["t_break_final"])
        text += f" (for good from {final})" if b["final_status"] == "crossing" else f" (final: {final})"
    return text


def taylor_check(
    losses: np.ndarray,
    ts: np.ndarray,
    l0: np.ndarray,
    a: np.ndarray,
    c: np.ndarray,
    perms: np.ndarray,
    k_report: np.ndarray,
    tolerance: float,
) -> dict[str, Any]:
    """Second-order Taylor models of ``L_k(w* + t d)`` against the measured ``L_k``.

    With per-sample ``l_i``, ``a_i`` and ``c_i`` at ``t = 0`` (:func:`directional_derivatives`)
    and their running means ``L_k, A_k, C_k`` on each ordering:

    * ``full`` model ``Q_k(t) = L_k + t A_k + t^2 C_k / 2`` (the gradient term kept);
    * ``paper`` model ``L_k + t^2 C_k / 2`` (eq. approx of Sec. 4.3: gradient dropped by
      Assumption 1).

    The relative error is ``|L_k(t) - Q_k(t)| / (t^2 |C_k| / 2)``: the model's error against
    its own curvature term (a remainder small next to the quadratic term means the quadratic
    model describes ``L_k``; for the paper's model the neglected ``t A_k`` counts as error). The
    median over orderings is reported at ``k_report`` for each ``t``. Where the model breaks, per
    ``k``: :func:`taylor_break` of the median error (``breaks``; ``t_break`` is its ``t_break``:
    the interpolated smallest ``|t|`` where the error exceeds ``tolerance``, None when it does so
    already at the smallest ``|t|`` probed or nowhere, ``break_status`` says which); for the
    paper's model the grid points where it is within ``tolerance`` are also reported.
    """
    ts = np.asarray(ts, dtype=np.float64)
    Lk = prefix_means(losses, perms)  # (T, R, n)
    L0, A, C = prefix_means(l0, perms), prefix_means(a, perms), prefix_means(c, perms)
    kidx = np.asarray(k_report, dtype=np.int64) - 1
    tt = ts[:, None, None]
    quad = 0.5 * tt**2 * np.abs(C[None])
    models = {"full": L0[None] + tt * A[None] + 0.5 * tt**2 * C[None], "paper": L0[None] + 0.5 * tt**2 * C[None]}
    nz = ts != 0
    out: dict[str, Any] = {"k": [int(v) for v in k_report], "t": ts.tolist(), "tolerance": float(tolerance)}
    for name, Q in models.items():
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.abs(Lk - Q) / quad
        rel = np.where(nz[:, None, None], rel, np.nan)
        sub = rel[:, :, kidx]
        med = np.full((len(ts), len(kidx)), np.nan)
        med[nz] = np.median(sub[nz], axis=1)  # (T, K); t = 0 has no relative error
        breaks, within = [], []
        for j in range(len(kidx)):
            breaks.append(taylor_break(ts, med[:, j], tolerance))
            ok = nz & (med[:, j] <= tolerance)
            within.append([float(v) for v in ts[ok]])
        out[name] = {
            "rel_error_median": [[None if not np.isfinite(v) else float(v) for v in row] for row in med],
            "t_break": [b["t_break"] for b in breaks],
            "break_status": [b["status"] for b in breaks],
            "breaks": breaks,
            "t_within": within,
        }
    return out
