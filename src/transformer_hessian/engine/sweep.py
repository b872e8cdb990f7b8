"""The sweeps over a captured graph (:mod:`.capture`): values and adjoints once, then for each
block of K parameter entries their tangents forward and the adjoints' tangents back.

H[rows of the block, :] is the adjoint tangent at the parameters. The blocks take the parameters
in the order of their first use in the graph: a block's sweep runs forward from its first seeded
operation and back to it only, and the columns of the parameters used before are the transposed
rows of the earlier blocks (:func:`fill_transposes`). The same sweep with arbitrary tangents gives
Hessian-vector products (:func:`hvp_sweep`)."""

from __future__ import annotations

import math
import sys
import time
import weakref
from collections.abc import Callable

import torch
from torch.fx import Node

from .capture import Captured
from .contract import ITEMS, Selection, tadd
from .factored import factored_rows, factored_sweeps, factored_weights
from .sums import AdjointSums

#: id of a graph's rules (its steps list) -> the run whose state they hold (weakly)
_ACTIVE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _value(env: dict, arg):
    return torch.fx.node.map_arg(arg, lambda n: env[n])


class Run:
    """One captured graph evaluated on its inputs: values of every node, adjoints of the
    differentiated ones, and the sweeps of tangents."""

    def __init__(self, cap: Captured):
        self.cap = cap
        self.env: dict[Node, object] = dict(cap.leaves)
        self.adj: dict[Node, torch.Tensor] = {}
        steps = {s.node: s for s in cap.steps}
        with torch.no_grad():
            for node in cap.graph.nodes:
                if node.op != "call_function":
                    continue
                step = steps.get(node)
                if step is None:
                    if node in cap.live and node.target not in ITEMS:
                        continue  # a metadata check on a differentiated value
                    self.env[node] = node.target(*_value(self.env, node.args), **_value(self.env, node.kwargs))
                    continue
                op = step.op
                op.bind([self.env[i] if isinstance(i, Node) else i for i in op.index_nodes])
                if op.forward is None:
                    self.env[node] = node.target(*_value(self.env, node.args), **_value(self.env, node.kwargs))
                else:
                    self.env[node] = _as_recorded(op.forward([self.env[i] for i in op.inputs]), node)
            self.loss = self.env[cap.loss]
            if not torch.isfinite(self.loss):
                raise ValueError(f"exact_hessian: the loss is {float(self.loss)} on these inputs and weights")
            self._adjoints()
        # position of each selected parameter: the first step that reads one of its placeholders
        first_use = {}
        for step in cap.steps:
            for i in step.op.inputs:
                first_use.setdefault(i, step.pos)
        self.rank = {n: min(first_use.get(ph, len(cap.steps)) for ph in cap.placeholders[n]) for n in cap.names}
        self._needs: dict[int, list[list[bool]]] = {}
        # rules keep their forward's state; other batches' runs share the rules: each run keeps its own
        self._state = [dict(s.op.__dict__) for s in cap.steps]
        _ACTIVE[id(cap.steps)] = self

    def activate(self) -> None:
        """Give the rules this run's state again (another batch's run on the same graph may have
        replaced it); a no-op when this run was the last evaluated or activated."""
        key = id(self.cap.steps)
        if _ACTIVE.get(key) is self:
            return
        for step, state in zip(self.cap.steps, self._state, strict=True):
            step.op.__dict__.clear()
            step.op.__dict__.update(state)
        _ACTIVE[key] = self

    def needs(self, first: int) -> list[list[bool]]:
        """For each step from ``first`` on, which of its inputs a sweep from ``first`` needs the
        adjoint tangent of: a value computed at or after ``first``, or a selected parameter whose
        first use is there (earlier values and parameters are outside the block's rows; their
        columns come from transposes)."""
        if first not in self._needs:
            cap = self.cap
            pos = {s.node: s.pos for s in cap.steps}
            wanted = self.params_from(first)
            self._needs[first] = [
                [i in cap.live and (pos.get(i, -1) >= first or i in wanted) for i in s.op.inputs]
                for s in cap.steps[first:]
            ]
        return self._needs[first]

    def _adjoints(self) -> None:
        cap = self.cap
        adj = {cap.loss: torch.ones((), dtype=self.loss.dtype, device=self.loss.device)}
        for step in reversed(cap.steps):
            g = adj.get(step.node)
            if g is None:
                continue
            op = step.op
            need = [i in cap.live for i in op.inputs]
            xs = [self.env[i] for i in op.inputs]
            for i, gi, nd in zip(op.inputs, op.adjoint(xs, self.env[step.node], g, need), need, strict=True):
                if nd and gi is not None:
                    adj[i] = adj[i] + gi if i in adj else gi
        self.adj = adj

    def gradient(self) -> torch.Tensor:
        """dL/dtheta over the selected parameters (H's order)."""
        self.activate()
        parts = []
        for n in self.cap.names:
            g = None
            for ph in self.cap.placeholders[n]:
                g = tadd(g, self.adj.get(ph))
            parts.append(
                torch.zeros(self.cap.shapes[n], dtype=self.cap.dtype, device=self.cap.device).reshape(-1)
                if g is None
                else g.reshape(-1)
            )
        return torch.cat(parts)

    def sweep(self, seeds: dict[str, torch.Tensor], first: int = 0) -> dict[str, torch.Tensor]:
        """Tangents ``seeds`` (name -> (K, *shape)) forward from step ``first`` and their adjoints'
        tangents back to it: name -> (K, *shape) adjoint tangent of every selected parameter whose
        first use is at or after ``first`` (the others' are incomplete and left out)."""
        self.activate()
        cap = self.cap
        tan: dict[Node, torch.Tensor] = {}
        for n, t in seeds.items():
            for ph in cap.placeholders[n]:
                tan[ph] = t
        adjt = self.propagate(cap.steps[first:], tan, self.needs(first))
        out = {}
        for n in cap.names:
            if self.rank[n] < first:
                continue
            total = None
            for ph in cap.placeholders[n]:
                total = tadd(total, adjt.get(ph))
            out[n] = total
        return out

    def propagate(self, steps, tan: dict, needs: list[list[bool]], rows=None) -> AdjointSums:
        """The tangents ``tan`` (node -> (K, ...)) forward through ``steps`` (consecutive, to the
        loss) and the adjoints' tangents back: the sums at the inputs each step ``needs`` (a list of
        flags per step over its inputs). ``rows(op, xs, ts, g, gt)``, when given, is called at each
        step the tangents reach, before its adjoint tangent (a factored sweep's row terms)."""
        cap, env = self.cap, self.env
        with torch.no_grad():
            for step in steps:
                if step.node is cap.loss:
                    continue  # nothing reads the loss's tangent
                op = step.op
                ts = [tan.get(i) for i in op.inputs]
                if any(t is not None for t in ts):
                    t = op.tangent([env[i] for i in op.inputs], ts, env[step.node])
                    if t is not None:
                        tan[step.node] = t
            adjt = AdjointSums()
            for step in reversed(steps):
                node, op = step.node, step.op
                # a value's tangent is read by its consumers' steps, all done by now: free it
                tan.pop(node, None)
                g = self.adj.get(node)
                if g is None:
                    continue
                gt = adjt.pop(node, None)
                ts = [tan.get(i) for i in op.inputs]
                if gt is None and all(t is None for t in ts):
                    continue
                xs = [env[i] for i in op.inputs]
                if rows is not None:
                    rows(op, xs, ts, g, gt)
                need = needs[step.pos - steps[0].pos]
                if not any(need):
                    continue
                if isinstance(op, Selection):  # its adjoint tangent added into the input's place
                    if gt is not None and need[0]:
                        op.transpose_into(adjt.own(op.inputs[0], (gt.shape[0], *op.shape_in), gt), gt)
                    continue
                res = op.adjoint_tangent(xs, ts, env[node], g, gt, need)
                for i, gi, nd in zip(op.inputs, res, need, strict=True):
                    if nd and gi is not None:
                        adjt.add(i, gi)
        return adjt

    def params_from(self, first: int) -> dict[Node, str]:
        """Placeholder -> name of every selected parameter first used at or after step ``first``."""
        return {ph: n for n in self.cap.names if self.rank[n] >= first for ph in self.cap.placeholders[n]}

    def tangent_bytes(self) -> int:
        """Bytes of one tangent of every differentiated value (the memory of one entry of a block,
        roughly thrice this with the adjoint tangents and temporaries)."""
        total = 0
        for step in self.cap.steps:
            v = self.env.get(step.node)
            if isinstance(v, torch.Tensor):
                total += v.numel() * v.element_size()
        return total


