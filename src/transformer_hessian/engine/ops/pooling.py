"""Max and average pooling over the last one or two axes (``F.max_pool1d`` / ``2d``,
``F.avg_pool1d`` / ``2d``, Funnel's poolers), each linear in its input at a point:

- average pooling is linear: y' = pool(x'), g_x = pool^T(g) (torch's ``avg_pool2d_backward``);
- max pooling picks, for each window, the entry its forward found largest: y = x[i(x)] with the
  indices i constant almost everywhere (where the maximum is unique), so y' = x'[i], g_x = the
  scatter-add of g onto i, and no curvature of its own (as autograd, which routes the same way).

A 1-d pooling is taken as a 2-d one of height 1, and every axis before the pooled ones as one
batch axis (the K tangents folded into it)."""

from __future__ import annotations

import math

import torch

from ..contract import LinearOp, node_arg, rule, shape_of

aten = torch.ops.aten


def _pair(v, n: int, fill: int) -> list[int]:
    """A 1-d setting (one number or a list of one) as (fill, v); a 2-d one as two numbers."""
    v = [v] if isinstance(v, int) else list(v)
    if n == 1:
        return [fill, v[0]]
    return v * 2 if len(v) == 1 else v


class _Pool(LinearOp):
    """The settings of a pooling, as a 2-d pooling of a ``(-1, 1, H, W)`` view of its input."""

    def __init__(self, node, spatial: int):
        super().__init__(node)
        self.inputs = [node.args[0]]
        self.shape_in, self.shape_out = shape_of(node.args[0]), shape_of(node)
        self.spatial = spatial
        kernel = node_arg(node, 1, "kernel_size")
        stride = node_arg(node, 2, "stride", []) or kernel  # torch's default: the kernel
        self.kernel, self.stride = _pair(kernel, spatial, 1), _pair(stride, spatial, 1)
        self.padding = _pair(node_arg(node, 3, "padding", 0), spatial, 0)
        self.plane_in = ([1] if spatial == 1 else []) + list(self.shape_in[-spatial:])
        self.plane_out = ([1] if spatial == 1 else []) + list(self.shape_out[-spatial:])

    @staticmethod
    def _planes(x, plane) -> torch.Tensor:
        """``x`` (with a leading K axis or not) as (-1, 1, H, W), (H, W) = ``plane``."""
        return x.reshape(-1, 1, *plane)

    @staticmethod
    def _back(y, like, batched: bool, shape) -> torch.Tensor:
        """``y`` as ``shape``, after the K axis of ``like`` when batched."""
        return y.reshape(*(like.shape[:1] if batched else ()), *shape)


@rule(aten.avg_pool1d.default, aten.avg_pool2d.default)
class AvgPool(_Pool):
    """Average pooling (``ceil_mode``, ``count_include_pad`` and 2-d's ``divisor_override`` kept)."""

    def __init__(self, node):
        one = node.target is aten.avg_pool1d.default
        super().__init__(node, 1 if one else 2)
        self.ceil = bool(node_arg(node, 4, "ceil_mode", False))
        self.include_pad = bool(node_arg(node, 5, "count_include_pad", True))
        self.divisor = None if one else node_arg(node, 6, "divisor_override", None)

    def apply(self, xs, batched):
        x = self._planes(xs[0], self.plane_in)
        y = aten.avg_pool2d.default(
            x, self.kernel, self.stride, self.padding, self.ceil, self.include_pad, self.divisor
        )  # fmt: skip
        return self._back(y, xs[0], batched, self.shape_out)

    def transpose(self, g, batched):
        g4 = self._planes(g, self.plane_out)
        x = g4.new_zeros((g4.shape[0], 1, *self.plane_in))
        gx = aten.avg_pool2d_backward.default(
            g4, x, self.kernel, self.stride, self.padding, self.ceil, self.include_pad, self.divisor
        )  # fmt: skip
        return [self._back(gx, g, batched, self.shape_in)]


@rule(aten.max_pool1d.default, aten.max_pool2d.default)
class MaxPool(_Pool):
    """Max pooling (``dilation`` and ``ceil_mode`` kept): the forward keeps each window's index."""

    def __init__(self, node):
        super().__init__(node, 1 if node.target is aten.max_pool1d.default else 2)
        self.dilation = _pair(node_arg(node, 4, "dilation", 1), self.spatial, 1)
        self.ceil = bool(node_arg(node, 5, "ceil_mode", False))
        self.n_in, self.n_out = math.prod(self.plane_in), math.prod(self.plane_out)

    def forward(self, xs):
        x = self._planes(xs[0], self.plane_in)
        y, idx = aten.max_pool2d_with_indices.default(
            x, self.kernel, self.stride, self.padding, self.dilation, self.ceil
        )  # fmt: skip
        self.idx = idx.reshape(-1, self.n_out)
        return y.reshape(self.shape_out)

    def apply(self, xs, batched):
        x = xs[0].reshape(-1, self.n_in)
        idx = self.idx.repeat(x.shape[0] // self.idx.shape[0], 1)
        return self._back(x.gather(1, idx), xs[0], batched, self.shape_out)

    def transpose(self, g, batched):
        g2 = g.reshape(-1, self.n_out)
        idx = self.idx.repeat(g2.shape[0] // self.idx.shape[0], 1)
        gx = g2.new_zeros((g2.shape[0], self.n_in)).scatter_add_(1, idx, g2)
        return [self._back(gx, g, batched, self.shape_in)]
