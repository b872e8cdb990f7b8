"""Drawing of the scaling study (``paper/figures/scaling.*``) from ``results/scaling/scaling.json``.

Only loads numbers written by :func:`transformer_hessian.studies.scaling.compute.aggregate`; computes nothing
but what it draws (no torch).
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.figure import Figure

from ...plotting import COMPACT_RC, GROUP_COLOURS, as_mapping
from ...util.datanames import named

#: Marker, fit line style and legend text of the two sweep directions.
_MARKER = {"width": "o", "depth": "s"}
_STYLE = {"width": "-", "depth": "--"}
_SERIES = {"width": "widths at depth {fixed_depth}", "depth": "depths at width {fixed_width}"}
#: Diagonal Hessian blocks drawn in panel (f): group -> label.
_DIAG = {"W_Q": "$H_{QQ}$", "W_K": "$H_{KK}$", "W_V": "$H_{VV}$", "W_1": "$H_{11}$", "W_2": "$H_{22}$"}


def size_label(size: Any, n_train: int | None = None) -> str:
    """``"n = 400"`` for a data-set size, ``"n = all (1437)"`` for ``None``."""
    if size is None:
        return f"n = all ({n_train})" if n_train else "n = all"
    return f"n = {size}"


def exponent_label(fit: Mapping[str, Any]) -> str:
    """``"b = -0.26 [-0.50, -0.13]"``: the fitted exponent and its bootstrap 95% interval, with
    enough decimals (2 to 4) to show the interval's width; no interval: the number of models."""
    ci = fit.get("exponent_ci")
    width = abs(ci[1] - ci[0]) if ci else 1.0
    decimals = int(min(4, max(2, np.ceil(-np.log10(width))))) if width > 0 else 2
    text = f"b = {fit['exponent']:.{decimals}f}"
    if ci:
        text += f" [{ci[0]:.{decimals}f}, {ci[1]:.{decimals}f}]"
    else:
        text += f" ({fit['n_points']} models: no interval)"
    return text


def sweep_title(result: Mapping[str, Any]) -> str:
    """Data set, model family and sweep of the result, for the figure's title."""
    s = result["settings"]
    name = named(result["dataset"], "MNIST / CIFAR-100")  # the sweep stands for both of the paper's

    def braces(v):
        return "{" + ", ".join(map(str, v)) + "}"

    def times_d(r):
        return "d" if r == 1 else f"{r:g} d"

    return (
        f"Scaling sweep on {name}: post-norm ViT, patch {s['patch_size']}, d_K = {times_d(s['d_k_ratio'])}, "
        f"d_ff = {times_d(s['d_ff_ratio'])}, {s['train']['epochs']} epochs AdamW\n"
        f"widths d in {braces(s['widths'])} at depth {s['fixed_depth']}; depths in {braces(s['depths'])} at "
        f"width {s['fixed_width']}; tolerance {s['tolerance']:g} nats; "
        f"D_k over {s['n_orderings']} random orderings; "
        + r"$\lambda_{max}$"
        + f" on {s['hessian_samples']} training samples"
    )


def _tick_text(v: float, _pos=None) -> str:
    """A log axis' tick: ``0.5``, ``500``, ``2,000``; from 10,000 on in thousands (``20k``,
    ``500k``), so that the labelled minor ticks of a narrow panel do not run into each other."""
    if v >= 10_000:
        return f"{v / 1000:,.0f}k"
    return f"{v:,.0f}" if v >= 10 else f"{v:g}"


