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
        self.q, self.k, self.v, self.A = q, k, v, A
        self.qt, self.kt, self.vt = qt, kt, vt
        St = tadd(_mm(qt, k.transpose(-1, -2)), _mm(q, None if kt is None else kt.transpose(-1, -2)))
        At = None
        if St is not None:
            St = St * s
            At = A * (St - (A * St).sum(-1, keepdim=True))
        self.At = At
        o = A @ v
        ot = tadd(_mm(At, v), _mm(A, vt))
        return o, ot

    def backward(self, go, got):
        """(adjoint, adjoint tangent) of each input, from the output's."""
        s, q, k, v, A, At = self.s, self.q, self.k, self.v, self.A, self.At
        qt, kt, vt = self.qt, self.kt, self.vt
        gA = go @ v.transpose(-1, -2)
        gv = A.transpose(-1, -2) @ go
        r = (A * gA).sum(-1, keepdim=True)
        gS = A * (gA - r)
        gq = (gS @ k) * s
        gk = (gS.transpose(-1, -2) @ q) * s
        # tangents of the adjoints
        gAt = tadd(_mm(got, v.transpose(-1, -2)), _mm(go, None if vt is None else vt.transpose(-1, -2)))
        gvt = tadd(_mm(None if At is None else At.transpose(-1, -2), go), _mm(A.transpose(-1, -2), got))
        gSt = None
        if At is not None:
            gSt = At * (gA - r)
        if gAt is not None or At is not None:
            inner = A * gAt if gAt is not None else 0.0
            if At is not None:
                inner = inner + At * gA
            rt = inner.sum(-1, keepdim=True)
            term = A * ((gAt if gAt is not None else 0.0) - rt)
            gSt = term if gSt is None else gSt + term
        gqt = tadd(_mm(gSt, k), _mm(gS, kt))
        gkt = tadd(_mm(None if gSt is None else gSt.transpose(-1, -2), q), _mm(gS.transpose(-1, -2), qt))
        gqt = None if gqt is None else gqt * s
        gkt = None if gkt is None else gkt * s
        return [(gq, gqt), (gk, gkt), (gv, gvt)]
