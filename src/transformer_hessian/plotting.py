"""One seaborn theme and the figure helpers behind the paper's Figures 3-6.

The notebooks in ``notebooks/`` only load results and call these helpers, so every figure
of the project shares one look and the drawing code is tested here (``tests/test_plotting.py``).

* :func:`set_theme` - seaborn "paper" context, "ticks" style, DejaVu Sans, fixed dpi.
* :func:`save_figure` - writes ``<path>.pdf`` and ``<path>.png`` atomically.
* :func:`hessian_heatmap` / :func:`hessian_figure` / :func:`shared_log_range` - Figures 3, 4.
* :func:`norms_figure` - Figure 5.
* :func:`landscape_figure` - Figure 6.
* :func:`load_hessian`, :func:`load_json` - re-exported from :mod:`.io`, which owns every result
  format (kept here so that ``plotting.load_json`` in existing notebooks keeps working).

The helpers create figures through :mod:`matplotlib.pyplot` so that Jupyter's inline backend
shows them; the caller closes them (``plt.close(fig)``) when drawing many in one process.
"""

from __future__ import annotations

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
from .io import load_hessian, load_json
from .utils import atomic_path

__all__ = [
    "GROUP_LABELS",
    "hessian_figure",
    "hessian_heatmap",
    "landscape_curve",
    "landscape_figure",
    "load_hessian",
    "load_json",
    "norms_figure",
    "save_figure",
    "set_theme",
    "shared_log_range",
    "robust_log_range",
    "zero_fraction",
    "contrast_ratio",
    "dataset_model_label",
    "slope_label",
]

#: Labels of the parameter groups on the axes of every figure (the paper's notation).
GROUP_LABELS = {"W_Q": "$W_Q$", "W_K": "$W_K$", "W_V": "$W_V$", "W_1": "$W_1$", "W_2": "$W_2$"}

#: The paper marks the Values in olive (Figures 3, 4 captions); so do the tick labels here.
VALUES_COLOUR = "olive"

#: Colour of exact zeros in the Hessian heatmaps (outside the colour map "rocket").
ZERO_COLOUR = "#5fa8d3"

#: Default quantiles of the nonzero log10 |H_ij| that set the heatmap colour range.
HEATMAP_QUANTILES = (0.005, 0.9995)

#: Names of the data sets in titles; digits is the offline stand-in.
DATASET_NAMES = {"digits": "8x8 digits (scikit-learn)", "mnist": "MNIST", "cifar100": "CIFAR-100"}

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


def _tight_bbox(fig: Figure):
    """The ``savefig.bbox: tight`` crop box (inches), computed once for all formats.

    ``bbox_inches="tight"`` makes every ``savefig`` call lay the figure out twice; the many-panel
    figures spent most of their time there. One layout pass here and the box passed to each
    format saves a pass per format. ``None`` (no crop) unless the theme asks for ``tight``.
    """
    if plt.rcParams["savefig.bbox"] != "tight" or not hasattr(fig.canvas, "get_renderer"):
        return plt.rcParams["savefig.bbox"]
    fig.draw_without_rendering()  # runs the layout engine, as savefig would
    return fig.get_tightbbox(fig.canvas.get_renderer()).padded(plt.rcParams["savefig.pad_inches"])


def save_figure(fig: Figure, path_without_suffix: str | os.PathLike[str]) -> list[Path]:
    """Write ``fig`` to ``<path>.pdf`` and ``<path>.png``; returns the two paths.

    The folder is created if needed. Each file is first written to a temporary file in the
    same folder and then moved into place with :func:`os.replace`, so an interrupted run never
    leaves a half-written figure. A trailing ``.pdf``/``.png`` on the path is ignored. The PDF
    carries no creation date, so the same figure gives the same bytes.
    """
    base = _figure_base(path_without_suffix)
    bbox = _tight_bbox(fig)
    written = []
    for fmt in _SAVE_FORMATS:
        target = base.parent / f"{base.name}.{fmt}"
        with atomic_path(target, suffix=f".{fmt}.tmp") as tmp:
            metadata = {"CreationDate": None} if fmt == "pdf" else None
            fig.savefig(tmp, format=fmt, metadata=metadata, bbox_inches=bbox)
        written.append(target)
    return written


def publish(fig: Figure, path_without_suffix: str | os.PathLike[str], width: int = 900) -> list[Path]:
    """Save ``fig`` (:func:`save_figure`), show the saved PNG in the notebook, close ``fig``.

    Showing the file that was written (instead of ``display(fig)``, which renders the figure
    once more) costs no extra drawing and shows exactly what lands in ``paper/figures``.
    Outside IPython only the saving and closing happen. Returns the written paths.
    """
    written = save_figure(fig, path_without_suffix)
    plt.close(fig)
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:  # pragma: no cover - IPython ships with the notebook stack
        return written
    if get_ipython() is not None:
        png = next(p for p in written if p.suffix == ".png")
        display(Image(filename=str(png), width=width))
    return written


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