def _as_recorded(v, node: Node):
    """A rule's value in the memory layout torch's own kernel gave at capture (a later ``view``
    may depend on it, e.g. on fused attention's output layout)."""
    rec = node.meta.get("val")
    if not isinstance(v, torch.Tensor) or not isinstance(rec, torch.Tensor) or v.stride() == rec.stride():
        return v
    if tuple(v.shape) != tuple(rec.shape):
        return v
    out = torch.empty_strided(tuple(rec.shape), tuple(rec.stride()), dtype=v.dtype, device=v.device)
    return out.copy_(v)


def columns(cap: Captured) -> dict[str, slice]:
    """name -> its columns of H (the selected parameters flattened one after the other)."""
    cols, off = {}, 0
    for n in cap.names:
        size = math.prod(cap.shapes[n])
        cols[n] = slice(off, off + size)
        off += size
    return cols


def blocks(run: Run, K: int, skip=()) -> list[list[tuple[str, int, int]]]:
    """The selected entries in the order of first use (but those of ``skip``), in blocks of at most
    K: (name, a0, a1) pieces."""
    out, cur, room = [], [], K
    for n in sorted((n for n in run.cap.names if n not in skip), key=lambda n: run.rank[n]):
        size, a = math.prod(run.cap.shapes[n]), 0
        while a < size:
            take = min(room, size - a)
            cur.append((n, a, a + take))
            a += take
            room -= take
            if room == 0:
                out.append(cur)
                cur, room = [], K
    if cur:
        out.append(cur)
    return out


