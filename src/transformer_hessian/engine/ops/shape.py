"""Shape operations: views, reshapes, transposes, expansions, tilings (``repeat``), paddings,
rolls, bilinear resizing, slices, concatenations, splits, gathers. Each is linear in its input (:class:`.contract.LinearOp`): the tangent is the same
operation on a leading axis of K tangents, the adjoint its transpose (docs/theory.md, "Operations
of any model": shape operations)."""

from __future__ import annotations

import torch

from ..contract import LinearOp, Selection, node_arg, rule, shape_of, sum_to

aten = torch.ops.aten


def _dim(d: int, n: int) -> int:
    return d % n if n else 0


class _Unary(LinearOp):
    """A shape operation of one input: its node and the recorded shapes of input and output."""

    def __init__(self, node):
        super().__init__(node)
        self.inputs = [node.args[0]]
        self.shape_in, self.shape_out = shape_of(node.args[0]), shape_of(node)


@rule(
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.flatten.using_ints,
    aten.unflatten.int,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.squeeze.default,
    aten.unsqueeze.default,
    aten.view_as.default,
    aten.reshape_as.default,
)
class Reshape(_Unary):
    """Any operation that keeps the entries in order and changes only the shape (row-local when
    the last axis stays: rows keep their order)."""

    def __init__(self, node):
        super().__init__(node)
        i, o = self.shape_in, self.shape_out
        self.row_local = bool(i) and bool(o) and i[-1] == o[-1]

    def apply(self, xs, batched):
        x = xs[0]
        return x.reshape(x.shape[0], *self.shape_out) if batched else x.reshape(self.shape_out)

    def transpose(self, g, batched):
        return [g.reshape(g.shape[0], *self.shape_in) if batched else g.reshape(self.shape_in)]


@rule(
    aten.contiguous.default,
    aten.clone.default,
    aten.alias.default,
    aten.lift_fresh_copy.default,
    aten._to_copy.default,
    aten.to.dtype,
    aten.to.dtype_layout,
    aten.to.device,
    aten.to.other,
    aten.type_as.default,
    aten.dropout.default,
    aten.feature_dropout.default,
)
class Identity(LinearOp):
    """Copies, layout changes, casts and dropout in evaluation mode: the identity (dropout that is
    on is refused); a floating-point cast of a differentiated value keeps the Hessian's precision
    (:meth:`forward`)."""

    row_local = True

    def __init__(self, node):
        super().__init__(node)
        self.inputs = [node.args[0]]
        if node.target in (aten.dropout.default, aten.feature_dropout.default):
            p, train = node_arg(node, 1, "p"), node_arg(node, 2, "train", True)
            if train and p > 0:
                raise NotImplementedError(f"p={p} in training mode: call model.eval()")

    def forward(self, xs):
        x = xs[0]
        val = self.node.meta.get("val")
        dtype = getattr(val, "dtype", x.dtype)
        if dtype != x.dtype and not (x.is_floating_point() and dtype.is_floating_point and _lower(dtype, x.dtype)):
            x = x.to(dtype)
        return x.contiguous()

    def apply(self, xs, batched):
        return xs[0]

    def transpose(self, g, batched):
        return [g]


def _lower(a: torch.dtype, b: torch.dtype) -> bool:
    """Whether floating dtype a has less precision than b."""
    return torch.finfo(a).bits < torch.finfo(b).bits


@rule(aten.transpose.int, aten.t.default, aten.permute.default, aten.swapaxes.default, aten.numpy_T.default)
class Permute(LinearOp):
    """A permutation of the axes."""

    def __init__(self, node):
        super().__init__(node)
        self.inputs = [node.args[0]]
        n = len(shape_of(node.args[0]))
        perm = list(range(n))
        t = node.target
        if t is aten.permute.default:
            perm = [_dim(d, n) for d in node.args[1]]
        elif t in (aten.t.default, aten.numpy_T.default):
            perm = perm[::-1]
        else:
            a, b = _dim(node.args[1], n), _dim(node.args[2], n)
            perm[a], perm[b] = perm[b], perm[a]
        self.perm = perm
        self.inverse = [perm.index(i) for i in range(n)]

    def apply(self, xs, batched):
        x = xs[0]
        return x.permute(0, *[p + 1 for p in self.perm]) if batched else x.permute(self.perm)

    def transpose(self, g, batched):
        return [g.permute(0, *[p + 1 for p in self.inverse]) if batched else g.permute(self.inverse)]


@rule(aten.expand.default, aten.expand_as.default, aten.broadcast_to.default)
class Expand(_Unary):
    """Broadcasting to a larger shape; its transpose sums over the broadcast axes."""

    def apply(self, xs, batched):
        x = xs[0]
        if not batched:
            return x.expand(self.shape_out)
        extra = len(self.shape_out) - len(self.shape_in)
        return x.reshape(x.shape[0], *([1] * extra), *self.shape_in).expand(x.shape[0], *self.shape_out)

    def transpose(self, g, batched):
        return [sum_to(g, self.shape_in, batched)]