def _plain_ticks(ax) -> None:
    """Plain numbers (not 2x10^2) on log axes, minor ticks labelled where an axis spans under 2 decades."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fmt = FuncFormatter(_tick_text)
    for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        axis.set_major_formatter(fmt)
        short = lo > 0 and hi / lo < 20
        axis.set_minor_locator(LogLocator(subs=(2, 5) if hi / max(lo, 1e-300) > 5 else (2, 3, 5, 7)))
        axis.set_minor_formatter(fmt if short else NullFormatter())


_BELOW = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.2), "frameon": False, "ncols": 1}


def _draw_fit(ax, fit: Mapping[str, Any] | None, colour, label: str, linestyle="-") -> None:
    if not fit or "exponent" not in fit:
        return
    P = np.asarray(fit["band_P"], dtype=np.float64)
    ax.plot(
        P,
        fit["prefactor"] * P ** fit["exponent"],
        color=colour,
        linestyle=linestyle,
        linewidth=1.3,
        label=f"{label}{exponent_label(fit)}",
    )
    if fit.get("band_lo"):
        ax.fill_between(P, fit["band_lo"], fit["band_hi"], color=colour, alpha=0.15, linewidth=0)


def scaling_figure(result: Mapping[str, Any] | str | os.PathLike[str], size=(5.8, 11.0)) -> Figure:
    """Six panels: (a) binned D_k curves with the tolerance and measured k*, (b) -slope with its
    bootstrap 95% interval, (c) prefactor, (d) measured (filled) and fitted (open) k*, (e) top Hessian
    eigenvalue, (f) spectral norms of the last block's diagonal Hessian blocks; (b)-(f) against the parameter
    count on log-log axes, (b)-(e) with the power-law fits of the result (one colour per data-set size)."""
    with plt.rc_context(COMPACT_RC):
        return _scaling_figure(result, size)


def _scaling_figure(result, size) -> Figure:
    res = as_mapping(result)
    sizes = list(dict.fromkeys(m["train_size"] for m in res["models"]))
    colours = dict(zip(sizes, sns.color_palette("deep", max(3, len(sizes)))))
    # Three rows of two panels, 5.8 in wide (printed at the paper's text width, no text below 6 pt);
    # every legend sits under its panel, outside the data.
    fig, axes = plt.subplots(3, 2, figsize=size, layout="constrained")
    (ax_d, ax_s), (ax_a, ax_k), (ax_l, ax_b) = axes
    _curves_panel(ax_d, res, sizes)
    _rate_panels(res, sizes, colours, ax_s, ax_a, ax_k, ax_l)
    dense = _blocks_panel(ax_b, res, sizes)
    for ax in (ax_s, ax_a, ax_k, ax_l, ax_b) if dense else (ax_s, ax_a, ax_k, ax_l):
        _plain_ticks(ax)
    fig.suptitle("\n".join(textwrap.fill(line, 100) for line in sweep_title(res).splitlines()), fontsize=7)
    return fig


def _curves_panel(ax_d, res, sizes) -> None:
    """(a) D_k curves: colour by parameter count, line style by data-set size, k* markers."""
    models = res["models"]
    tol = res["settings"]["tolerance"]
    styles = dict(zip(sizes, ["-", "--", ":", "-."] * 4))
    P_all = np.array([m["n_parameters"] for m in models], dtype=np.float64)
    cmap = plt.get_cmap("viridis")
    lp = np.log(P_all)
    span = max(float(np.ptp(lp)), 1e-12)
    labelled = set()
    for m in models:
        c = m["curve"]
        col = cmap(0.9 * (np.log(m["n_parameters"]) - lp.min()) / span)
        # one legend entry per model shape (colour); the data-set sizes are the line styles below
        shape = f"d={m['width']}, {m['depth']} block{'s' * (m['depth'] > 1)}, P={m['n_parameters']:,}"
        ax_d.plot(
            c["D_binned_k"],
            c["D_binned"],
            color=col,
            linestyle=styles[m["train_size"]],
            linewidth=1.2,
            label=None if shape in labelled else shape,
        )
        labelled.add(shape)
        ks = c["k_star_measured"]
        if ks is not None:
            ax_d.plot([ks], [tol], marker="v", color=col, markersize=6, markeredgecolor="black", markeredgewidth=0.4)
    if len(sizes) > 1:
        for size in sizes:
            ax_d.plot([], [], color="0.3", linestyle=styles[size], linewidth=1.2, label=size_label(size))
    ax_d.axhline(tol, color="0.2", linestyle=":", linewidth=1.0, label=f"tolerance {tol:g} (markers: k*)")
    ax_d.set(
        xscale="log",
        yscale="log",
        xlabel="number of training samples k",
        ylabel=r"$D_k = |L_{k+1}(w^*) - L_k(w^*)|$ (nats)",
        title="(a) D_k, median in log-spaced bins of k",
    )
    ax_d.legend(fontsize=6.5, **_BELOW)


def _scatter(ax, res, sizes, colours, key, err=None, filled=True, fit=True, prefix="") -> None:
    """One quantity ``key`` of every model against P, coloured by data-set size, marker by sweep
    direction; with ``fit`` the power-law fits of that quantity."""
    for size in sizes:
        group = [m for m in res["rows"] if m["train_size"] == size and m[key] is not None]
        col = colours[size]
        for m in group:
            kw = {
                "color": col,
                "marker": _MARKER[m["series"][0] if m["series"] else "width"],
                "markersize": 5,
                "linestyle": "none",
                "markeredgecolor": "black",
                "markeredgewidth": 0.4,
            }
            if not filled:
                kw.update(markerfacecolor="white", markeredgecolor=col, markeredgewidth=1.2)
            if err is not None:
                lo, hi = err(m)
                ax.errorbar(
                    [m["n_parameters"]],
                    [m[key]],
                    yerr=[[m[key] - lo], [hi - m[key]]],
                    capsize=2,
                    elinewidth=0.8,
                    **kw,
                )
            else:
                ax.plot([m["n_parameters"]], [m[key]], **kw)
        if not fit or not group:
            continue
        for series, by_q in res["fits"][str(size or "all")].items():
            what = _SERIES[series].format(**res["settings"]) if len(sizes) == 1 else f"{series}s"
            where = f", {size_label(size, group[0]['n_train'])}" if len(sizes) > 1 else ""
            _draw_fit(ax, by_q.get(key), col, f"{prefix}{what}{where}: ", linestyle=_STYLE[series])
    ax.set(xscale="log", yscale="log", xlabel="parameters P")


def _rate_panels(res, sizes, colours, ax_s, ax_a, ax_k, ax_l) -> None:
    """(b) decay rate, (c) prefactor, (d) sample size k*, (e) top eigenvalue against P, with the
    sweep directions' markers in every legend."""
    tol = res["settings"]["tolerance"]
    _scatter(ax_s, res, sizes, colours, "decay_rate", err=lambda m: (-m["slope_ci95"][1], -m["slope_ci95"][0]))
    ax_s.axhline(1.0, color="0.3", linestyle=":", linewidth=1.0, label="Theorem 7: 1/k (rate 1)")
    ax_s.set(ylabel="decay rate -slope of D_k\n(95% CI over orderings)", title="(b) rate: D_k ~ prefactor k^slope")
    _scatter(ax_a, res, sizes, colours, "prefactor")
    ax_a.set(ylabel="prefactor of D_k (nats)", title="(c) prefactor of the fitted D_k")
    _scatter(ax_k, res, sizes, colours, "k_star_measured")
    _scatter(ax_k, res, sizes, colours, "k_star_fitted", filled=False, fit=False)
    ax_k.set(
        ylabel=f"sample size k* with\nD_k <= {tol:g} (samples)",
        title="(d) sample size k* at the tolerance",
    )
    _scatter(ax_l, res, sizes, colours, "top_eigenvalue")
    ax_l.set(
        ylabel=r"$\lambda_{max}$ of the training-loss Hessian"
        + "\n"
        + rf"at $w^*$ ({res['settings']['hessian_samples']} samples)",
        title="(e) top Hessian eigenvalue (Lanczos)",
    )
    for ax in (ax_s, ax_a, ax_k, ax_l):
        handles, labels = ax.get_legend_handles_labels()
        handles += [plt.Line2D([], [], color="0.4", marker=_MARKER[k], linestyle="none", markersize=5) for k in _MARKER]
        labels += [_SERIES[k].format(**res["settings"]) for k in _MARKER]
        if ax is ax_k:
            handles += [
                plt.Line2D([], [], color="0.4", marker="o", linestyle="none", markersize=5),
                plt.Line2D([], [], color="0.4", marker="o", markerfacecolor="white", linestyle="none", markersize=5),
            ]
            labels += ["k* measured on the mean D_k", "k* of the fitted prefactor k^slope"]
        ax.legend(handles, labels, fontsize=6.5, **_BELOW)


