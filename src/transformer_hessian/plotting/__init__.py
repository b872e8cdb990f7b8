"""One seaborn theme and the figure helpers behind the paper's Figures 3-6, one module per concept.

The notebooks in ``notebooks/`` only load results and call these helpers, so every figure
of the project shares one look and the drawing code is tested here (``tests/plotting/test_plotting.py``).

* :mod:`.style` - :func:`set_theme` (seaborn "paper" context, "ticks" style, DejaVu Sans, fixed
  dpi), the colours and group labels, :func:`dataset_model_label`, :func:`run_label`, :func:`contrast_ratio`.
* :mod:`.save` - :func:`save_figure` (``<path>.pdf`` and ``<path>.png`` atomically), :func:`publish`.
* :mod:`.hessian_maps` - :func:`hessian_heatmap` / :func:`hessian_figure` /
  :func:`shared_log_range` / :func:`robust_log_range` - Figures 3, 4.
* :mod:`.norms` - :func:`norms_figure` - Figure 5.
* :func:`load_hessian`, :func:`load_json` - re-exported from :mod:`transformer_hessian.util.io`, which
  owns every result format (kept here so that ``plotting.load_json`` in notebooks keeps working).

Everything is re-exported here, so ``from transformer_hessian import plotting`` and
``plotting.<name>`` work as before the split; nothing here imports torch.

The helpers create figures through :mod:`matplotlib.pyplot` so that Jupyter's inline backend
shows them; the caller closes them (``plt.close(fig)``) when drawing many in one process.
"""

from __future__ import annotations

from ..util.io import load_hessian, load_json
from .hessian_maps import hessian_figure, hessian_heatmap, robust_log_range, shared_log_range, zero_fraction
from .inputs import as_mapping
from .norms import norms_figure
from .save import publish, save_figure
from .style import (
    COMPACT_RC,
    DATASET_NAMES,
    GROUP_COLOURS,
    GROUP_LABELS,
    HEATMAP_CMAP,
    HEATMAP_QUANTILES,
    STAGE_COLOURS,
    VALUES_COLOUR,
    ZERO_COLOUR,
    contrast_ratio,
    dataset_model_label,
    run_label,
    set_theme,
)

__all__ = [
    "COMPACT_RC",
    "DATASET_NAMES",
    "GROUP_COLOURS",
    "GROUP_LABELS",
    "HEATMAP_CMAP",
    "HEATMAP_QUANTILES",
    "STAGE_COLOURS",
    "VALUES_COLOUR",
    "ZERO_COLOUR",
    "as_mapping",
    "contrast_ratio",
    "dataset_model_label",
    "hessian_figure",
    "hessian_heatmap",
    "load_hessian",
    "load_json",
    "norms_figure",
    "publish",
    "robust_log_range",
    "run_label",
    "save_figure",
    "set_theme",
    "shared_log_range",
    "zero_fraction",
]
