"""One seaborn theme and the figure helpers behind the paper's Figures 3-6.

The notebooks in ``notebooks/`` only load results and call these helpers, so every figure
of the project shares one look and the drawing code is tested here (``tests/test_plotting.py``).

* :func:`set_theme` - seaborn "paper" context, "ticks" style, DejaVu Sans, fixed dpi.
* :func:`save_figure` - writes ``<path>.pdf`` and ``<path>.png`` atomically.
* :func:`hessian_heatmap` / :func:`hessian_figure` / :func:`shared_log_range` - Figures 3, 4.
* :func:`norms_figure` - Figure 5.
* :func:`landscape_figure` - Figure 6.
* :func:`load_hessian`, :func:`load_json` - readers of the pipeline's result files, with
  errors that name the file.

The helpers create figures through :mod:`matplotlib.pyplot` so that Jupyter's inline backend
shows them; the caller closes them (``plt.close(fig)``) when drawing many in one process.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

from . import GROUPS
from .utils import atomic_path

__all__ = [
    "GROUP_LABELS",
    "hessian_figure",
    "hessian_heatmap",
    "landscape_figure",
    "load_hessian",
    "load_json",
    "norms_figure",
    "save_figure",
    "set_theme",
    "shared_log_range",
    "slope_label",
]

#: Short labels of the parameter groups on the axes of every figure.
GROUP_LABELS = {"W_Q": "Q", "W_K": "K", "W_V": "V", "W_1": "W1", "W_2": "W2"}

#: Colour map of the log-magnitude heatmaps.
HEATMAP_CMAP = "rocket"

#: Colour of each training stage in the bar charts.
STAGE_COLOURS = {"init": "#4C72B0", "trained": "#DD8452"}

_SAVE_FORMATS = ("pdf", "png")


def set_theme(dpi: int = 150, savefig_dpi: int = 300) -> None:
    """Apply the project's plotting theme (call once, before drawing)."""
    sns.set_theme(
        context="paper",
        style="ticks",
        palette="deep",
        font="DejaVu Sans",
        rc={
            "figure.dpi": dpi,
            "savefig.dpi": savefig_dpi,
            "savefig.bbox": "tight",
            "savefig.pad_inches": 0.02,
            "axes.titlesize": 10,
            "axes.labelsize": 9,
            "xtick.labelsize": 8,
            "ytick.labelsize": 8,
            "legend.fontsize": 8,
            "legend.frameon": False,
            "pdf.fonttype": 42,  # embed TrueType: text stays editable and searchable
            "ps.fonttype": 42,
            "image.interpolation": "nearest",
            "axes.spines.top": False,
            "axes.spines.right": False,
        },
    )


def _figure_base(path_without_suffix: str | os.PathLike[str]) -> Path:
    base = Path(path_without_suffix)
    if base.suffix.lower() in {"." + fmt for fmt in _SAVE_FORMATS}:
        base = base.with_suffix("")
    if not base.name:
        raise ValueError(f"save_figure needs a file name, got {str(path_without_suffix)!r}")
    return base




def save_figure(fig: Figure, path_without_suffix: str | os.PathLike[str]) -> list[Path]:
    """Write ``fig`` to ``<path>.pdf`` and ``<path>.png``; returns the two paths.

    The folder is created if needed. Each file is first written to a temporary file in the
    same folder and then moved into place with :func:`os.replace`, so an interrupted run never
    leaves a half-written figure. A trailing ``.pdf``/``.png`` on the path is ignored. The PDF
    carries no creation date, so the same figure gives the same bytes.
    """
    base = _figure_base(path_without_suffix)
    written = []
    for fmt in _SAVE_FORMATS:
        target = base.parent / f"{base.name}.{fmt}"
        with atomic_path(target, suffix=f".{fmt}.tmp") as tmp:
            metadata = {"CreationDate": None} if fmt == "pdf" else None
            fig.savefig(tmp, format=fmt, metadata=metadata)
        written.append(target)
    return written


# ----------------------------------------------------------------------------- readers


