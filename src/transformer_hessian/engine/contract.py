"""The operation contract of the exact-Hessian engine, and the table that maps captured operations to it.

Every differentiated value v of the captured graph carries, besides its value, a tangent
v' = dv/dtheta for the K parameter entries of one sweep (a tensor of shape ``(K, *v.shape)``, or
``None`` when it is zero) and, on the way back, its adjoint g = dL/dv and the adjoint's tangent
g' = dg/dtheta. An operation y = f(x_1, ..., x_n) gives

- ``forward(xs)``: its value (by default torch's own kernel, fused or not: nothing is differentiated);
- ``tangent(xs, ts, y)``: y' = sum_i df/dx_i x_i';
- ``adjoint(xs, y, g, need)``: g_i = (df/dx_i)^T g for each input i with ``need[i]``;
- ``adjoint_tangent(xs, ts, y, g, gt, need)``: g_i' = (df/dx_i)^T g' + sum_j <g, d^2 f/dx_i dx_j> x_j',
  the second-order chain rule: the first term carries the curvature of everything after the
  operation back, the second adds the operation's own curvature.

Parameters are inputs like any other: a parameter's tangent is its seed (one-hot rows of the
identity), and its adjoint tangent is its block of Hessian columns. So an operation owns no
parameter and no operation reads another's state.

What else a rule may declare, on :class:`Op` with its default:

- ``index_nodes``: the graph nodes it reads that are not differentiated (indices, a boolean mask,
  a loss's targets); their values reach :meth:`Op.bind` once per evaluation, before ``forward``.
  One that depends on a selected parameter is refused by the front end.
- ``forward``: the value computed by the rule itself (None: torch's kernel on the node's arguments).
- a refusal: a constructor that raises ``NotImplementedError`` with the reason (dropout that is on,
  a transposed convolution); the front end names the operation, module and line with it.
- ``row_local``: the operation works row by row, a row being the last axis of a value and its
  rows the other axes flattened (the tokens of a Transformer): output row n reads row n of each
  input with as many rows, and an input with one row is shared by every row (a bias, a norm's
  scale). Attention, products of two values, permutations and sums over tokens are not. The
  factored sweeps (:mod:`.factored`) run only through row-local operations.
- ``row_params`` and :meth:`Op.row_terms`: the inputs shared by every row (parameters) whose
  adjoint tangent the rule can give as a sum over rows of outer products (:class:`RowTerm`), so
  that a factored sweep weights each row before the sum.

A :class:`Selection` (a slice, a select, one output of a split) adds its adjoint tangent in place
into its input's (:meth:`Selection.transpose_into`, which the sweep calls instead of
``adjoint_tangent``), so that the pieces of one value (q, k, v of a fused projection) land in one
tensor.

An operation is one class registered for the torch operations it implements (:func:`rule`);
:data:`RULES` is the table the front end (:mod:`.capture`) looks them up in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch.fx import Node

Tangent = torch.Tensor | None

#: torch operation (an OpOverload, or a name for the engine's own operations) -> its class
RULES: dict[object, type[Op]] = {}
#: an operation with several outputs (a split) -> the class of one output, a ``getitem`` of it
#: (each output a step of its own; the operation itself is not one)
ITEMS: dict[object, type[Op]] = {}


def rule(*targets, items: bool = False) -> Callable[[type[Op]], type[Op]]:
    """Register the decorated class as the rule of each of ``targets`` (with ``items``: of each
    output of these multi-output operations, :data:`ITEMS`)."""
    table = ITEMS if items else RULES

    def register(cls: type[Op]) -> type[Op]:
        for t in targets:
            if t in table:
                raise ValueError(f"{t}: already has the rule {table[t].__name__}")
            table[t] = cls
        return cls

    return register


def shape_of(arg) -> tuple[int, ...]:
    """The static shape of a captured value (a graph node with its recorded value, or a tensor)."""
    if isinstance(arg, Node):
        return tuple(arg.meta["val"].shape)
    return tuple(arg.shape)


class Op:
    """One captured operation. ``inputs`` are the graph nodes it reads, in the order its methods
    take them (``xs``, ``ts``, ``need`` and the returned lists follow it); the rest of the node's
    arguments are its static settings, parsed by the subclass's constructor."""

    #: output row n reads only row n of its inputs (the rows: every axis but the last, flattened;
    #: an input with fewer rows is shared by every row); the factored sweeps need it
    row_local = False
    #: indices of inputs whose adjoint tangent :meth:`row_terms` gives as a sum over rows
    row_params: tuple[int, ...] = ()

    def __init__(self, node: Node):
        self.node = node
        self.inputs: list[Node] = []
        #: nodes read but not differentiated, their values handed to :meth:`bind`
        self.index_nodes: list = []

    def bind(self, index: list) -> None:
        """The values of :attr:`index_nodes`, in their order (once per evaluation, before the forward)."""

    #: ``forward(xs) -> value`` where the rule computes the value itself (to keep what its other
    #: methods need, or to keep the Hessian's precision through a cast); None: the value is torch's
    #: own operation on the node's arguments
    forward: Callable[[Sequence[torch.Tensor]], torch.Tensor] | None = None

    def tangent(self, xs, ts: Sequence[Tangent], y) -> Tangent:
        """y' = sum_i J_i x_i' for the K tangents (None: zero)."""
        raise NotImplementedError

    def adjoint(self, xs, y, g, need: Sequence[bool]) -> list[Tangent]:
        """g_i = J_i^T g for each input (None where not needed or zero)."""
        raise NotImplementedError

    def adjoint_tangent(self, xs, ts, y, g, gt: Tangent, need: Sequence[bool]) -> list[Tangent]:
        """g_i' = J_i^T g' + sum_j <g, d^2 f/dx_i dx_j> x_j' for each input."""
        raise NotImplementedError

    def row_terms(self, i: int, xs, ts, y, g, gt: Tangent) -> list[RowTerm]:
        """The adjoint tangent of input ``i`` (one of :attr:`row_params`) as terms summed over the
        rows n (see :class:`RowTerm`); the sum of the terms is what :meth:`adjoint_tangent` gives."""
        raise NotImplementedError