def seeds_of(run: Run, pieces: list[tuple[str, int, int]]) -> dict[str, torch.Tensor]:
    """One-hot tangents of a block's entries, per parameter: (K, *shape)."""
    cap = run.cap
    K = sum(a1 - a0 for _, a0, a1 in pieces)
    seeds, k = {}, 0
    for n, a0, a1 in pieces:
        size = math.prod(cap.shapes[n])
        t = seeds.get(n)
        if t is None:
            t = seeds[n] = torch.zeros((K, size), dtype=cap.dtype, device=cap.device)
        rows = torch.arange(a1 - a0, device=cap.device)
        t[k + rows, a0 + rows] = 1.0
        k += a1 - a0
    return {n: t.view(K, *cap.shapes[n]) for n, t in seeds.items()}


def dense_hessian(
    run: Run, K: int, progress: Callable[[int, int], None] | None = None, factored: bool = True
) -> torch.Tensor:
    """The (P, P) Hessian, block by block (rows); the columns a block's sweep leaves out (of the
    parameters used before it) are filled from the transposed rows in one pass at the end. With
    ``factored``, the weights of row-local tails with more than K entries take factored sweeps
    (:mod:`.factored`)."""
    cap = run.cap
    cols = columns(cap)
    P = sum(s.stop - s.start for s in cols.values())
    H = torch.zeros(P, P, dtype=cap.dtype, device=cap.device)
    # entry (r, c) is swept when the first use of c's parameter is at or after the start of r's block
    col_rank = torch.empty(P, dtype=torch.long)
    for n in cap.names:
        col_rank[cols[n]] = run.rank[n]
    row_first = torch.empty(P, dtype=torch.long)
    fws = factored_weights(run, K) if factored else []
    todo = blocks(run, K, {fw.name for fw in fws})
    total = len(todo) + factored_sweeps(run, fws, K)
    done = 0

    def tick():
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    for fw in fws:
        row_first[cols[fw.name]] = fw.pos
        factored_rows(run, fw, H, cols, K, tick)
    for pieces in todo:
        first = min(run.rank[n] for n, _, _ in pieces)
        res = run.sweep(seeds_of(run, pieces), first)
        k = 0
        for n, a0, a1 in pieces:  # rows of H of this piece: a contiguous range
            rows = slice(cols[n].start + a0, cols[n].start + a1)
            row_first[rows] = first
            for m, t in res.items():
                if t is not None:  # one strided copy (a weight's rows may come transposed)
                    H[rows, cols[m]].view(a1 - a0, *cap.shapes[m]).copy_(t[k : k + a1 - a0])
            k += a1 - a0
        tick()
    return complete_symmetric_(H, row_first, col_rank)