def load_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a JSON result file; the error names the file and the rule that writes it."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"result file {str(p)!r} not found; run the pipeline (snakemake) to produce it "
            f"or pass the right path as a notebook parameter"
        )
    try:
        with p.open() as handle:
            return json.load(handle)
    except json.JSONDecodeError as err:
        raise ValueError(f"{str(p)!r} is not valid JSON ({err}); delete it and rerun") from err


def load_hessian(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read ``results/<exp>/hessian/<stage>.npz``.

    Returns a dict with ``H`` (float64), ``names`` (list of str), ``offsets`` and, when
    stored, ``shapes``.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"Hessian file {str(p)!r} not found; run the pipeline's hessian rule to produce it "
            f"or pass the right path as a notebook parameter"
        )
    with np.load(p, allow_pickle=False) as data:
        missing = [key for key in ("H", "names", "offsets") if key not in data.files]
        if missing:
            raise KeyError(f"{str(p)!r} lacks the array(s) {missing}; rerun the hessian rule")
        out = {
            "H": np.asarray(data["H"], dtype=np.float64),
            "names": [v.decode() if isinstance(v, bytes) else str(v) for v in data["names"]],
            "offsets": np.asarray(data["offsets"], dtype=np.int64),
        }
        if "shapes" in data.files:
            out["shapes"] = np.asarray(data["shapes"], dtype=np.int64)
    return out


def _as_mapping(obj: Mapping[str, Any] | str | os.PathLike[str]) -> Mapping[str, Any]:
    if isinstance(obj, (str, os.PathLike)):
        return load_json(obj)
    return obj


# ----------------------------------------------------------------------------- Figures 3, 4


def _log_abs(H: np.ndarray) -> np.ndarray:
    """log10 |H| with -inf where H == 0."""
    out = np.full(H.shape, -np.inf)
    np.log10(np.abs(H), out=out, where=H != 0)
    return out


def shared_log_range(*Hs: Any, floor: float = -12) -> tuple[float, float]:
    """Colour range ``(vmin, vmax)`` of log10 |H| over all the given matrices.

    ``vmax`` is the largest log10 |H_ij|; ``vmin`` the smallest over the nonzero entries, but
    not below ``floor`` (entries that are tiny only through rounding would otherwise stretch
    the scale). Exact zeros are ignored; with no nonzero entry at all the range is
    ``(floor, floor + 1)``. Passing the init and trained Hessians gives Figures 3 and 4 one
    colour scale.
    """
    if not Hs:
        raise ValueError("shared_log_range needs at least one matrix")
    lo, hi = np.inf, -np.inf
    for H in Hs:
        a = np.abs(np.asarray(H, dtype=np.float64))
        if not np.all(np.isfinite(a)):
            raise ValueError("a Hessian passed to shared_log_range has non-finite entries")
        nz = a[a > 0]
        if nz.size:
            lo = min(lo, float(np.log10(nz.min())))
            hi = max(hi, float(np.log10(nz.max())))
    floor = float(floor)
    if not np.isfinite(hi) or hi < floor:  # all zero, or all below the floor
        return floor, floor + 1.0
    vmin, vmax = max(lo, floor), hi
    if vmax <= vmin:  # a single magnitude: widen to one decade below it
        vmin = max(floor, vmax - 1.0)
        if vmin >= vmax:
            vmax = vmin + 1.0
    return float(vmin), float(vmax)


def _check_blocks(H: np.ndarray, offsets: Any, names: Sequence[str]) -> np.ndarray:
    if H.ndim != 2 or H.shape[0] != H.shape[1]:
        raise ValueError(f"H must be a square matrix, got shape {H.shape}")
    if not np.all(np.isfinite(H)):
        raise ValueError("H has non-finite entries; recompute the Hessian")
    off = np.asarray(offsets, dtype=np.int64).ravel()
    if off.size != len(names) + 1:
        raise ValueError(
            f"offsets must have len(names) + 1 = {len(names) + 1} entries, got {off.size}"
        )
    if off[0] != 0 or off[-1] != H.shape[0] or np.any(np.diff(off) <= 0):
        raise ValueError(
            f"offsets {off.tolist()} must increase strictly from 0 to P = {H.shape[0]}"
        )
    return off


