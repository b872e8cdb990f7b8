"""The graph of a torch encoder layer / stack as curvature-propagation operations, and the loss.

:class:`Tape` records the operations of one chunk of samples with their values and forward
tangents; :meth:`Tape.backward` runs the adjoints and their tangents back through them, each
operation adding its parameters' Hessian columns. :func:`chunk_hessian` is one chunk's
contribution to the Hessian of the (batch-mean) loss.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..engine.contract import tadd
from .attention import SelfAttention
from .ops import Activation, Add, Hess, LayerNorm, Linear, MeanTokens, Slot, op_slots


class Tape:
    """Values and tangents of the nodes of one forward sweep, and the operations that made them."""

    def __init__(self):
        self.v: list = []
        self.t: list = []
        self.ops: list = []

    def leaf(self, v: torch.Tensor, t: torch.Tensor | None = None) -> int:
        """A new node; its id."""
        self.v.append(v)
        self.t.append(t)
        return len(self.v) - 1

    def apply(self, op, *ids: int) -> int:
        """Run ``op`` forward on the nodes ``ids``; the id of its output node."""
        args = [a for i in ids for a in (self.v[i], self.t[i])]
        v, t = op.forward(*args)
        out = self.leaf(v, t)
        self.ops.append((op, ids, out))
        return out

    def backward(self, out: int, g: torch.Tensor, gt: torch.Tensor | None) -> None:
        """Adjoints and their tangents from node ``out`` back to the leaves (the ops add H's columns).

        The sweep stops at the first operation (in graph order) that owns a seeded parameter: the
        operations before it own only parameters that come earlier in the graph, whose Hessian
        columns against the seeded tangents are the transposed rows of an earlier sweep
        (:func:`.api.exact_hessian` fills them in), and nothing after it depends on them."""
        self.v = self.t = None  # the ops keep what their backward needs
        first = next((i for i, (op, _, _) in enumerate(self.ops) if any(s.seed is not None for s in op_slots(op))), 0)
        adj = {out: (g, gt)}
        for k in range(len(self.ops) - 1, first - 1, -1):
            op, ids, oid = self.ops[k]
            if oid not in adj:
                continue
            g, gt = adj.pop(oid)
            # the first operation's inputs come from before it: no later operation reads their adjoints
            back = op.backward(g, gt, input_tangent=False) if k == first and op_slots(op) else op.backward(g, gt)
            for i, (gi, gti) in zip(ids, back, strict=True):
                if i in adj:
                    g0, gt0 = adj[i]
                    adj[i] = (g0 + gi, tadd(gt0, gti))
                else:
                    adj[i] = (gi, gti)
        self.ops = []

    def row_local_weights(self) -> dict[int, list[tuple[int, int, str]]]:
        """id(slot) -> the ranges (a0, a1, kind) of rows of a Linear weight that can be swept factored
        (:class:`.ops.Hess`, ``factored=kind``): all rows of the weights after the last operation that
        mixes rows (attention, the token mean), from which everything to the loss is row by row; and,
        when that last operation is an attention, its in_proj's W_q rows (the query side is row by
        row), its W_v rows head by head (o' = A v' is A x row-scaled) and its W_k rows head by head
        (o' is q[t, a] times a tangent of column c, "keys"); :func:`.attention.add_mixed_columns` adds
        the columns whose adjoint tangents are not row by row."""
        last = max((i for i, (op, _, _) in enumerate(self.ops) if getattr(op, "mixes_rows", False)), default=-1)
        out = {
            id(op.w): [(0, op.w.value.shape[0], "rows")] for op, _, _ in self.ops[last + 1 :] if isinstance(op, Linear)
        }
        if last >= 0 and isinstance(self.ops[last][0], SelfAttention):
            w, nh = self.ops[last][0].source.w, self.ops[last][0].h
            d = w.value.shape[1]
            heads = [(i * d // nh, (i + 1) * d // nh) for i in range(nh)]
            out[id(w)] = [(0, d, "rows")] + [(d + a, d + b, "keys") for a, b in heads]
            out[id(w)] += [(2 * d + a, 2 * d + b, "rows") for a, b in heads]
        return out

    def ranks(self) -> dict[int, int]:
        """id(slot) -> the index of the operation that owns it, in graph order."""
        return {id(s): i for i, (op, _, _) in enumerate(self.ops) for s in op_slots(op)}


def _slot(slots: dict, t: torch.Tensor | None) -> Slot | None:
    return None if t is None else slots[id(t)]


def _self_attention(tape: Tape, hess: Hess, slots: dict, mha, x: int, mask) -> int:
    in_proj = Linear(hess, _slot(slots, mha.in_proj_weight), _slot(slots, mha.in_proj_bias))
    m = tape.apply(SelfAttention(mask, mha.num_heads, in_proj), tape.apply(in_proj, x))
    out = mha.out_proj
    return tape.apply(Linear(hess, _slot(slots, out.weight), _slot(slots, out.bias)), m)


def _ffn(tape: Tape, hess: Hess, slots: dict, layer, kind: str, x: int) -> int:
    lin1, lin2 = layer.linear1, layer.linear2
    h = tape.apply(Linear(hess, _slot(slots, lin1.weight), _slot(slots, lin1.bias)), x)
    a = tape.apply(Activation(kind), h)
    return tape.apply(Linear(hess, _slot(slots, lin2.weight), _slot(slots, lin2.bias)), a)


def _norm(hess: Hess, slots: dict, ln) -> LayerNorm:
    return LayerNorm(hess, _slot(slots, ln.weight), _slot(slots, getattr(ln, "bias", None)), ln.eps)


def encoder_layer(tape: Tape, hess: Hess, slots: dict, layer, kind: str, x: int, mask) -> int:
    """One ``nn.TransformerEncoderLayer`` (dropout off) on node x; ``kind`` is "relu" or "gelu"."""
    if layer.norm_first:
        h = tape.apply(_norm(hess, slots, layer.norm1), x)
        x = tape.apply(Add(), x, _self_attention(tape, hess, slots, layer.self_attn, h, mask))
        h = tape.apply(_norm(hess, slots, layer.norm2), x)
        return tape.apply(Add(), x, _ffn(tape, hess, slots, layer, kind, h))
    x = tape.apply(
        _norm(hess, slots, layer.norm1),
        tape.apply(Add(), x, _self_attention(tape, hess, slots, layer.self_attn, x, mask)),
    )
    return tape.apply(_norm(hess, slots, layer.norm2), tape.apply(Add(), x, _ffn(tape, hess, slots, layer, kind, x)))


def forward_sweep(spec, hess: Hess, slots: dict, x: torch.Tensor) -> tuple[Tape, int]:
    """The forward sweep of the chunk ``x``: the tape and the node the loss reads (the encoder's
    output for MSE, the head's logits on the token mean for cross-entropy)."""
    tape = Tape()
    node = tape.leaf(x)
    for layer, kind in zip(spec.layers, spec.kinds, strict=True):
        node = encoder_layer(tape, hess, slots, layer, kind, node, spec.mask)
    if spec.final_norm is not None:
        node = tape.apply(_norm(hess, slots, spec.final_norm), node)
    if spec.loss != "mse":
        head = spec.head
        node = tape.apply(
            Linear(hess, _slot(slots, head.weight), _slot(slots, head.bias)),
            tape.apply(MeanTokens(mixes_rows=not spec.pooled_split), node),
        )
    return tape, node


def graph_ranks(spec, hess: Hess, slots: dict, x: torch.Tensor) -> tuple[dict[int, int], dict[int, list]]:
    """id(slot) -> position of its operation in the graph, and id(slot) -> the ranges of rows of a
    weight that can be swept factored (:meth:`Tape.row_local_weights`), from a values-only sweep of
    ``x`` (no seeds)."""
    tape = forward_sweep(spec, hess, slots, x)[0]
    return tape.ranks(), tape.row_local_weights()


def chunk_hessian(spec, hess: Hess, slots: dict, x: torch.Tensor, targets: torch.Tensor) -> None:
    """Add the chunk's samples' share of the Hessian of the full batch's loss to ``hess``.

    ``spec`` (see :mod:`.api`) names the layers, their activations, the final norm, the mask,
    the loss and its normaliser (the full batch's, so chunks add up).
    """
    tape, node = forward_sweep(spec, hess, slots, x)
    out, ot = tape.v[node], tape.t[node]
    if spec.loss == "mse":
        g = (out - targets) * (2.0 / spec.count)
        gt = None if ot is None else ot * (2.0 / spec.count)
    else:  # out are the logits
        p = torch.softmax(out, -1)
        g = (p - F.one_hot(targets.long(), out.shape[-1]).to(p.dtype)) / spec.count
        gt = None if ot is None else (p * ot - p * (p * ot).sum(-1, keepdim=True)) / spec.count
        # a factored sweep through the token mean (pooled_split): its logit tangents are not its rows'
        # (the mean sums rows), and the loss's own curvature enters those rows as pooled's J^T Lambda J
        gt = None if spec.pooled_split and hess.factored else gt
    tape.backward(node, g, gt)
