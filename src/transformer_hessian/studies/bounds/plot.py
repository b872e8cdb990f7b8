"""Figure of the bound evaluation: measured Hessian spectral norms against the project's
and the paper's bounds, per block pair (log scale), violations marked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ... import ATTENTION_GROUPS, GROUPS
from ...plotting import COMPACT_RC, GROUP_LABELS
from ...util.datanames import DATA_SETS, library_name, stands_in

__all__ = ["DATASET_NAMES", "bounds_figure"]

#: The Hessian experiment's data set: the paper's is MNIST.
DATASET_NAMES = {n: library_name(n) + (" (stand-in for MNIST)" if stands_in(n, "MNIST") else "") for n in DATA_SETS}

PANELS = [
    (
        "theory",
        "attention",
        ATTENTION_GROUPS,
        "attention layer, per-sample MSE",
        {"paper_statement": "paper Thm 1 (statement)", "paper_appendix": "paper Thm 1 (proof's M)"},
    ),
    (
        "theory",
        "block",
        GROUPS,
        "full block, per-sample MSE",
        {"paper_statement": "paper Thm 6, Lemma 4 as stated", "paper_proof": "paper Thm 6, Lemma 4 as in proof"},
    ),
    (
        "experiment",
        "block",
        GROUPS,
        "full block, batch cross-entropy (Figs 3-5)",
        {"paper_statement": "paper Thm 6 (MSE bound; not like for like)"},
    ),
]
STYLE = {
    "measured": {"marker": "o", "color": "black", "label": "measured $\\|H_{ij}\\|_2$"},
    "project": {"marker": "s", "color": "#4C72B0", "label": "project bound (proven)"},
    "paper_statement": {"marker": "^", "color": "#DD8452"},
    "paper_appendix": {"marker": "v", "color": "#55A868"},
    "paper_proof": {"marker": "v", "color": "#55A868"},
}


def _pairs(names):
    return [(names[a], j) for a in range(len(names)) for j in names[a:]] + [("total", "total")]


def _counterexample_panel(ax, c: Mapping[str, Any], stage: str) -> None:
    """Theorem 1 under W_Q -> W_Q/delta, W_K -> delta W_K with target F(X): ||H|| vs M."""
    scan = pd.DataFrame(c["scan"])
    ax.plot(scan.delta, scan.true_total, "o-", color="black", ms=4, label="measured $\\|H\\|_2$", zorder=5)
    # open squares above the measured points: the project bound lies close to the measured norm
    ax.plot(
        scan.delta,
        scan.project_total,
        "s--",
        color="#4C72B0",
        ms=6,
        mfc="none",
        mew=1.2,
        zorder=6,
        label="project bound",
    )
    for form, st in (("statement", STYLE["paper_statement"]), ("appendix", STYLE["paper_appendix"])):
        ax.plot(
            scan.delta,
            scan[f"M_{form}"],
            marker=st["marker"],
            color=st["color"],
            ms=5,
            label=f"paper Thm 1 ({'statement' if form == 'statement' else 'proof' + chr(39) + 's M'})",
        )
        bad = scan[f"M_{form}"] < scan.true_total
        ax.scatter(
            scan.delta[bad],
            scan[f"M_{form}"][bad],
            s=60,
            marker="x",
            color="red",
            linewidths=1.5,
            zorder=6,
            label="bound < measured" if form == "statement" else None,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.invert_xaxis()
    ax.set_xlabel("delta ($W_Q$/delta, $W_K$ delta; scores unchanged)")
    ax.set_ylabel("attention Hessian norm")
    ax.grid(alpha=0.3)
    ax.set_title(f"{stage}: Theorem 1 counter-example, target F(X)")


#: Horizontal offset of each series within a block pair, so that no marker hides another.
_DODGE = {"measured": -0.22, "project": 0.0, "paper_statement": 0.22, "paper_appendix": 0.36, "paper_proof": 0.36}


def bounds_figure(results: Mapping[str, Mapping[str, Any]]) -> Figure:
    """Columns: stages (init, trained); rows: attention layer (MSE), block (MSE), block (CE) and
    the Theorem 1 rescaling scan (sample 0's attention layer, ||H|| and M against delta).
    Per block pair (upper triangle; the blocks are symmetric) and the whole Hessian ("all"):
    the median over the evaluated samples of the measured spectral norm and of each bound, side
    by side within the pair. A red cross marks a pair where a bound fell below the measured norm
    on some sample. Each row's legend sits under the row, outside the data."""
    with plt.rc_context(COMPACT_RC):
        return _bounds_figure(results)


def _bounds_figure(results: Mapping[str, Mapping[str, Any]]) -> Figure:
    stages = list(results)
    fig, axes = plt.subplots(
        4,
        len(stages),
        figsize=(5.7, 12.5),
        layout="constrained",
        gridspec_kw={"height_ratios": [1, 1.1, 1.1, 1]},
        squeeze=False,
    )
    first = next(iter(results.values()))
    for c, stage in enumerate(stages):
        df = pd.DataFrame(results[stage]["records"])
        for r, (setting, layer, names, title, paper_cols) in enumerate(PANELS):
            ax = axes[r, c]
            sel = df[(df.setting == setting) & (df.layer == layer)]
            pairs = _pairs(names)
            x = np.arange(len(pairs))
            series = {"measured": "measured", "project": "project", **{k: k for k in paper_cols}}
            violated = False
            cols = list(series.values())
            vals = sel[cols].to_numpy(dtype=float)
            vals = vals[np.isfinite(vals) & (vals > 0)]
            lo, hi = vals.min(), vals.max()
            ax.set_ylim(lo / 3, hi * 3)
            for k, col in series.items():
                med, bad = [], []
                for p in pairs:
                    g = sel[(sel.row == p[0]) & (sel.col == p[1])]
                    med.append(g[col].median() if len(g) else np.nan)
                    bad.append(bool(len(g)) and k != "measured" and bool((g[col] < g["measured"] * (1 - 1e-9)).any()))
                st = dict(STYLE[k])
                st.setdefault("label", paper_cols.get(k, k))
                xs = x + _DODGE[k]
                ax.scatter(xs, med, s=12 if k == "measured" else 16, zorder=5 if k == "measured" else 3, **st)
                bad = np.array(bad)
                if bad.any():
                    violated = True
                    ax.scatter(
                        xs[bad],
                        np.array(med)[bad],
                        s=50,
                        marker="x",
                        color="red",
                        zorder=4,
                        linewidths=1.3,
                        label="bound < measured" if k == "project" or not violated else None,
                    )
            txt = [f"project {sel['ratio'].median():.3g}"]
            for k, name in paper_cols.items():
                txt.append(f"{name.replace('paper ', '')}: {(sel[k] / sel['measured']).median():.2g}")
            # The summary is the x label: it sits under the tick labels and cannot cover a marker.
            ax.set_xlabel("median bound / measured:\n" + "\n".join(txt), fontsize=7)
            labels = ["all" if p[0] == "total" else f"{GROUP_LABELS[p[0]]}{GROUP_LABELS[p[1]]}" for p in pairs]
            ax.set_xticks(x, labels, rotation=90 if len(pairs) > 4 else 0, fontsize=7)
            ax.set_yscale("log")
            if c == 0:
                ax.set_ylabel("spectral norm")
            ax.grid(axis="y", alpha=0.3)
            n = results[stage]["n_samples"] if setting == "theory" else 1
            ax.set_title(
                f"{stage}: {title}" + (f",\nmedian of {n} samples" if setting == "theory" else ",\nwhole batch")
            )
        _counterexample_panel(axes[3, c], results[stage]["counterexample"], stage)
    # One legend for all panels, under the figure (outside the data).
    uniq: dict = {}
    for ax in axes.ravel():
        for handle, label in zip(*ax.get_legend_handles_labels()):
            uniq.setdefault(label, handle)
    fig.legend(uniq.values(), uniq.keys(), loc="outside lower center", ncols=2, fontsize=7, frameon=False)
    ds = DATASET_NAMES.get(first.get("dataset"), first.get("dataset"))
    fig.suptitle(
        f"Hessian spectral norms vs bounds - {ds}\nViT, 1 post-norm block, width {first['width']}, "
        f"d_K {first['d_k']}, d_ff {first['d_ff']}, {first['tokens']} tokens",
    )
    return fig