def hessian_heatmap(
    ax: Axes,
    H: Any,
    offsets: Any,
    names: Sequence[str],
    vmin: float,
    vmax: float,
    title: str | None = None,
    cmap: str = HEATMAP_CMAP,
    colorbar: bool = True,
) -> AxesImage:
    """Draw log10 |H| on ``ax``: block lines at ``offsets``, block labels, a colour bar.

    Entries equal to 0 (log10 = -inf) and entries below ``vmin`` take the colour of ``vmin``;
    entries above ``vmax`` that of ``vmax``. Tick labels are the short group names (Q, K, V,
    W1, W2) centred on each block. Returns the image, whose colour limits are
    ``(vmin, vmax)``.
    """
    H = np.asarray(H, dtype=np.float64)
    names = [str(n) for n in names]
    off = _check_blocks(H, offsets, names)
    if not vmin < vmax:
        raise ValueError(f"need vmin < vmax, got vmin={vmin}, vmax={vmax}")
    img = np.clip(_log_abs(H), vmin, vmax)
    image = ax.imshow(
        img, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest", aspect="equal"
    )
    for b in off[1:-1]:
        ax.axhline(b - 0.5, color="white", linewidth=0.6)
        ax.axvline(b - 0.5, color="white", linewidth=0.6)
    centres = (off[:-1] + off[1:]) / 2.0 - 0.5
    labels = [GROUP_LABELS.get(n, n) for n in names]
    ax.set_xticks(centres, labels)
    ax.set_yticks(centres, labels)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(True)
    if title:
        ax.set_title(title)
    if colorbar:
        cbar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.03)
        cbar.set_label("log10 |H|")
    return image


def hessian_figure(
    hessian: Mapping[str, Any],
    vmin: float,
    vmax: float,
    title: str | None = None,
    size: float = 4.2,
) -> Figure:
    """One-panel figure of a Hessian as returned by :func:`load_hessian`."""
    fig, ax = plt.subplots(figsize=(size * 1.15, size), layout="constrained")
    hessian_heatmap(
        ax, hessian["H"], hessian["offsets"], hessian["names"], vmin, vmax, title=title
    )
    return fig


# ----------------------------------------------------------------------------- Figure 5


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


def _grouped_bars(
    ax: Axes, series: dict[str, np.ndarray], hatches: dict[str, str], colours: dict[str, str]
) -> None:
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
    stages = {"init": init, "trained": trained}

    fig = plt.figure(figsize=(10.0, 7.6), layout="constrained")
    axd = fig.subplot_mosaic([["a", "b"], ["c", "d"]])
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
    ax.set_ylabel("norm")
    ax.legend(ncols=2, loc="best")

    ax = axd["b"]
    _grouped_bars(ax, block_series, hatches, colours)
    ax.set_title(r"(b) diagonal Hessian blocks $H_{ii}$")
    ax.set_ylabel("norm")
    ax.legend(ncols=2, loc="best")

    spec = {stage: _block_matrix(doc, "spectral") for stage, doc in stages.items()}
    vmin, vmax = shared_log_range(*spec.values(), floor=-300)
    labels = [GROUP_LABELS[g] for g in GROUPS]
    for key, stage in (("c", "init"), ("d", "trained")):
        ax = axd[key]
        mat = spec[stage]
        annot = np.array([[f"{v:.1e}" for v in row] for row in mat])
        sns.heatmap(
            np.clip(_log_abs(np.nan_to_num(mat)), vmin, vmax),
            ax=ax,
            vmin=vmin,
            vmax=vmax,
            cmap=HEATMAP_CMAP,
            annot=annot,
            fmt="",
            annot_kws={"fontsize": 6.5},
            square=True,
            xticklabels=labels,
            yticklabels=labels,
            cbar=key == "d",
            cbar_kws={"label": "log10 ||H_ij||_2"} if key == "d" else None,
            linewidths=0.5,
            linecolor="white",
        )
        ax.tick_params(length=0)
        ax.set_title(f"({key}) Hessian block spectral norms, {stage}")
    return fig


# ----------------------------------------------------------------------------- Figure 6


def _positive(values: Any) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    return np.where(v > 0, v, np.nan)


