"""Diagrams drawn by code with matplotlib patches (no data).

* :func:`draw_block_stack` - the post-norm Transformer block of the paper's Figure 1(b):
  Self-Attention -> LayerNorm -> FeedForward -> LayerNorm, with the two residual connections
  (Sec. 3 of arXiv 2510.16927: ``Y = LN(X + F(X))``, ``Z = LN(Y + FFN(Y))``).
"""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

__all__ = ["BLOCK_STACK", "draw_block_stack"]

#: Boxes of the block, bottom to top: (label, face colour).
BLOCK_STACK = (
    ("Self-Attention", "#C9DAF8"),
    ("LayerNorm", "#FCE5CD"),
    ("FeedForward", "#D9EAD3"),
    ("LayerNorm", "#FCE5CD"),
)


def _arrow(ax: Axes, start, end, **kw) -> FancyArrowPatch:
    style = {"arrowstyle": "-|>", "mutation_scale": 9, "linewidth": 1.0, "color": "0.15", "shrinkA": 0, "shrinkB": 0}
    style.update(kw)
    patch = FancyArrowPatch(start, end, **style)
    ax.add_patch(patch)
    return patch


def draw_block_stack(
    ax: Axes, title: str | None = "post-norm Transformer block", hessian_label: bool = True
) -> dict[str, list]:
    """Draw the block stack SA -> LN -> FFN -> LN with residual arrows on ``ax``.

    Coordinates are axis units ``[0, 1] x [0, 1]``; the axis frame and ticks are turned off.
    The input ``X`` enters at the bottom, ``Z`` leaves at the top; a residual arrow bypasses
    Self-Attention into the first LayerNorm (``X + F(X)``) and another bypasses FeedForward
    into the second (``Y + FFN(Y)``). With ``hessian_label`` the operator
    ``H^(k)(w*) = d^2 L_k / dw^2`` of the paper's panel (b) is written beside the stack.
    Returns the drawn artists: ``{"boxes": [...], "arrows": [...], "texts": [...]}``
    (4 boxes in ``BLOCK_STACK`` order, 5 flow arrows then 2 residual arrows).
    """
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_axis_off()
    boxes, arrows, texts = [], [], []
    x0, width, height = 0.27, 0.66, 0.1
    y_bottom, y_top = 0.14, 0.80
    step = (y_top - y_bottom - height) / (len(BLOCK_STACK) - 1)
    centres = []
    for i, (label, colour) in enumerate(BLOCK_STACK):
        y = y_bottom + i * step
        box = FancyBboxPatch(
            (x0, y),
            width,
            height,
            boxstyle="round,pad=0.01,rounding_size=0.02",
            facecolor=colour,
            edgecolor="0.2",
            linewidth=1.0,
        )
        ax.add_patch(box)
        boxes.append(box)
        texts.append(ax.text(x0 + width / 2, y + height / 2, label, ha="center", va="center", fontsize=7))
        centres.append(y)
    xc = x0 + width / 2
    texts.append(ax.text(xc, 0.02, "input X", ha="center", va="bottom", fontsize=7))
    arrows.append(_arrow(ax, (xc, 0.07), (xc, centres[0])))
    for i in range(len(centres) - 1):
        arrows.append(_arrow(ax, (xc, centres[i] + height), (xc, centres[i + 1])))
    arrows.append(_arrow(ax, (xc, centres[-1] + height), (xc, 0.95)))
    texts.append(ax.text(xc + 0.04, 0.93, "output Z", ha="left", va="center", fontsize=7))
    # residuals: from below a sub-layer to the LayerNorm after it, drawn on the left
    for src_box, dst_box, label in ((0, 1, "X"), (2, 3, "Y")):
        y_from = centres[src_box] - 0.035
        y_to = centres[dst_box] + height / 2
        x_side = x0 - 0.09
        ax.plot([xc, x_side, x_side], [y_from, y_from, y_to], color="#B45F06", linewidth=1.0, solid_joinstyle="miter")
        arrows.append(_arrow(ax, (x_side, y_to), (x0, y_to), color="#B45F06"))
        texts.append(
            ax.text(
                x_side - 0.01, (y_from + y_to) / 2, f"+ {label}", ha="right", va="center", fontsize=7, color="#B45F06"
            )
        )
    if hessian_label:
        texts.append(
            ax.text(
                0.995,
                0.5,
                "$\\mathbf{H}^{(k)}(\\mathbf{w}^*)$\n$= d^2 L_k / d\\mathbf{w}^2$",
                ha="right",
                va="center",
                fontsize=7,
            )
        )
    if title:
        ax.set_title(title)
    return {"boxes": boxes, "arrows": arrows, "texts": texts}
