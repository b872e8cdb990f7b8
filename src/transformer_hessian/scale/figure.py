"""The ``curvature`` command's figure: the SLQ spectral density with the top eigenvalues marked,
and, where blocks were asked for, each block's spectral norm and trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def draw(res: dict, path: str | Path) -> None:
    """``curvature.png`` from the command's results (matplotlib, no torch)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..core.spectral import broadened_density, density_grid
    from ..plotting.style import set_theme

    set_theme()
    blocks = res.get("blocks") or {}
    ncols = 2 if blocks else 1
    fig, axes = plt.subplots(1, ncols, figsize=(3.4 * ncols, 2.6), squeeze=False)
    ax = axes[0, 0]
    nodes, weights = np.asarray(res["slq"]["nodes"]), np.asarray(res["slq"]["weights"])
    grid, sigma = density_grid(nodes, 400, 0.01)
    rho = broadened_density(nodes, weights, grid, sigma)
    floor = float(rho.max()) * 1e-6
    ax.semilogy(grid, np.maximum(rho, floor), lw=1.0, color="C0")
    ax.set_ylim(floor, float(rho.max()) * 3)
    for lam in res["eigenvalues"]:
        ax.axvline(lam, color="C3", lw=0.6, ls="--")
    ax.set_xlabel("eigenvalue")
    ax.set_ylabel("density (SLQ)")
    ax.set_title(f"H of {res['n_terms']:,} loss terms, P = {res['P']:,}", fontsize=8)
    if blocks:
        ax = axes[0, 1]
        names = list(blocks)
        y = np.arange(len(names))
        norms = [blocks[n]["spectral_norm"] for n in names]
        traces = [abs(blocks[n]["trace"]["mean"]) for n in names]
        ax.barh(y - 0.2, norms, height=0.4, label="spectral norm", color="C0")
        ax.barh(y + 0.2, traces, height=0.4, label="|trace|", color="C1")
        ax.set_yticks(y, [n if len(n) <= 24 else "..." + n[-21:] for n in names], fontsize=7)
        if max(norms + traces) > 100 * max(min(norms + traces), 1e-300):
            ax.set_xscale("log")
        ax.invert_yaxis()
        ax.legend(fontsize=7, frameon=False)
        ax.set_title("blocks", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=200)
    plt.close(fig)
