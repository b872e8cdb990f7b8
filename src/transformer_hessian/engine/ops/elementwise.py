"""Arithmetic with broadcasting (sums, differences, products, quotients of values or with numbers),
sign changes, selections with a fixed mask, sums and means over axes, adaptive average pooling."""

from __future__ import annotations

import math

import torch
from torch.fx import Node

from ..contract import LinearOp, Op, RowTerm, as_tangent, node_arg, rows_of, rule, shape_of, shared_row, sum_to, tadd

aten = torch.ops.aten


def _nodes(args) -> list:
    return [a for a in args if isinstance(a, Node)]


def _full(t: torch.Tensor, shape) -> torch.Tensor:
    """A tangent broadcast to ``(K, *shape)``."""
    t = as_tangent(t, shape)
    return t if tuple(t.shape[1:]) == tuple(shape) else t.expand(t.shape[0], *shape)


def _shared(shapes, out) -> tuple[int, ...]:
    """Indices of the inputs (of ``shapes``) that are one row shared by every row of ``out``."""
    return tuple(i for i, s in enumerate(shapes) if shared_row(s, out))


@rule(aten.add.Tensor, aten.sub.Tensor, aten.add.Scalar, aten.sub.Scalar, aten.rsub.Scalar, aten.rsub.Tensor)
class AddSub(LinearOp):
    """a + alpha b, a - alpha b, alpha b - a (``rsub``) with broadcasting; a number in place of a
    value shifts the output and drops out of every derivative."""

    def __init__(self, node):
        super().__init__(node)
        a, b = node.args[0], node.args[1]
        alpha = node_arg(node, 2, "alpha", 1)
        name = node.target.overloadpacket.__name__
        ca, cb = (-1.0, alpha) if name == "rsub" else (1.0, -alpha if name == "sub" else alpha)
        self.inputs = _nodes([a, b])
        self.coef = [c for v, c in ((a, ca), (b, cb)) if isinstance(v, Node)]
        self.shapes = [shape_of(v) for v in self.inputs]
        self.out = shape_of(node)
        self.row_params = _shared(self.shapes, self.out)

    row_local = True

    def row_terms(self, i, xs, ts, y, g, gt):
        """A shared addend: sum_n coef gt_n."""
        if gt is None:
            return []
        c = self.coef[i]
        return [RowTerm(None, rows_of(_full(gt * c if c != 1 else gt, self.out), True))]

    def apply(self, xs, batched):
        out = None
        for x, c in zip(xs, self.coef, strict=True):
            term = (
                (as_tangent(x, self.out) if batched else x) * c
                if c != 1
                else (as_tangent(x, self.out) if batched else x)
            )
            out = term if out is None else out + term
        if batched:
            return _full(out, self.out)
        return out.expand(self.out) if tuple(out.shape) != self.out else out

    def transpose(self, g, batched):
        return [sum_to(g * c if c != 1 else g, s, batched) for c, s in zip(self.coef, self.shapes, strict=True)]

    def tangent(self, xs, ts, y):
        """The sum of the inputs' tangents that are not zero (no zeros are made for the others)."""
        out = None
        for t, c in zip(ts, self.coef, strict=True):
            if t is not None:
                term = as_tangent(t, self.out) * c if c != 1 else as_tangent(t, self.out)
                out = term if out is None else out + term
        return None if out is None else _full(out, self.out)


@rule(aten.neg.default)
class Neg(LinearOp):
    """-x."""

    row_local = True

    def __init__(self, node):
        super().__init__(node)
        self.inputs = [node.args[0]]

    def apply(self, xs, batched):
        return -xs[0]

    def transpose(self, g, batched):
        return [-g]


