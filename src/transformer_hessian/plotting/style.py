"""The project's one look: seaborn theme, colours, group labels and the data set / model label
that names what a figure shows (every figure of the project uses these)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import seaborn as sns

from ..util.datanames import DATA_SETS, named

__all__ = [
    "DATASET_NAMES",
    "GROUP_COLOURS",
    "GROUP_LABELS",
    "COMPACT_RC",
    "HEATMAP_CMAP",
    "HEATMAP_QUANTILES",
    "STAGE_COLOURS",
    "VALUES_COLOUR",
    "ZERO_COLOUR",
    "contrast_ratio",
    "dataset_model_label",
    "run_label",
    "set_theme",
    "wrap_lines",
]

GROUP_LABELS = {"W_Q": "$W_Q$", "W_K": "$W_K$", "W_V": "$W_V$", "W_1": "$W_1$", "W_2": "$W_2$"}

#: The paper marks the Values in olive (Figures 3, 4 captions); so do the tick labels here.
VALUES_COLOUR = "olive"

#: Colour of exact zeros in the Hessian heatmaps (outside the colour map "rocket").
ZERO_COLOUR = "#5fa8d3"

#: Default quantiles of the nonzero log10 |H_ij| that set the heatmap colour range.
HEATMAP_QUANTILES = (0.005, 0.9995)

#: Names of the data sets in titles; digits is the offline stand-in.
DATASET_NAMES = {n: named(n) for n in DATA_SETS}

#: Colour map of the log-magnitude heatmaps.
HEATMAP_CMAP = "rocket"

#: One colour per parameter group of a block (Figures 7-11, the bounds and scaling figures): Paul
#: Tol's "muted" scheme, nine colours that stay distinct under the common colour-vision deficiencies
#: (https://personal.sron.nl/~pault/). Matrix groups and LayerNorm groups also differ in line style.
GROUP_COLOURS = {
    "W_Q": "#332288",  # indigo
    "W_K": "#88CCEE",  # cyan
    "W_V": "#44AA99",  # teal
    "W_1": "#117733",  # green
    "W_2": "#999933",  # olive
    "gamma1": "#DDCC77",  # sand
    "beta1": "#CC6677",  # rose
    "gamma2": "#882255",  # wine
    "beta2": "#AA4499",  # purple
}

#: Font sizes of the many-panel figures, drawn about 6 in wide so that, printed at the paper's
#: 5.5-in text width (``plotting.print_check``), no text falls below 6 pt. Use as
#: ``with plt.rc_context(COMPACT_RC):`` around the drawing (fonts are fixed when a text is made).
COMPACT_RC = {
    "axes.titlesize": 8,
    "axes.labelsize": 7.5,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.title_fontsize": 7,
    "figure.titlesize": 8.5,
    "font.size": 7.5,
}

#: Colour of each training stage in the bar charts.
STAGE_COLOURS = {"init": "#4C72B0", "trained": "#DD8452"}


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
    """``"8x8 digits (scikit-learn; stand-in for MNIST), ViT: 1 block, 16 tokens, d=16, ..."``
    (``"MNIST (stand-in for CIFAR-100), ..."`` when MNIST runs an experiment of CIFAR-100).

    ``metrics`` is a training ``metrics.json`` (keys ``dataset`` and ``model``); the text names
    the data set the model ran on and its sizes, so every figure says what it shows.
    """
    m = metrics["model"]
    name = named(str(metrics["dataset"]), stands_in_for)
    tokens = (int(m["image_size"]) // int(m["patch_size"])) ** 2
    blocks = f"{m['depth']} block" + ("s" if int(m["depth"]) != 1 else "")
    return f"{name}{sep}ViT, {blocks}, {tokens} tokens, d={m['width']}, d_K={m['d_k']}, d_ff={m['d_ff']}"


#: A run of the paper's CIFAR-100 experiments (probe, spectrum) names its data set so.
CIFAR_RUN_NAMES = {n: named(n, "CIFAR-100", stand_in="stand-in for the paper's {}") for n in DATA_SETS}


def run_label(result: Mapping[str, Any], metrics: Mapping[str, Any] | None = None) -> str:
    """``"<data set>; post-norm ViT, <depth> blocks, width <d>, ..."`` for the figures of the
    paper's CIFAR-100 experiments (probe, spectrum): ``result`` names the data set, the model
    part comes from a training ``metrics`` (when given)."""
    ds = CIFAR_RUN_NAMES.get(str(result.get("dataset")), str(result.get("dataset", "?")))
    if metrics and "model" in metrics:
        m = metrics["model"]
        return (
            f"{ds}; post-norm ViT, {m['depth']} block{'s' if m['depth'] != 1 else ''}, width {m['width']}, "
            f"d_ff {m['d_ff']}, {metrics.get('n_parameters', '?')} parameters"
        )
    return ds


def wrap_lines(text: str, width: int = 100) -> str:
    """``text`` with every line wrapped at ``width`` characters: a title line wider than its figure
    widens the saved file, so printing it at the text width would shrink every font."""
    import textwrap

    return "\n".join(textwrap.fill(line, width) for line in text.splitlines())