@rule(aten.pad.default, aten.constant_pad_nd.default)
class Pad(_Unary):
    """Constant padding (or cropping, by negative amounts) of the last axes (Swin's windows): the
    padded entries are constants, the transpose crops them off."""

    def __init__(self, node):
        super().__init__(node)
        mode = node_arg(node, 2, "mode", "constant")
        if node.target is aten.pad.default and mode != "constant":
            raise NotImplementedError(f"pad with mode={mode!r}")
        self.pad = [int(p) for p in node.args[1]]

    def apply(self, xs, batched):
        return torch.nn.functional.pad(xs[0], self.pad)

    def transpose(self, g, batched):
        return [torch.nn.functional.pad(g, [-p for p in self.pad])]


@rule(aten.roll.default)
class Roll(_Unary):
    """``torch.roll`` (Swin's shifted windows): a permutation of the entries; the transpose rolls back."""

    def __init__(self, node):
        super().__init__(node)
        n = len(self.shape_in)
        self.shifts = [int(v) for v in node.args[1]]
        self.dims = [_dim(d, n) for d in node_arg(node, 2, "dims", [])]

    def _roll(self, x, shifts, batched):
        if not self.dims:  # rolled as one flat axis
            lead = x.shape[:1] if batched else ()
            return x.reshape(*lead, -1).roll(shifts, -1).reshape(x.shape)
        return x.roll(shifts, [d + 1 for d in self.dims] if batched else self.dims)

    def apply(self, xs, batched):
        return self._roll(xs[0], self.shifts, batched)

    def transpose(self, g, batched):
        return [self._roll(g, [-v for v in self.shifts], batched)]


@rule(aten.upsample_bilinear2d.vec, aten.upsample_bilinear2d.default)
class Bilinear(_Unary):
    """Bilinear resizing of (N, C, H, W) values (BEiT's relative position bias table to a new
    window): linear in the input; the transpose is torch's own upsample_bilinear2d_backward (a
    first-order kernel of a linear map)."""

    def __init__(self, node):
        super().__init__(node)
        self.align = bool(node.args[2])
        if node.target is aten.upsample_bilinear2d.vec:
            f = node_arg(node, 3, "scale_factors")
            self.scales = (None, None) if f is None else (float(f[0]), float(f[1]))
        else:
            self.scales = (node_arg(node, 3, "scales_h"), node_arg(node, 4, "scales_w"))

    def apply(self, xs, batched):
        x = xs[0].reshape(-1, *self.shape_in[1:])
        out = aten.upsample_bilinear2d.default(x, list(self.shape_out[2:]), self.align, *self.scales)
        return out.reshape(-1, *self.shape_out) if batched else out.reshape(self.shape_out)

    def transpose(self, g, batched):
        g = g.reshape(-1, *self.shape_out[1:])
        size = [g.shape[0], *self.shape_in[1:]]
        out = aten.upsample_bilinear2d_backward.default(g, list(self.shape_out[2:]), size, self.align, *self.scales)
        return [out.reshape(-1, *self.shape_in) if batched else out.reshape(self.shape_in)]


class _Indexed(Selection):
    """A selection x[index] with a fixed index (a tuple of slices and integers); the transpose
    writes the adjoint into zeros at the same place."""

    index: tuple

    def forward(self, xs):
        return self.apply(xs, False)

    def apply(self, xs, batched):
        x = xs[0]
        return x[(slice(None), *self.index)] if batched else x[self.index]

    def transpose(self, g, batched):
        shape = (g.shape[0], *self.shape_in) if batched else self.shape_in
        out = g.new_zeros(shape)
        out[(slice(None), *self.index) if batched else self.index] = g
        return [out]

    def transpose_into(self, acc: torch.Tensor, gt: torch.Tensor) -> None:
        """acc (K tangents of the input) += the transpose of gt, in place: what the sweep calls
        instead of :meth:`adjoint_tangent`, so that the pieces of a split (q, k, v of a fused
        projection) land in one tensor instead of one of zeros each, summed."""
        acc[(slice(None), *self.index)] += gt


