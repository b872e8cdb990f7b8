"""Factored sweeps: the Hessian rows of a weight whose output reaches the loss row by row.

Let W (o, i) be a selected weight read once, by ``y = x W^T`` (``linear``; ``addmm``'s x M alike),
and let every operation from there to the loss be row-local (:attr:`.contract.Op.row_local`:
output row n reads row n of its inputs; rows are the tokens, every axis but the last). The tangent
of y for the entry (a, c) of W is x[n, c] e_a in row n, and everything after y is linear in the
tangent and row by row, so for every value v after y, row by row,

    v'_(a, c)[n] = x[n, c] u_a[n],        g'_(a, c)[n] = x[n, c] w_a[n],

where u_a and w_a are the tangent and adjoint tangent of the sweep seeded with e_a in every row of
y (what a bias of y would get). One sweep of o unit tangents thus stands for o i entries. A
parameter theta read after y gets the adjoint tangent sum_n (its row-n term), each term linear in
the tangents; weighted, H[(a, c), theta] = sum_n x[n, c] (row-n term of unit a), one product over
the rows per term (:meth:`.contract.Op.row_terms`, :func:`add_row_terms`). The rows of H of W
come out whole; the columns of the parameters used before y are the transposes of earlier rows,
as in the dense sweeps (:func:`.sweep.dense_hessian`). docs/theory.md, "Factored sweeps in the
graph engine".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.fx import Node

from .contract import RowTerm
from .ops.linear import Addmm, Linear

#: elements of the temporaries of one weighted product (x[:, c] times a term's rows, and the
#: product's result) before the scale's columns are taken in chunks
CHUNK_ELEMENTS = 1 << 24


@dataclass(frozen=True)
class FactoredWeight:
    """A weight swept factored: its name, the position of the step that reads it, and whether that
    step is ``addmm`` (W stored (i, o), the rows of H (c, a)) rather than ``linear`` ((o, i), (a, c))."""

    name: str
    pos: int
    addmm: bool


def _rows(v) -> int | None:
    """Number of rows of a recorded value (None: not a tensor of at least one axis)."""
    if not isinstance(v, torch.Tensor) or v.dim() == 0:
        return None
    return v.numel() // v.shape[-1] if v.shape[-1] else None


def _val(node):
    return node.meta.get("val") if isinstance(node, Node) else None


def _tail_is_row_local(run, p: int, after: dict[Node, str]) -> bool:
    """Whether every step from position ``p`` to the loss is row-local on values of the same rows,
    and every parameter first used there is read by a rule that gives its row terms."""
    cap = run.cap
    steps = cap.steps[p:]
    n_rows = _rows(_val(steps[0].node))
    if n_rows is None:
        return False
    made = {s.node for s in steps}
    for s in steps:
        op = s.op
        # a step that reads nothing of the tail (a second embedding lookup) carries none of its tangents
        if s is not steps[0] and not any(i in after or (i in made and i in cap.live) for i in op.inputs):
            continue
        if not op.row_local:
            return False
        if s.node is not cap.loss and _rows(_val(s.node)) != n_rows:
            return False
        for i, inp in enumerate(op.inputs):
            if inp in after:
                if i not in op.row_params:
                    return False
            elif inp in made and inp in cap.live and _rows(_val(inp)) != n_rows:
                return False
    return True


def factored_weights(run, K: int = 0) -> list[FactoredWeight]:
    """The selected weights whose rows of H a factored sweep gives: read once, by a ``linear`` (as
    its weight) or an ``addmm`` (as its matrix), at their first use, with a row-local tail, and
    with more than ``K`` entries (a weight that fits in a block of K one-hot tangents shares a
    sweep that runs anyway: a factored one would be an extra sweep)."""
    cap = run.cap
    readers: dict[Node, list] = {}
    for s in cap.steps:
        for i, inp in enumerate(s.op.inputs):
            readers.setdefault(inp, []).append((s, i))
    tails: dict[int, bool] = {}
    out = []
    for name in cap.names:
        phs = cap.placeholders[name]
        shape = cap.shapes[name]
        if len(phs) != 1 or len(shape) != 2 or shape[0] * shape[1] <= K or len(readers.get(phs[0], [])) != 1:
            continue
        ((step, i),) = readers[phs[0]]
        kind = type(step.op)
        if not ((kind is Linear and i == 1) or (kind is Addmm and i == 2)) or run.rank[name] != step.pos:
            continue
        p = step.pos
        if p not in tails:
            tails[p] = _tail_is_row_local(run, p, run.params_from(p))
        if tails[p]:
            out.append(FactoredWeight(name, p, kind is Addmm))
    return out


def add_row_terms(target: torch.Tensor, scale: torch.Tensor, term: RowTerm) -> None:
    """target[a, c, :] += sum_n scale[n, c] (row n of ``term`` for unit a), target (U, m, entries),
    scale (N, m): one product over the rows per chunk of the scale's columns."""
    left, right, left_first = term
    U, N, k = right.shape
    m = scale.shape[1]
    dt = target.dtype  # a tail computed in a lower precision (precision="model") adds into H's
    scale = scale.to(dt)
    left = None if left is None else left.to(dt)
    R = right.to(dt).transpose(0, 1).reshape(N, U * k)
    j = 1 if left is None else left.shape[-1]
    step = max(1, min(m, CHUNK_ELEMENTS // max(1, N * j + j * U * k)))
    for c0 in range(0, m, step):
        S = scale[:, c0 : c0 + step]
        mc = S.shape[1]
        tgt = target[:, c0 : c0 + mc]
        if left is None:
            tgt.add_((S.T @ R).view(mc, U, k).transpose(0, 1))
            continue
        L = (S.unsqueeze(2) * left.reshape(N, 1, j)).reshape(N, mc * j)
        if left_first:  # entries (j, k)
            tgt.unflatten(-1, (j, k)).add_((L.T @ R).view(mc, j, U, k).permute(2, 0, 1, 3))
        else:  # entries (k, j)
            tgt.unflatten(-1, (k, j)).add_((R.T @ L).view(U, k, mc, j).transpose(1, 2))


def factored_rows(run, fw: FactoredWeight, H: torch.Tensor, cols: dict[str, slice], units: int, progress=None) -> None:
    """Fill the rows of H of ``fw``'s weight (every column of the parameters first used at or after
    it) by factored sweeps of at most ``units`` unit tangents, calling ``progress()`` after each."""
    run.activate()
    cap, env = run.cap, run.env
    step = cap.steps[fw.pos]
    op = step.op
    x = env[op.inputs[1] if fw.addmm else op.inputs[0]]
    scale = x.reshape(-1, x.shape[-1])
    if fw.addmm and op.alpha != 1:
        scale = scale * op.alpha
    y = env[step.node]
    N, m = scale.shape
    o = y.shape[-1]
    region = cap.steps[fw.pos :]
    made = {s.node for s in region}
    theirs = run.params_from(fw.pos)
    # adjoint tangents only of values made in the region: the parameters' come as row terms
    needs = [[i in made and i in cap.live for i in s.op.inputs] for s in region]
    rows = H[cols[fw.name]]
    # H's rows of W as (a, c, columns): (o, i) row-major for linear, (i, o) for addmm's M
    by_unit = rows.view(m, o, -1).transpose(0, 1) if fw.addmm else rows.view(o, m, -1)
    for a0 in range(0, o, units):
        U = min(o, a0 + units) - a0
        target = by_unit[a0 : a0 + U]

        def add_rows(op, xs, ts, g, gt, target=target):
            for i, inp in enumerate(op.inputs):
                name = theirs.get(inp)
                if name is not None:
                    for term in op.row_terms(i, xs, ts, env[op.node], g, gt):
                        add_row_terms(target[..., cols[name]], scale, term)

        seed = y.new_zeros((U, N, o))
        k = torch.arange(U, device=y.device)
        seed[k, :, a0 + k] = 1.0  # e_a in every row: the tangent a bias of y would get
        run.propagate(region, {step.node: seed.view(U, *y.shape)}, needs, add_rows)
        if progress is not None:
            progress()


def factored_sweeps(run, fws: list[FactoredWeight], units: int) -> int:
    """How many factored sweeps ``fws`` take at ``units`` unit tangents a sweep."""
    return sum(math.ceil(run.cap.shapes[fw.name][1 if fw.addmm else 0] / units) for fw in fws)
