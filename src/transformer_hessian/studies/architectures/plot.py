"""The study's figure (``paper/figures/architectures.{pdf,png}``): per architecture the diagonal
Hessian blocks after training (spectral norm and RMS entry), the heterogeneity of the blocks (JS0
and the spread of the block norms, at init and after training) and, for stacks, the share of the
Hessian outside the layer-diagonal blocks. No torch here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ...plotting import COMPACT_RC, GROUP_COLOURS, STAGE_COLOURS
from ...util.datanames import described
from .metrics import KINDS

__all__ = ["architectures_figure"]

#: W_O has no colour in the shared table (the paper's block has no W_O): Paul Tol's rose.
KIND_COLOURS = {**{k: GROUP_COLOURS[k] for k in KINDS if k in GROUP_COLOURS}, "W_O": "#CC6677"}
KIND_LABELS = {k: f"$W_{{{k[2:]}}}$" for k in KINDS}


def _columns(result: Mapping[str, Any]) -> list[tuple[str, dict, int]]:
    """(x label, architecture, layer) per bar group: one per layer of each architecture."""
    out = []
    for a in result["architectures"]:
        n = a["arch"]["num_layers"]
        for layer in range(n):
            out.append((a["name"] if n == 1 else f"{a['name']} L{layer}", a, layer))
    return out


def _diag(a: Mapping[str, Any], layer: int, field: str) -> dict[str, float]:
    rows = {r["row"]: r[field] for r in a["trained"]["blocks"] if r["row"] == r["col"]}
    return {k: rows[f"L{layer}.{k}"] for k in KINDS}


def _grouped(ax, cols, field: str, title: str) -> None:
    x = np.arange(len(cols))
    w = 0.8 / len(KINDS)
    for j, kind in enumerate(KINDS):
        vals = [_diag(a, layer, field)[kind] for _, a, layer in cols]
        ax.bar(x + (j - (len(KINDS) - 1) / 2) * w, vals, w, color=KIND_COLOURS[kind])
    ax.set_yscale("log")
    ax.set_xticks(x, [c[0] for c in cols], rotation=30, ha="right")
    ax.set_title(title)


def _stages(ax, names, init, trained, title: str, ylabel: str) -> None:
    x = np.arange(len(names))
    for k, (stage, vals) in enumerate((("init", init), ("trained", trained))):
        ax.bar(x + (k - 0.5) * 0.38, [np.nan if v is None else v for v in vals], 0.38, color=STAGE_COLOURS[stage])
    ax.set_xticks(x, names, rotation=30, ha="right")
    ax.set_title(title)
    ax.set_ylabel(ylabel)


def architectures_figure(result: Mapping[str, Any]) -> Figure:
    """Five panels and a legend (see the module docstring) from the study's result."""
    archs = result["architectures"]
    names = [a["name"] for a in archs]
    cols = _columns(result)
    with plt.rc_context(COMPACT_RC):
        fig, axes = plt.subplots(3, 2, figsize=(6.0, 7.4), layout="constrained")
        _grouped(axes[0, 0], cols, "spectral", "(a) diagonal blocks after training:\nspectral norm $\\|H_{ii}\\|_2$")
        _grouped(axes[0, 1], cols, "rms", "(b) diagonal blocks after training:\nRMS entry $\\|H_{ii}\\|_F/n_i$")
        _stages(
            axes[1, 0],
            names,
            [a["init"]["js0"]["js0"] for a in archs],
            [a["trained"]["js0"]["js0"] for a in archs],
            "(c) JS0: mean JS distance between\nthe diagonal blocks' spectra",
            "JS0 (0 = equal spectra)",
        )
        _stages(
            axes[1, 1],
            names,
            [a["init"]["spread_decades"]["diag_spectral"] for a in archs],
            [a["trained"]["spread_decades"]["diag_spectral"] for a in archs],
            "(d) spread of the diagonal\nblocks' spectral norms",
            "log10(max / min)",
        )
        stacks = [a for a in archs if a["arch"]["num_layers"] > 1]
        ax = axes[2, 0]
        if stacks:
            _stages(
                ax,
                [a["name"] for a in stacks],
                [a["init"]["layer_offdiag"]["energy"] for a in stacks],
                [a["trained"]["layer_offdiag"]["energy"] for a in stacks],
                "(e) stacks: share of $\\|H\\|_F^2$\nbetween different layers",
                "share",
            )
            for k, a in enumerate(stacks):
                for j, stage in enumerate(("init", "trained")):
                    v = a[stage]["layer_offdiag"]["energy"]
                    ax.annotate(f"{v:.2f}", (k + (j - 0.5) * 0.38, v), ha="center", va="bottom", fontsize=7)
            ax.set_ylim(0, 1)
            ax.set_xlim(-0.9, len(stacks) - 0.1)
        else:
            ax.text(0.5, 0.5, "(e) no stack in this run", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
        leg = axes[2, 1]
        leg.set_axis_off()
        handles = [Patch(color=KIND_COLOURS[k], label=KIND_LABELS[k]) for k in KINDS]
        handles += [Patch(color=STAGE_COLOURS[s], label=s) for s in ("init", "trained")]
        leg.legend(handles=handles, loc="center", ncols=2, frameon=False, title="block (a, b); stage (c-e)")
        data = described(result["dataset"], "MNIST", " (stand-in for {})")
        s = result["settings"]
        fig.suptitle(
            f"Architecture study (beyond the paper): torch encoders on {data},\n"
            f"d_model {s['d_model']}, d_ff {s['dim_feedforward']}, Hessian batch {s['hessian_batch_size']}"
        )
    return fig
