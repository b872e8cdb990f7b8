"""Operations taken as the operations they are made of, each of which has a rule.

- Torch's own losses in a callable ``loss=`` (``F.cross_entropy`` with ``ignore_index``,
  ``label_smoothing`` or probabilities as targets, ``F.nll_loss``, ``F.mse_loss``, ``F.l1_loss``,
  ``F.huber_loss``, ``F.smooth_l1_loss``, ``F.kl_div``, ``F.binary_cross_entropy_with_logits``) and
  ``einsum``: torch's own decompositions (``make_fx`` with ``torch._decomp``'s entries for these
  operations only): log-softmax, gathers, sums, comparisons with the targets; permutes, views and
  batched products (log-sigmoid's forward with its buffer becomes ``log_sigmoid``).
- ``group_norm`` and ``_weight_norm`` (the ``weight_norm`` parametrisation): this module's own,
  in operations the rule table keeps whole (``make_fx`` before dispatch): a group norm is a layer
  norm without affine of each (sample, group)'s entries, then the per-channel weight and bias; a
  weight norm is v g / ||v||, the norm over every axis but ``dim`` (the whole tensor when -1).

The capture records each as one ATen operation, which has no rule. :func:`inline_decompositions`
replaces the node by the graph its decomposition traces to on the recorded shapes. The new nodes
keep the operation's source line, so a refusal inside names it.
"""

from __future__ import annotations

import functools
import math
import operator

import torch
from torch.fx import Node
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

aten = torch.ops.aten

#: replaced by torch's decompositions: the losses, the broadcast torch's losses start with, einsum
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
    aten.einsum,
)


def _group_norm(x, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    N, C, G = x.shape[0], x.shape[1], num_groups
    per = math.prod(x.shape[1:]) // G
    y = aten.layer_norm.default(x.reshape(N, G, per), [per], None, None, eps).reshape(x.shape)
    shape = (C,) + (1,) * (x.dim() - 2)
    if weight is not None:
        y = y * weight.reshape(shape)
    return y if bias is None else y + bias.reshape(shape)


def _weight_norm(v, g, dim=0):
    axes = [a for a in range(v.dim()) if a != dim % v.dim()] if dim != -1 else list(range(v.dim()))
    return v * (g / (v * v).sum(dim=axes, keepdim=True).sqrt())


#: replaced by this module's own decompositions (traced before dispatch, so that the operations
#: the rule table keeps whole, such as layer_norm, stay whole)
OWN = {aten.group_norm.default: _group_norm, aten._weight_norm.default: _weight_norm}


@functools.cache
def _decompositions() -> dict:
    from torch._decomp import get_decompositions

    return get_decompositions(list(LOSSES))


def inline_decompositions(graph: torch.fx.Graph) -> None:
    """Replace each node of :data:`LOSSES` and :data:`OWN` in ``graph`` by the nodes of its
    decomposition."""
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in OWN:
            _inline(graph, node, OWN[node.target])
        elif getattr(node.target, "overloadpacket", None) in LOSSES:
            _inline(graph, node)


def _inline(graph: torch.fx.Graph, node: Node, own=None) -> None:
    flat, spec = pytree.tree_flatten((node.args, node.kwargs))
    where = [i for i, a in enumerate(flat) if isinstance(a, Node)]
    examples = [torch.zeros(flat[i].meta["val"].shape, dtype=flat[i].meta["val"].dtype) for i in where]

    def call(*tensors):
        vals = list(flat)
        for i, t in zip(where, tensors, strict=True):
            vals[i] = t
        args, kwargs = pytree.tree_unflatten(vals, spec)
        return (own or node.target)(*args, **kwargs)

    table = {} if own else _decompositions()
    sub = make_fx(call, decomposition_table=table, tracing_mode="fake", pre_dispatch=own is not None)(*examples)
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
