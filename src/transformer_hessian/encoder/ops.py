"""Curvature-propagation rules of the operations inside a torch Transformer encoder layer.

Every operation carries, besides its value v and the loss adjoint g = dL/dv, the tangents of
both with respect to all P selected parameters at once: v' = dv/dtheta (shape (P, *v.shape)) on
the forward sweep and g' = dg/dtheta on the backward sweep. Differentiating each adjoint rule
g_in = (dop/din)^T g_out once more gives

    g_in' = (dop/din)^T g_out' + <g_out, d^2 op / din^2> in'     (+ the cross terms of several inputs),

the second-order chain rule: the first term carries the curvature of everything after the op
back, the second adds the op's own curvature, contracted with its adjoint. For a parameter W of
the op the same rule gives the Hessian column block H[:, W] = dg_W/dtheta. A parameter's own
seed dW = e_p enters a linear layer as x (x) I (its Kronecker structure: one diagonal write).
See docs/theory.md, "Curvature propagation through torch encoder layers".

A tangent of ``None`` is identically zero (the inputs do not depend on the parameters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..engine.contract import RowTerm, tadd
from ..engine.factored import add_row_terms


@dataclass
class Slot:
    """One parameter: its (detached) value and its range in the selected parameters (None: not selected)."""

    value: torch.Tensor
    cols: slice | None
    #: (tangent range in the current block, first row a0, end row a1) of the rows seeded in it
    seed: tuple | None = None


class Hess:
    """The dense (P, P) Hessian being assembled: row p = tangent p, columns = the parameter's entries.

    The tangents of one sweep are pieces of parameters, ``(tangent range, rows of H)`` each; the
    rows of one sweep need not be contiguous in H (the sweep takes the parameters in the order of
    the graph, :func:`.api.exact_hessian`).

    A *factored* sweep (one piece: whole rows a0..a1 of a Linear weight W (o, i) whose tangents
    stay row by row up to the loss, :meth:`.graph.Tape.row_local_weights`) propagates a few unit
    tangents instead of one per entry. ``factored="rows"``: one unit tangent per row a of W; the
    tangent of every node for the entry (a, c) is, row n by row n, ``scale[n, c]`` times unit a's,
    the scale being the input x of W (set by its forward) or, after the attention of a sweep seeded
    at W_v, A_h x (set by :class:`.attention.SelfAttention`). ``factored="keys"`` (rows of the
    last attention's W_k within one head): one unit tangent per column c of W, the tangent for
    (a, c) being ``scale[n, a]`` = q[n, a] times unit c's. Its rows of H are (a, c) in row-major
    order, from sums over rows n weighted by the scale (:meth:`units`; docs/theory.md, section 21,
    "Factored sweeps")."""

    def __init__(self, H: torch.Tensor, pieces: list[tuple[slice, slice]] | None = None, factored: str | bool = False):
        self.H = H
        #: the tangents being propagated: (tangent range, rows of H) per piece; P is their number
        self.pieces = [(slice(0, H.shape[0]), slice(0, H.shape[0]))] if pieces is None else pieces
        self.P = sum(t.stop - t.start for t, _ in self.pieces)
        #: False (dense), "rows" or "keys" (a factored sweep)
        self.factored = factored
        #: (N, scale index) row weights of a factored sweep's rows (set per chunk by the seeded Linear,
        #: or by the attention for a sweep seeded at W_v or W_k)
        self.scale: torch.Tensor | None = None
        if factored not in (False, "rows", "keys"):
            raise ValueError(f"factored: False, 'rows' or 'keys', got {factored!r}")
        if factored and len(self.pieces) != 1:
            raise ValueError("a factored sweep has one piece (whole rows of one Linear weight)")

    def units(self, cols: slice) -> torch.Tensor:
        """H[rows of a factored sweep, cols] as (unit tangent, scale index, column): a view."""
        ((_, rows),) = self.pieces
        blk = self.H[rows, cols]
        if self.factored == "keys":  # rows (a, c): a indexes the scale, c the unit
            return blk.view(self.scale.shape[1], self.P, -1).transpose(0, 1)
        return blk.view(self.P, self.scale.shape[1], -1)

    @classmethod
    def zeros(cls, P: int, dtype: torch.dtype, device: torch.device) -> Hess:
        """A new (P, P) zero matrix, all its rows propagated."""
        return cls(torch.zeros(P, P, dtype=dtype, device=device))

    def rows(self, pieces: list[tuple[slice, slice]], factored: str | bool = False) -> Hess:
        """The same matrix with its own tangents (one sweep's); sweeps of disjoint rows of H may
        run at the same time, each on its own view."""
        return Hess(self.H, pieces, factored)

    def add(self, slot: Slot | None, terms: list[tuple]) -> None:
        """H[rows, slot] += the sum of the ``terms``, each ``(left, right, transposed)``: the sum
        over rows n of ``left[n] (x) right[:, n]`` ((P, j, k) from left (N, j) and the tangent
        right (P, N, k); (P, k, j) when transposed; left None: the plain sum, (P, k))."""
        if slot is None or slot.cols is None:
            return
        if self.factored:
            for left, right, transposed in terms:
                if right is not None:
                    # target[a, c, (j, k)] += sum_n scale[n, c] left[n, j] right[a, n, k] ((k, j) when transposed)
                    U, k = right.shape[0], right.shape[-1]
                    term = RowTerm(left, right.reshape(U, -1, k), not transposed)
                    add_row_terms(self.units(slot.cols), self.scale, term)
            return
        blk = None
        for left, right, transposed in terms:
            if right is not None:
                t = _row_sum(left, right, transposed)
                blk = t if blk is None else blk.add_(t)
        if blk is not None:
            flat = blk.reshape(self.P, -1)
            for tangents, rows in self.pieces:
                self.H[rows, slot.cols] += flat[tangents]


def _row_sum(left, right, transposed: bool) -> torch.Tensor:
    if left is None:
        return right.sum(1)
    out = torch.matmul(left.T, right)  # batched products whose batch operand is the contiguous tangent
    return out.transpose(1, 2) if transposed else out


def op_slots(op) -> list[Slot]:
    """The selected parameters an operation owns (its Hessian columns)."""
    return [s for s in (getattr(op, n, None) for n in ("w", "b", "gamma", "beta")) if _selected(s)]


def _zeros_tangent(P: int, like: torch.Tensor) -> torch.Tensor:
    return like.new_zeros((P, *like.shape))


def _seeded(slot: Slot | None) -> bool:
    return slot is not None and slot.seed is not None


def _selected(slot: Slot | None) -> bool:
    return slot is not None and slot.cols is not None


class Linear:
    """y = x W^T + b on the last axis; W (o, i). Seeds: dy/dW_(a, c) = x_c e_a (the x (x) I structure)."""

    def __init__(self, hess: Hess, w: Slot, b: Slot | None):
        self.hess, self.w, self.b = hess, w, b if (b is not None and b.value is not None) else None

    def forward(self, x, xt):
        """The output's value and tangent (P, *shape), None when zero."""
        W = self.w.value
        o, i = W.shape
        self.x2, self.xt2 = x.reshape(-1, i), None if xt is None else xt.reshape(self.hess.P, -1, i)
        N = self.x2.shape[0]
        y = self.x2 @ W.T
        if self.b is not None:
            y = y + self.b.value
        yt = None if xt is None else self.xt2 @ W.T
        # output columns the tangent can be non-zero in: the seeded rows, when the input has none (a
        # sweep seeded at W_k rows starts at the attention's scores, attention.SelfAttention)
        keys = self.hess.factored == "keys"
        seeded = [] if keys else [s.seed for s in (self.w, self.b) if _seeded(s)]
        self.support = (
            None if xt is not None or not seeded else (min(a0 for _, a0, _ in seeded), max(a1 for *_, a1 in seeded))
        )
        if seeded:
            yt = _zeros_tangent(self.hess.P, y) if yt is None else yt
        if _seeded(self.w) and self.hess.factored == "rows":  # yt[a, n, a] += 1; row (a, c) is x[n, c] times it
            self.hess.scale = self.x2
            _seed_diag(yt, self.w.seed, N, o)
        elif _seeded(self.w) and not keys:  # yt[(a, c), n, a] += x[n, c]
            sl, a0, a1 = self.w.seed
            yt[sl].view(a1 - a0, i, N, o)[..., a0:a1].diagonal(0, 0, 3).add_(self.x2.T.unsqueeze(-1))
        if _seeded(self.b):  # yt[a, n, a] += 1
            _seed_diag(yt, self.b.seed, N, o)
        self.shape = x.shape
        out_shape = (*x.shape[:-1], o)
        return y.view(out_shape), None if yt is None else yt.view(self.hess.P, *out_shape)

    def backward(self, g, gt, input_tangent: bool = True):
        """(adjoint, adjoint tangent) of each input, from the output's; ``input_tangent=False``:
        the input's adjoint tangent is not needed (None; the sweep's first operation)."""
        W = self.w.value
        o, i = W.shape
        P = self.hess.P
        g2 = g.reshape(-1, o)
        N = g2.shape[0]
        gt2 = None if gt is None else gt.reshape(P, N, o)
        gx = g2 @ W
        gxt = None if gt2 is None or not input_tangent else gt2 @ W
        if _seeded(self.w) and input_tangent:  # gxt[(a, c), n, c] += g[n, a]
            if self.hess.factored:  # never: a factored sweep starts at its seeded Linear (graph.Tape.backward)
                raise RuntimeError("a factored sweep needs no input tangent at its seeded Linear")
            gxt = _zeros_tangent(P, gx) if gxt is None else gxt
            sl, a0, a1 = self.w.seed
            gxt[sl].view(a1 - a0, i, N, i).diagonal(0, 1, 3).add_(g2[:, a0:a1].T.unsqueeze(-1))
        # H[:, W] = sum_n g[n]^T xt[n] + gt[n]^T x[n],  H[:, b] = sum_n gt[n]
        self.hess.add(self.w, [(g2, self.xt2, False), (self.x2, gt2, True)])
        self.hess.add(self.b, [(None, gt2, False)])
        return [(gx.view(self.shape), None if gxt is None else gxt.view(P, *self.shape))]


def _seed_diag(t: torch.Tensor, seed: tuple, N: int, width: int, vals: torch.Tensor | None = None) -> None:
    """t[(a), n, a] += vals[n, a] (1 when ``vals`` is None) for the seeded entries a0 <= a < a1 of a
    parameter acting on one output column each (a bias, a LayerNorm's gamma or beta, a unit seed)."""
    sl, a0, a1 = seed
    t[sl].view(a1 - a0, N, width)[..., a0:a1].diagonal(0, 0, 2).add_(1.0 if vals is None else vals[:, a0:a1])


class LayerNorm:
    """y = gamma * (x - mean) / sqrt(var + eps) + beta on the last axis (biased variance)."""

    def __init__(self, hess: Hess, gamma: Slot | None, beta: Slot | None, eps: float):
        self.hess, self.gamma, self.beta, self.eps = hess, gamma, beta, eps

    def forward(self, x, xt):
        """The output's value and tangent (P, *shape), None when zero."""
        P = self.hess.P
        d = x.shape[-1]
        x2 = x.reshape(-1, d)
        N = x2.shape[0]
        xc = x2 - x2.mean(-1, keepdim=True)
        self.sigma = ((xc * xc).mean(-1, keepdim=True) + self.eps).sqrt()
        self.n = xc / self.sigma
        self.nt = self.st = None
        if xt is not None:
            xt2 = xt.reshape(P, N, d)
            self.st = (self.n * xt2).mean(-1, keepdim=True)  # sigma' (mean(n) = 0)
            self.nt = (xt2 - xt2.mean(-1, keepdim=True) - self.n * self.st) / self.sigma
        gam = self.gamma.value if self.gamma is not None else None
        y = self.n * gam if gam is not None else self.n
        if self.beta is not None:
            y = y + self.beta.value
        yt = None if self.nt is None else (self.nt * gam if gam is not None else self.nt)
        if _seeded(self.gamma) or _seeded(self.beta):
            yt = _zeros_tangent(P, y) if yt is None else yt
        if _seeded(self.gamma):
            _seed_diag(yt, self.gamma.seed, N, d, self.n)
        if _seeded(self.beta):
            _seed_diag(yt, self.beta.seed, N, d)
        self.shape = x.shape
        return y.view(x.shape), None if yt is None else yt.view(P, *x.shape)

    def backward(self, g, gt, input_tangent: bool = True):
        """(adjoint, adjoint tangent) of each input, from the output's; ``input_tangent=False``:
        the input's adjoint tangent is not needed (None; the sweep's first operation)."""
        P = self.hess.P
        d = self.shape[-1]
        g2 = g.reshape(-1, d)
        N = g2.shape[0]
        gt2 = None if gt is None else gt.reshape(P, N, d)
        gam = self.gamma.value if self.gamma is not None else None
        n, sigma, nt, st = self.n, self.sigma, self.nt, self.st
        gn = g2 * gam if gam is not None else g2
        gnt = None if gt2 is None else (gt2 * gam if gam is not None else gt2)
        if _seeded(self.gamma):
            gnt = _zeros_tangent(P, gn) if gnt is None else gnt
            _seed_diag(gnt, self.gamma.seed, N, d, g2)
        m = (gn * n).mean(-1, keepdim=True)
        gx = (gn - gn.mean(-1, keepdim=True) - n * m) / sigma
        # H[:, gamma] = sum_n gt * n + g * nt,  H[:, beta] = sum_n gt
        if _selected(self.gamma):
            terms = [(None, None if gt2 is None else gt2 * n, False), (None, None if nt is None else g2 * nt, False)]
            self.hess.add(self.gamma, terms)
        self.hess.add(self.beta, [(None, gt2, False)])
        if not input_tangent:
            return [(gx.view(self.shape), None)]
        gxt = None
        if gnt is not None:
            gxt = gnt - gnt.mean(-1, keepdim=True) - n * (gnt * n).mean(-1, keepdim=True)
        if nt is not None:
            extra = -nt * m - n * (gn * nt).mean(-1, keepdim=True)
            gxt = extra if gxt is None else gxt + extra
        if gxt is not None:
            gxt = gxt / sigma
        if st is not None:
            gxt = gxt - gx * (st / sigma)
        return [(gx.view(self.shape), None if gxt is None else gxt.view(P, *self.shape))]


class Activation:
    """ReLU or torch's exact (erf) GELU, elementwise: y' = s1 u', g_u' = s1 g_y' + s2 g_y u'."""

    def __init__(self, kind: str):
        self.kind = kind

    def forward(self, u, ut):
        """The output's value and tangent (P, *shape), None when zero."""
        if self.kind == "relu":
            self.s1, self.s2 = (u > 0).to(u.dtype), None
            y = u * self.s1
        else:
            cdf = 0.5 * (1.0 + torch.erf(u / math.sqrt(2.0)))
            pdf = torch.exp(-0.5 * u * u) / math.sqrt(2.0 * math.pi)
            y = u * cdf
            self.s1, self.s2 = cdf + u * pdf, (2.0 - u * u) * pdf
        self.ut = ut
        return y, None if ut is None else ut * self.s1

    def backward(self, g, gt):
        """(adjoint, adjoint tangent) of each input, from the output's."""
        gu = g * self.s1
        gut = None if gt is None else gt * self.s1
        if self.s2 is not None and self.ut is not None:
            curv = self.s2 * g  # the activation's own curvature, added in place (one pass)
            gut = self.ut * curv if gut is None else gut.addcmul_(self.ut, curv)
        return [(gu, gut)]


class Add:
    """Residual sum a + b."""

    def forward(self, a, at, b, bt):
        """The output's value and tangent (P, *shape), None when zero."""
        return a + b, tadd(at, bt)

    def backward(self, g, gt):
        """(adjoint, adjoint tangent) of each input, from the output's."""
        return [(g, gt), (g, gt)]


class MeanTokens:
    """(B, T, d) -> (B, d), the mean over tokens (the pooling before a classification head).

    An output row reads several input rows, so no factored sweep (:class:`Hess`) runs through it,
    unless ``mixes_rows=False``: the loss's curvature then enters the factored sweeps' rows as the
    Gauss-Newton term of :mod:`.pooled`, and nothing of theirs flows back through the mean."""

    def __init__(self, mixes_rows: bool = True):
        self.mixes_rows = mixes_rows

    def forward(self, x, xt):
        """The output's value and tangent (P, *shape), None when zero."""
        self.T = x.shape[1]
        return x.mean(1), None if xt is None else xt.mean(2)

    def backward(self, g, gt):
        """(adjoint, adjoint tangent) of each input, from the output's."""
        T = self.T
        gx = (g / T).unsqueeze(1).expand(g.shape[0], T, g.shape[1])
        gxt = None if gt is None else (gt / T).unsqueeze(2).expand(gt.shape[0], gt.shape[1], T, gt.shape[2])
        return [(gx, gxt)]


def symmetrize_(H: torch.Tensor, tile: int = 1024) -> torch.Tensor:
    """H <- (H + H^T) / 2 in place, tile by tile (the same numbers as the out-of-place sum; the
    extra memory is two tiles, not a second P x P matrix)."""
    P = H.shape[0]
    for i in range(0, P, tile):
        rows = slice(i, min(i + tile, P))
        for j in range(i, P, tile):
            cols = slice(j, min(j + tile, P))
            m = (H[rows, cols] + H[cols, rows].T).mul_(0.5)
            H[rows, cols] = m
            H[cols, rows] = m.T
    return H
