"""Figure of the matrix-free Hessian spectrum (:mod:`transformer_hessian.spectrum`).

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
    """The four panels described in the module docstring; ``label`` names data set and model."""
    blocks = result["blocks"]
    nb = len(blocks)
    groups = list(result["groups"])
    size = size or (max(12.5, 2.3 * nb + 1.5), 8.4)
    fig = plt.figure(figsize=size, layout="constrained")
    sub_top, sub_bot = fig.subfigures(2, 1, height_ratios=[1.15, 1.0])
    ax_top, ax_tr, ax_den = sub_top.subplots(1, 3)
    x = np.arange(nb)
    pal = sns.color_palette("viridis", nb)

    # (a) top Ritz values per block, whole model's largest
    k = len(blocks[0]["top"]["eigenvalues"])
    for i, b in enumerate(blocks):
        ev = np.asarray(b["top"]["eigenvalues"])
        ax_top.scatter(
            np.full(len(ev) - 1, i), ev[1:], s=14, color="0.55", zorder=2, label="2nd..k-th" if i == 0 else None
        )
        ax_top.scatter([i], ev[:1], s=40, color="C0", zorder=3, label=r"$\lambda_{\max}$ of block" if i == 0 else None)
    lam = result["whole_model"]["top"]["eigenvalues"][0]
    ax_top.axhline(lam, color="C3", ls="--", lw=1.2, label=rf"whole model $\lambda_{{\max}}$ = {lam:.3g}")
    # symmetric log scale: the whole model's lambda_max can be far above the blocks'
    vals = np.abs([v for b in blocks for v in b["top"]["eigenvalues"]] + [lam])
    ax_top.set_yscale("symlog", linthresh=max(float(np.max(vals)) * 1e-3, 1e-300))
    ax_top.set(
        xticks=x,
        xlabel="transformer block",
        ylabel="Hessian eigenvalue (Ritz value, symlog)",
        title=f"(a) top-{k} eigenvalues of each block's\nfive-group Hessian (Lanczos)",
    )
    ax_top.legend(fontsize=7, loc="best")

    # (b) Hutchinson traces with 2 standard errors
    tr = np.array([b["trace"]["mean"] for b in blocks])
    se = np.array([b["trace"]["stderr"] for b in blocks])
    ax_tr.errorbar(x, tr, yerr=2 * se, fmt="o", color="C0", capsize=3, label="block (±2 s.e.)")
    ax_tr.axhline(0, color="0.7", lw=0.8)
    w = result["whole_model"]["trace"]
    ax_tr.set(
        xticks=x,
        xlabel="transformer block",
        ylabel="tr(H) estimate",
        title=f"(b) Hutchinson trace ({blocks[0]['trace']['n_probes']} Rademacher probes)\n"
        f"whole model: {w['mean']:.3g} ± {w['stderr']:.2g} (1 s.e.)",
    )
    ax_tr.legend(fontsize=7)

    # (c) SLQ densities, log y, on one grid and one broadening for all blocks
    with_density = [b for b in blocks if b.get("density")]
    if with_density:
        peak = max(float(np.max(b["density"]["density"])) for b in with_density)
        for i, b in enumerate(with_density):
            rho = np.maximum(np.asarray(b["density"]["density"]), peak * 1e-9)
            ax_den.plot(b["density"]["grid"], rho, color=pal[i], lw=1.2, label=f"block {b['block']}")
        ax_den.set_yscale("log")
        ax_den.set_ylim(peak * 1e-7, peak * 3)
    n_slq = len(blocks[0]["density"]["nodes"]) if blocks[0].get("density") else 0
    ax_den.set(
        xlabel="eigenvalue",
        ylabel="spectral density",
        title=f"(c) SLQ spectral density per block ({n_slq} probes,\nGaussian broadening; log scale)",
    )
    ax_den.legend(fontsize=7, ncol=2 if nb > 4 else 1)

    # (d) block-pair norms, one colour scale
    N = np.array([b["pair_norms"] for b in blocks])
    logN = np.log10(np.where(N > 0, N, np.nan))
    vmin, vmax = np.nanmin(logN), np.nanmax(logN)
    axes = np.atleast_1d(sub_bot.subplots(1, nb))
    ticks = [_LABELS.get(g, g) for g in groups]
    for i, ax in enumerate(axes):
        im = ax.imshow(logN[i], cmap="magma", vmin=vmin, vmax=vmax)
        ax.set_xticks(range(len(groups)), ticks, fontsize=7)
        ax.set_yticks(range(len(groups)), ticks if i == 0 else [], fontsize=7)
        ax.set_title(f"block {blocks[i]['block']}", fontsize=9)
        if nb <= 4:
            for a in range(len(groups)):
                for c in range(len(groups)):
                    ax.text(
                        c,
                        a,
                        f"{N[i, a, c]:.2g}",
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="white" if logN[i, a, c] < (vmin + vmax) / 2 else "black",
                    )
    sub_bot.colorbar(im, ax=list(axes), label=r"$\log_{10}\|H_{ab}\|_2$", shrink=0.9)
    sub_bot.suptitle(
        r"(d) block-pair spectral norms $\|H_{ab}\|_2$ (rows a, columns b; Lanczos on $H_{ab}^\top H_{ab}$)",
        fontsize=10,
    )
    fig.suptitle(
        f"Matrix-free Hessian spectrum of the cross-entropy on one batch of {result['batch_size']} "
        f"training samples\n{label}",
        fontsize=11,
    )
    return fig
