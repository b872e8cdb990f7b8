"""Figure 2 of the paper (arXiv 2510.16927, `fig:transformer`): the ViT that was run, drawn by code.

:func:`draw_architecture` draws, bottom to top, the model of :class:`transformer_hessian.core.model.ViT`
from its sizes (a training ``metrics.json`` ``model`` entry or :meth:`ModelConfig.to_dict`):

    image (C x H x W) -> patch embedding (p x p patches, linear to d, + positional embedding)
    -> N x post-norm block [Self-Attention -> Add -> LayerNorm -> FFN -> Add -> LayerNorm]
    -> mean over the L tokens -> linear head (classes)

so the diagram always shows the sizes of the run (patch size, tokens L = (H/p)^2, width d,
d_K, d_ff, depth N, classes). :func:`architecture_figure` puts one panel per experiment side
by side (the Hessian and the loss-landscape models). Only matplotlib patches and text are
used; nothing is read from disk here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

__all__ = ["BOX_COLOURS", "architecture_figure", "draw_architecture", "merge_panels", "model_sizes"]

#: Fill colour of each kind of box.
BOX_COLOURS = {
    "input": "#e8e8e8",
    "embed": "#c6dbef",
    "attention": "#fdd0a2",
    "add": "#ffffff",
    "norm": "#d9f0d3",
    "ffn": "#dadaeb",
    "pool": "#c6dbef",
    "head": "#c6dbef",
}

_REQUIRED = ("image_size", "channels", "num_classes", "patch_size", "width", "depth", "d_k", "d_ff")


def model_sizes(model: Mapping[str, Any]) -> dict[str, int]:
    """The sizes the diagram prints: the keys of ``_REQUIRED`` plus ``tokens = (H / p)^2``.

    Raises ``KeyError`` naming a missing key and ``ValueError`` when ``p`` does not divide ``H``.
    """
    missing = [key for key in _REQUIRED if key not in model]
    if missing:
        raise KeyError(f"model sizes lack {missing}; pass a metrics.json 'model' entry")
    sizes = {key: int(model[key]) for key in _REQUIRED}
    if sizes["image_size"] % sizes["patch_size"]:
        raise ValueError(f"patch_size {sizes['patch_size']} does not divide image_size {sizes['image_size']}")
    sizes["tokens"] = (sizes["image_size"] // sizes["patch_size"]) ** 2
    return sizes


def _box(ax: Axes, x: float, y: float, w: float, h: float, text: str, kind: str, fontsize: float) -> FancyBboxPatch:
    patch = FancyBboxPatch(
        (x - w / 2, y - h / 2),
        w,
        h,
        boxstyle="round,pad=0.02,rounding_size=0.12",
        facecolor=BOX_COLOURS[kind],
        edgecolor="0.2",
        linewidth=0.8,
        zorder=3,
    )
    ax.add_patch(patch)
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, zorder=4)
    return patch


def _arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], **kw) -> FancyArrowPatch:
    style = dict(arrowstyle="-|>", mutation_scale=8, linewidth=0.9, color="0.15", zorder=2)
    style.update(kw)
    arrow = FancyArrowPatch(start, end, **style)
    ax.add_patch(arrow)
    return arrow


def _block_frame(ax: Axes, x: float, w: float, depth: int, fontsize: float) -> tuple[FancyBboxPatch, list[str]]:
    """The dashed frame around the repeated block, labelled ``<depth> x`` and "post-norm block";
    returns the frame and the two texts."""
    # the repeated block
    frame = FancyBboxPatch(
        (x - w / 2 - 0.35, 4.6),
        w + 1.55,
        9.75,
        boxstyle="round,pad=0.05,rounding_size=0.25",
        facecolor="none",
        edgecolor="0.35",
        linestyle="--",
        linewidth=1.0,
        zorder=1,
    )
    ax.add_patch(frame)
    depth_text = f"{depth} x"
    ax.text(x - w / 2 - 0.55, 9.6, depth_text, ha="right", va="center", fontsize=fontsize + 2, fontweight="bold")
    ax.text(
        x - w / 2 - 0.55,
        8.7,
        "post-norm\nblock",
        ha="right",
        va="top",
        fontsize=fontsize,
        style="italic",
        color="0.3",
    )
    return frame, [depth_text, "post-norm\nblock"]


def draw_architecture(
    ax: Axes, model: Mapping[str, Any], title: str | None = None, fontsize: float = 6.6
) -> dict[str, Any]:
    """Draw the post-norm ViT with the sizes of ``model`` on ``ax`` (bottom to top).

    ``model`` holds ``image_size, channels, num_classes, patch_size, width, depth, d_k, d_ff``
    (e.g. ``metrics.json["model"]``). Returns ``{"boxes": {name: patch}, "residuals": [two
    arrows], "sizes": model_sizes(model), "texts": [every string drawn]}``; box names, bottom
    to top: input, embed, attention, add1, norm1, ffn, add2, norm2, pool, head. The block is
    framed and labelled ``N x`` with ``N = depth``; the two residual arrows go from the
    block input to the first Add and from the first LayerNorm's output to the second Add.
    """
    s = model_sizes(model)
    L, d = s["tokens"], s["width"]
    ax.set_xlim(0, 10.5)
    ax.set_ylim(0.2, 19.2)
    ax.set_aspect("auto")
    ax.axis("off")
    x, w = 4.9, 7.2
    rows = [
        ("input", 1.0, f"image {s['channels']}x{s['image_size']}x{s['image_size']}", "input"),
        (
            "embed",
            3.0,
            f"patch embedding: {s['patch_size']}x{s['patch_size']} patches\n"
            f"linear to d={d}, + positional emb.\n-> L={L} tokens x d={d}",
            "embed",
        ),
        ("attention", 5.9, f"Self-Attention (1 head)\nW_Q, W_K: {d}x{s['d_k']},  W_V: {d}x{d}", "attention"),
        ("add1", 7.5, "Add", "add"),
        ("norm1", 8.9, "LayerNorm", "norm"),
        ("ffn", 10.6, f"FeedForward: ReLU\nW_1: {d}x{s['d_ff']},  W_2: {s['d_ff']}x{d}", "ffn"),
        ("add2", 12.2, "Add", "add"),
        ("norm2", 13.6, "LayerNorm", "norm"),
        ("pool", 16.5, f"mean over the L={L} tokens -> d={d}", "pool"),
        ("head", 18.4, f"linear head -> {s['num_classes']} class logits", "head"),
    ]
    boxes, texts = {}, []
    for name, y, text, kind in rows:
        height = 1.55 if "\n" in text and text.count("\n") > 1 else (1.2 if "\n" in text else 0.8)
        boxes[name] = _box(ax, x, y, w if kind not in ("add",) else 1.6, height, text, kind, fontsize)
        texts.append(text)
    names = [r[0] for r in rows]
    ys = {r[0]: r[1] for r in rows}
    heights = {n: boxes[n].get_height() for n in names}
    for lower, upper in zip(names[:-1], names[1:]):
        _arrow(ax, (x, ys[lower] + heights[lower] / 2 + 0.02), (x, ys[upper] - heights[upper] / 2 - 0.02))
    # residual connections (post-norm: the skip joins before each LayerNorm)
    xr = x + w / 2 + 0.5
    residuals = []
    for src_y, add in ((4.95, "add1"), (9.65, "add2")):
        ax.plot([x, xr, xr], [src_y, src_y, ys[add]], color="0.15", linewidth=0.9, zorder=2)
        residuals.append(_arrow(ax, (xr, ys[add]), (x + 0.82, ys[add])))
    frame, frame_texts = _block_frame(ax, x, w, s["depth"], fontsize)
    texts += frame_texts
    if title:
        ax.set_title(title, fontsize=fontsize + 1.5)
    return {"boxes": boxes, "residuals": residuals, "sizes": s, "texts": texts, "frame": frame}


def merge_panels(panels: Sequence[tuple[str, Mapping[str, Any]]]) -> list[tuple[str, Mapping[str, Any]]]:
    """One panel per distinct model: panels whose models are equal are drawn once, their titles
    joined line by line (each distinct line once, in order), e.g. both experiments' names."""
    merged: list[tuple[list[str], Mapping[str, Any]]] = []
    for title, model in panels:
        for lines, seen in merged:
            if dict(seen) == dict(model):
                lines += [line for line in title.splitlines() if line not in lines]
                break
        else:
            merged.append((title.splitlines(), model))
    return [("\n".join(lines), model) for lines, model in merged]


def architecture_figure(
    panels: Sequence[tuple[str, Mapping[str, Any]]], panel_size: tuple[float, float] = (2.75, 5.2)
) -> Figure:
    """Figure 2: one :func:`draw_architecture` panel per ``(title, model)`` pair, side by side; a
    model that several experiments use is drawn once with all their titles (:func:`merge_panels`)."""
    if not panels:
        raise ValueError("architecture_figure needs at least one (title, model) panel")
    panels = merge_panels(panels)
    fig, axes = plt.subplots(
        1, len(panels), figsize=(panel_size[0] * len(panels), panel_size[1]), layout="constrained", squeeze=False
    )
    for ax, (title, model) in zip(axes[0], panels):
        draw_architecture(ax, model, title=title)
    return fig
