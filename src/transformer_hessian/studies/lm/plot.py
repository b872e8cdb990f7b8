"""Drawing of the language study (``paper/figures/lm_*``) from its result files; computes nothing
but what it draws (no torch). Every figure is drawn about 6 in wide with :data:`COMPACT_RC` fonts,
so that printed at the paper's 5.5-in text width no text falls below 6 pt."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullFormatter

from ...plotting import COMPACT_RC
from ...plotting.style import HEATMAP_CMAP, STAGE_COLOURS

__all__ = [
    "approx_figure",
    "approx_table",
    "hessian_maps_figure",
    "landscape2d_figure",
    "landscape_figure",
    "norms_figure",
    "scaling_figure",
    "scaling_table",
]

_METHOD_COLOURS = {"GGN": "#4C72B0", "K-FAC": "#DD8452", "EK-FAC": "#55A868", "block-diagonal": "#8172B3"}


def _title(h: Mapping[str, Any]) -> str:
    m, c = h["model"], h["corpus"]
    return (
        f"GPT-style decoder (d {m['width']}, {m['depth']} layers, {m['heads']} heads, context {m['context']}) "
        f"on the {c['name']} corpus, {h['hessian_sequences']} sequences"
    )


_SHORT = {"W_Q": "Q", "W_K": "K", "W_V": "V", "W_O": "O", "W_1": "W1", "W_2": "W2"}


def _short(label: str) -> str:
    """``L0 W_Q h1`` -> ``L0 Qh1``, ``L0 W_1`` -> ``L0 W1``."""
    for long, short in _SHORT.items():
        label = label.replace(long, short)
    return label.replace(" h", "h")


def _map_ticks(groups, n: int, P: int) -> tuple[list[float], list[str]]:
    """Tick positions and labels of a map of ``n`` cells over ``P`` rows: E, and per layer the
    attention weights together (``L0 QKVO``), W1 and W2."""
    spans: dict[str, list[int]] = {}
    for g, a, b in groups:
        key = g.split(" ")[0] + (" QKVO" if any(m in g for m in ("W_Q", "W_K", "W_V", "W_O")) else "")
        key = key if key.endswith("QKVO") or g == "E" else _short(g)
        lo, hi = spans.get(key, [a, b])
        spans[key] = [min(lo, a), max(hi, b)]
    ticks, labels = [], []
    for label, (a, b) in spans.items():  # a label only where it has room (7 pt on a ~2.7 in axis)
        t = (a + b) / 2 * n / P
        if not ticks or t - ticks[-1] >= 0.05 * n:
            ticks.append(t)
            labels.append(label)
    return ticks, labels


def hessian_maps_figure(maps: Mapping[str, np.ndarray], h: Mapping[str, Any]) -> Figure:
    """log10 of the largest |H_ij| per cell of a print-size grid, at initialisation and after
    training, on one colour scale (the 0.5% and 99.95% quantiles of both maps' finite cells);
    lines and labels at the blocks E, and per layer W_Q, W_K, W_V, W_O, W_1, W_2."""
    init, trained = np.asarray(maps["init"]), np.asarray(maps["trained"])
    both = np.concatenate([init[np.isfinite(init)], trained[np.isfinite(trained)]])
    lo, hi = np.quantile(both, [0.005, 0.9995]) if both.size else (0.0, 1.0)
    P = int(h["init"]["P"])
    groups = h["map_groups"]
    with plt.rc_context(COMPACT_RC):
        fig, axes = plt.subplots(1, 2, figsize=(6.2, 3.3), layout="constrained")
        for ax, (stage, img) in zip(axes, (("at initialisation", init), ("after training", trained))):
            n = img.shape[0]
            im = ax.imshow(
                np.where(np.isfinite(img), img, np.nan), cmap=HEATMAP_CMAP, vmin=lo, vmax=hi, interpolation="nearest"
            )
            for _, a, _ in groups:
                ax.axhline(a * n / P - 0.5, color="white", lw=0.3)
                ax.axvline(a * n / P - 0.5, color="white", lw=0.3)
            ticks, labels = _map_ticks(groups, n, P)
            ax.set_xticks(ticks, labels, rotation=90, fontsize=7)
            ax.set_yticks(ticks, labels, fontsize=7)
            ax.set_title(stage)
        fig.colorbar(im, ax=axes, shrink=0.8, label="log10 max |H_ij| per cell")
        fig.suptitle(_title(h), fontsize=7.5)
    return fig


def norms_figure(h: Mapping[str, Any]) -> Figure:
    """(a, b) log10 of the RMS entry of every pair of blocks (heads split), at initialisation and
    after training, one colour scale; (c) spectral norms of the diagonal blocks, both stages."""
    g0, g1 = h["init"]["groups"], h["trained"]["groups"]
    labels = [_short(x) for x in g0["labels"]]
    r0, r1 = np.log10(np.asarray(g0["rms"])), np.log10(np.asarray(g1["rms"]))
    lo, hi = float(min(r0.min(), r1.min())), float(max(r0.max(), r1.max()))
    with plt.rc_context(COMPACT_RC):
        fig = plt.figure(figsize=(6.2, 6.2), layout="constrained")
        top, bottom = fig.subfigures(2, 1, height_ratios=[1.25, 1])
        axes = top.subplots(1, 2)
        for ax, r, name in zip(axes, (r0, r1), ("(a) RMS entry at initialisation", "(b) after training")):
            im = ax.imshow(r, cmap=HEATMAP_CMAP, vmin=lo, vmax=hi)
            ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
            ax.set_yticks(range(len(labels)), labels, fontsize=7)
            ax.set_title(name)
        top.colorbar(im, ax=axes, shrink=0.8, label="log10 ||H_ij||_F / sqrt(n_i n_j)")
        ax = bottom.subplots()
        x = np.arange(len(labels))
        for off, (stage, g) in zip((-0.2, 0.2), (("init", g0), ("trained", g1))):
            ax.bar(x + off, g["spectral_diagonal"], width=0.4, color=STAGE_COLOURS[stage], label=stage)
        ax.set_yscale("log")
        ax.set_xticks(x, labels, rotation=90, fontsize=7)
        ax.set_ylabel("||H_ii||_2")
        ax.set_title("(c) spectral norm of the diagonal blocks")
        ax.legend()
        fig.suptitle(_title(h), fontsize=7.5)
    return fig


def landscape_figure(ls: Mapping[str, Any]) -> Figure:
    """(a) D_k = |L_(k+1)(w*) - L_k(w*)| against the number of training sequences k (mean over
    orderings, sequence by sequence and batch by batch) with the fitted slopes and Theorem 7's
    2L/(k+1); (b) Assumption 1: ||grad L_k(w*)|| against k with the sampling reference."""
    c, a1 = ls["curve"], ls["assumption1"]
    with plt.rc_context(COMPACT_RC):
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(6.2, 3.6), layout="constrained")
        k = np.asarray(c["k"], dtype=float)
        ax.loglog(k, c["D_mean"], ".", ms=2, color="0.6", label="sequence by sequence (mean)")
        ax.loglog(c["D_binned_k"], c["D_binned"], "-", color="#4C72B0", label=f"binned; slope {c['slope']:.2f} "
                  f"[{c['slope_ci95'][0]:.2f}, {c['slope_ci95'][1]:.2f}]")  # fmt: skip
        if c.get("batch"):
            b = c["batch"]
            ax.loglog(b["k"], b["D_mean"], "s", ms=2.5, color="#DD8452", label=f"batch by batch (b = {b['batch_size']}); "
                      f"slope {b['slope']:.2f}")  # fmt: skip
        ax.loglog(k, c["theorem7_bound_2L"], ":", color="k", label="Theorem 7: 2L/(k+1)")
        ax.set_xlabel("training sequences k")
        ax.set_ylabel("|L_(k+1)(w*) - L_k(w*)|")
        ax.set_title("(a) D_k on sequences")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2))
        kk = np.asarray(a1["k"], dtype=float)
        bx.loglog(kk, a1["grad_norm_k_mean"], "o-", ms=2.5, label=f"mean over orderings; slope {a1['slope']:.2f}")
        bx.fill_between(kk, a1["grad_norm_k_q10"], a1["grad_norm_k_q90"], alpha=0.25, label="10-90% of orderings")
        bx.loglog(kk, a1["sampling_reference"], "--", color="k", label="sampling reference")
        bx.axhline(a1["full_grad_norm"], color="0.4", lw=0.8, label="||grad L_n(w*)||")
        bx.set_xlabel("training sequences k")
        bx.set_ylabel("||grad L_k(w*)||")
        bx.set_title(f"(b) Assumption 1 ({ls['gram_sequences']} sequences)")
        bx.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2))
        for a in (ax, bx):
            a.xaxis.set_minor_formatter(NullFormatter())
            a.yaxis.set_minor_formatter(NullFormatter())
    return fig


def landscape2d_figure(r: Mapping[str, Any]) -> Figure:
    """The whole training set's mean loss on the plane of the top two Hessian eigenvectors through
    w* (a) next to the quadratic model L0 + a g.u1 + b g.u2 + (lambda1 a^2 + lambda2 b^2)/2 (b):
    filled contours on one set of levels (over both panels) with one colour bar, w* marked, the
    axes labelled with the eigenvalues; the disc of the claim (``near``) dashed on both."""
    a, b = np.asarray(r["a"]), np.asarray(r["b"])
    L, Q = np.asarray(r["loss"]), np.asarray(r["quadratic"])
    lo, hi = float(min(L.min(), Q.min())), float(max(L.max(), Q.max()))
    levels = np.linspace(lo, hi if hi > lo else lo + 1e-12, 16)
    l1, l2 = r["eigenvalues"][:2]
    near = r["near"]
    with plt.rc_context(COMPACT_RC):
        fig, axes = plt.subplots(1, 2, figsize=(6.2, 3.3), layout="constrained", sharey=True)
        panels = (("(a) loss L(w* + a u1 + b u2)", L), ("(b) quadratic model at w*", Q))
        for ax, (title, Z) in zip(axes, panels):
            cs = ax.contourf(a, b, Z.T, levels=levels, cmap="viridis")
            ax.contour(a, b, Z.T, levels=levels, colors="white", linewidths=0.3, alpha=0.6)
            ax.plot([0], [0], marker="*", ms=6, color="#DD8452", mec="k", mew=0.4, ls="none")
            t = np.linspace(0, 2 * np.pi, 200)
            rho = near["disc_radius"]
            ax.plot(rho * np.cos(t), rho * np.sin(t), "--", color="white", lw=0.8)
            ax.set_aspect("equal")
            ax.set_xlabel(f"a along u1 (λ1 = {l1:.3g})")
            ax.set_title(title)
        axes[0].set_ylabel(f"b along u2 (λ2 = {l2:.3g})")
        cb = fig.colorbar(cs, ax=axes, shrink=0.85, label="mean training loss (nats)")
        cb.locator = MaxNLocator(6)
        cb.update_ticks()
        rel = near.get("rel_gap")
        gap = (
            f"; within {near['disc_radius']:.3g} (dashed) max |L - Q| / |Q - L0| = {rel:.2g}" if rel is not None else ""
        )
        fig.suptitle(
            f"Plane of the top two Hessian eigenvectors, whole training set\n({r['sequences']:,} sequences, "
            f"P = {r['P']:,}){gap}",
            fontsize=7.5,
        )
    return fig


def scaling_figure(sc: Mapping[str, Any]) -> Figure:
    """(a) validation loss against training tokens D, one line per model (width, depth), with the
    fitted law; (b) against the non-embedding parameters N, one line per D; (c) k*, the D_k
    prefactor and the top Hessian eigenvalue against N at the largest training set, with power laws."""
    from .scaling import law_value

    rows = pd.DataFrame(sc["rows"])
    law = sc["law"]
    theta = [law[n] for n in ("E", "A", "alpha", "B", "beta")] if law.get("fitted") else None
    with plt.rc_context(COMPACT_RC):
        fig, axes = plt.subplots(1, 3, figsize=(6.4, 3.4), layout="constrained")
        ax = axes[0]
        for (w, d), g in rows.groupby(["width", "depth"]):
            g = g.sort_values("tokens")
            line = ax.plot(g["tokens"], g["val_loss"], "o", ms=2.5, label=f"d {w}, {d} L")[0]
            if theta is not None:
                D = np.geomspace(g["tokens"].min(), g["tokens"].max(), 40)
                ax.plot(D, law_value(theta, float(g["N"].iloc[0]), D), "-", lw=0.8, color=line.get_color())
        ax.set_xscale("log")
        ax.set_xlabel("training tokens D")
        ax.set_ylabel("validation loss (nats)")
        title = "(a) fitted L(N, D)"
        if theta is not None:
            title += f"\nalpha {law['alpha']:.2f}, beta {law['beta']:.2f}"
        ax.set_title(title)
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.28))
        bx = axes[1]
        for D, g in rows.groupby("tokens"):
            g = g.sort_values("N")
            bx.plot(g["N"], g["val_loss"], "o-", ms=2.5, lw=0.8, label=f"D {D}")
        bx.set_xscale("log")
        bx.set_xlabel("non-embedding parameters N")
        bx.set_title("(b) validation loss")
        bx.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.28))
        cx = axes[2]
        at = rows[rows["sequences"] == sc["fit_sequences"]].sort_values("N")
        for q, label, marker in (
            ("k_star", "k* (sequences)", "o"),
            ("prefactor", "D_k prefactor", "s"),
            ("lambda_max", "top eigenvalue", "^"),
        ):
            y = pd.to_numeric(at[q], errors="coerce")
            fit = sc["fits"].get(q, {})
            text = f"{label}; b {fit['exponent']:.2f}" if "exponent" in fit else label
            cx.plot(at["N"], y, marker + "-", ms=3, lw=0.8, label=text)
        cx.set_xscale("log")
        cx.set_yscale("log")
        cx.set_xlabel("non-embedding parameters N")
        cx.set_title(f"(c) at {sc['fit_sequences']} sequences")
        cx.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.28))
        for a in axes:
            a.xaxis.set_minor_formatter(NullFormatter())
            a.yaxis.set_minor_formatter(NullFormatter())
    return fig


def _short(name: str) -> str:
    return name.replace("blocks.", "L").replace(".weight", "").replace("attn.", "").replace("mlp.", "")


def _approx_panel(ax, a: Mapping[str, Any], title: str) -> None:
    """One stage's bars: the relative Frobenius error of each method per diagonal block and overall."""
    names = list(a["blocks"]) + ["all"]
    x = np.arange(len(names))
    methods = [m for m in a["methods"] if m != "block-diagonal"]
    for i, m in enumerate(methods):
        vals = [a["blocks"][n][m]["fro"] for n in a["blocks"]] + [a["whole"][m]["fro"]]
        ax.bar(x + (i - 1) * 0.27, vals, width=0.27, color=_METHOD_COLOURS[m], label=m)
    bd = a["whole"]["block-diagonal"]["fro"]
    if bd > 0:  # 0 for one layer: nothing outside the layer's block
        ax.axhline(bd, color=_METHOD_COLOURS["block-diagonal"], ls="--", lw=0.9, label="layer-block-diagonal (all)")
    ax.set_yscale("log")
    ax.set_xticks(x, [_short(n) for n in names], rotation=90, fontsize=7)
    ax.set_title(title)


def _same_limits(axes, results) -> None:
    """One log y-range over the panels of a row, spanning every positive error of ``results``."""
    vals = [e["fro"] for a in results for by in [*a["blocks"].values(), a["whole"]] for e in by.values()]
    vals = [x for x in vals if x > 0]
    if vals:
        for ax in axes:
            ax.set_ylim(min(vals) / 1.5, max(vals) * 1.5)


def approx_figure(h: Mapping[str, Any], vit: Mapping[str, Any] | None = None) -> Figure:
    """Relative Frobenius error of the GGN, K-FAC, EK-FAC and the layer-block-diagonal Hessian
    against the exact Hessian, per diagonal weight block and for all weights, at initialisation
    and after training (log scale: the errors span decades; the block-diagonal line is absent
    where it is 0, a one-layer model); with ``vit`` (rule lm_vit_approx's result) the same on the
    paper's ViT in a right-hand column, on the language model's scale for each stage."""
    with_vit = vit is not None and vit.get("approximations") and "init" in vit
    with plt.rc_context(COMPACT_RC):
        cols = 2 if with_vit else 1
        fig, axes = plt.subplots(
            2, cols, figsize=(6.2, 4.6), layout="constrained", squeeze=False,
            gridspec_kw={"width_ratios": [2.8, 1] if with_vit else [1]},
        )  # fmt: skip
        for row, stage in enumerate(("init", "trained")):
            when = "at init" if stage == "init" else "trained"
            a = h[stage].get("approximations")
            if not a:
                axes[row, 0].set_axis_off()
            else:
                _approx_panel(axes[row, 0], a, f"language model, {when}")
            axes[row, 0].set_ylabel("||A - H||_F / ||H||_F")
            if with_vit:
                _approx_panel(axes[row, 1], vit[stage], f"paper's ViT, {when}")
                _same_limits(axes[row], [x for x in (a, vit[stage]) if x])
        handles, labels = axes[0, 0].get_legend_handles_labels()
        if not handles and with_vit:
            handles, labels = axes[0, 1].get_legend_handles_labels()
        fig.legend(handles, labels, fontsize=7, ncol=4, loc="outside lower center")
        title = _title(h)
        if with_vit:
            v = vit["trained"]
            title += (
                f"\nright: the paper's ViT, block {v['block']}'s five groups (P = {v['P']:,}), batch {v['batch_size']}"
            )
        fig.suptitle(title, fontsize=7.5)
    return fig


def approx_table(h: Mapping[str, Any], vit: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """One row per (model, stage, block, method): relative Frobenius and spectral errors; the paper's
    ViT (``vit``, rule lm_vit_approx's result) after the language model."""
    rows = []
    models = [("language model", {stage: h[stage].get("approximations") for stage in ("init", "trained")})]
    if vit is not None and vit.get("approximations"):
        models.append(("paper's ViT", vit))
    for model, by_stage in models:
        for stage in ("init", "trained"):
            a = by_stage[stage]
            if not a:
                continue
            for block, by in list(a["blocks"].items()) + [("all weights", a["whole"])]:
                for m, e in by.items():
                    rows.append(
                        {"model": model, "stage": stage, "block": block, "method": m, "rel_fro": e["fro"],
                         "rel_spectral": e["spectral"]}
                    )  # fmt: skip
    return pd.DataFrame(rows)


def scaling_table(sc: Mapping[str, Any]) -> pd.DataFrame:
    """One row per model of the grid."""
    keys = [
        "id",
        "width",
        "depth",
        "sequences",
        "tokens",
        "N",
        "P",
        "val_loss",
        "train_loss",
        "slope",
        "prefactor",
        "k_star",
        "lambda_max",
        "largest_block",
    ]
    return pd.DataFrame([{k: r.get(k) for k in keys} for r in sc["rows"]])
