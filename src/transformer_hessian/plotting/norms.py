"""Figure 5: weight norms and Hessian block norms at initialisation and after training."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .. import GROUPS
from .hessian_maps import _log_abs, shared_log_range
from .inputs import as_mapping as _as_mapping
from .style import COMPACT_RC, GROUP_LABELS, HEATMAP_CMAP, STAGE_COLOURS, wrap_lines

__all__ = ["norms_figure"]


def _spans_decades(values: Any, decades: float = 2.0) -> bool:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    return v.size > 1 and np.log10(v.max() / v.min()) >= decades


def _check_norms(norms: Mapping[str, Any], which: str) -> None:
    for key in ("blocks", "weights"):
        if key not in norms:
            raise KeyError(f"norms JSON for {which} lacks the key {key!r}; rerun the hessian rule")
    missing = [g for g in GROUPS if g not in norms["weights"]]
    if missing:
        raise KeyError(f"norms JSON for {which}: 'weights' lacks {missing}")


def _block_matrix(norms: Mapping[str, Any], field: str) -> np.ndarray:
    index = {g: i for i, g in enumerate(GROUPS)}
    mat = np.full((len(GROUPS), len(GROUPS)), np.nan)
    for entry in norms["blocks"]:
        mat[index[entry["row"]], index[entry["col"]]] = float(entry[field])
    return mat


def _grouped_bars(ax: Axes, series: dict[str, np.ndarray], hatches: dict[str, str], colours: dict[str, str]) -> None:
    n_groups = len(GROUPS)
    width = 0.8 / len(series)
    x = np.arange(n_groups)
    for i, (label, values) in enumerate(series.items()):
        ax.bar(
            x + (i - (len(series) - 1) / 2) * width,
            values,
            width=width,
            label=label,
            color=colours[label],
            hatch=hatches[label],
            edgecolor="black",
            linewidth=0.4,
        )
    ax.set_xticks(x, [GROUP_LABELS[g] for g in GROUPS])
    if _spans_decades(np.concatenate(list(series.values()))):
        ax.set_yscale("log")


def norms_figure(
    norms_init: Mapping[str, Any] | str | os.PathLike[str],
    norms_trained: Mapping[str, Any] | str | os.PathLike[str],
    title: str | None = None,
) -> Figure:
    """Figure 5: weight norms and Hessian block norms, at initialisation and after training.

    Inputs are the norms JSON documents (dicts, or paths to them). Panels:
    (a) spectral and Frobenius norm of each weight matrix (grouped bars, init vs trained);
    (b) spectral and Frobenius norm of the diagonal Hessian blocks H_ii (log scale when the
    values span two or more decades); (c), (d) log10 spectral norm of all 25 blocks H_ij at
    initialisation and after training, on one colour scale, annotated with the values.
    """
    init = _as_mapping(norms_init)
    trained = _as_mapping(norms_trained)
    _check_norms(init, "init")
    _check_norms(trained, "trained")

    with plt.rc_context(COMPACT_RC):
        return _norms_figure(init, trained, title)


def _short_sci(v: float) -> str:
    """``9.7e-1``: two significant digits, no ``+`` or leading zero in the exponent (fits a cell)."""
    mantissa, exponent = f"{v:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _norms_figure(init, trained, title) -> Figure:
    stages = {"init": init, "trained": trained}
    # 6 in wide: printed at the paper's text width no text falls below 6 pt (plotting.print_check).
    fig = plt.figure(figsize=(6.0, 6.8), layout="constrained")
    if title:  # wrapped: a line wider than the figure would widen the saved file and shrink every font
        fig.suptitle(wrap_lines(title, 105), fontsize=8)
    axd = fig.subplot_mosaic([["legend", "legend"], ["a", "b"], ["c", "d"]], height_ratios=[0.07, 1.0, 1.0])
    colours, hatches, weight_series, block_series = {}, {}, {}, {}
    for norm, hatch in (("spectral", ""), ("fro", "//")):
        for stage, doc in stages.items():
            label = f"{'spectral' if norm == 'spectral' else 'Frobenius'}, {stage}"
            colours[label] = STAGE_COLOURS[stage]
            hatches[label] = hatch
            weight_series[label] = np.array([float(doc["weights"][g][norm]) for g in GROUPS])
            block_series[label] = np.diag(_block_matrix(doc, norm))

    ax = axd["a"]
    _grouped_bars(ax, weight_series, hatches, colours)
    ax.set_title("(a) weight matrices")
    ax.set_ylabel("matrix norm")

    ax = axd["b"]
    _grouped_bars(ax, block_series, hatches, colours)
    ax.set_title(r"(b) diagonal Hessian blocks $H_{ii}$")
    ax.set_ylabel("block norm")
    # One legend for (a) and (b), in its own row above the panels: it cannot cover a bar.
    handles, labels_ab = axd["a"].get_legend_handles_labels()
    axd["legend"].axis("off")
    axd["legend"].legend(handles, labels_ab, loc="center", ncols=4, frameon=False)

    spec = {stage: _block_matrix(doc, "spectral") for stage, doc in stages.items()}
    vmin, vmax = shared_log_range(*spec.values(), floor=-300)
    labels = [GROUP_LABELS[g] for g in GROUPS]
    for key, stage in (("c", "init"), ("d", "trained")):
        ax = axd[key]
        mat = spec[stage]
        annot = np.array([[_short_sci(v) for v in row] for row in mat])
        sns.heatmap(
            np.clip(_log_abs(np.nan_to_num(mat)), vmin, vmax),
            ax=ax,
            vmin=vmin,
            vmax=vmax,
            cmap=HEATMAP_CMAP,
            annot=annot,
            fmt="",
            annot_kws={"fontsize": 6.6},
            square=True,
            xticklabels=labels,
            yticklabels=labels,
            cbar=False,
            linewidths=0.5,
            linecolor="white",
        )
        ax.tick_params(length=0)
        ax.set_yticklabels(labels, rotation=0)
        ax.set_title(f"({key}) Hessian block spectral norms, {stage}")
    # One colour bar for (c) and (d): both panels use the same (vmin, vmax).
    mappable = axd["d"].collections[0]
    cbar = fig.colorbar(mappable, ax=[axd["c"], axd["d"]], shrink=0.9, pad=0.02)
    cbar.set_label(r"$\log_{10} \|H_{ij}\|_2$ (panels c, d)")
    return fig


# ----------------------------------------------------------------------------- Figure 6
