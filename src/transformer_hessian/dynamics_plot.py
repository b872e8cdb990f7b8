"""Figures 7-11 (paper App. A.1): parameter groups during the first training steps.

One figure per family of :data:`FAMILIES` (Queries, Keys, Values,
LayerNorm, FeedForward), drawn from the ``dynamics`` rule's npz/JSON:

* (a) the entries of each weight matrix at the heatmap steps (diverging colour scale centred at
  0, shared over the steps; LayerNorm: gamma - 1 and beta of every coordinate against the step);
* (b) log10 |H_gg| of the diagonal Hessian block(s) on the fixed Hessian batch at the same steps
  (LayerNorm: the 4d x 4d block of gamma1, beta1, gamma2, beta2), one colour range per row from
  robust quantiles, exact zeros in grey;
* (c) spectral and Frobenius norms of the weights against the step (log scale);
* (d) spectral norms ||H_gh||_2 of the Hessian blocks of each group g of the family with every
  group h of the block against the step (log scale; the diagonal block drawn thick).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import colors
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from . import ALL_GROUPS, LN_GROUPS
from .io import load_dynamics  # noqa: F401 (re-exported: the format lives in io.py)

#: The five figure families of Appendix A.1: figure number -> (title word, groups).
FAMILIES = {
    "fig7": ("Queries", ("W_Q",)),
    "fig8": ("Keys", ("W_K",)),
    "fig9": ("Values", ("W_V",)),
    "fig10": ("LayerNorm", LN_GROUPS),
    "fig11": ("FeedForward", ("W_1", "W_2")),
}

#: Axis labels of the nine groups.
LABELS = {
    "W_Q": "W_Q",
    "W_K": "W_K",
    "W_V": "W_V",
    "W_1": "W_1",
    "W_2": "W_2",
    "gamma1": "γ1",
    "beta1": "β1",
    "gamma2": "γ2",
    "beta2": "β2",
}
#: One colour per partner group h in panel (d), the same in every figure.
PARTNER_COLOURS = dict(zip(ALL_GROUPS, plt.get_cmap("tab10").colors))
DATASETS = {"digits": "8x8 digits (stand-in for MNIST)", "mnist": "MNIST", "cifar100": "CIFAR-100"}
FIGURE_NUMBERS = {"fig7": 7, "fig8": 8, "fig9": 9, "fig10": 10, "fig11": 11}


def robust_log_range(mats, lo_q: float = 0.02) -> tuple[float, float]:
    """(vmin, vmax) of log10 |entries| over the nonzero entries of ``mats``: vmin = the ``lo_q``
    quantile, vmax = the maximum (a single tiny entry cannot stretch the scale)."""
    vals = np.concatenate([np.abs(np.asarray(m, dtype=np.float64)).ravel() for m in mats])
    nz = vals[vals > 0]
    if nz.size == 0:
        return -12.0, -11.0
    logs = np.log10(nz)
    vmin, vmax = float(np.quantile(logs, lo_q)), float(logs.max())
    return (vmin, vmin + 1.0) if vmax <= vmin else (vmin, vmax)


def tile_max_abs(m, max_side: int = 256) -> tuple[np.ndarray, int]:
    """(|m| reduced by the maximum over k x k tiles, k) with k = ceil(max(shape) / max_side), so
    the image has at most ``max_side`` pixels a side (k = 1: |m| itself). A tile is 0 only when
    all its entries are; a figure panel cannot show more pixels than this anyway."""
    a = np.abs(np.asarray(m, dtype=np.float64))
    k = max(1, -(-max(a.shape) // max_side))
    if k == 1:
        return a, 1
    r, c = -(-a.shape[0] // k) * k, -(-a.shape[1] // k) * k
    padded = np.zeros((r, c))
    padded[: a.shape[0], : a.shape[1]] = a
    return padded.reshape(r // k, k, c // k, k).max(axis=(1, 3)), k


def _title(fig_id: str, summary: Mapping[str, Any]) -> str:
    family = FAMILIES[fig_id][0]
    m = summary["model"]
    ds = DATASETS.get(summary["dataset"], summary["dataset"])
    return (
        f"Figure {FIGURE_NUMBERS[fig_id]} ({family}): first {summary['steps'][-1]} training steps, {ds}; "
        f"{m['depth']}-block post-norm ViT (d={m['width']}, d_ff={m['d_ff']}, patch {m['patch_size']}); "
        f"Hessian on a fixed batch of {summary['batch_size']}"
    )


def _entries_row(sub, data, groups, heat_idx, steps):
    """Row (a): weight entries (matrices at the heat steps; LayerNorm vectors against the step)."""
    if groups == LN_GROUPS:
        axes = sub.subplots(1, len(groups), sharey=True)
        vals = {g: data[f"weights_{g}"].astype(np.float64) - (1.0 if g.startswith("gamma") else 0.0) for g in groups}
        vmax = max(float(np.abs(v).max()) for v in vals.values()) or 1.0
        for ax, g in zip(axes, groups):
            v = vals[g]  # (n_snap, d)
            im = ax.imshow(
                v.T,
                cmap="RdBu_r",
                vmin=-vmax,
                vmax=vmax,
                aspect="auto",
                interpolation="nearest",
                extent=(steps[0], steps[-1], v.shape[1] - 0.5, -0.5),
            )
            ax.set_title(f"{LABELS[g]} − 1" if g.startswith("gamma") else LABELS[g])
            ax.set_xlabel("training step")
        axes[0].set_ylabel("coordinate")
        cb = sub.colorbar(im, ax=list(axes), shrink=0.9, pad=0.02)
        cb.set_label("γ − 1 or β (entry)")
        return
    rows = len(groups)
    axes = np.atleast_2d(sub.subplots(rows, len(heat_idx), squeeze=False))
    for r, g in enumerate(groups):
        mats = [data[f"weights_{g}"][i].astype(np.float64) for i in heat_idx]
        if g == "W_2":
            mats = [m.T for m in mats]
        vmax = max(float(np.abs(m).max()) for m in mats) or 1.0
        for c, (i, m) in enumerate(zip(heat_idx, mats)):
            ax = axes[r, c]
            im = ax.imshow(
                m,
                cmap="RdBu_r",
                vmin=-vmax,
                vmax=vmax,
                interpolation="nearest",
                aspect="equal" if m.shape[0] == m.shape[1] else "auto",
            )
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            name = "W_2ᵀ" if g == "W_2" else LABELS[g]
            ax.set_title(f"{name}, step {steps[i]}")
            ax.set_xlabel("column")
            if c == 0:
                ax.set_ylabel("row")
        cb = sub.colorbar(im, ax=list(axes[r]), shrink=0.9, pad=0.02)
        cb.set_label(f"{LABELS[g]} entry")


def _hessian_row(sub, data, groups, summary):
    """Row (b): log10 |H| of the diagonal block(s) at the heat steps, zeros in grey."""
    heat = list(data["heat_steps"])
    keys = ["LN"] if groups == LN_GROUPS else list(groups)
    axes = np.atleast_2d(sub.subplots(len(keys), len(heat), squeeze=False))
    for r, key in enumerate(keys):
        pooled = [tile_max_abs(m) for m in data[f"hdiag_{key}"]]
        mats, k = [p[0] for p in pooled], pooled[0][1]
        vmin, vmax = robust_log_range(mats)
        cmap = plt.get_cmap("rocket" if "rocket" in plt.colormaps() else "magma").with_extremes(bad="0.75")
        zeros = any((m == 0).any() for m in mats)
        for c, (s, m) in enumerate(zip(heat, mats)):
            ax = axes[r, c]
            with np.errstate(divide="ignore"):
                img = np.ma.masked_equal(np.log10(np.abs(m)), -np.inf)
            extent = (-0.5, m.shape[1] * k - 0.5, m.shape[0] * k - 0.5, -0.5)
            im = ax.imshow(
                np.ma.clip(img, vmin, vmax),
                cmap=cmap,
                norm=colors.Normalize(vmin, vmax),
                interpolation="nearest",
                aspect="equal",
                extent=extent,
            )
            if key == "LN":
                d = m.shape[0] // 4
                for b in (d, 2 * d, 3 * d):
                    ax.axhline(b - 0.5, color="white", lw=0.6)
                    ax.axvline(b - 0.5, color="white", lw=0.6)
                ticks = [d * (k + 0.5) - 0.5 for k in range(4)]
                ax.set_xticks(ticks, [LABELS[g] for g in LN_GROUPS])
                ax.set_yticks(ticks, [LABELS[g] for g in LN_GROUPS])
                ax.set_title(f"H (LayerNorm block), step {s}")
            else:
                ax.set_title(f"H[{LABELS[key]}, {LABELS[key]}], step {s}")
                ax.set_xlabel("parameter index")
                if c == 0:
                    ax.set_ylabel("parameter index")
        cb = sub.colorbar(im, ax=list(axes[r]), shrink=0.9, pad=0.02)
        notes = [f"max over {k}x{k} tiles"] if k > 1 else []
        notes += ["grey: exactly 0"] if zeros else []
        cb.set_label("log10 |H entry|" + (f"\n({'; '.join(notes)})" if notes else ""))


def _norms_row(sub, data, groups):
    """Row (c)+(d): weight norms and Hessian block spectral norms against the step."""
    steps = data["steps"]
    idx = {g: ALL_GROUPS.index(g) for g in ALL_GROUPS}
    axes = sub.subplots(1, 1 + len(groups), sharex=True)
    ax = axes[0]
    for g in groups:
        col = PARTNER_COLOURS[g]
        wn = data["weight_norms"][:, :, idx[g]]
        if g in LN_GROUPS:
            ax.plot(steps, np.where(wn[:, 0] > 0, wn[:, 0], np.nan), color=col, marker=".", label=LABELS[g])
        else:
            ax.plot(steps, wn[:, 0], color=col, marker=".", label=f"{LABELS[g]} spectral")
            ax.plot(steps, wn[:, 1], color=col, ls="--", marker=".", label=f"{LABELS[g]} Frobenius")
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("weight norm" + (" (Euclidean; β = 0 at step 0)" if groups == LN_GROUPS else ""))
    ax.set_title("weight norms")
    ax.legend(loc="best", fontsize=6)
    hn = data["hessian_norms"][:, 1]  # spectral, (n, 9, 9)
    positive = hn[hn > 0]
    lo, hi = (float(positive.min()), float(positive.max())) if positive.size else (1e-12, 1.0)
    for ax, g in zip(axes[1:], groups):
        for h in ALL_GROUPS:
            y = hn[:, idx[g], idx[h]]
            ax.plot(
                steps, np.where(y > 0, y, np.nan), color=PARTNER_COLOURS[h], lw=2.2 if h == g else 1.0, label=LABELS[h]
            )
        ax.set_yscale("log")
        ax.set_ylim(lo / 2, hi * 2)
        ax.set_xlabel("training step")
        ax.set_title(f"||H[{LABELS[g]}, h]||₂")
        if ax is axes[1]:
            ax.set_ylabel("Hessian block norm ||·||₂")
    axes[-1].legend(title="h", loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=7)


def dynamics_figure(fig_id: str, data: Mapping[str, Any], summary: Mapping[str, Any]) -> Figure:
    """Figure ``fig_id`` (fig7 ... fig11) from the dynamics arrays and summary (see module doc)."""
    if fig_id not in FAMILIES:
        raise ValueError(f"unknown figure {fig_id!r}; one of {list(FAMILIES)}")
    _, groups = FAMILIES[fig_id]
    steps = list(data["steps"])
    heat_idx = [steps.index(s) for s in data["heat_steps"]]
    n_rows = 1 if groups == LN_GROUPS else len(groups)
    square = groups == LN_GROUPS or all(data[f"weights_{g}"].shape[1] == data[f"weights_{g}"].shape[2] for g in groups)
    heights = [(2.2 if square else 1.7) * n_rows, 2.3 * n_rows, 2.4]
    # Fixed margins instead of a layout engine: constrained layout made saving these many-panel
    # figures several times slower (tick and text extents recomputed on every pass).
    fig = plt.figure(figsize=(11, sum(heights) + 0.6))
    subs = fig.subfigures(3, 1, height_ratios=heights)
    for sub, h in zip(subs, heights):
        sub.subplots_adjust(
            left=0.11,
            right=0.86,
            bottom=0.55 / h,
            top=1 - 0.35 / h,
            wspace=0.5 if len(groups) > 2 else 0.35,
            hspace=0.85,
        )
    _entries_row(subs[0], data, groups, heat_idx, steps)
    _hessian_row(subs[1], data, groups, summary)
    _norms_row(subs[2], data, groups)
    for sub, tag in zip(subs, ("(a) entries", "(b) diagonal Hessian block", "(c) norms against the step")):
        sub.supylabel(tag, fontsize=8, fontweight="bold", x=0.01)
    fig.suptitle(_title(fig_id, summary), fontsize=9, y=0.998)
    return fig