@rule(aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar)
class MulDiv(Op):
    """a * b and a / b with broadcasting. With one of them a number or a value that does not
    depend on the parameters this is linear in the other; with both differentiated, the product's
    own curvature is g' terms across the two inputs (and for a quotient, 2 a / b^3 in b)."""

    def __init__(self, node):
        super().__init__(node)
        a, b = node.args[0], node.args[1]
        self.div = node.target.overloadpacket.__name__ == "div"
        if self.div and node.kwargs.get("rounding_mode") is not None:
            raise NotImplementedError("div with rounding_mode is not differentiable")
        self.a, self.b = a, b
        self.inputs = _nodes([a, b])
        self.out = shape_of(node)
        # a shared factor of a product (a norm's scale written by hand)
        self.row_params = () if self.div else _shared([shape_of(v) for v in self.inputs], self.out)

    row_local = True

    def row_terms(self, i, xs, ts, y, g, gt):
        """A shared factor b of a * b: sum_n gt_n a_n + g_n a'_n."""
        a, b = self._vals(xs)
        ta, tb = self._split(ts)
        first = i == 0 and isinstance(self.a, Node)
        other, t_other = (b, tb) if first else (a, ta)
        r = None if gt is None else gt * other
        if t_other is not None:
            r = tadd(r, g * as_tangent(t_other, self.out))
        return [] if r is None else [RowTerm(None, rows_of(_full(r, self.out), True))]

    def _vals(self, xs):
        it = iter(xs)
        a = next(it) if isinstance(self.a, Node) else self.a
        b = next(it) if isinstance(self.b, Node) else self.b
        return a, b

    def _split(self, seq):
        """(value for a, value for b) from a list over ``inputs`` (None for a number)."""
        it = iter(seq)
        return (next(it) if isinstance(self.a, Node) else None, next(it) if isinstance(self.b, Node) else None)

    def _shape(self, v):
        return shape_of(v) if isinstance(v, Node) else ()

    def tangent(self, xs, ts, y):
        a, b = self._vals(xs)
        ta, tb = self._split(ts)
        out = None
        if ta is not None:
            out = as_tangent(ta, self.out) * (1.0 / b if self.div else b)
        if tb is not None:
            tb = as_tangent(tb, self.out)
            out = tadd(out, -tb * (y / b) if self.div else a * tb)
        return None if out is None else _full(out, self.out)

    def adjoint(self, xs, y, g, need):
        a, b = self._vals(xs)
        out = []
        if isinstance(self.a, Node):
            out.append(sum_to(g / b if self.div else g * b, self._shape(self.a)))
        if isinstance(self.b, Node):
            out.append(sum_to(-g * y / b if self.div else g * a, self._shape(self.b)))
        return out

    def adjoint_tangent(self, xs, ts, y, g, gt, need):
        a, b = self._vals(xs)
        ta, tb = self._split(ts)
        ta = None if ta is None else as_tangent(ta, self.out)
        tb = None if tb is None else as_tangent(tb, self.out)
        out = []
        if isinstance(self.a, Node):
            if self.div:  # d/da = 1/b; d2/da db = -1/b^2
                r = tadd(None if gt is None else gt / b, None if tb is None else -(g / (b * b)) * tb)
            else:  # d/da = b; d2/da db = 1
                r = tadd(None if gt is None else gt * b, None if tb is None else g * tb)
            out.append(None if r is None else sum_to(_full(r, self.out), self._shape(self.a), True))
        if isinstance(self.b, Node):
            if self.div:  # d/db = -y/b; d2/db da = -1/b^2; d2/db^2 = 2 y / b^2
                r = tadd(None if gt is None else -gt * (y / b), None if ta is None else -(g / (b * b)) * ta)
                r = tadd(r, None if tb is None else (2.0 * g * y / (b * b)) * tb)
            else:
                r = tadd(None if gt is None else gt * a, None if ta is None else g * ta)
            out.append(None if r is None else sum_to(_full(r, self.out), self._shape(self.b), True))
        return out


