"""Figures 3 and 4: log-magnitude heat maps of a Hessian with its block structure, and their
shared colour ranges."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

from .style import GROUP_LABELS, HEATMAP_CMAP, HEATMAP_QUANTILES, VALUES_COLOUR, ZERO_COLOUR

__all__ = ["hessian_figure", "hessian_heatmap", "robust_log_range", "shared_log_range", "zero_fraction"]


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
      a swatch below the map gives their share of the entries ("no exact zeros" when there are none).
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
        # The share of exact zeros is always printed below the map (the caption promises it).
        from matplotlib.patches import Patch

        share = (
            f"exact 0 ({100 * zero_fraction(H):.1f}% of entries)"
            if zeros.any()
            else f"no exact zeros (0 of {H.size:,} entries)"
        )
        ax.legend(
            handles=[Patch(facecolor=zero_colour if zeros.any() else "none", edgecolor="0.3", label=share)],
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
