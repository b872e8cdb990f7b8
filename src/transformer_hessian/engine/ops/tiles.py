"""Tiling: ``repeat`` (the whole input tiled along each axis) and ``repeat_interleave`` with a
fixed count (each entry repeated in place: Funnel's upsampling). Both linear; the transposes sum
the copies."""

from __future__ import annotations

import torch

from ..contract import node_arg, rule
from .shape import _dim, _Unary

aten = torch.ops.aten


@rule(aten.repeat.default)
class Repeat(_Unary):
    """``x.repeat(r)``: the input tiled r_i times along each axis (DeBERTa's relative position
    embeddings); the transpose sums the tiles."""

    def __init__(self, node):
        super().__init__(node)
        self.reps = tuple(int(r) for r in node.args[1])
        self.padded = (1,) * (len(self.reps) - len(self.shape_in)) + self.shape_in

    def apply(self, xs, batched):
        x = xs[0]
        return x.reshape(x.shape[0], *self.padded).repeat(1, *self.reps) if batched else x.repeat(*self.reps)

    def transpose(self, g, batched):
        lead = tuple(g.shape[:1]) if batched else ()
        tiles = [v for r, n in zip(self.reps, self.padded, strict=True) for v in (r, n)]
        g = g.reshape(*lead, *tiles).sum(dim=tuple(len(lead) + 2 * i for i in range(len(self.reps))))
        return [g.reshape(*lead, *self.shape_in)]


@rule(aten.repeat_interleave.self_int)
class RepeatInterleave(_Unary):
    """``x.repeat_interleave(r, dim)`` with a fixed count r (every entry r times, in place; no
    ``dim``: of the flattened input): the transpose sums each entry's r copies."""

    def __init__(self, node):
        super().__init__(node)
        self.r = int(node_arg(node, 1, "repeats"))
        dim = node_arg(node, 2, "dim")
        self.flat = dim is None
        self.dim = 0 if self.flat else _dim(dim, len(self.shape_in))

    def apply(self, xs, batched):
        x = xs[0]
        if self.flat:
            x = x.reshape(x.shape[0], -1) if batched else x.reshape(-1)
        return x.repeat_interleave(self.r, dim=self.dim + int(batched))

    def transpose(self, g, batched):
        lead = tuple(g.shape[:1]) if batched else ()
        d = len(lead) + self.dim
        g = g.reshape(*g.shape[:d], g.shape[d] // self.r, self.r, *g.shape[d + 1 :]).sum(d + 1)
        return [g.reshape(*lead, *self.shape_in)]
