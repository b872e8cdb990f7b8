"""Figure of the bound evaluation: measured Hessian spectral norms against the project's
and the paper's bounds, per block pair (log scale), violations marked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .. import ATTENTION_GROUPS, GROUPS
from ..plotting import GROUP_LABELS

__all__ = ["DATASET_NAMES", "bounds_figure"]

DATASET_NAMES = {
    "digits": "scikit-learn 8x8 digits (stand-in for MNIST)",
    "mnist": "MNIST",
    "cifar100": "CIFAR-100",
}

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
    ax.plot(scan.delta, scan.project_total, "s--", color="#4C72B0", ms=4, label="project bound")
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
            s=110,
            marker="x",
            color="red",
            linewidths=2,
            zorder=6,
            label="bound < measured" if form == "statement" else None,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.invert_xaxis()
    ax.set_xlabel("delta (W_Q/delta, W_K*delta; scores unchanged)")
    ax.set_ylabel("spectral norm of the attention Hessian")
    ax.grid(alpha=0.3)
    ax.set_title(f"{stage}: Theorem 1 counter-example, target F(X)", fontsize=9)
    ax.legend(fontsize=6.5, loc="upper left", frameon=True)


def bounds_figure(results: Mapping[str, Mapping[str, Any]]) -> Figure:
    """Rows: stages (init, trained); columns: attention layer (MSE), block (MSE), block (CE) and
    the Theorem 1 rescaling scan (sample 0's attention layer, ||H|| and M against delta).
    Per block pair (upper triangle; the blocks are symmetric) and the whole Hessian ("all"):
    the median over the evaluated samples of the measured spectral norm and of each bound.
    A red cross marks a pair where a bound fell below the measured norm on some sample."""
    stages = list(results)
    fig, axes = plt.subplots(
        len(stages),
        4,
        figsize=(18, 4.3 * len(stages) + 0.6),
        layout="constrained",
        gridspec_kw={"width_ratios": [7, 16, 16, 8]},
        squeeze=False,
    )
    first = next(iter(results.values()))
    for r, stage in enumerate(stages):
        df = pd.DataFrame(results[stage]["records"])
        for c, (setting, layer, names, title, paper_cols) in enumerate(PANELS):
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
            ax.set_ylim(lo / 3, hi * (hi / lo) ** 0.4)  # head room for the text box
            for k, col in series.items():
                med, bad = [], []
                for p in pairs:
                    g = sel[(sel.row == p[0]) & (sel.col == p[1])]
                    med.append(g[col].median() if len(g) else np.nan)
                    bad.append(bool(len(g)) and k != "measured" and bool((g[col] < g["measured"] * (1 - 1e-9)).any()))
                st = dict(STYLE[k])
                st.setdefault("label", paper_cols.get(k, k))
                ax.scatter(x, med, s=16 if k == "measured" else 30, zorder=5 if k == "measured" else 3, **st)
                bad = np.array(bad)
                if bad.any():
                    violated = True
                    ax.scatter(
                        x[bad],
                        np.array(med)[bad],
                        s=120,
                        marker="x",
                        color="red",
                        zorder=4,
                        linewidths=2,
                        label="bound < measured" if k == "project" or not violated else None,
                    )
            txt = [f"median bound/measured: project {sel['ratio'].median():.3g}"]
            for k, name in paper_cols.items():
                txt.append(f"{name.replace('paper ', 'paper ')}: {(sel[k] / sel['measured']).median():.2g}")
            ax.text(
                0.02,
                0.97,
                "\n".join(txt),
                transform=ax.transAxes,
                va="top",
                ha="left",
                fontsize=6.5,
                bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.8, "edgecolor": "0.8"},
            )
            labels = ["all" if p[0] == "total" else f"{GROUP_LABELS[p[0]]}{GROUP_LABELS[p[1]]}" for p in pairs]
            ax.set_xticks(x, labels, rotation=90 if len(pairs) > 4 else 0)
            ax.set_yscale("log")
            ax.set_xlabel("block pair (i, j)")
            ax.set_ylabel("spectral norm (loss units per weight$^2$)")
            ax.grid(axis="y", alpha=0.3)
            n = results[stage]["n_samples"] if setting == "theory" else 1
            ax.set_title(
                f"{stage}: {title}" + (f", median of {n} samples" if setting == "theory" else ", whole batch"),
                fontsize=9,
            )
        _counterexample_panel(axes[r, 3], results[stage]["counterexample"], stage)
    # One legend per block-pair column, under its bottom panel (the scan panels keep theirs).
    for c in range(3):
        uniq: dict = {}
        for ax in axes[:, c]:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                uniq.setdefault(label, handle)
        axes[-1, c].legend(
            uniq.values(),
            uniq.keys(),
            loc="upper center",
            bbox_to_anchor=(0.5, -0.27),
            ncol=2,
            fontsize=7,
            frameon=False,
        )
    ds = DATASET_NAMES.get(first.get("dataset"), first.get("dataset"))
    fig.suptitle(
        f"Hessian spectral norms vs bounds - {ds}; ViT, 1 post-norm block, width {first['width']}, "
        f"d_K {first['d_k']}, d_ff {first['d_ff']}, {first['tokens']} tokens",
        fontsize=11,
    )
    return fig
