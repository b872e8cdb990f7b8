"""Figure of the matrix-free Hessian spectrum (:mod:`transformer_hessian.studies.spectrum.compute`).

:func:`spectrum_figure` draws, from the JSON written by ``transformer-hessian spectrum``:
(a) the top Ritz values of every block's five-group Hessian and the whole model's largest one,
(b) Hutchinson trace estimates per block with +-2 standard errors, (c) the SLQ spectral
density of every block on a log scale, (d) log10 of the block-pair spectral norms
``||H_ab||_2`` of every block on one colour scale.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.figure import Figure

from ...plotting.style import COMPACT_RC, wrap_lines

__all__ = ["spectrum_figure", "spectrum_table"]

_LABELS = {"W_Q": "$W_Q$", "W_K": "$W_K$", "W_V": "$W_V$", "W_1": "$W_1$", "W_2": "$W_2$"}


def spectrum_table(result: Mapping[str, Any]):
    """DataFrame, one row per block and one for the whole model: parameters, top Ritz value and
    its residual bound, smallest Ritz value, Hutchinson trace and standard error."""
    import pandas as pd

    rows = []
    for b in result["blocks"]:
        rows.append(("block " + str(b["block"]), b))
    rows.append(("whole model", result["whole_model"]))
    return pd.DataFrame(
        [
            {
                "parameters": name,
                "P": e["n_params"],
                "lambda_max": e["top"]["eigenvalues"][0],
                "residual": e["top"]["residuals"][0],
                "smallest_ritz": e["top"]["smallest"],
                "trace": e["trace"]["mean"],
                "trace_stderr": e["trace"]["stderr"],
            }
            for name, e in rows
        ]
    )


def spectrum_figure(result: Mapping[str, Any], label: str = "", size: tuple[float, float] | None = None) -> Figure:
    """The four panels described in the module docstring; ``label`` names data set and model.

    6 in wide whatever the depth (printed at the paper's text width, no text below 6 pt): (a) and
    (b) show every block and the whole model side by side (so a one-block model is not one lone
    point), (d) one heat map per block, four a row."""
    with plt.rc_context(COMPACT_RC):
        return _spectrum_figure(result, label, size)


def _spectrum_figure(result: Mapping[str, Any], label: str, size) -> Figure:
    blocks = result["blocks"]
    nb = len(blocks)
    groups = list(result["groups"])
    per_row = min(nb, 4)
    d_rows = -(-nb // per_row)
    size = size or (6.0, 3.0 + 2.0 * d_rows)
    fig = plt.figure(figsize=size, layout="constrained")
    sub_top, sub_bot = fig.subfigures(2, 1, height_ratios=[2.6, 2.0 * d_rows])
    ax_top, ax_tr, ax_den = sub_top.subplots(1, 3)
    x = np.arange(nb + 1)  # the blocks, then the whole model
    names = [f"block {b['block']}" for b in blocks] + ["whole\nmodel"]
    pal = sns.color_palette("viridis", nb)
    whole = result["whole_model"]

    _top_panel(ax_top, blocks, whole, x, names)
    _trace_panel(ax_tr, blocks, whole, x, names)
    _density_panel(ax_den, blocks, pal)
    _pair_norms_panel(sub_bot, blocks, groups, per_row, d_rows)
    fig.suptitle(
        wrap_lines(
            f"Matrix-free Hessian spectrum, cross-entropy on one batch of {result['batch_size']} training samples\n{label}"
        ),
    )
    return fig


def _top_panel(ax_top, blocks, whole, x, names) -> None:
    nb = len(blocks)
    # (a) top Ritz values per block and of the whole model
    k = len(blocks[0]["top"]["eigenvalues"])
    for i, e in enumerate([*blocks, whole]):
        ev = np.asarray(e["top"]["eigenvalues"])
        ax_top.scatter(
            np.full(len(ev) - 1, i), ev[1:], s=10, color="0.55", zorder=2, label="2nd..k-th" if i == 0 else None
        )
        ax_top.scatter(
            [i], ev[:1], s=28, color="C0" if i < nb else "C3", zorder=3, label=r"$\lambda_{\max}$" if i == 0 else None
        )
    vals = np.abs([v for e in [*blocks, whole] for v in e["top"]["eigenvalues"]])
    # symmetric log scale: the whole model's lambda_max can be far above the blocks'
    ax_top.set_yscale("symlog", linthresh=max(float(np.max(vals)) * 1e-3, 1e-300))
    ax_top.set_xticks(x, names, rotation=90 if nb > 2 else 0)
    ax_top.set_xlim(-0.6, nb + 0.6)
    ax_top.set(ylabel="Ritz value (symlog)", title=f"(a) top-{k} eigenvalues")
    ax_top.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3 if nb > 2 else -0.22), ncols=1)


def _trace_panel(ax_tr, blocks, whole, x, names) -> None:
    nb = len(blocks)
    # (b) Hutchinson traces with 2 standard errors
    tr = np.array([b["trace"]["mean"] for b in blocks] + [whole["trace"]["mean"]])
    se = np.array([b["trace"]["stderr"] for b in blocks] + [whole["trace"]["stderr"]])
    ax_tr.errorbar(x[:nb], tr[:nb], yerr=2 * se[:nb], fmt="o", color="C0", capsize=3, ms=4)
    ax_tr.errorbar(x[nb:], tr[nb:], yerr=2 * se[nb:], fmt="o", color="C3", capsize=3, ms=4)
    ax_tr.axhline(0, color="0.7", lw=0.8)
    ax_tr.set_xticks(x, names, rotation=90 if nb > 2 else 0)
    ax_tr.set_xlim(-0.6, nb + 0.6)
    ax_tr.set(
        ylabel="tr(H) estimate (±2 s.e.)",
        title=f"(b) Hutchinson trace\n({blocks[0]['trace']['n_probes']} Rademacher probes)",
    )


def _density_panel(ax_den, blocks, pal) -> None:
    nb = len(blocks)
    # (c) SLQ densities, log y, on one grid and one broadening for all blocks
    with_density = [b for b in blocks if b.get("density")]
    if with_density:
        peak = max(float(np.max(b["density"]["density"])) for b in with_density)
        for i, b in enumerate(with_density):
            rho = np.maximum(np.asarray(b["density"]["density"]), peak * 1e-9)
            ax_den.plot(b["density"]["grid"], rho, color=pal[i], lw=1.0, label=f"block {b['block']}")
        ax_den.set_yscale("log")
        ax_den.set_ylim(peak * 1e-7, peak * 3)
        ax_den.xaxis.set_major_locator(plt.MaxNLocator(3))
    n_slq = len(blocks[0]["density"]["nodes"]) if blocks[0].get("density") else 0
    ax_den.set(
        xlabel="eigenvalue", ylabel="spectral density (log)", title=f"(c) SLQ density\n({n_slq} probes, broadened)"
    )
    if nb > 1:
        ax_den.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncols=2)


def _pair_norms_panel(sub_bot, blocks, groups, per_row, d_rows) -> None:
    nb = len(blocks)
    # (d) block-pair norms, one colour scale
    N = np.array([b["pair_norms"] for b in blocks])
    logN = np.log10(np.where(N > 0, N, np.nan))
    vmin, vmax = np.nanmin(logN), np.nanmax(logN)
    if nb <= 2:  # one or two maps: on the left, not stretched over (or adrift in) the whole width
        sub_bot = sub_bot.subfigures(1, 2, width_ratios=[nb + 1, 4 - nb])[0]
    grid = np.atleast_2d(sub_bot.subplots(d_rows, per_row, squeeze=False))
    axes = grid.ravel()
    ticks = [_LABELS.get(g, g) for g in groups]
    for i, ax in enumerate(axes):
        if i >= nb:
            ax.axis("off")
            continue
        im = ax.imshow(logN[i], cmap="magma", vmin=vmin, vmax=vmax)
        ax.set_xticks(range(len(groups)), ticks)
        ax.set_yticks(range(len(groups)), ticks if i % per_row == 0 else [])
        ax.set_title(f"block {blocks[i]['block']}")
        # no values in the cells: they overlapped at print size; the spectrum table has them
    sub_bot.colorbar(im, ax=list(axes[:nb]), label=r"$\log_{10}\|H_{ab}\|_2$", shrink=0.9)
    sub_bot.suptitle(r"(d) block-pair spectral norms $\|H_{ab}\|_2$ (rows a, columns b)", fontsize=8)
