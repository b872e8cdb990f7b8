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
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from ... import ALL_GROUPS, LN_GROUPS
from ...plotting.style import COMPACT_RC, GROUP_COLOURS
from ...util.datanames import DATA_SETS, named

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
#: One colour per partner group h in panel (d), the same in every figure (colour-blind safe).
PARTNER_COLOURS = GROUP_COLOURS
#: Matrix groups solid, LayerNorm groups dashed: a second cue besides the colour.
_LINESTYLE = {g: (0, (4, 1.5)) if g in LN_GROUPS else "-" for g in ALL_GROUPS}
#: Figures 7-11 are the paper's MNIST experiment.
DATASETS = {n: named(n, "MNIST", library=False) for n in DATA_SETS}
#: Width of Figures 7-11 (inches): printed at the paper's 5.5-in text width, 7-pt text stays >= 6.5 pt.
FIGURE_WIDTH_IN = 5.9
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
        f"Figure {FIGURE_NUMBERS[fig_id]} ({family}): first {summary['steps'][-1]} training steps, {ds}\n"
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
            ax.xaxis.set_major_locator(MaxNLocator(4, integer=True))
            ax.yaxis.set_major_locator(MaxNLocator(4, integer=True))
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
                ax.set_title(f"step {s}")
            else:
                ax.set_title(f"H[{LABELS[key]}, {LABELS[key]}], step {s}" if len(keys) > 1 else f"step {s}")
                ax.set_xlabel("parameter index")
                if c == 0:
                    ax.set_ylabel("parameter index")
        cb = sub.colorbar(im, ax=list(axes[r]), shrink=0.9, pad=0.02)
        notes = [f"max over {k}x{k} tiles"] if k > 1 else []
        notes += ["grey: exactly 0"] if zeros else []
        cb.set_label("log10 |H entry|" + (f"\n({'; '.join(notes)})" if notes else ""))


