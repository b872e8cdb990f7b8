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

from ..engine.contract import tadd


def _mm(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    return None if a is None or b is None else a @ b


class Attention:
    """softmax(q k^T / sqrt(d_h) + mask) v, no parameters (in_proj and out_proj are :class:`.ops.Linear`)."""

    def __init__(self, mask: torch.Tensor | None):
        self.mask = mask

    def forward(self, q, qt, k, kt, v, vt, St=None):
        """The output's value and tangent (P, *shape), None when zero; ``St``: a tangent of the
        scores besides those of q and k (a sweep seeded at W_k, :class:`SelfAttention`)."""
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
        St = tadd(St, _mm(None if qt is None else qt * s, k.transpose(-1, -2)))
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

    def backward(self, go, got, rows_only: bool = False):
        """(adjoint, adjoint tangent) of each input, from the output's; ``rows_only``: not the
        tangents of k's and v's adjoints, which sum over the query rows, nor g_o v'^T in g_A' (a
        factored sweep seeded at q, k or v, :func:`add_mixed_columns`, which reads the kept g_S, g_S'
        and g_o').

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
        if vt is not None and not rows_only:  # column t' scaled by x[t', c] in a sweep seeded at v
            gv2 = go @ vt.transpose(-1, -2)
            gAt = gv2 if gAt is None else gAt.add_(gv2)
        gvt = None
        if not rows_only:
            gvt = tadd(_mm(None if At is None else At.transpose(-1, -2), go), _mm(A.transpose(-1, -2), got))
        gSt = None
        rt = tadd(None if got is None else got * self.o, None if self.ot is None else go * self.ot)
        if rt is not None:  # A * (g_A' - rowsum(...)); g_A' is not None only if rt is not None
            rt = rt.sum(-1, keepdim=True)
            gSt = (A * -rt) if gAt is None else gAt.sub_(rt).mul_(A)
        if At is not None:
            gSt = At * (gA - r) if gSt is None else gSt.addcmul_(At, gA - r)
        gqt = tadd(_mm(gSt, k), _mm(gS, kt))
        gqt = None if gqt is None else gqt * s
        if rows_only:
            self.go, self.got, self.gS, self.gSt = go, got, gS, gSt
            return [(gq, gqt), (gk, None), (gv, None)]
        gkt = tadd(_mm(None if gSt is None else gSt.transpose(-1, -2), q), _mm(gS.transpose(-1, -2), qt))
        gkt = None if gkt is None else gkt * s
        return [(gq, gqt), (gk, gkt), (gv, gvt)]


def add_mixed_columns(core: Attention, in_proj, hess) -> None:
    """A factored sweep seeded at rows a0..a1 of in_proj's W_q, or of W_k or W_v within one head h0
    (:class:`.ops.Hess`): add the columns of in_proj whose adjoint tangents are not row by row.

    Row by row, the tangents after the attention are a scale times a unit tangent's: for a seed at
    q, x[t, c] times unit u's (q'_u = e_u; the query side is row by row); at v, (A_h0 x)[t, c] times
    unit u's (v' = x[:, c] e_u, o' = A v' = (A x)[:, c] e_u); at k, q[t, u] times unit c's (k' =
    x[:, c] e_u, S'[t, t'] = s q[t, u] x[t', c]). So g_S' = scale G[t, t'] (+ A_h0[t, t'] g_o[t, j_u]
    x[t', c] for v), G being what :meth:`Attention.backward` keeps. Per sample and head: g_k'[t'] =
    s sum_t g_S'[t, t'] q[t] (+ g_S[t, t'] x[t, c] e_u for q), g_v'[t'] = sum_t A'[t, t'] g_o[t] +
    A[t, t'] g_o'[t], for v the extra g_q'[t] = s g_o[t, j_u] sum_t' A_h0[t, t'] x[t', c] k[t'], for
    k the extra g_q'[t] = s (g_S x)[t, c] e_u. Their columns of W (b) are the sums over rows against
    x1 = [x, 1]: two-sided sums over (t, t'), taken over t' first. The row-by-row g_q' goes back
    through in_proj's own sums."""
    a0, a1 = in_proj.w.seed[1:]
    x, outer = in_proj.x2, hess.scale
    N, m = x.shape
    B, h, T, dh = core.q.shape
    P, d = hess.P, h * dh
    x1 = torch.cat([x, x.new_ones(N, 1)], 1).view(B, 1, T, m + 1)
    rows = lambda t: t.transpose(1, 2).reshape(N, h, -1)  # (B, h, T, c) -> (N, h, c)  # noqa: E731
    tan = lambda t: t.permute(2, 1, 3, 0, 4).reshape(h, N, -1)  # (P, B, h, T, c) -> (h, N, P c)  # noqa: E731
    # (P, U, h, j, c'): k from g_S', v from g_o' (and A' for q and k seeds)
    wk = _row_sums(outer, rows(core.q) * core.s, tan(core.gSt @ x1), P)
    wv = _row_sums(outer, rows(core.A @ x1), tan(core.got), P).transpose(-1, -2)
    part, h0, _ = seed_part(in_proj.w.seed, d, dh)
    if part < 2:
        wv += _row_sums(outer, rows(core.go), tan(core.At @ x1), P)
    extra = []
    if part == 0:  # seeded at q: g_k'[t'] += s sum_t g_S[t, t'] x[t, c] e_u
        Z = (outer.T @ rows(core.gS @ x1).reshape(N, -1)).view(-1, h, m + 1) * core.s
        for u in range(P):
            hu, ju = divmod(a0 + u, dh)
            wk[u, :, hu, ju] += Z[:, hu]
    elif part == 1:  # seeded at k: g_q'[t] += s (g_S x)[t, c] e_u, the same for every row u
        E = (x1.view(N, m + 1).T @ (core.gS[:, h0] @ x.view(B, T, m)).view(N, m)) * core.s  # (c', c)
        blk = x.new_zeros(P, a1 - a0, a1 - a0, m + 1)
        blk.diagonal(0, 1, 2).copy_(E.T.unsqueeze(-1))
        extra = [(a0 - d, blk)]
    else:
        extra = _v_seed_columns(core, x, x1.view(N, m + 1), a0 - 2 * d, a1 - 2 * d)
    extra += [(d, wk.reshape(P, -1, d, m + 1)), (2 * d, wv.reshape(P, -1, d, m + 1))]
    for r0, blk in extra:
        r1 = r0 + blk.shape[2]
        if in_proj.w.cols is not None:
            hess.units(in_proj.w.cols).unflatten(-1, (3 * d, m))[:, :, r0:r1].add_(blk[..., :m])
        if in_proj.b is not None and in_proj.b.cols is not None:
            hess.units(in_proj.b.cols)[:, :, r0:r1].add_(blk[..., m])


def seed_part(seed: tuple, d: int, dh: int) -> tuple[int, int, int]:
    """(0, 1 or 2 for W_q, W_k or W_v, head, row in the head) of the first seeded row of an in_proj."""
    part, row = divmod(seed[1], d)
    return (part, *divmod(row, dh))


def _row_sums(outer: torch.Tensor, left: torch.Tensor, right: torch.Tensor, P: int) -> torch.Tensor:
    """sum_n outer[n, u] left[n, h, j] right[h, n, (p, c)] as (p, u, h, j, c): one product per head."""
    N, U = outer.shape
    h, j = left.shape[1:]
    L = (left.transpose(0, 1).unsqueeze(2) * outer.unsqueeze(-1)).reshape(h, N, U * j)
    return torch.bmm(L.transpose(1, 2), right).view(h, U, j, P, -1).permute(3, 1, 0, 2, 4)


def _v_seed_columns(core: Attention, x, x1, v0: int, v1: int) -> list:
    """The terms of a sweep seeded at rows v0..v1 of W_v (one head h0) in which x[t', c] scales the
    key row t' (from g_o v'^T in g_A'): (first row of in_proj, (U, m, d_h, m + 1) block) for the
    W_q rows of h0 (s sum_n g_o[n, j_u] Y[n, c, j] x1[n, c'], Y[t] = sum_t' A[t, t'] x[t', c] k[t', j])
    and its W_k rows (s sum_n x[n, c] M[n, j_u, j] x1[n, c'], M[t'] = sum_t A[t, t'] g_o[t, j_u] q[t, j])."""
    B, h, T, dh = core.q.shape
    N, m = x.shape
    h0, ju = v0 // dh, torch.arange(v0, v1, device=x.device) % dh
    A0, q0, k0, go0 = core.A[:, h0], core.q[:, h0], core.k[:, h0], core.go[:, h0]
    X = x.view(B, T, m, 1)
    Y = (A0 @ (X * k0.unsqueeze(-2)).view(B, T, m * dh)).view(N, m, dh)
    M = (A0.transpose(-1, -2) @ (go0.unsqueeze(-1) * q0.unsqueeze(-2)).view(B, T, dh * dh)).view(N, dh, dh)
    yq = torch.einsum("nk,ncj,ne->kcje", go0.reshape(N, dh), Y, x1) * core.s
    yk = torch.einsum("nc,nkj,ne->kcje", x, M, x1) * core.s
    return [(h0 * dh, yq[ju]), (h * dh + h0 * dh, yk[ju])]


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
        hess, seed, x2 = self.source.hess, self.source.w.seed, self.source.x2
        part, h0, u0 = seed_part(seed, d, d // h) if hess.factored and seed is not None else (0, 0, 0)
        St = None
        if part == 1:  # seeded at W_k rows of head h0: unit c's S'[t, t'] = s x[t', c], the scale q[t, a]
            St = x.new_zeros((hess.P, B, h, T, T))
            St[:, :, h0] = (x2.view(B, T, -1).permute(2, 0, 1) / math.sqrt(d // h)).unsqueeze(2)
            hess.scale = args[0][:, h0, :, u0 : u0 + seed[2] - seed[1]].reshape(B * T, -1).contiguous()
        o, ot = self.core.forward(*args, St=St)
        if part == 2:  # seeded at v: the rows' scale is A_h0 x
            hess.scale = (self.core.A[:, h0] @ x2.view(B, T, -1)).reshape(B * T, -1)
        out = o.transpose(1, 2).reshape(B, T, d)
        return out, None if ot is None else ot.transpose(2, 3).reshape(ot.shape[0], B, T, d)

    def backward(self, g, gt):
        """(adjoint, adjoint tangent) of the packed input, from the output's."""
        B, T, d3 = self.shape
        d, h = d3 // 3, self.h
        go = g.reshape(B, T, h, d // h).transpose(1, 2)
        got = None if gt is None else gt.reshape(gt.shape[0], B, T, h, d // h).transpose(2, 3)
        factored = self.source.hess.factored
        parts = self.core.backward(go, got, rows_only=bool(factored))
        if factored:  # a sweep seeded at q, k or v (graph.Tape.row_local_weights): the columns not row by row
            add_mixed_columns(self.core, self.source, self.source.hess)
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
