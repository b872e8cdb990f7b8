"""Figures of the landscape probes (:mod:`transformer_hessian.probe`).

* :func:`fig1_figure` - the paper's Figure 1 from data: (a) measured ``L_k`` and ``L_{k+1}``
  along ``w* + t d``, (b) the block diagram (:func:`transformer_hessian.diagrams.draw_block_stack`).
* :func:`theorem7_figure` - Theorem 7 off ``w*`` and the Taylor model.
* :func:`fig12_figure` - Figure 12 (Assumption 1) and the minimiser shift.
* :func:`run_label` - "data set, model" text for titles, from the probe result and metrics.

The input is the JSON document written by ``transformer-hessian probe`` (a dict).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from .diagrams import draw_block_stack

__all__ = ["fig1_figure", "fig12_figure", "run_label", "theorem7_figure"]

_DATASET_NAMES = {
    "digits": "8x8 digits (scikit-learn; stand-in for the paper's CIFAR-100)",
    # The probe and spectrum experiments are the paper's CIFAR-100 experiments.
    "mnist": "MNIST (stand-in for the paper's CIFAR-100)",
    "cifar100": "CIFAR-100",
}
VIOLATION = "#D62728"


def run_label(result: Mapping[str, Any], metrics: Mapping[str, Any] | None = None) -> str:
    """``"<data set>, ViT <depth> blocks, width <d>"`` (the model part when ``metrics`` is given)."""
    ds = _DATASET_NAMES.get(str(result.get("dataset")), str(result.get("dataset", "?")))
    if metrics and "model" in metrics:
        m = metrics["model"]
        return (
            f"{ds}; post-norm ViT, {m['depth']} block{'s' if m['depth'] != 1 else ''}, width {m['width']}, "
            f"d_ff {m['d_ff']}, {metrics.get('n_parameters', '?')} parameters"
        )
    return ds


def _dir_colours(names) -> dict[str, Any]:
    pal = sns.color_palette("deep")
    return {n: pal[i % len(pal)] for i, n in enumerate(names)}


def fig1_figure(result: Mapping[str, Any], label: str = "", size=(12.5, 5.6)) -> Figure:
    """Figure 1: (a) ``L_k``, ``L_{k+1}`` around ``w*`` at a small and a large ``k``, per direction
    (top Hessian eigenvector and the first random direction), with the gap on log axes;
    (b) the block diagram."""
    f1 = result["fig1"]
    dirs = [d for d in f1["directions"] if d == "top eigenvector u"] + [
        d for d in f1["directions"] if d.startswith("random")
    ][:1]
    ks = [str(f1["k_small"]), str(f1["k_large"])]
    fig = plt.figure(figsize=size, layout="constrained")
    gs = fig.add_gridspec(len(dirs), 4, width_ratios=[1, 1, 1.1, 0.75])
    pal = sns.color_palette("deep")
    for r, d in enumerate(dirs):
        data = f1["directions"][d]
        t = np.asarray(data["t"])
        for c, k in enumerate(ks):
            ax = fig.add_subplot(gs[r, c])
            cur = data["curves"][k]
            Lk, Lk1 = np.asarray(cur["L_k"]), np.asarray(cur["L_k1"])
            ax.plot(t, Lk, color=pal[0], marker="o", markersize=2.5, linewidth=1.2, label=r"$L_k$")
            ax.plot(t, Lk1, color=pal[1], marker="s", markersize=2.5, linewidth=1.2, linestyle="--", label=r"$L_{k+1}$")
            ax.fill_between(t, Lk, Lk1, color=VIOLATION, alpha=0.25, linewidth=0, label="gap")
            ax.axvline(0.0, color="0.5", linestyle=":", linewidth=0.8)
            gap0 = abs(Lk1[len(t) // 2] - Lk[len(t) // 2])
            ax.set_title(
                f"({'a' if r == 0 else 'c'}{c + 1}) {d}, k = {k}\n"
                rf"gap at $w^*$ = {gap0:.2e}",
                fontsize=8.5,
            )
            ax.set_xlabel(r"$t$ ($w = w^* + t\,d$, $\|d\|_2 = 1$)")
            ax.set_ylabel("mean cross-entropy (nats)")
            if r == 0 and c == 0:
                ax.legend(loc="upper center")
        ax = fig.add_subplot(gs[r, 2])
        for k, colour, style in ((ks[0], pal[2], "-"), (ks[1], pal[4], "-")):
            cur = data["curves"][k]
            ax.plot(
                t,
                np.maximum(cur["gap_mean"], 1e-300),
                color=colour,
                linestyle=style,
                marker="o",
                markersize=2.5,
                label=f"k = {k}, mean over orderings",
            )
            ax.plot(
                t,
                np.maximum(cur["gap_ordering0"], 1e-300),
                color=colour,
                linestyle=":",
                linewidth=0.9,
                label=f"k = {k}, first ordering",
            )
        ax.set_yscale("log")
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi * (hi / lo) ** 0.35)  # head room for the legend
        ax.set_xlabel(r"$t$")
        ax.set_ylabel(r"$|L_{k+1} - L_k|$ (nats)")
        ax.set_title(f"({'a' if r == 0 else 'c'}3) gap along {d}", fontsize=8.5)
        ax.legend(fontsize=6.5, loc="upper center", ncols=2)
    axb = fig.add_subplot(gs[:, 3])
    draw_block_stack(
        axb,
        title="(b) post-norm Transformer block\n"
        r"$\mathbf{H}^{(k)}(\mathbf{w}^*) = d^2 L_k / d\mathbf{w}^2$",
        hessian_label=False,
    )
    fig.suptitle(f"Figure 1: measured loss landscapes around $w^*$ - {label}", fontsize=9.5)
    return fig


def theorem7_figure(result: Mapping[str, Any], label: str = "", size=(13.0, 5.4)) -> Figure:
    """Theorem 7 off ``w*``: (a) left-hand side and bound along ``u`` for a few ``t``;
    (b) the ratio (max over orderings) to the printed bound for every direction and ``t``,
    violations (ratio > 1) marked; (c) Taylor-model relative error at ``k = n`` against ``|t|``."""
    th = result["theorem7"]
    k = np.asarray(result["k_store"], dtype=float)
    colours = _dir_colours(th)
    fig, axes = plt.subplots(1, 3, figsize=size, layout="constrained")

    ax = axes[0]
    u = th["top eigenvector u"]
    t_all = np.asarray(u["t"])
    pos = np.flatnonzero(t_all > 0)
    t_max = t_all[pos[-1]]
    # t = 0 and the positive grid points nearest 1%, 10% and 100% of t_max
    pick = [int(np.argmin(np.abs(t_all)))] + [
        int(pos[np.argmin(np.abs(np.log(t_all[pos] / (f * t_max))))]) for f in (0.01, 0.1, 1.0)
    ]
    tcols = sns.color_palette("dark", 8)
    for j, i in enumerate(dict.fromkeys(pick)):
        col = tcols[[0, 2, 1, 3][j % 4]]
        ax.plot(
            k, np.maximum(u["lhs_mean"][i], 1e-300), color=col, linewidth=1.2, label=f"t = {t_all[i]:.2g}: mean lhs"
        )
        ax.plot(k, u["lhs_max"][i], color=col, linewidth=0.7, alpha=0.7, linestyle="-.")
        ax.plot(k, u["bound"][i], color=col, linestyle="--", linewidth=1.0)
    ax.plot([], [], color="0.3", linestyle="-.", linewidth=0.7, label="max over orderings")
    ax.plot([], [], color="0.3", linestyle="--", label=r"bound $(2L + M t^2)/(k+1)$")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of samples k")
    ax.set_ylabel(r"$|L_{k+1}(w) - L_k(w)|$ (nats)")
    ax.set_title("(a) along the top eigenvector u", fontsize=9)
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2)

    ax = axes[1]
    n_viol = 0
    for d, res in th.items():
        for i in range(len(res["t"])):
            ratio = np.asarray(res["ratio_max"][i], dtype=float)
            ax.plot(k, ratio, color=colours[d], linewidth=0.6, alpha=0.6, label=d if i == 0 else None)
            bad = ratio > 1
            n_viol += int(bad.sum())
            if bad.any():
                ax.plot(k[bad], ratio[bad], "x", color=VIOLATION, markersize=5)
    ax.axhline(1.0, color=VIOLATION, linestyle="--", linewidth=1.2, label="bound (ratio 1)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of samples k")
    ax.set_ylabel("max over orderings of lhs / bound")
    s = result["theorem7_summary"]
    ax.set_title(
        f"(b) held in {100 * s['held_fraction']:.3f}% of {s['n_comparisons']:,} comparisons\n"
        f"M = {result['M']:.3g}, L = {result['loss_max']:.3g}; without M term: "
        f"{100 * s['held_fraction_no_curvature']:.1f}%",
        fontsize=8.5,
    )
    ax.text(
        0.98,
        0.9,
        "no violations" if n_viol == 0 else f"{n_viol} (k, t, direction) above 1",
        transform=ax.transAxes,
        ha="right",
        color=VIOLATION if n_viol else "0.2",
        fontsize=8,
    )
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2)

    ax = axes[2]
    tay = result["taylor"]
    for d, res in tay.items():
        t = np.asarray(res["t"])
        pos = t > 0
        for model, style in (("full", "-"), ("paper", "--")):
            err = np.asarray([[np.nan if v is None else v for v in row] for row in res[model]["rel_error_median"]])
            e = err[:, -1]  # k = n
            both = np.fmax(e[pos], e[::-1][pos])  # worse of +t and -t
            ax.plot(
                t[pos],
                both,
                color=colours[d],
                linestyle=style,
                marker="o" if model == "full" else None,
                markersize=2.5,
                label=f"{d}, {'second-order' if model == 'full' else 'paper (no gradient)'}",
            )
        tb = res["full"]["t_break"][-1]
        if tb is not None:
            ax.axvline(tb, color=colours[d], linestyle=":", linewidth=0.9)
    tol = next(iter(tay.values()))["tolerance"]
    ax.axhline(tol, color=VIOLATION, linestyle="--", linewidth=1.0, label=f"tolerance {tol:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"$|t| = \|w - w^*\|_2$")
    ax.set_ylabel(r"$|L_n - Q_n| / (t^2 |C_n| / 2)$")
    ax.set_title(f"(c) Taylor model of $L_k$, k = n = {result['n_samples']} (dotted: break)", fontsize=8.5)
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2)
    fig.suptitle(f"Theorem 7 off $w^*$ - {label}", fontsize=9.5)
    return fig


def fig12_figure(result: Mapping[str, Any], label: str = "", size=(11.5, 5.0)) -> Figure:
    """Figure 12: (a) ``||grad L_k(w*)||`` and ``||grad L_{k-1}(w*)||`` against ``k`` (log-log) with
    the fit; (b) the minimiser shift ``||w*_k - w*_{k+1}||`` against ``k``."""
    a1 = result["assumption1"]
    pal = sns.color_palette("deep")
    k = np.asarray(a1["k"], dtype=float)
    fig, axes = plt.subplots(1, 2, figsize=size, layout="constrained", width_ratios=[1.35, 1])
    ax = axes[0]
    ax.fill_between(
        k, a1["grad_norm_k_q10"], a1["grad_norm_k_q90"], color=pal[0], alpha=0.18, label="10-90% over orderings"
    )
    ax.plot(k, a1["grad_norm_k_mean"], color=pal[0], marker="o", markersize=3, label=r"$\|\nabla L_k(w^*)\|$, mean")
    ax.plot(
        k, a1["grad_norm_k_median"], color=pal[0], linestyle="-.", linewidth=1.0, label=r"$\|\nabla L_k(w^*)\|$, median"
    )
    ax.plot(
        k,
        a1["grad_norm_km1_mean"],
        color=pal[1],
        linestyle="--",
        linewidth=1.1,
        label=r"$\|\nabla L_{k-1}(w^*)\|$, mean",
    )
    ax.plot(
        k,
        a1["sampling_reference"],
        color="0.35",
        linestyle=":",
        linewidth=1.2,
        label=r"sampling reference $\sqrt{E\|\nabla L_k\|^2}$",
    )
    fit = np.exp(a1["intercept"]) * k ** a1["slope"]
    lo, hi = a1["slope_ci95"]
    ax.plot(k, fit, color=pal[3], linewidth=1.6, label=f"fit: slope {a1['slope']:.3f} [{lo:.3f}, {hi:.3f}] (95% CI)")
    if "init" in a1:
        ax.plot(
            k,
            a1["init"]["grad_norm_k_mean"],
            color="0.55",
            marker=".",
            linewidth=1.0,
            label=f"at initialisation, mean (slope {a1['init']['slope']:.2f})",
        )
    ax.axhline(
        a1["full_grad_norm"],
        color=pal[2],
        linestyle="--",
        linewidth=0.9,
        label=rf"$\|\nabla L_n(w^*)\|$ = {a1['full_grad_norm']:.3g}",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of samples k")
    ax.set_ylabel("gradient norm (nats per unit parameter)")
    ax.set_title(f"(a) Assumption 1 asks for 0; {a1['n_orderings']} orderings of n = {result['n_samples']}", fontsize=9)
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=3)

    ax = axes[1]
    sh = result["minimiser_shift"]
    ks = np.array([r["k"] for r in sh["rows"]], dtype=float)
    mean = np.array([r["shift"] for r in sh["rows"]])
    for r in sh["rows"]:
        ax.plot([r["k"]] * len(r["shift_each"]), r["shift_each"], ".", color=pal[0], alpha=0.6)
    ax.plot(ks, mean, color=pal[0], marker="o", label=r"$\|w^*_k - w^*_{k+1}\|$, mean over orderings")
    ax.plot(
        ks,
        [r["move"] for r in sh["rows"]],
        color=pal[1],
        marker="s",
        linestyle="--",
        label=r"$\|w^*_k - w^*\|$ (fine-tune move)",
    )
    if len(ks) and mean[0] > 0:
        ax.plot(ks, mean[0] * ks[0] / ks, color="0.4", linestyle=":", label="1/k reference")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(ks, [str(int(v)) for v in ks])
    ax.set_xlabel("number of samples k")
    ax.set_ylabel(r"parameter distance $\|\cdot\|_2$")
    ax.set_title(
        f"(b) minimiser shift: {sh['steps']} GD steps, lr = {sh['lr']:.2g} = {result['settings']['shift_lr_scale']:g}/M",
        fontsize=8.5,
    )
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    fig.suptitle(f"Figure 12 (Assumption 1) - {label}", fontsize=9.5)
    return fig