@rule(aten.slice.Tensor, aten.select.int, aten.narrow.default)
class Slice(_Indexed):
    """``x[..., start:end:step, ...]`` on one axis (``select``: one index, the axis dropped)."""

    def __init__(self, node):
        super().__init__(node)
        self.inputs = [node.args[0]]
        self.shape_in = shape_of(node.args[0])
        n = len(self.shape_in)
        dim = _dim(node_arg(node, 1, "dim", 0), n)
        if node.target is aten.select.int:
            sel = node_arg(node, 2, "index")
        elif node.target is aten.narrow.default:
            start = node_arg(node, 2, "start") % self.shape_in[dim]
            sel = slice(start, start + node_arg(node, 3, "length"))
        else:
            sel = slice(node_arg(node, 2, "start"), node_arg(node, 3, "end"), node_arg(node, 4, "step", 1))
        self.index = (slice(None),) * dim + (sel,)
        self.row_local = dim == n - 1 and isinstance(sel, slice)


@rule(aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default, aten.unbind.int, items=True)
class SplitItem(_Indexed):
    """One output of ``split`` / ``split_with_sizes`` / ``chunk`` / ``unbind`` (a ``getitem`` of it):
    a slice of the split's input. The front end gives it the split's node as ``split``."""

    def __init__(self, node):
        super().__init__(node)
        split, i = node.args
        self.inputs = [split.args[0]]
        self.shape_in = shape_of(split.args[0])
        n = len(self.shape_in)
        t = split.target
        if t is aten.unbind.int:
            dim = _dim(node_arg(split, 1, "dim", 0), n)
            self.index = (slice(None),) * dim + (i,)
            return
        dim = _dim(node_arg(split, 2, "dim", 0), n)
        sizes = [v.shape[dim] for v in split.meta["val"]]
        start = sum(sizes[:i])
        self.index = (slice(None),) * dim + (slice(start, start + sizes[i]),)
        self.row_local = dim == n - 1


@rule(aten.cat.default, aten.concat.default)
class Cat(LinearOp):
    """Concatenation along one axis; its transpose splits the adjoint."""

    def __init__(self, node):
        super().__init__(node)
        self.inputs = list(node.args[0])
        n = len(shape_of(node))
        self.dim = _dim(node_arg(node, 1, "dim", 0), n)
        self.sizes = [shape_of(a)[self.dim] for a in self.inputs]
        self.row_local = self.dim == n - 1

    def apply(self, xs, batched):
        return torch.cat(list(xs), self.dim + batched)

    def transpose(self, g, batched):
        return list(torch.split(g, self.sizes, self.dim + batched))


@rule(aten.stack.default)
class Stack(LinearOp):
    """Stacking along a new axis; its transpose unbinds the adjoint."""

    def __init__(self, node):
        super().__init__(node)
        self.inputs = list(node.args[0])
        n = len(shape_of(node))
        self.dim = _dim(node_arg(node, 1, "dim", 0), n)

    def apply(self, xs, batched):
        return torch.stack(list(xs), self.dim + batched)

    def transpose(self, g, batched):
        return list(torch.unbind(g, self.dim + batched))


@rule(aten.index.Tensor)
class Index(LinearOp):
    """``x[i_1, ..., i_k]`` with index tensors that do not depend on the parameters (adjacent index
    axes); the transpose accumulates the adjoint at the indexed places."""

    def __init__(self, node):
        super().__init__(node)
        self.inputs = [node.args[0]]
        self.shape_in = shape_of(node.args[0])
        self.index_nodes = list(node.args[1])

    def bind(self, index: list) -> None:
        """The index tensors' values (the front end evaluates them once, before the sweeps)."""
        self.raw = list(index)
        self.index = tuple(slice(None) if i is None else i for i in index)

    def apply(self, xs, batched):
        x = xs[0]
        return x[(slice(None), *self.index)] if batched else x[self.index]

    def transpose(self, g, batched):
        shape = (g.shape[0], *self.shape_in) if batched else self.shape_in
        idx = [None, *self.raw] if batched else self.raw
        return [aten.index_put.default(g.new_zeros(shape), idx, g, True)]


@rule(aten.gather.default)
class Gather(LinearOp):
    """``torch.gather(x, dim, index)`` with an index that does not depend on the parameters."""

    def __init__(self, node):
        super().__init__(node)
        self.inputs = [node.args[0]]
        self.shape_in = shape_of(node.args[0])
        self.dim = _dim(node.args[1], len(self.shape_in))
        self.index_nodes = [node.args[2]]

    def bind(self, index: list) -> None:
        """The index tensor's value (evaluated once, before the sweeps)."""
        self.index = index[0]

    def apply(self, xs, batched):
        x = xs[0]
        idx = self.index.expand(x.shape[0], *self.index.shape) if batched else self.index
        return x.gather(self.dim + batched, idx)

    def transpose(self, g, batched):
        shape = (g.shape[0], *self.shape_in) if batched else self.shape_in
        idx = self.index.expand(g.shape[0], *self.index.shape) if batched else self.index
        return [g.new_zeros(shape).scatter_add_(self.dim + batched, idx, g)]