class RowTerm(NamedTuple):
    """sum_n left[n] (x) right[:, n] for K tangents: ``left`` (N, j) rows of values, ``right`` (K, N, k)
    rows of tangents; laid out (j, k) in the input's entries when ``left_first``, else (k, j);
    ``left`` None: sum_n right[:, n] ((K, k), k the input's entries)."""

    left: torch.Tensor | None
    right: torch.Tensor
    left_first: bool = False


def shared_row(shape: Sequence[int], out: Sequence[int]) -> bool:
    """Whether a value of ``shape`` is one row shared by every row of a value of shape ``out``
    (a bias, a norm's scale): its last axis is the output's and it has no other entries."""
    return len(shape) > 0 and len(out) > 0 and shape[-1] == out[-1] and math.prod(shape) == shape[-1]


def rows_of(t: torch.Tensor, batched: bool = False) -> torch.Tensor:
    """A value as its rows (N, last axis), or K tangents as (K, N, last axis)."""
    return t.reshape(t.shape[0], -1, t.shape[-1]) if batched else t.reshape(-1, t.shape[-1])


def node_arg(node: Node, i: int, name: str, default=None):
    """A setting of a captured operation: its ``i``-th positional argument, else keyword ``name``,
    else ``default``."""
    return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)


def node_inputs(node: Node) -> list[Node]:
    """Every graph node among a node's arguments, in argument order (repeats kept)."""
    out: list[Node] = []
    torch.fx.node.map_arg((node.args, node.kwargs), out.append)
    return out


