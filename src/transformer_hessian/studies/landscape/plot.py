"""Figure 6: the loss-landscape differences ``|L_{k+1} - L_k|`` against the number of samples (the
landscape study's drawing helpers; which curve is drawn is :func:`.result.verdict_curve`'s choice)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.figure import Figure

from ...plotting.inputs import as_mapping as _as_mapping
from .result import verdict_curve

__all__ = ["landscape_curve", "landscape_figure", "slope_label"]


def _positive(values: Any) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    return np.where(v > 0, v, np.nan)


def slope_label(result: Mapping[str, Any]) -> str:
    """``"fitted slope = -0.98 [-1.02, -0.95] (95% CI)"`` for a landscape result.

    Two decimals, or more (up to 4) when the interval is too narrow to show at two, and more
    while an end of the interval that is not -1 would print as -1: the printed
    interval contains -1 exactly when the interval does (``[-0.998, -0.975]``, not
    ``[-1.00, -0.97]``).
    """
    slope = float(result["slope"])
    ci = result.get("slope_ci95")
    have_ci = ci is not None and len(ci) == 2 and all(c is not None for c in ci)
    decimals = 2
    if have_ci:
        width = abs(float(ci[1]) - float(ci[0]))
        if width > 0:
            decimals = int(min(4, max(2, np.ceil(-np.log10(width)))))
        ends = [float(c) for c in ci]
        while decimals < 17 and any(c != -1.0 and float(f"{c:.{decimals}f}") == -1.0 for c in ends):
            decimals += 1
    text = f"fitted slope = {slope:.{decimals}f}"
    if have_ci:
        text += f" [{float(ci[0]):.{decimals}f}, {float(ci[1]):.{decimals}f}] (95% CI)"
    return text


def landscape_curve(result: Mapping[str, Any]) -> dict[str, Any]:
    """The curve Figure 6 draws: the per-sample one, or ``result["batch"]`` when the result's
    ``granularity`` is ``"batch"``. Returns a dict with ``k``, ``D_mean``, ``D_binned_k``,
    ``D_binned``, ``slope``, ``intercept``, ``slope_ci95``, ``fit_k_min``, ``fit_k_max``,
    ``theorem7_bound_2L``, ``bound_holds``, ``granularity`` and ``label`` (a phrase for the
    legend and caption)."""
    res = _as_mapping(result)
    granularity, curve = verdict_curve(res)
    if granularity == "batch":
        out = dict(curve)
        out["label"] = f"data added batch-by-batch (b = {out['batch_size']})"
    else:
        out = {key: res[key] for key in res if key != "batch"}
        out["label"] = "data added sample-by-sample"
    out["granularity"] = granularity
    return out


def landscape_figure(
    result: Mapping[str, Any] | str | os.PathLike[str],
    show_bound: bool = True,
    size: tuple[float, float] = (6.4, 4.4),
    title: str | None = None,
) -> Figure:
    """Figure 6: ``|L_{k+1} - L_k|`` against the number of samples ``k`` on log-log axes.

    ``result`` is the output of :func:`transformer_hessian.core.landscape.analyse_landscape`
    (or a path to the landscape JSON); the curve drawn is :func:`landscape_curve` (per-sample
    or batch-by-batch, as the result's ``granularity`` says). Draws the mean over orderings,
    its median in log-spaced bins of ``k`` (the smoother: the paper's EMA over the index ``k``
    is not drawn, because on log axes it stays at its first values up to ``k ~ 1/(1-f)`` and
    lies far above the data), a 1/k reference through the start of the fit range, the fitted
    power law (slope and bootstrap 95% interval in the legend) and, with ``show_bound``,
    Theorem 7's bound 2L/(k+1) at w = w* (2L/(j+1) in batches for the batch curve). The legend
    is inside the axes (lower left, below the curves' start); ``title`` names data and model.
    """
    res = _as_mapping(result)
    for key in ("k", "D_mean", "slope", "intercept", "fit_k_min", "fit_k_max"):
        if key not in res:
            raise KeyError(f"landscape result lacks the key {key!r}; rerun the landscape rule")
    cur = landscape_curve(res)
    k = np.asarray(cur["k"], dtype=np.float64)
    d_mean = _positive(cur["D_mean"])
    palette = sns.color_palette("deep")

    fig, ax = plt.subplots(figsize=size, layout="constrained")
    n_ord = res.get("n_orderings")
    mean_label = f"mean over {n_ord} orderings" if n_ord else "mean over orderings"
    ax.plot(k, d_mean, color=palette[0], linewidth=0.8, alpha=0.8, label=mean_label, zorder=2)
    if cur.get("D_binned_k"):
        per = res.get("bins_per_decade", 8)
        ax.plot(
            np.asarray(cur["D_binned_k"], dtype=np.float64),
            _positive(cur["D_binned"]),
            color=palette[2],
            linewidth=0,
            marker="o",
            markersize=3.5,
            markeredgecolor="black",
            markeredgewidth=0.4,
            label=f"median in log-spaced bins of k ({per} per decade)",
            zorder=5,
        )
    _draw_fit_and_bound(ax, cur, k, d_mean, palette, show_bound)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of training samples k")
    if cur["granularity"] == "batch":
        ax.set_ylabel(r"$|L_{(j+1)b}(w^*) - L_{jb}(w^*)|$, k = jb (cross-entropy, nats)")
    else:
        ax.set_ylabel(r"$|L_{k+1}(w^*) - L_k(w^*)|$ (cross-entropy, nats)")
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(loc="lower left", fontsize=7, frameon=True, framealpha=0.85, edgecolor="0.8")
    return fig


def _draw_fit_and_bound(
    ax, cur: Mapping[str, Any], k: np.ndarray, d_mean: np.ndarray, palette, show_bound: bool
) -> None:
    """On ``ax``: the 1/k reference, the fitted power law over the fit range of the curve ``cur``
    and, with ``show_bound``, Theorem 7's bound (see :func:`landscape_figure`)."""
    k_lo, k_hi = float(cur["fit_k_min"]), float(cur["fit_k_max"])
    in_fit = (k >= k_lo) & (k <= k_hi)
    # 1/k reference c/k through the mean curve at the start of the fit range: c is the
    # geometric mean of k * D_mean over the first decade [k_min, 10 k_min] of the fit range,
    # so that one noisy point does not set it.
    first_decade = in_fit & (k <= 10 * k_lo) & np.isfinite(d_mean)
    if first_decade.any():
        c = float(np.exp(np.mean(np.log(k[first_decade] * d_mean[first_decade]))))
        ax.plot(k, c / k, color="0.3", linestyle=":", linewidth=1.3, label="1/k reference", zorder=4)
    k_fit = k[in_fit]
    if k_fit.size:
        fitted = np.exp(float(cur["intercept"])) * k_fit ** float(cur["slope"])
        ax.plot(k_fit, fitted, color=palette[3], linewidth=1.6, alpha=0.9, label=slope_label(cur), zorder=3)
    if show_bound and "theorem7_bound_2L" in cur:
        bound_label = (
            "Theorem 7 bound 2L/(j+1), j = k/b batches" if cur["granularity"] == "batch" else "Theorem 7 bound 2L/(k+1)"
        )
        ax.plot(
            k,
            _positive(cur["theorem7_bound_2L"]),
            color="0.1",
            linestyle="--",
            linewidth=1.0,
            label=bound_label,
            zorder=2,
        )