def robust_log_range(*Hs: Any, quantiles: tuple[float, float] = HEATMAP_QUANTILES) -> tuple[float, float]:
    """Colour range ``(vmin, vmax)``: quantiles of log10 |H_ij| over the nonzero entries.

    The entries of all the given matrices are pooled (so Figures 3 and 4 share one scale) and
    ``vmin, vmax = quantile(log10 |H_ij|, quantiles)`` over ``H_ij != 0``; exact zeros are
    excluded (the heatmap shows them in a colour of their own). Unlike the extreme entries,
    the quantiles are not set by a single tiny or huge entry. With no nonzero entry the range
    is ``(-12, -11)``; with a single magnitude it is widened to one decade below it.
    """
    if not Hs:
        raise ValueError("robust_log_range needs at least one matrix")
    lo_q, hi_q = (float(q) for q in quantiles)
    if not 0.0 <= lo_q < hi_q <= 1.0:
        raise ValueError(f"quantiles must satisfy 0 <= lo < hi <= 1, got {quantiles}")
    logs = []
    for H in Hs:
        a = np.abs(np.asarray(H, dtype=np.float64)).ravel()
        if not np.all(np.isfinite(a)):
            raise ValueError("a Hessian passed to robust_log_range has non-finite entries")
        logs.append(np.log10(a[a > 0]))
    pooled = np.concatenate(logs)
    if pooled.size == 0:
        return -12.0, -11.0
    vmin, vmax = (float(v) for v in np.quantile(pooled, [lo_q, hi_q]))
    if vmax <= vmin:
        vmin = vmax - 1.0
    return vmin, vmax


def zero_fraction(H: Any) -> float:
    """Share of the entries of ``H`` that are exactly 0 (e.g. rows of dead ReLU units)."""
    a = np.asarray(H)
    return float(np.count_nonzero(a == 0) / a.size) if a.size else 0.0