def linear_or_log(ax, values, axis: str = "y") -> str:
    """Log scale when the positive ``values`` span a decade or more, else a linear scale (a log axis
    over less than a decade shows one or no labelled tick). Returns the scale set."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    scale = "log" if v.size and v.max() / v.min() >= 10.0 else "linear"
    (ax.set_yscale if axis == "y" else ax.set_xscale)(scale)
    return scale


def _norms_row(sub, data, groups):
    """Row (c)+(d): weight norms and Hessian block spectral norms against the step; the last
    slot of the grid holds the legends (outside the data)."""
    steps = data["steps"]
    idx = {g: ALL_GROUPS.index(g) for g in ALL_GROUPS}
    n_slots = 2 + len(groups)  # weight norms, one Hessian-norm panel per group, legends
    ncols = n_slots if n_slots <= 4 else 3
    nrows = -(-n_slots // ncols)
    grid = sub.subplots(nrows, ncols, squeeze=False).ravel()
    axes, spare = grid[: n_slots - 1], grid[n_slots - 1 :]
    ax = axes[0]
    weight_values = []
    for g in groups:
        col = GROUP_COLOURS[g]
        wn = data["weight_norms"][:, :, idx[g]]
        if g in LN_GROUPS:
            y = np.where(wn[:, 0] > 0, wn[:, 0], np.nan)
            ax.plot(steps, y, color=col, marker=".", ms=3, ls=_LINESTYLE[g], label=LABELS[g])
            weight_values.append(y)
        else:
            ax.plot(steps, wn[:, 0], color=col, marker=".", ms=3, label=f"{LABELS[g]} spectral")
            ax.plot(steps, wn[:, 1], color=col, ls="--", marker=".", ms=3, label=f"{LABELS[g]} Frobenius")
            weight_values += [wn[:, 0], wn[:, 1]]
    linear_or_log(ax, np.concatenate(weight_values))
    ax.set_xlabel("training step")
    ax.set_ylabel("weight norm" + (" (Euclidean)" if groups == LN_GROUPS else ""))
    ax.set_title("weight norms" + ("; β = 0 at step 0" if groups == LN_GROUPS else ""))
    hn = data["hessian_norms"][:, 1]  # spectral, (n, 9, 9)
    positive = hn[hn > 0]
    lo, hi = (float(positive.min()), float(positive.max())) if positive.size else (1e-12, 1.0)
    for ax, g in zip(axes[1:], groups):
        for h in ALL_GROUPS:
            y = hn[:, idx[g], idx[h]]
            ax.plot(
                steps,
                np.where(y > 0, y, np.nan),
                color=GROUP_COLOURS[h],
                ls=_LINESTYLE[h],
                lw=2.2 if h == g else 1.0,
                label=LABELS[h],
            )
        if linear_or_log(ax, [lo, hi]) == "log":
            ax.set_ylim(lo / 2, hi * 2)
        ax.set_xlabel("training step")
        ax.set_title(f"||H[{LABELS[g]}, h]||₂")
        if ax is axes[1] or (ncols == 3 and list(grid).index(ax) % ncols == 0):
            ax.set_ylabel("||·||₂ of the block")
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(4, integer=True))
    legend_ax = spare[0]
    legend_ax.axis("off")
    for extra in spare[1:]:
        extra.axis("off")
    handles, labels = axes[1].get_legend_handles_labels()
    if groups != LN_GROUPS:  # the weight panel: line style = norm, colour = group (as below)
        handles += [
            Line2D([], [], color="0.2", marker=".", ms=3, label="spectral"),
            Line2D([], [], color="0.2", marker=".", ms=3, ls="--", label="Frobenius"),
        ]
        labels += ["weight: spectral", "weight: Frobenius"]
    legend_ax.legend(
        handles,
        labels,
        loc="center left",
        title="group h (thick: h = g)",
        ncols=1 if ncols == 4 else 2,  # four panels a row leave a narrow slot
        frameon=False,
        handlelength=1.8,
        columnspacing=0.8,
    )


def dynamics_figure(fig_id: str, data: Mapping[str, Any], summary: Mapping[str, Any]) -> Figure:
    """Figure ``fig_id`` (fig7 ... fig11) from the dynamics arrays and summary (see module doc)."""
    with plt.rc_context(COMPACT_RC):
        return _dynamics_figure(fig_id, data, summary)


def _dynamics_figure(fig_id: str, data: Mapping[str, Any], summary: Mapping[str, Any]) -> Figure:
    if fig_id not in FAMILIES:
        raise ValueError(f"unknown figure {fig_id!r}; one of {list(FAMILIES)}")
    _, groups = FAMILIES[fig_id]
    steps = list(data["steps"])
    heat_idx = [steps.index(s) for s in data["heat_steps"]]
    n_rows = 1 if groups == LN_GROUPS else len(groups)
    square = groups == LN_GROUPS or all(data[f"weights_{g}"].shape[1] == data[f"weights_{g}"].shape[2] for g in groups)
    n_norm_rows = 2 if len(groups) + 2 > 4 else 1
    title_in = 0.45  # the two-line suptitle's band above row (a)
    heights = [(1.9 if square else 1.5) * n_rows + title_in, 1.9 * n_rows, 2.0 * n_norm_rows]
    # Fixed margins instead of a layout engine: constrained layout made saving these many-panel
    # figures several times slower (tick and text extents recomputed on every pass).
    # FIGURE_WIDTH_IN wide: printed at the paper's text width the 7-pt fonts stay above 6 pt.
    fig = plt.figure(figsize=(FIGURE_WIDTH_IN, sum(heights) + 0.2))
    subs = fig.subfigures(3, 1, height_ratios=heights)
    for sub, h, hspace in zip(subs, heights, (0.75, 0.75, 0.95)):
        sub.subplots_adjust(left=0.13, right=0.86, bottom=0.5 / h, top=1 - 0.32 / h, wspace=0.45, hspace=hspace)
    subs[0].subplots_adjust(top=1 - (0.32 + title_in) / heights[0])
    subs[2].subplots_adjust(right=0.98, wspace=0.55 if len(groups) + 2 != 4 else 0.8)
    _entries_row(subs[0], data, groups, heat_idx, steps)
    _hessian_row(subs[1], data, groups, summary)
    _norms_row(subs[2], data, groups)
    row_tags = ("(a) entries", "(b) diagonal Hessian block" if groups != LN_GROUPS else "(b) LayerNorm Hessian block")
    for sub, tag in zip(subs, (*row_tags, "(c) norms against the step")):
        sub.supylabel(tag, fontsize=7.5, fontweight="bold", x=0.01)
    fig.suptitle(_title(fig_id, summary), fontsize=7.5, y=0.998)
    return fig
