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

from .contract import RowTerm, Selection
from .ops.linear import Addmm, Linear
from .sums import AdjointSums

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
            after = {ph: n for n in cap.names if run.rank[n] >= p for ph in cap.placeholders[n]}
            tails[p] = _tail_is_row_local(run, p, after)
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


def factored_rows(run, fw: FactoredWeight, H: torch.Tensor, cols: dict[str, slice], units: int, progress=None) -> int:
    """Fill the rows of H of ``fw``'s weight (every column of the parameters first used at or after
    it) by factored sweeps of at most ``units`` unit tangents; the number of sweeps."""
    run.activate()
    cap, env = run.cap, run.env
    step = cap.steps[fw.pos]
    op = step.op
    x = env[op.inputs[1] if fw.addmm else op.inputs[0]]
    scale = x.reshape(-1, x.shape[-1])
    if fw.addmm and op.alpha != 1:
        scale = scale * op.alpha
    y = env[step.node]
    N, o = scale.shape[0], y.shape[-1]
    m = scale.shape[1]
    region = cap.steps[fw.pos :]
    made = {s.node for s in region}
    theirs = {ph: n for n in cap.names if run.rank[n] >= fw.pos for ph in cap.placeholders[n]}
    needs = [[i in made and i in cap.live for i in s.op.inputs] for s in region]
    P = H.shape[0]
    rows = H[cols[fw.name]]
    # H's rows of W as (a, c, columns): (o, i) row-major for linear, (i, o) for addmm's M
    by_unit = rows.view(m, o, P).transpose(0, 1) if fw.addmm else rows.view(o, m, P)
    sweeps = 0
    for a0 in range(0, o, units):
        a1 = min(o, a0 + units)
        U = a1 - a0
        seed = y.new_zeros((U, N, o))
        k = torch.arange(U, device=y.device)
        seed[k, :, a0 + k] = 1.0
        _sweep(run, region, needs, theirs, seed.view(U, *y.shape), by_unit[a0:a1], scale, cols)
        sweeps += 1
        if progress is not None:
            progress()
    return sweeps


def _sweep(run, region, needs, theirs, seed, target, scale, cols) -> None:
    """One factored sweep: unit tangents ``seed`` of the region's first value forward, their
    adjoints' tangents back, each parameter's row terms weighted into ``target`` (U, m, P)."""
    cap, env = run.cap, run.env
    tan: dict[Node, torch.Tensor] = {region[0].node: seed}
    with torch.no_grad():
        for s in region[1:]:
            if s.node is cap.loss:
                continue
            ts = [tan.get(i) for i in s.op.inputs]
            if any(t is not None for t in ts):
                t = s.op.tangent([env[i] for i in s.op.inputs], ts, env[s.node])
                if t is not None:
                    tan[s.node] = t
        adjt = AdjointSums()
        for j in range(len(region) - 1, -1, -1):
            s = region[j]
            node, op = s.node, s.op
            tan.pop(node, None)  # read by its consumers' steps, all done by now
            g = run.adj.get(node)
            if g is None:
                continue
            gt = adjt.pop(node, None)
            ts = [tan.get(i) for i in op.inputs]
            if j == 0:
                ts = [None] * len(ts)  # the seed enters at the output, not through the inputs
            if gt is None and all(t is None for t in ts):
                continue
            xs = [env[i] for i in op.inputs]
            for i, inp in enumerate(op.inputs):
                name = theirs.get(inp)
                if name is not None:
                    for term in op.row_terms(i, xs, ts, env[node], g, gt):
                        add_row_terms(target[..., cols[name]], scale, term)
            need = needs[j]
            if not any(need):
                continue
            if isinstance(op, Selection):
                if gt is not None and need[0]:
                    op.transpose_into(adjt.own(op.inputs[0], (gt.shape[0], *op.shape_in), gt), gt)
                continue
            res = op.adjoint_tangent(xs, ts, env[node], g, gt, need)
            for inp, gi, nd in zip(op.inputs, res, need, strict=True):
                if nd and gi is not None:
                    adjt.add(inp, gi)


def factored_row_count(run, fws: list[FactoredWeight], units: int) -> int:
    """How many factored sweeps ``fws`` take at ``units`` unit tangents a sweep."""
    return sum(math.ceil(_out_width(run, fw) / units) for fw in fws)


def _out_width(run, fw: FactoredWeight) -> int:
    return run.cap.shapes[fw.name][1 if fw.addmm else 0]