def _relative_luminance(colour: Any) -> float:
    from matplotlib.colors import to_rgb

    rgb = np.array(to_rgb(colour))
    lin = np.where(rgb <= 0.03928, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    return float(lin @ np.array([0.2126, 0.7152, 0.0722]))


def contrast_ratio(c1: Any, c2: Any) -> float:
    """WCAG contrast ratio ``(L1 + 0.05) / (L2 + 0.05)`` of two colours (>= 1)."""
    l1, l2 = sorted((_relative_luminance(c1), _relative_luminance(c2)), reverse=True)
    return (l1 + 0.05) / (l2 + 0.05)


def dataset_model_label(metrics: Mapping[str, Any], stands_in_for: str | None = None, sep: str = "; ") -> str:
    """``"8x8 digits (scikit-learn; stand-in for MNIST), ViT: 1 block, 16 tokens, d=16, ..."``.

    ``metrics`` is a training ``metrics.json`` (keys ``dataset`` and ``model``); the text names
    the data set the model ran on and its sizes, so every figure says what it shows.
    """
    m = metrics["model"]
    name = DATASET_NAMES.get(metrics["dataset"], str(metrics["dataset"]))
    if metrics["dataset"] == "digits" and stands_in_for:
        name = name.replace(")", f"; stand-in for {stands_in_for})")
    tokens = (int(m["image_size"]) // int(m["patch_size"])) ** 2
    blocks = f"{m['depth']} block" + ("s" if int(m["depth"]) != 1 else "")
    return f"{name}{sep}ViT, {blocks}, {tokens} tokens, d={m['width']}, d_K={m['d_k']}, d_ff={m['d_ff']}"


def _check_blocks(H: np.ndarray, offsets: Any, names: Sequence[str]) -> np.ndarray:
    if H.ndim != 2 or H.shape[0] != H.shape[1]:
        raise ValueError(f"H must be a square matrix, got shape {H.shape}")
    if not np.all(np.isfinite(H)):
        raise ValueError("H has non-finite entries; recompute the Hessian")
    off = np.asarray(offsets, dtype=np.int64).ravel()
    if off.size != len(names) + 1:
        raise ValueError(f"offsets must have len(names) + 1 = {len(names) + 1} entries, got {off.size}")
    if off[0] != 0 or off[-1] != H.shape[0] or np.any(np.diff(off) <= 0):
        raise ValueError(f"offsets {off.tolist()} must increase strictly from 0 to P = {H.shape[0]}")
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
    zero_colour: str = ZERO_COLOUR,
) -> AxesImage:
    """Draw log10 |H| on ``ax``: block separators, the paper's block labels, a colour bar.

    * Exact zeros are masked and drawn in ``zero_colour``, which is not in the colour map;
      the colour bar carries a swatch "exact 0" with their share of the entries.
    * Entries below ``vmin`` / above ``vmax`` take the end colours (the colour bar shows
      arrows at both ends); the image's colour limits are ``(vmin, vmax)``.
    * Block separators are black lines on a white halo, visible on the darkest and on the
      brightest block.
    * Tick labels ``W_Q, W_K, W_V, W_1, W_2`` centred on each block, ``W_V`` in olive as in
      the paper.
    Returns the image; its array is a masked array whose mask is exactly ``H == 0``.
    """
    from matplotlib import patheffects

    H = np.asarray(H, dtype=np.float64)
    names = [str(n) for n in names]
    off = _check_blocks(H, offsets, names)
    if not vmin < vmax:
        raise ValueError(f"need vmin < vmax, got vmin={vmin}, vmax={vmax}")
    zeros = H == 0
    img = np.ma.masked_array(np.clip(_log_abs(H), vmin, vmax), mask=zeros)
    colour_map = plt.get_cmap(cmap).with_extremes(bad=zero_colour)
    image = ax.imshow(img, cmap=colour_map, vmin=vmin, vmax=vmax, interpolation="nearest", aspect="equal")
    halo = [patheffects.Stroke(linewidth=1.8, foreground="white"), patheffects.Normal()]
    for b in off[1:-1]:
        for line in (ax.axhline(b - 0.5), ax.axvline(b - 0.5)):
            line.set(color="black", linewidth=0.7, path_effects=halo)
    centres = (off[:-1] + off[1:]) / 2.0 - 0.5
    labels = [GROUP_LABELS.get(n, n) for n in names]
    ax.set_xticks(centres, labels)
    ax.set_yticks(centres, labels)
    for tick_labels in (ax.get_xticklabels(), ax.get_yticklabels()):
        for name, text in zip(names, tick_labels):
            if name == "W_V":
                text.set_color(VALUES_COLOUR)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(True)
    if title:
        ax.set_title(title)
    if colorbar:
        cbar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.03, extend="both")
        cbar.set_label(r"$\log_{10} |H_{ij}|$ (clipped to the colour range)")
        if zeros.any():
            from matplotlib.patches import Patch

            ax.legend(
                handles=[
                    Patch(
                        facecolor=zero_colour,
                        edgecolor="0.3",
                        label=f"exact 0 ({100 * zero_fraction(H):.1f}% of entries)",
                    )
                ],
                loc="upper center",
                bbox_to_anchor=(0.5, -0.06),
                frameon=False,
                handlelength=1.2,
                borderaxespad=0.0,
            )
    return image


def hessian_figure(
    hessian: Mapping[str, Any],
    vmin: float,
    vmax: float,
    title: str | None = None,
    size: float = 4.6,
) -> Figure:
    """One-panel figure of a Hessian as returned by :func:`load_hessian`."""
    fig, ax = plt.subplots(figsize=(size * 1.15, size), layout="constrained")
    hessian_heatmap(ax, hessian["H"], hessian["offsets"], hessian["names"], vmin, vmax, title=title)
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
    stages = {"init": init, "trained": trained}

    fig = plt.figure(figsize=(10.0, 8.0), layout="constrained")
    if title:
        fig.suptitle(title, fontsize=10)
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


def landscape_curve(result: Mapping[str, Any]) -> dict[str, Any]:
    """The curve Figure 6 draws: the per-sample one, or ``result["batch"]`` when the result's
    ``granularity`` is ``"batch"``. Returns a dict with ``k``, ``D_mean``, ``D_binned_k``,
    ``D_binned``, ``slope``, ``intercept``, ``slope_ci95``, ``fit_k_min``, ``fit_k_max``,
    ``theorem7_bound_2L``, ``bound_holds``, ``granularity`` and ``label`` (a phrase for the
    legend and caption)."""
    res = _as_mapping(result)
    granularity = res.get("granularity", "sample")
    if granularity == "batch":
        if not res.get("batch"):
            raise KeyError("landscape result has granularity 'batch' but no 'batch' entry; rerun the landscape rule")
        out = dict(res["batch"])
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

    ``result`` is the output of :func:`transformer_hessian.landscape.analyse_landscape`
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
    k_lo, k_hi = float(cur["fit_k_min"]), float(cur["fit_k_max"])
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