def complete_symmetric_(H: torch.Tensor, row_first: torch.Tensor, col_rank: torch.Tensor, tile: int = 1024):
    """H in place from its swept entries (r, c) (those with ``col_rank[c] >= row_first[r]``): where
    both (r, c) and (c, r) were swept their mean, where one was, that one, tile by tile (one pass
    over H, the extra memory a few tiles). One of the two is always swept: the blocks go in the
    order of first use. A tile swept on one side only is copied transposed, with no masks (about 4x
    faster than masking every tile; docs/timings.md, "Measurements that were code comments")."""
    P = H.shape[0]
    dev = H.device
    row_first, col_rank = row_first.to(dev), col_rank.to(dev)
    for i in range(0, P, tile):
        ri = slice(i, min(i + tile, P))
        rf, cr = row_first[ri], col_rank[ri]
        for j in range(i, P, tile):
            cj = slice(j, min(j + tile, P))
            rf_j, cr_j = row_first[cj], col_rank[cj]
            # ma: (r, c) swept, mb: (c, r) swept, for r in ri and c in cj
            a_all, a_any = bool(cr_j.min() >= rf.max()), bool(cr_j.max() >= rf.min())
            b_all, b_any = bool(cr.min() >= rf_j.max()), bool(cr.max() >= rf_j.min())
            if a_all and not b_any:  # the tile above the diagonal was swept, its mirror not
                H[cj, ri] = H[ri, cj].T
                continue
            if b_all and not a_any:
                H[ri, cj] = H[cj, ri].T
                continue
            a, bt = H[ri, cj], H[cj, ri].T
            if a_all and b_all:
                m = (a + bt).mul_(0.5)
            else:
                ma = cr_j.unsqueeze(0) >= rf.unsqueeze(1)
                mb = cr.unsqueeze(1) >= rf_j.unsqueeze(0)
                m = torch.where(ma & mb, (a + bt).mul_(0.5), torch.where(ma, a, bt))
            H[ri, cj] = m
            H[cj, ri] = m.T
    return H


#: bytes of one entry's tangents a Hessian-vector product's chunk may hold: a block of vectors is
#: swept in chunks of K columns that keep the tangents near the caches (a few columns at a time beat
#: one at a time and a few dozen; docs/timings.md, "Measurements that were code comments")
HVP_CHUNK_BYTES = 32 << 20


def hvp_sweep(run: Run, V: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
    """H V for V of shape (P,) or (P, K): sweeps with the columns as tangents, ``chunk`` columns at
    a time (default from :data:`HVP_CHUNK_BYTES`)."""
    cap = run.cap
    cols = columns(cap)
    vec = V.dim() == 1
    Vm = V.unsqueeze(1) if vec else V
    if chunk is None:
        chunk = max(1, HVP_CHUNK_BYTES // max(run.tangent_bytes(), 1))
    # each column's product written in place as a row (no chunks to concatenate); a (P, K) view
    out = Vm.new_empty(Vm.shape[1], sum(c.stop - c.start for c in cols.values()))
    for j in range(0, Vm.shape[1], chunk):
        Vc = Vm[:, j : j + chunk]
        k = Vc.shape[1]
        seeds = {n: Vc[cols[n]].T.reshape(k, *cap.shapes[n]).to(cap.dtype) for n in cap.names}
        res = run.sweep(seeds, 0)
        del seeds
        for n in cap.names:
            t = res.pop(n, None)
            dst = out[j : j + k, cols[n]]
            if t is None:
                dst.zero_()
            else:
                dst.copy_(t.reshape(k, -1))
    return out[0] if vec else out.T


class Progress:
    """A progress line every few seconds for long dense Hessians (blocks done, estimate of the rest)."""

    def __init__(self, every: float = 10.0, stream=None):
        self.every, self.t0, self.last = every, time.perf_counter(), time.perf_counter()
        self.stream = stream

    def __call__(self, done: int, total: int) -> None:
        """Report ``done`` of ``total`` blocks when ``every`` seconds have passed."""
        now = time.perf_counter()
        if now - self.last < self.every or done == total:
            return
        self.last = now
        rest = (now - self.t0) / done * (total - done)
        print(
            f"exact_hessian: block {done}/{total}, about {rest:.0f} s left", file=self.stream or sys.stderr, flush=True
        )
