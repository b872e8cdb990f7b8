"""Writing figures: :func:`save_figure` (PDF and PNG, atomically, reproducible bytes) and
:func:`publish` (save, show the saved PNG in the notebook, close)."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ..util.files import atomic_path

__all__ = ["publish", "save_figure"]

_SAVE_FORMATS = ("pdf", "png")


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
