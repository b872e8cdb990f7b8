"""Inputs the library answers itself, naming the argument and the bound, before torch would fail
deeper down with a message that names neither: targets of the wrong kind or outside the logits'
classes, token ids outside an embedding table, integer inputs to a float model, a non-finite weight
that is not selected. The weights are checked before the capture; the targets and inputs right after
it (:func:`check_ranges`, also for each later batch bound to the graph), before any value is computed."""

from __future__ import annotations

import torch
from torch.fx import Node
from torch.utils import _pytree as pytree

from .ops.losses import IGNORE_INDEX, causal_lm, cross_entropy

aten = torch.ops.aten

#: losses whose targets are class indices (token ids), with IGNORE_INDEX not counted
CLASS_LOSSES = ("cross_entropy", "causal_lm")


def check_targets(loss, targets) -> None:
    """Class-index targets for ``cross_entropy`` / ``causal_lm``: an integer tensor whose entries
    are at least 0 or exactly ``-100`` (the upper bound waits for the logits, :func:`check_ranges`)."""
    if loss not in CLASS_LOSSES:
        return
    if not isinstance(targets, torch.Tensor):
        raise TypeError(f"targets: loss={loss!r} takes a tensor of class indices, got {type(targets).__name__}")
    if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
        raise TypeError(
            f"targets: loss={loss!r} takes integer class indices (token ids, {IGNORE_INDEX} not counted), "
            f"got {targets.dtype}; for probabilities or soft labels pass a callable loss"
        )
    if targets.device.type != "meta":
        check_classes(targets, None)


def check_classes(y: torch.Tensor, classes: int | None) -> None:
    """Class indices ``y`` in 0..classes-1 (any upper bound when None), or IGNORE_INDEX."""
    if not y.numel():
        return
    bad = y[(y < 0) & (y != IGNORE_INDEX)]
    if bad.numel():
        raise ValueError(
            f"targets: entry {int(bad[0])} is negative; class indices are 0 or more, or {IGNORE_INDEX} "
            "for a position not counted"
        )
    top = int(y.max())
    if classes is not None and top >= classes:
        raise ValueError(
            f"targets: class index {top} is outside the model's {classes} logits (0..{classes - 1}, "
            f"or {IGNORE_INDEX} for a position not counted)"
        )


def check_weights(named: dict, selected) -> None:
    """Every parameter the model holds is finite: a nan or inf in one that is not selected still
    makes the loss nan (named here, not as 'the loss is nan')."""
    chosen = set(selected)
    for name, p in named.items():
        if p.device.type != "meta" and p.is_floating_point() and not torch.isfinite(p).all():
            role = "" if name in chosen else " (not selected, but the loss reads it)"
            raise ValueError(f"params: {name!r} has non-finite entries (nan or inf){role}")


def call_leaves(args: tuple, kwargs: dict, targets, single: bool) -> tuple[list[str], list]:
    """The leaves of a model call with its targets, in the capture's placeholder order, and a name
    for each (``inputs`` when ``single``, the user's one tensor; ``inputs[1]``,
    ``inputs['input_ids']``, ``targets``)."""
    flat = pytree.tree_flatten_with_path(((args, kwargs, targets), {}))[0]
    names = []
    for path, _ in flat:
        keys = [getattr(k, "idx", getattr(k, "key", None)) for k in path]
        head, rest = keys[1], keys[2:]
        if head == 0 and single:
            rest = rest[1:]
        names.append(("targets" if head == 2 else "inputs") + "".join(f"[{k!r}]" for k in rest))
    return names, [x for _, x in flat]


#: operations whose inputs torch requires to share one dtype (elementwise ones promote instead)
_SAME_DTYPE = {
    aten.linear.default, aten.mm.default, aten.bmm.default, aten.matmul.default, aten.addmm.default,
    aten.baddbmm.default, aten.conv2d.default, aten.convolution.default, aten.layer_norm.default,
}  # fmt: skip


def check_integer_inputs(cap) -> None:
    """No integer input reaches a matrix product, convolution or norm of the float model as a value
    (token ids go to embedding lookups, where they are indices): torch would stop inside the first
    sweep with 'Long and Double'."""
    label = dict(zip(cap.user, cap.user_names, strict=False))
    for step in cap.steps:
        if step.node.target not in _SAME_DTYPE:
            continue
        for i in step.op.inputs:
            src = _through_views(i)
            x = cap.leaves.get(src) if src in label else None
            if isinstance(x, torch.Tensor) and not (x.is_floating_point() or x.is_complex()):
                raise ValueError(
                    f"{label[src]}: {x.dtype} values reach {step.node.target} of the {cap.dtype} model as "
                    f"numbers; pass {cap.dtype} inputs (token ids go to a model that embeds them)"
                )


#: operations that keep every entry of their input (a view of token ids before the lookup)
_VIEWS = {
    aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.clone.default, aten.alias.default,
    aten.contiguous.default, aten.unsqueeze.default, aten.squeeze.dim, aten.flatten.using_ints,
}  # fmt: skip


def _through_views(node):
    while isinstance(node, Node) and node.op == "call_function" and node.target in _VIEWS:
        node = node.args[0]
    return node


def check_ranges(cap) -> None:
    """Token ids of each user input that indexes an embedding table lie within its rows, and
    class-index targets below the logits' class count (``cap.user_names``: :func:`call_leaves`)."""
    label = dict(zip(cap.user, cap.user_names, strict=False))
    for node in cap.graph.nodes:
        if node.op != "call_function" or node.target is not aten.embedding.default:
            continue
        weight, ids = node.args[0], _through_views(node.args[1])
        if not (isinstance(ids, Node) and ids in label):
            continue
        rows = weight.meta["val"].shape[0]
        x = cap.leaves[ids]
        if x.numel() and (int(x.min()) < 0 or int(x.max()) >= rows):
            bad = int(x.min()) if int(x.min()) < 0 else int(x.max())
            raise ValueError(f"{label[ids]}: id {bad} is outside the embedding's {rows} rows (0..{rows - 1})")
    name = {causal_lm: "causal_lm", cross_entropy: "cross_entropy"}.get(cap.loss.target)
    if cap.targets is None or name is None:
        return
    y = cap.leaves[cap.targets]
    check_targets(name, y)
    check_classes(y, cap.loss.args[0].meta["val"].shape[-1])
