"""Figures of the landscape probes (:mod:`transformer_hessian.studies.probe`).

* :func:`fig1_figure` - the paper's Figure 1 from data: (a) measured ``L_k`` and ``L_{k+1}``
  along ``w* + t d``, (b) the block diagram (:func:`transformer_hessian.plotting.diagrams.draw_block_stack`).
* :func:`theorem7_figure` - Theorem 7 off ``w*`` and the Taylor model.
* :func:`fig12_figure` - Figure 12 (Assumption 1) and the minimiser shift.
* :func:`run_label` - "data set, model" text for titles, from the probe result and metrics
  (:func:`transformer_hessian.plotting.style.run_label`, re-exported: the spectrum figure uses it too).

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

from ...plotting.diagrams import draw_block_stack
from ...plotting.style import COMPACT_RC, run_label, wrap_lines

__all__ = ["fig1_figure", "fig12_figure", "run_label", "theorem7_figure"]

VIOLATION = "#D62728"


def _dir_colours(names) -> dict[str, Any]:
    pal = sns.color_palette("deep")
    return {n: pal[i % len(pal)] for i, n in enumerate(names)}


def fig1_figure(result: Mapping[str, Any], label: str = "", size=(6.0, 5.4)) -> Figure:
    """Figure 1: (a) ``L_k``, ``L_{k+1}`` around ``w*`` at a small and a large ``k``, per direction
    (top Hessian eigenvector and the first random direction), with the gap on log axes;
    (b) the block diagram. One legend for all panels, under the figure."""
    with plt.rc_context(COMPACT_RC):
        return _fig1_figure(result, label, size)


def _fig1_figure(result: Mapping[str, Any], label: str, size) -> Figure:
    f1 = result["fig1"]
    dirs = [d for d in f1["directions"] if d == "top eigenvector u"] + [
        d for d in f1["directions"] if d.startswith("random")
    ][:1]
    ks = [str(f1["k_small"]), str(f1["k_large"])]
    fig = plt.figure(figsize=size, layout="constrained")
    gs = fig.add_gridspec(len(dirs), 4, width_ratios=[1, 1, 1.1, 0.9])
    pal = sns.color_palette("deep")
    for r, d in enumerate(dirs):
        data = f1["directions"][d]
        t = np.asarray(data["t"])
        tag = "a" if r == 0 else "c"
        for c, k in enumerate(ks):
            ax = fig.add_subplot(gs[r, c])
            cur = data["curves"][k]
            Lk, Lk1 = np.asarray(cur["L_k"]), np.asarray(cur["L_k1"])
            ax.plot(t, Lk, color=pal[0], marker="o", markersize=2, linewidth=1.0, label=r"$L_k$")
            ax.plot(t, Lk1, color=pal[1], marker="s", markersize=2, linewidth=1.0, linestyle="--", label=r"$L_{k+1}$")
            ax.fill_between(t, Lk, Lk1, color=VIOLATION, alpha=0.25, linewidth=0, label="gap $|L_{k+1} - L_k|$")
            ax.axvline(0.0, color="0.5", linestyle=":", linewidth=0.8)
            gap0 = abs(Lk1[len(t) // 2] - Lk[len(t) // 2])
            ax.set_title(f"({tag}{c + 1}) k = {k}\n" + rf"gap at $w^*$: {gap0:.1e}")
            ax.set_xlabel(r"$t$ ($w = w^* + t\,d$)")
            if c == 0:
                ax.set_ylabel(f"{_short_direction(d)}\nmean cross-entropy (nats)")
        ax = fig.add_subplot(gs[r, 2])
        for k, colour in ((ks[0], pal[2]), (ks[1], pal[4])):
            cur = data["curves"][k]
            ax.plot(
                t,
                np.maximum(cur["gap_mean"], 1e-300),
                color=colour,
                marker="o",
                markersize=2,
                label=f"k = {k}: gap, mean over orderings",
            )
            ax.plot(
                t,
                np.maximum(cur["gap_ordering0"], 1e-300),
                color=colour,
                linestyle=":",
                linewidth=0.9,
                label=f"k = {k}: gap, first ordering",
            )
        ax.set_yscale("log")
        ax.set_xlabel(r"$t$")
        ax.set_ylabel(r"$|L_{k+1} - L_k|$ (nats)")
        ax.set_title(f"({tag}3) gap along\n{_short_direction(d)}")
    axb = fig.add_subplot(gs[:, 3])
    draw_block_stack(
        axb,
        title="(b) post-norm block\n" r"$\mathbf{H}^{(k)}(\mathbf{w}^*) = d^2 L_k / d\mathbf{w}^2$",
        hessian_label=False,
    )
    uniq: dict = {}
    for ax in fig.axes:
        for handle, text in zip(*ax.get_legend_handles_labels()):
            uniq.setdefault(text, handle)
    fig.legend(uniq.values(), uniq.keys(), loc="outside lower center", ncols=3, frameon=False)
    fig.suptitle(wrap_lines(f"Figure 1: measured loss landscapes around $w^*$\n{label}"))
    return fig


def _short_direction(d: str) -> str:
    return "top eigenvector u" if d == "top eigenvector u" else d.replace("random", "random direction")


def theorem7_figure(result: Mapping[str, Any], label: str = "", size=(5.8, 9.6)) -> Figure:
    """Theorem 7 off ``w*``: (a) left-hand side and bound along ``u`` for a few ``t`` (each ``t``
    its own marker; curves that coincide say so in the legend); (b) the ratio (max over
    orderings) to the printed bound for every direction and ``t``, violations (ratio > 1)
    marked; (c) Taylor-model relative error at ``k = n`` against ``|t|``. One panel a row."""
    with plt.rc_context(COMPACT_RC):
        return _theorem7_figure(result, label, size)


def _theorem7_figure(result: Mapping[str, Any], label: str, size) -> Figure:
    th = result["theorem7"]
    k = np.asarray(result["k_store"], dtype=float)
    colours = _dir_colours(th)
    fig, axes = plt.subplots(3, 1, figsize=size, layout="constrained")
    _theorem7_top_panel(axes[0], th, k)
    _theorem7_ratio_panel(axes[1], result, th, k, colours)
    _taylor_panel(axes[2], result, colours)
    fig.suptitle(wrap_lines(f"Theorem 7 off $w^*$\n{label}"))
    return fig


def _theorem7_top_panel(ax, th, k) -> None:
    """(a) |L_{k+1} - L_k| along the top eigenvector u at four t, with the bound."""
    u = th["top eigenvector u"]
    t_all = np.asarray(u["t"])
    pos = np.flatnonzero(t_all > 0)
    t_max = t_all[pos[-1]]
    # t = 0 and the positive grid points nearest 1%, 10% and 100% of t_max
    pick = [int(np.argmin(np.abs(t_all)))] + [
        int(pos[np.argmin(np.abs(np.log(t_all[pos] / (f * t_max))))]) for f in (0.01, 0.1, 1.0)
    ]
    tcols = sns.color_palette("dark", 8)
    shown = list(dict.fromkeys(pick))
    curves = [np.maximum(np.asarray(u["lhs_mean"][i], dtype=float), 1e-300) for i in shown]
    markers = ["o", "s", "^", "D"]
    for j, i in enumerate(shown):
        col = tcols[[0, 2, 1, 3][j % 4]]
        # Curves that agree within 2% everywhere coincide on log axes: say so, and stagger the
        # markers so that each t stays visible on the shared line.
        same = [
            f"{t_all[shown[m]]:.2g}"
            for m in range(len(shown))
            if m != j and np.allclose(curves[m], curves[j], rtol=0.02, atol=0)
        ]
        note = f" (= t = {', '.join(same)})" if same else ""
        ax.plot(
            k,
            curves[j],
            color=col,
            linewidth=1.1,
            marker=markers[j % 4],
            markersize=3.5,
            markevery=(0.03 + 0.045 * j, 0.18),
            markerfacecolor="none" if j % 2 else col,
            label=f"t = {t_all[i]:.2g}: mean lhs{note}",
        )
        ax.plot(k, u["lhs_max"][i], color=col, linewidth=0.7, alpha=0.7, linestyle="-.")
        ax.plot(k, u["bound"][i], color=col, linestyle="--", linewidth=1.0)
    ax.plot([], [], color="0.3", linestyle="-.", linewidth=0.7, label="max over orderings")
    ax.plot([], [], color="0.3", linestyle="--", label=r"bound $(2L + M t^2)/(k+1)$")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of samples k")
    ax.set_ylabel(r"$|L_{k+1}(w) - L_k(w)|$ (nats)")
    ax.set_title("(a) along the top eigenvector u")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))


def _theorem7_ratio_panel(ax, result, th, k, colours) -> None:
    """(b) max over orderings of lhs / bound, per direction and t; violations marked."""
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
    )
    ax.text(
        0.98,
        0.9,
        "no violations" if n_viol == 0 else f"{n_viol} (k, t, direction) above 1",
        transform=ax.transAxes,
        ha="right",
        color=VIOLATION if n_viol else "0.2",
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))


def _taylor_panel(ax, result, colours) -> None:
    """(c) the Taylor model's relative error at k = n against |t|, per direction."""
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
    ax.set_title(f"(c) Taylor model of $L_k$, k = n = {result['n_samples']} (dotted: break)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))


def fig12_figure(result: Mapping[str, Any], label: str = "", size=(5.8, 8.6)) -> Figure:
    """Figure 12: (a) ``||grad L_k(w*)||`` and ``||grad L_{k-1}(w*)||`` against ``k`` (log-log) with
    the fit; (b) the minimiser shift ``||w*_k - w*_{k+1}||`` against ``k``."""
    fig, axes = plt.subplots(2, 1, figsize=size, layout="constrained", height_ratios=[1.3, 1])
    _gradient_panel(axes[0], result)
    _shift_panel(axes[1], result)
    fig.suptitle(wrap_lines(f"Figure 12 (Assumption 1)\n{label}", 95), fontsize=9)
    return fig


def _gradient_panel(ax, result) -> None:
    """Figure 12 (a): the gradient norms at w* against k, the fit and the references."""
    a1 = result["assumption1"]
    pal = sns.color_palette("deep")
    k = np.asarray(a1["k"], dtype=float)
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
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=2)


def _shift_panel(ax, result) -> None:
    """Figure 12 (b): the minimiser shift against k."""
    pal = sns.color_palette("deep")
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
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2)
