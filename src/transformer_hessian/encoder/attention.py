"""Curvature propagation through scaled dot-product attention with an additive mask.

Per head (B, h, T, d_h): S = q k^T / sqrt(d_h) + M, A = softmax_row(S), o = A v. Forward
tangents S' = (q' k^T + q k'^T) s, A' = A * (S' - rowsum(A * S')), o' = A' v + A v'; adjoints
g_A = g_o v^T, g_v = A^T g_o, g_S = A * (g_A - rowsum(A * g_A)), g_q = g_S k s, g_k = g_S^T q s;
their tangents (the second-order chain rule of the softmax and of the two bilinear products)
in :meth:`Attention.backward`. Masked entries (M = -inf) have A = 0 and drop out of every term.
"""

from __future__ import annotations

import math

import torch

from .ops import tadd


def _mm(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    return None if a is None or b is None else a @ b


class Attention:
    """softmax(q k^T / sqrt(d_h) + mask) v, no parameters (in_proj and out_proj are :class:`.ops.Linear`)."""

    def __init__(self, mask: torch.Tensor | None):
        self.mask = mask

    def forward(self, q, qt, k, kt, v, vt):
        """The output's value and tangent (P, *shape), None when zero."""
        s = 1.0 / math.sqrt(q.shape[-1])
        self.s = s
        S = (q @ k.transpose(-1, -2)) * s
        if self.mask is not None:
            S = S + self.mask
        A = torch.softmax(S, dim=-1)
        o = A @ v
        self.q, self.k, self.v, self.A, self.o = q, k, v, A, o
        self.qt, self.kt, self.vt = qt, kt, vt
        # S' = s (q' k^T + q k'^T); A' = A * (S' - rowsum(A * S')), formed in place (the (P, .., T, T)
        # tensors are the largest of the sweep)
        St = _mm(None if qt is None else qt * s, k.transpose(-1, -2))
        if kt is not None:
            qk = (q * s) @ kt.transpose(-1, -2)
            St = qk if St is None else St.add_(qk)
        At = None
        if St is not None:
            At = St.mul_(A)
            At.addcmul_(A, At.sum(-1, keepdim=True), value=-1.0)
        self.At = At
        ot = tadd(_mm(At, v), _mm(A, vt))
        self.ot = ot
        return o, ot

    def backward(self, go, got):
        """(adjoint, adjoint tangent) of each input, from the output's.

        The row sums of the softmax's second-order term never form a (P, .., T, T) product:
        rowsum(A * g_A') + rowsum(A' * g_A) = rowsum(g_o' * o + g_o * o'), since A v = o and
        A' v + A v' = o' (g_A = g_o v^T, g_A' = g_o' v^T + g_o v'^T)."""
        s, q, k, v, A, At = self.s, self.q, self.k, self.v, self.A, self.At
        qt, kt, vt = self.qt, self.kt, self.vt
        gA = go @ v.transpose(-1, -2)
        gv = A.transpose(-1, -2) @ go
        r = (A * gA).sum(-1, keepdim=True)
        gS = A * (gA - r)
        gq = (gS @ k) * s
        gk = (gS.transpose(-1, -2) @ q) * s
        # tangents of the adjoints
        gAt = _mm(got, v.transpose(-1, -2))
        if vt is not None:
            gv2 = go @ vt.transpose(-1, -2)
            gAt = gv2 if gAt is None else gAt.add_(gv2)
        gvt = tadd(_mm(None if At is None else At.transpose(-1, -2), go), _mm(A.transpose(-1, -2), got))
        gSt = None
        rt = tadd(None if got is None else got * self.o, None if self.ot is None else go * self.ot)
        if rt is not None:  # A * (g_A' - rowsum(...)); g_A' is not None only if rt is not None
            rt = rt.sum(-1, keepdim=True)
            gSt = (A * -rt) if gAt is None else gAt.sub_(rt).mul_(A)
        if At is not None:
            gSt = At * (gA - r) if gSt is None else gSt.addcmul_(At, gA - r)
        gqt = tadd(_mm(gSt, k), _mm(gS, kt))
        gkt = tadd(_mm(None if gSt is None else gSt.transpose(-1, -2), q), _mm(gS.transpose(-1, -2), qt))
        gqt = None if gqt is None else gqt * s
        gkt = None if gkt is None else gkt * s
        return [(gq, gqt), (gk, gkt), (gv, gvt)]


class SelfAttention:
    """The packed in_proj output (B, T, 3 d) split into q, k, v heads, attention, and the heads
    merged back to (B, T, d): one operation, so the adjoint of the packed input is assembled once.

    ``source`` is the in_proj :class:`.ops.Linear`: where its output's tangent is non-zero only in
    some columns (a sweep whose tangents are seeded at in_proj rows, ``Linear.support``), the
    q, k or v outside them get no tangent and their terms are skipped."""

    #: an output row (token) reads other rows (no factored sweep through it, :class:`.ops.Hess`)
    mixes_rows = True

    def __init__(self, mask: torch.Tensor | None, nhead: int, source):
        self.core, self.h, self.source = Attention(mask), nhead, source

    def forward(self, x, xt):
        """The output's value and tangent (P, *shape), None when zero."""
        B, T, d3 = x.shape
        d, h = d3 // 3, self.h
        self.shape = x.shape
        lo, hi = (0, d3) if xt is None or self.source.support is None else self.source.support
        args = []
        for j in range(3):
            sl = slice(j * d, (j + 1) * d)
            args.append(x[..., sl].reshape(B, T, h, d // h).transpose(1, 2))
            live = xt is not None and lo < sl.stop and hi > sl.start
            args.append(xt[..., sl].reshape(xt.shape[0], B, T, h, d // h).transpose(2, 3) if live else None)
        o, ot = self.core.forward(*args)
        out = o.transpose(1, 2).reshape(B, T, d)
        return out, None if ot is None else ot.transpose(2, 3).reshape(ot.shape[0], B, T, d)

    def backward(self, g, gt):
        """(adjoint, adjoint tangent) of the packed input, from the output's."""
        B, T, d3 = self.shape
        d, h = d3 // 3, self.h
        go = g.reshape(B, T, h, d // h).transpose(1, 2)
        got = None if gt is None else gt.reshape(gt.shape[0], B, T, h, d // h).transpose(2, 3)
        parts = self.core.backward(go, got)
        gx = g.new_empty(self.shape)
        P = next((t.shape[0] for _, t in parts if t is not None), None)
        gxt = None if P is None else g.new_empty((P, *self.shape))
        for j, (gj, gtj) in enumerate(parts):
            sl = slice(j * d, (j + 1) * d)
            gx[..., sl].view(B, T, h, d // h).copy_(gj.transpose(1, 2))
            if gxt is not None:
                dst = gxt[..., sl]
                if gtj is None:
                    dst.zero_()
                else:
                    dst.view(P, B, T, h, d // h).copy_(gtj.transpose(2, 3))
        return [(gx, gxt)]
