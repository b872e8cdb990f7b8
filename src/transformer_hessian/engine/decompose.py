"""Torch's own losses in a callable ``loss=`` (``F.cross_entropy`` with ``ignore_index``,
``label_smoothing`` or probabilities as targets, ``F.nll_loss``, ``F.mse_loss``, ``F.l1_loss``,
``F.huber_loss``, ``F.smooth_l1_loss``, ``F.kl_div``, ``F.binary_cross_entropy_with_logits``), taken as
torch's own decompositions of them.

The capture records such a loss as one ATen operation (``aten.cross_entropy_loss``), which has no
rule. :func:`inline_losses` replaces the node by the graph torch's decomposition of it traces to on
the recorded shapes (``make_fx`` with ``torch._decomp``'s entries for these operations only): log-
softmax, gathers, sums, comparisons with the targets, each an operation with a rule or a constant of
the point (log-sigmoid's forward with its buffer becomes ``log_sigmoid``). The new nodes keep the loss's source line, so a refusal inside names it.
"""

from __future__ import annotations

import functools
import operator

import torch
from torch.fx import Node
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

aten = torch.ops.aten

#: the losses replaced by their decompositions, and the broadcast torch's losses start with
LOSSES = (
    aten.cross_entropy_loss,
    aten.nll_loss_nd,
    aten.nll_loss_forward,
    aten.nll_loss2d_forward,
    aten.mse_loss,
    aten.l1_loss,
    aten.huber_loss,
    aten.smooth_l1_loss,
    aten.kl_div,
    aten.binary_cross_entropy_with_logits,
    aten.broadcast_tensors,
)


@functools.cache
def _decompositions() -> dict:
    from torch._decomp import get_decompositions

    return get_decompositions(list(LOSSES))


def inline_losses(graph: torch.fx.Graph) -> None:
    """Replace each node of :data:`LOSSES` in ``graph`` by the nodes of its decomposition."""
    for node in list(graph.nodes):
        if node.op == "call_function" and getattr(node.target, "overloadpacket", None) in LOSSES:
            _inline(graph, node)


def _inline(graph: torch.fx.Graph, node: Node) -> None:
    flat, spec = pytree.tree_flatten((node.args, node.kwargs))
    where = [i for i, a in enumerate(flat) if isinstance(a, Node)]
    examples = [torch.zeros(flat[i].meta["val"].shape, dtype=flat[i].meta["val"].dtype) for i in where]

    def call(*tensors):
        vals = list(flat)
        for i, t in zip(where, tensors, strict=True):
            vals[i] = t
        args, kwargs = pytree.tree_unflatten(vals, spec)
        return node.target(*args, **kwargs)

    sub = make_fx(call, decomposition_table=_decompositions(), tracing_mode="fake")(*examples)
    buffer_read = any(
        n.target is operator.getitem and n.args[0].target is aten.log_sigmoid_forward.default and n.args[1] and n.users
        for n in sub.graph.nodes
    )
    if buffer_read or any(n.op == "get_attr" for n in sub.graph.nodes):
        return  # a tensor constant of its own, or log-sigmoid's buffer read: left as it is (refused, named)
    env: dict[Node, object] = {}
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    for ph, i in zip(placeholders, where, strict=True):
        env[ph] = flat[i]
    out = None
    with graph.inserting_before(node):
        for n in sub.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                out = pytree.tree_map(lambda a: env[a] if isinstance(a, Node) else a, n.args[0])
                break
            if n.target is aten.log_sigmoid_forward.default:  # (log sigmoid x, a buffer): the first is read
                new = graph.call_function(aten.log_sigmoid.default, (env[n.args[0]],))
                new.meta["val"] = n.meta["val"][0]
            elif n.target is operator.getitem and n.args[0].target is aten.log_sigmoid_forward.default:
                env[n] = env[n.args[0]]
                continue
            else:
                new = graph.node_copy(n, lambda a: env[a])
            for key in ("stack_trace", "nn_module_stack"):
                if key in node.meta:
                    new.meta[key] = node.meta[key]
            env[n] = new
    if isinstance(out, (list, tuple)):  # broadcast_tensors: its items are read by getitem nodes
        for user in list(node.users):
            user.replace_all_uses_with(out[user.args[1]])
            graph.erase_node(user)
    else:
        node.replace_all_uses_with(out)
    graph.erase_node(node)
