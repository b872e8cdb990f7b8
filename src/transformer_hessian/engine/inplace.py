"""In-place operations on differentiated values (``x += y`` in a model's code, e.g. Falcon's
``mlp_output += attention_output`` or T5's ``scores += position_bias``), taken as their functional
form where that computes the same values.

``torch.export`` keeps such an operation as ATen's in-place overload (``aten.add_.Tensor``), which
writes into its first input. Its functional twin (``aten.add.Tensor``) gives the same output; the
two differ only for a later reader of the overwritten memory made before the write: the input
itself (the capture gives the model's later uses of it the in-place node instead), a view of it, or
the tensor it is a view of. Where there is one the model is refused (torch's schemas say which
outputs share memory with an input) rather than differentiate values the model never used.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import Node


def _writes_first(target) -> bool:
    """``target`` is an in-place ATen overload: it writes into its first argument."""
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.arguments:
        return False
    info = schema.arguments[0].alias_info
    return info is not None and info.is_write


def _shares_input(node: Node) -> bool:
    """The node's output may share memory with its first input (a view, a piece of a split, or an
    operation that may return its input, such as ``contiguous`` or ``to``)."""
    if node.op != "call_function" or not node.args or not isinstance(node.args[0], Node):
        return False
    if node.target is operator.getitem:
        return _shares_input(node.args[0])
    schema = getattr(node.target, "_schema", None)
    return bool(schema is not None and schema.returns and schema.returns[0].alias_info is not None)


def _memory_of(x: Node) -> set[Node]:
    """Every node whose value may share memory with ``x``'s: up to the tensor it is a view of, and
    down through every view of that."""
    root = x
    while _shares_input(root):
        root = root.args[0]
    seen, todo = set(), [root]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(u for u in n.users if _shares_input(u) and u.args[0] is n)
    return seen


def out_of_place(node: Node, order: dict[Node, int]) -> str | None:
    """Give an in-place ``node`` its functional target when nothing reads the memory it writes
    after it (``order``: position of each node in the graph); the reason it cannot otherwise.
    None for a node that is not in-place or was rewritten."""
    t = node.target
    if not _writes_first(t):
        return None
    base = t._schema.name.split("::")[-1].removesuffix("_")
    functional = getattr(getattr(torch.ops.aten, base, None), t._overloadname, None)
    if functional is None or _writes_first(functional):
        return "an in-place operation without a functional form"
    written = node.args[0]
    if not isinstance(written, Node):
        return "an in-place operation on a constant"
    here = order[node]
    for m in _memory_of(written):
        if m.op == "placeholder":
            return f"writes into the model's input, parameter or buffer {m.name!r}"
        if order[m] >= here:  # the write's own output, and values made after it, read the new memory
            continue
        late = [u for u in m.users if u is not node and order[u] > here]
        if late:
            via = "" if m is written else f" through {m.name!r}"
            return f"writes into {written.name!r}, whose memory {late[0].name!r} reads afterwards{via}"
    node.target = functional
    return None
