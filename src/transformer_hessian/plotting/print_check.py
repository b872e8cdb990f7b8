r"""Is a figure readable when printed? Text that overlaps other text, fonts below 6 pt at the
paper's column width, and legends that cover data.

The paper uses the NeurIPS template (``neurips_2024``, one column): its ``\textwidth`` is
5.5 in. A figure included at the column width is scaled by ``PRINT_WIDTH_IN / saved width``
(the saved width is the ``savefig.bbox: tight`` box of the theme), so a font of ``s`` points
prints at ``s * PRINT_WIDTH_IN / saved width`` points. :func:`text_problems` lists every
problem of one figure in words; ``tests/plotting/test_figure_text.py`` runs it on every figure of the
registry. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import Collection
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.text import Text

__all__ = [
    "MIN_FONT_PT",
    "PRINT_WIDTH_IN",
    "PrintedText",
    "legend_problems",
    "printed_scale",
    "printed_texts",
    "saved_width_in",
    "text_problems",
]

#: ``\textwidth`` of the paper's template (NeurIPS 2024, single column), in inches.
PRINT_WIDTH_IN = 5.5
#: Smallest font a printed figure may use (points, at ``PRINT_WIDTH_IN``).
MIN_FONT_PT = 6.0
#: Two text boxes that share less than this (pixels, in both directions) do not count as overlapping.
_TOLERANCE_PX = 0.5


@dataclass(frozen=True)
class PrintedText:
    """One visible text of a drawn figure: the artist, its box (display pixels) and where it sits."""

    text: Text
    bbox: object  # matplotlib.transforms.Bbox
    where: str

    @property
    def string(self) -> str:
        """The text as drawn."""
        return self.text.get_text()


def _renderer(fig: Figure):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def saved_width_in(fig: Figure, renderer=None) -> float:
    """Width (inches) of the saved file: the tight box plus padding when the theme crops, else the figure."""
    renderer = renderer or _renderer(fig)
    if plt.rcParams["savefig.bbox"] == "tight":
        return float(fig.get_tightbbox(renderer).padded(plt.rcParams["savefig.pad_inches"]).width)
    return float(fig.get_figwidth())


def printed_scale(fig: Figure, renderer=None, width_in: float = PRINT_WIDTH_IN) -> float:
    """Factor by which the figure's fonts change when the saved file is printed ``width_in`` wide."""
    return width_in / saved_width_in(fig, renderer)


def _where(text: Text, legend_of: dict[int, Legend]) -> str:
    leg = legend_of.get(id(text))
    ax = text.axes
    name = ""
    if ax is not None:
        name = ax.get_title() or ax.get_label() or ""
        name = f"axes {name!r}"
    if leg is not None:
        return f"legend of {name or 'the figure'}"
    return name or "figure"


def printed_texts(fig: Figure, renderer=None) -> list[PrintedText]:
    """Every visible, non-empty text of ``fig`` as drawn: titles, labels, tick labels in view
    (major and minor), annotations, legend texts, colour-bar labels, suptitles."""
    renderer = renderer or _renderer(fig)
    tick_texts: set[int] = set()
    in_view: list[Text] = []
    for ax in fig.get_axes():
        for axis in (ax.xaxis, ax.yaxis):
            for tick in (*axis.majorTicks, *axis.minorTicks):
                tick_texts.update((id(tick.label1), id(tick.label2)))
            if not (ax.axison and ax.get_visible() and axis.get_visible()):
                continue  # ``ax.axis("off")`` hides the tick labels
            for tick in (*axis._update_ticks(),):  # the ticks drawn: inside the view interval
                for label in (tick.label1, tick.label2):
                    if label.get_visible() and tick.get_visible():
                        in_view.append(label)
    legend_of: dict[int, Legend] = {}
    for leg in fig.findobj(Legend):
        for t in (*leg.get_texts(), leg.get_title()):
            legend_of[id(t)] = leg
    out: list[PrintedText] = []
    seen: set[int] = set()
    candidates = [t for t in fig.findobj(Text) if id(t) not in tick_texts] + in_view
    for t in candidates:
        if id(t) in seen:
            continue
        seen.add(id(t))
        if not t.get_text().strip() or not t.get_visible():
            continue
        leg = legend_of.get(id(t))
        if leg is not None and not leg.get_visible():
            continue
        if t.axes is not None and not t.axes.get_visible():
            continue
        bbox = t.get_window_extent(renderer)
        if bbox.width <= 0 or bbox.height <= 0:
            continue
        out.append(PrintedText(t, bbox, _where(t, legend_of)))
    return out


def _overlap(a, b) -> bool:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w > _TOLERANCE_PX and h > _TOLERANCE_PX


def legend_problems(fig: Figure, renderer=None) -> list[str]:
    """Legends drawn inside an axes that cover a data point of a line or marker of that axes."""
    renderer = renderer or _renderer(fig)
    problems = []
    for ax in fig.get_axes():
        leg = ax.get_legend()
        if leg is None or not leg.get_visible():
            continue
        box = leg.get_window_extent(renderer)
        if not ax.get_window_extent(renderer).overlaps(box):
            continue  # outside the axes
        pts = []
        for art in ax.get_children():
            if not art.get_visible() or art is leg:
                continue
            if isinstance(art, Line2D):
                xy = np.column_stack(art.get_data()).astype(float)
                pts.append(art.get_transform().transform(xy))
            elif isinstance(art, Collection) and art.get_offsets() is not None and len(art.get_offsets()):
                pts.append(art.get_offset_transform().transform(np.asarray(art.get_offsets(), dtype=float)))
        if not pts:
            continue
        xy = np.concatenate(pts)
        xy = xy[np.isfinite(xy).all(axis=1)]
        axbox = ax.get_window_extent(renderer)
        inside_ax = (xy[:, 0] >= axbox.x0) & (xy[:, 0] <= axbox.x1) & (xy[:, 1] >= axbox.y0) & (xy[:, 1] <= axbox.y1)
        xy = xy[inside_ax]
        covered = (xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0) & (xy[:, 1] < box.y1)
        if covered.any():
            problems.append(
                f"the legend of axes {ax.get_title()!r} covers {int(covered.sum())} of its {len(xy)} data points"
            )
    return problems


def text_problems(
    fig: Figure,
    width_in: float = PRINT_WIDTH_IN,
    min_pt: float = MIN_FONT_PT,
    legends: bool = True,
) -> list[str]:
    """Problems of ``fig`` printed ``width_in`` wide, in words (empty: none).

    * a font below ``min_pt`` points at the printed size (``fontsize * printed_scale``);
    * two texts whose boxes overlap (tick labels included; a text is never compared with itself);
    * a text that reaches outside the saved area;
    * with ``legends``: a legend inside an axes that covers data points (:func:`legend_problems`).
    """
    renderer = _renderer(fig)
    scale = printed_scale(fig, renderer, width_in)
    texts = printed_texts(fig, renderer)
    problems = []
    for t in texts:
        printed = t.text.get_fontsize() * scale
        if printed < min_pt - 1e-9:
            problems.append(
                f"{t.string[:40]!r} ({t.where}): {t.text.get_fontsize():.3g} pt prints at {printed:.2f} pt "
                f"< {min_pt} pt ({saved_width_in(fig, renderer):.2f} in wide, printed at {width_in} in)"
            )
    for i, a in enumerate(texts):
        for b in texts[i + 1 :]:
            if _overlap(a.bbox, b.bbox):
                problems.append(f"{a.string[:40]!r} ({a.where}) overlaps {b.string[:40]!r} ({b.where})")
    if legends:
        problems += legend_problems(fig, renderer)
    return problems