class LinearOp(Op):
    """An operation linear in its inputs together (views, sums, concatenations): ``apply`` maps
    inputs to the output, ``transpose`` maps an output adjoint to the inputs' adjoints, each on
    plain values or, with ``batched``, on a leading axis of K tangents. No curvature of its own:
    y' = apply(x'), g_i' = transpose(g')_i."""

    def apply(self, xs, batched: bool):
        """The map on values, or with ``batched`` on a leading axis of K tangents."""
        raise NotImplementedError

    def transpose(self, g, batched: bool) -> list[torch.Tensor]:
        """The transposed map: the inputs' adjoints from the output's."""
        raise NotImplementedError

    def tangent(self, xs, ts, y):
        """``apply`` on the tangents (a missing one as zeros); None when all are missing."""
        if all(t is None for t in ts):
            return None
        K = next(t.shape[0] for t in ts if t is not None)
        full = [t if t is not None else x.new_zeros((K, *x.shape)) for x, t in zip(xs, ts, strict=True)]
        return self.apply(full, batched=True)

    def adjoint(self, xs, y, g, need):
        """``transpose`` of g."""
        return self.transpose(g, batched=False)

    def adjoint_tangent(self, xs, ts, y, g, gt, need):
        """``transpose`` of g' (a linear map has no curvature of its own)."""
        return [None] * len(self.inputs) if gt is None else self.transpose(gt, batched=True)


class Selection(LinearOp):
    """A piece of its one input (``x[index]``): ``shape_in`` is the input's shape, and
    :meth:`transpose_into` adds an adjoint tangent into the input's in place."""

    shape_in: tuple[int, ...]

    def transpose_into(self, acc: torch.Tensor, gt: torch.Tensor) -> None:
        """acc (K tangents of the input, ``(K, *shape_in)``) += the transpose of gt."""
        raise NotImplementedError


class Pointwise(Op):
    """y = f(x) entry by entry: y' = f'(x) x', g_x = f'(x) g, g_x' = f'(x) g' + f''(x) g x'.
    Subclasses give ``d1`` and ``d2`` (``d2`` None: f is affine)."""

    row_local = True

    def __init__(self, node: Node):
        super().__init__(node)
        self.inputs = [node.args[0]]
        self._f1_of = self._f2_of = None

    def d1(self, x, y):
        """f'(x) (y = f(x) given too)."""
        raise NotImplementedError

    def d2(self, x, y):
        """f''(x); None when f is affine."""
        return None

    def _f1(self, x, y):
        """f'(x), computed once per value (every sweep reads the same)."""
        if self._f1_of is not x:
            self._f1_of, self._f1_val = x, self.d1(x, y)
        return self._f1_val

    def _f2g(self, x, y, g):
        """f''(x) g (None for an affine f), computed once per value and adjoint."""
        if self._f2_of is not g:
            d2 = self.d2(x, y)
            self._f2_of, self._f2_val = g, None if d2 is None else d2 * g
        return self._f2_val

    def tangent(self, xs, ts, y):
        """f'(x) x'."""
        (t,) = ts
        return None if t is None else t * self._f1(xs[0], y)

    def adjoint(self, xs, y, g, need):
        """f'(x) g."""
        return [g * self._f1(xs[0], y)]

    def adjoint_tangent(self, xs, ts, y, g, gt, need):
        """f'(x) g' + f''(x) g x'."""
        (x,), (t,) = xs, ts
        out = None if gt is None else gt * self._f1(x, y)
        f2g = None if t is None else self._f2g(x, y, g)
        if f2g is not None:
            out = t * f2g if out is None else out.addcmul_(t, f2g)
        return [out]


def as_tangent(t: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """A tangent ``(K, *s)`` viewed with unit axes in front of ``s`` up to ``len(shape)`` axes, so
    that it broadcasts against values of ``shape`` the way a value of shape ``s`` would."""
    extra = len(shape) - (t.dim() - 1)
    return t if extra <= 0 else t.reshape(t.shape[0], *([1] * extra), *t.shape[1:])


def sum_to(x: torch.Tensor, shape: Sequence[int], batched: bool = False) -> torch.Tensor:
    """The adjoint of broadcasting a value of ``shape``: sum ``x`` over the broadcast axes (with
    ``batched``, x has a leading axis of tangents that is kept)."""
    lead = 1 if batched else 0
    shape = tuple(shape)
    extra = x.dim() - lead - len(shape)
    if extra > 0:
        x = x.sum(dim=tuple(range(lead, lead + extra)))
    dims = tuple(lead + i for i, n in enumerate(shape) if n == 1 and x.shape[lead + i] != 1)
    if dims:
        x = x.sum(dim=dims, keepdim=True)
    return x


def tadd(a: Tangent, b: Tangent) -> Tangent:
    """Sum of two tangents, None being zero."""
    if a is None:
        return b
    if b is None:
        return a
    return a + b