def _blocks_panel(ax_b, res, sizes) -> list:
    """(f) spectral norms of the diagonal blocks of the last block's Hessian (closed form), one
    line per sweep direction; returns the models that have them."""
    dense = [m for m in res["rows"] if m.get("block_diag_spectral")]
    palette = sns.color_palette("deep")
    if dense:
        for i, (g, label) in enumerate(_DIAG.items()):
            for size in sizes:
                for series in _MARKER:
                    sel = [m for m in dense if m["train_size"] == size and series in m["series"]]
                    if sel:
                        ax_b.plot(
                            [m["n_parameters"] for m in sel],
                            [m["block_diag_spectral"][g] for m in sel],
                            color=GROUP_COLOURS.get(g, palette[i]),
                            marker=_MARKER[series],
                            markersize=4,
                            linewidth=1.0,
                            linestyle=_STYLE[series],
                            label=label if (size, series) == (sizes[0], "width") else None,
                        )
        skipped = [m["id"] for m in res["rows"] if not m.get("block_diag_spectral")]
        ax_b.set(xscale="log", yscale="log")
        ax_b.legend(
            fontsize=6.5,
            **{**_BELOW, "ncols": 3},
            title=textwrap.fill("not formed (too large): " + ", ".join(skipped), 50) if skipped else None,
            title_fontsize=6.5,
        )
    else:
        ax_b.text(
            0.5,
            0.5,
            "no model small enough for a dense Hessian\n(scaling.dense_max_params)",
            ha="center",
            va="center",
            transform=ax_b.transAxes,
            fontsize=8,
        )
        ax_b.set(xticks=[], yticks=[])
    ax_b.set(
        xlabel="parameters P",
        ylabel="spectral norm of the\ndiagonal Hessian block",
        title="(f) last block's diagonal Hessian blocks at $w^*$",
    )
    return dense