def slope_label(result: Mapping[str, Any]) -> str:
    """``"fitted slope = -0.98 [-1.02, -0.95] (95% CI)"`` for a landscape result.

    Two decimals, or more (up to 4) when the interval is too narrow to show at two.
    """
    slope = float(result["slope"])
    ci = result.get("slope_ci95")
    have_ci = ci is not None and len(ci) == 2 and all(c is not None for c in ci)
    decimals = 2
    if have_ci:
        width = abs(float(ci[1]) - float(ci[0]))
        if width > 0:
            decimals = int(min(4, max(2, np.ceil(-np.log10(width)))))
    text = f"fitted slope = {slope:.{decimals}f}"
    if have_ci:
        text += f" [{float(ci[0]):.{decimals}f}, {float(ci[1]):.{decimals}f}] (95% CI)"
    return text


def landscape_figure(
    result: Mapping[str, Any] | str | os.PathLike[str],
    show_bound: bool = True,
    size: tuple[float, float] = (8.8, 3.8),
) -> Figure:
    """Figure 6: ``|L_{k+1} - L_k|`` against ``k`` on log-log axes.

    ``result`` is the output of :func:`transformer_hessian.landscape.analyse_landscape`
    (or a path to the landscape JSON). Draws the mean over orderings, its EMA, a 1/k reference
    through the mean curve at the start of the fit range, the fitted power law over the fit
    range (the legend, right of the axes, gives the slope and its bootstrap 95% interval) and, with
    ``show_bound``, Theorem 7's bound 2L/(k+1) at w = w*.
    """
    res = _as_mapping(result)
    for key in ("k", "D_mean", "slope", "intercept", "fit_k_min", "fit_k_max"):
        if key not in res:
            raise KeyError(f"landscape result lacks the key {key!r}; rerun the landscape rule")
    k = np.asarray(res["k"], dtype=np.float64)
    d_mean = _positive(res["D_mean"])
    k_lo, k_hi = float(res["fit_k_min"]), float(res["fit_k_max"])
    palette = sns.color_palette("deep")

    fig, ax = plt.subplots(figsize=size, layout="constrained")
    n_ord = res.get("n_orderings")
    mean_label = f"mean over {n_ord} orderings" if n_ord else "mean over orderings"
    ax.plot(k, d_mean, color=palette[0], linewidth=0.9, label=mean_label, zorder=2)
    if "D_ema" in res:
        ax.plot(
            k,
            _positive(res["D_ema"]),
            color=palette[2],
            linewidth=1.2,
            alpha=0.85,
            label=f"EMA over k (factor {float(res.get('ema_factor', 0.99)):g})",
            zorder=2,
        )
    in_fit = (k >= k_lo) & (k <= k_hi)
    # 1/k reference c/k through the mean curve at the start of the fit range: c is the
    # geometric mean of k * D_mean over the first decade [k_min, 10 k_min] of the fit range,
    # so that one noisy point does not set it.
    first_decade = in_fit & (k <= 10 * k_lo) & np.isfinite(d_mean)
    if first_decade.any():
        c = float(np.exp(np.mean(np.log(k[first_decade] * d_mean[first_decade]))))
        ax.plot(
            k, c / k, color="0.3", linestyle=":", linewidth=1.3,
            label="1/k reference", zorder=4,
        )
    k_fit = k[in_fit]
    if k_fit.size:
        fitted = np.exp(float(res["intercept"])) * k_fit ** float(res["slope"])
        ax.plot(
            k_fit, fitted, color=palette[3], linewidth=1.6, alpha=0.9,
            label=slope_label(res), zorder=3,
        )
    if show_bound and "theorem7_bound_2L" in res:
        ax.plot(
            k,
            _positive(res["theorem7_bound_2L"]),
            color="0.1",
            linestyle="--",
            linewidth=1.0,
            label="Theorem 7 bound 2L/(k+1)",
            zorder=2,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of samples k")
    ax.set_ylabel(r"$|L_{k+1}(w^*) - L_k(w^*)|$")
    if res.get("experiment"):
        ax.set_title(str(res["experiment"]))
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return fig