@rule(aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.masked_fill.Scalar, aten.masked_fill.Tensor)
class Select(LinearOp):
    """``where(cond, a, b)`` (either branch may be a number) and ``masked_fill(x, mask, value)``
    with a condition that does not depend on the parameters: entries are taken from one input or
    are constants."""

    row_local = True

    def __init__(self, node):
        super().__init__(node)
        self.fill = node.target.overloadpacket.__name__ == "masked_fill"
        self.out = shape_of(node)
        if self.fill:
            self.inputs = [node.args[0]]
            self.index_nodes = [node.args[1]]
            self.shapes = [shape_of(node.args[0])]
        else:
            self.branches = [node.args[1], node.args[2]]
            self.inputs = _nodes(self.branches)
            self.index_nodes = [node.args[0]]
            self.shapes = [shape_of(v) for v in self.inputs]

    def bind(self, index: list) -> None:
        """The condition's value (evaluated once, before the sweeps)."""
        self.cond = index[0]

    def _masks(self):
        if self.fill:
            return [~self.cond]
        keep = [self.cond, ~self.cond]
        return [k for k, v in zip(keep, self.branches, strict=True) if isinstance(v, Node)]

    def apply(self, xs, batched):
        out = None
        for x, m in zip(xs, self._masks(), strict=True):
            x = as_tangent(x, self.out) if batched else x
            term = x * m.to(x.dtype)
            out = term if out is None else out + term
        return _full(out, self.out) if batched else out.expand(self.out)

    def transpose(self, g, batched):
        return [sum_to(g * m.to(g.dtype), s, batched) for m, s in zip(self._masks(), self.shapes, strict=True)]


@rule(aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default)
class Reduce(LinearOp):
    """Sums and means over axes (all axes without ``dim``)."""

    def __init__(self, node):
        super().__init__(node)
        self.inputs = [node.args[0]]
        self.shape_in = shape_of(node.args[0])
        n = len(self.shape_in)
        dims = node_arg(node, 1, "dim")
        dims = list(range(n)) if dims is None or dims == [] else ([dims] if isinstance(dims, int) else list(dims))
        self.dims = sorted(d % n for d in dims) if n else []
        self.keepdim = bool(node_arg(node, 2, "keepdim", False))
        self.mean = node.target.overloadpacket.__name__ == "mean"
        count = 1
        for d in self.dims:
            count *= self.shape_in[d]
        self.scale = 1.0 / count if self.mean else 1.0
        self.row_local = n >= 2 and self.dims == [n - 1] and self.keepdim

    def apply(self, xs, batched):
        x = xs[0]
        if not self.dims:
            return x * self.scale if self.scale != 1.0 else x
        out = x.sum(dim=[d + batched for d in self.dims], keepdim=self.keepdim)
        return out * self.scale if self.scale != 1.0 else out

    def transpose(self, g, batched):
        if not self.keepdim:
            for d in self.dims:
                g = g.unsqueeze(d + batched)
        shape = ((g.shape[0],) if batched else ()) + self.shape_in
        g = g.expand(shape)
        return [g * self.scale if self.scale != 1.0 else g]


@rule(aten.adaptive_avg_pool1d.default, aten.adaptive_avg_pool2d.default, aten._adaptive_avg_pool2d.default)
class AdaptiveAvgPool(LinearOp):
    """Adaptive average pooling of the last one or two axes to sizes that divide them (Swin's
    pooler, to 1): means over equal windows, each output entry the mean of its window."""

    def __init__(self, node):
        super().__init__(node)
        self.inputs = [node.args[0]]
        self.shape_in, self.shape_out = shape_of(node.args[0]), shape_of(node)
        k = 1 if node.target is aten.adaptive_avg_pool1d.default else 2
        self.lead, self.axes = self.shape_in[:-k], list(zip(self.shape_in[-k:], self.shape_out[-k:], strict=True))
        if any(n % m for n, m in self.axes):
            raise NotImplementedError(f"adaptive average pooling of {self.shape_in[-k:]} to {self.shape_out[-k:]}")
        self.windows = [w for n, m in self.axes for w in (m, n // m)]
        self.scale = 1.0 / math.prod(n // m for n, m in self.axes)

    def apply(self, xs, batched):
        x = xs[0]
        lead = tuple(x.shape[:1]) if batched else ()
        x = x.reshape(*lead, *self.lead, *self.windows)
        dims = [x.dim() - 1 - 2 * i for i in range(len(self.axes))]
        return x.sum(dims).reshape(*lead, *self.shape_out) * self.scale

    def transpose(self, g, batched):
        lead = tuple(g.shape[:1]) if batched else ()
        g = g.reshape(*lead, *self.lead, *[v for _, m in self.axes for v in (m, 1)])
        return [(g.expand(*lead, *self.lead, *self.windows) * self.scale).reshape(*lead, *self.shape_in)]
