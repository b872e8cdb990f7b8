"""Factored (fast) closed forms of the post-norm block: the per-token factorisation.

Every map after the attention scores is row-wise, so for token l the Jacobian of F_l, Y_l, S_l,
Z_l w.r.t. each group is a Kronecker-like product alpha_l (x) Phi_l of a vector and a small
matrix (docs/theory.md, "Per-token factorisation"). The functional part (g^T (x) I) d^2Z/dW^2
of a loss Hessian is then a sum over tokens of small contractions, with g pushed back through
LN_2, the FFN, LN_1 and the softmax; no third-order tensor is formed. Also the tiled in-place
helpers that write blocks into a large dense Hessian.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from .. import GROUPS
from .ffn import ffn_mask
from .layernorm import layernorm_forward, layernorm_hessian_contract, layernorm_jacobian_rows, layernorm_vjp
from .packed import _outer_rows, _packed_cols, _packed_outer_t, _packed_sandwich_t, _TokenSums, _unpack
from .reduced import _REDUCED_ATTENTION, REDUCED_GROUPS, _expand_pair, reduced_shapes


def _token_factors(X: torch.Tensor, p: dict, eps: float, all_groups: bool = True) -> SimpleNamespace:
    """Forward pass on X (B, L, d) plus the per-token factors alpha, Phi with

        d F_l / d vec_r(W)  [c, (i, j)] = alpha_l[i] Phi^F_l[c, j]      (W_QK, W_Q, W_V)
        d S_l / d vec_r(W)  [c, (i, j)] = alpha_l[i] Phi^S_l[c, j]      (all six)

    for W_K the roles of the two indices are swapped (the factor is indexed (r, n) instead
    of vec_r's (n, r)); :func:`_dense_jacobian` restores the order.
      W_QK: alpha = x_l,           Phi^F = W_V^T X^T J_{a_l} X / s
      W_Q: alpha = x_l,            Phi^F = W_V^T X^T J_{a_l} X W_K / s  (= Phi^F_QK W_K)
      W_K: alpha = (X W_Q)_l,      Phi^F = W_V^T X^T J_{a_l} X / s      (= Phi^F_QK)
      W_V: alpha = (A X)_l,        Phi^F = I_d
      W_1: alpha = y_l,            Phi^S[c, f] = m_lf (W_2)_fc
      W_2: alpha = ReLU(h_l),      Phi^S = I_d
    and Phi^Y = J_{1,l} Phi^F, Phi^S = (dS_l/dY_l) Phi^Y for the attention groups. W_QK is the
    product W_Q W_K^T, through which alone the scores depend on W_Q and W_K (the reduced
    parametrisation, :data:`REDUCED_GROUPS`); the W_Q and W_K factors are derived from it.
    ``all_groups=False`` skips what only the five-group Jacobian needs (the Phi of W_Q and
    W_K, Phi^S of W_1): the reduced Hessian (:func:`_reduced_upper`) does not use them.
    """
    WQ, WK, WV, W1, W2 = (p[n] for n in GROUPS)
    Bn, L, d = X.shape
    k = WQ.shape[1]
    s = math.sqrt(k)
    dt, dev = X.dtype, X.device
    Id = torch.eye(d, dtype=dt, device=dev)
    XQ, XK, XV = X @ WQ, X @ WK, X @ WV
    A = torch.softmax(XQ @ XK.transpose(-1, -2) / s, dim=-1)
    AX = A @ X
    U1 = X + A @ XV
    Y = layernorm_forward(U1, p["gamma1"], p["beta1"], eps)
    j1 = layernorm_jacobian_rows(U1, p["gamma1"], eps)
    M, R = ffn_mask(Y, W1, p["b_1"])
    S = R @ W2 + Y
    if p["b_2"] is not None:
        S = S + p["b_2"]
    Z = layernorm_forward(S, p["gamma2"], p["beta2"], eps)
    j2 = layernorm_jacobian_rows(S, p["gamma2"], eps)
    # dS_l/dY_l = I + W_2^T diag(m_l) W_1^T  (Lemma 1), [c, e]
    Js = (M @ (W2.unsqueeze(-1) * W1.T.unsqueeze(-2)).reshape(W2.shape[0], d * d)).view(Bn, L, d, d)
    Js.diagonal(0, -2, -1).add_(1.0)
    # X^T J_{a_l} X = sum_j a_lj x_j x_j^T - (A X)_l (A X)_l^T
    XX = (X.unsqueeze(-1) * X.unsqueeze(-2)).reshape(Bn, L, d * d)
    XJX = (A @ XX).view(Bn, L, d, d).addcmul_(AX.unsqueeze(-1), AX.unsqueeze(-2), value=-1.0)
    VXJX = (WV.T @ XJX).div_(s)  # W_V^T X^T J X / s
    phi_f = {"W_QK": VXJX, "W_V": Id.expand(Bn, L, d, d)}
    phi_y = {"W_QK": j1 @ VXJX, "W_V": j1}  # J_1 Phi^F (J_1 I = J_1 exactly)
    phi_s = {n: Js @ phi_y[n] for n in _REDUCED_ATTENTION}
    if all_groups:
        for phi in (phi_f, phi_y, phi_s):  # one product with the shared W_K, not a batch of them
            phi["W_Q"] = phi["W_QK"] @ WK
            phi["W_K"] = phi["W_QK"]
        phi_s["W_1"] = W2.T * M.unsqueeze(-2)  # [c, f] = W2[f, c] m_f
    phi_s["W_2"] = Id.expand(Bn, L, d, d)
    alpha = {"W_QK": X, "W_Q": X, "W_K": XQ, "W_V": AX, "W_1": Y, "W_2": R}
    return SimpleNamespace(
        X=X,
        XQ=XQ,
        XK=XK,
        XV=XV,
        A=A,
        AX=AX,
        U1=U1,
        Y=Y,
        M=M,
        R=R,
        S=S,
        Z=Z,
        j1=j1,
        j2=j2,
        Js=Js,
        XJX=XJX,
        phi_f=phi_f,
        phi_y=phi_y,
        phi_s=phi_s,
        alpha=alpha,
        p=p,
        eps=eps,
        k=k,
    )


def _dense_jacobian(f: SimpleNamespace, name: str) -> torch.Tensor:
    """dZ/dW per sample from the factors: (B, L d, p q), [(l, c), (i, j)] = alpha_l[i] (J_2 Phi^S)_l[c, j]
    (for W_K the factor's (r, n) order is transposed back to vec_r's (n, r))."""
    phi_z = f.j2 @ f.phi_s[name]
    t = torch.einsum("bli,blcj->blcij", f.alpha[name], phi_z)
    if name == "W_K":
        t = t.transpose(-1, -2)
    B, L, d = t.shape[:3]
    return t.reshape(B, L * d, -1)


def _psi_sandwich(P: torch.Tensor, Q: torch.Tensor, A: torch.Tensor, Delta: torch.Tensor) -> torch.Tensor:
    """sum_{j, J} P_jr Psi_l[j, J] Q_JR for every token l, shape (B, L, r, R), with the row
    Hessian Psi_l = diag(u_l) - u_l a_l^T - a_l u_l^T of the softmax contracted with its
    weights (u_l = Delta_l, a_l = A_l; :func:`.vec.softmax_row_hessian_contract`), without forming Psi:

        P^T diag(u_l) Q - (P^T u_l)(Q^T a_l)^T - (P^T a_l)(Q^T u_l)^T.
    """
    Bn, L = A.shape[:2]
    r, R = P.shape[-1], Q.shape[-1]
    PQ = (P.unsqueeze(-1) * Q.unsqueeze(-2)).reshape(Bn, L, r * R)
    out = (Delta @ PQ).view(Bn, L, r, R)
    pu, pa, qu, qa = Delta @ P, A @ P, Delta @ Q, A @ Q
    out.addcmul_(pu.unsqueeze(-1), qa.unsqueeze(-2), value=-1.0)
    return out.addcmul_(pa.unsqueeze(-1), qu.unsqueeze(-2), value=-1.0)


#: tokens per chunk of the token sums whose operands have (tokens x 1024) or more entries
#: (:func:`_add_token_sums`); the per-token factors, at most (tokens x d^2), are formed once for
#: all tokens. Each chunk's operands are then a few MiB, below glibc's largest mmap threshold
#: (32 MiB), so freed buffers are reused instead of being mapped afresh (page faults) on every
#: product. At the paper's shape (49 tokens, d = 16, d_ff = 64, 2 threads) chunks of 256 and 512
#: tokens were slower and 768 to 6272 equal within this machine's noise, measured while the
#: whole token sum still ran chunk by chunk.
_CHUNK_TOKENS = 1024


def _reduced_upper(f: SimpleNamespace, g: torch.Tensor):
    """The functional part over :data:`REDUCED_GROUPS`: :func:`_add_token_sums`, then
    :func:`_reduced_blocks`. Yields first ("grad", "W_QK", dl/dW_QK), then (W_i, W_j, block)
    for i <= j."""
    sums = _TokenSums()
    _add_token_sums(f, g, sums)
    yield from _reduced_blocks(sums, f)


def _functional_upper(f: SimpleNamespace, g: torch.Tensor):
    """The functional part over the five groups: :func:`_reduced_upper` expanded by
    :func:`_expand_pair`. Yields (W_i, W_j, block) for i <= j in GROUPS order, each block in the
    factor layout [i, k, j, l] (row entry (i, j) of W_i, column entry (k, l) of W_j)."""
    p = f.p
    stream = _reduced_upper(f, g)
    _, _, grad = next(stream)
    for gi, gj, t in stream:
        yield from _expand_pair(gi, gj, t, p["W_Q"], p["W_K"], grad)


def _add_token_sums(f: SimpleNamespace, g: torch.Tensor, sums: _TokenSums) -> None:
    """Add the token sums of the functional part sum_b (g_b^T (x) I) d^2Z_b/(dW_i dW_j) over the
    reduced groups to ``sums``, for X (B, L, d) and g (B, L, d) = dl/dZ per sample,
    contracted through the chain without forming d^2Z (see docs/theory.md):

      g_S = J_2^T g,  Omega_2 = <g, d^2LN_2/dS^2>,  g_Y = (dS/dY)^T g_S,
      Omega_1 = <g_Y, d^2LN_1/dU^2>,  g_F = J_1^T g_Y,
      Psi_l = <X W_V g_F,l, d^2 a_l/dt_l^2>,  Delta_l = J_{a_l} X W_V g_F,l.

    Per token n the block (W_i, W_j) is alpha_i alpha_j^T (x) C_n with C_n = Phi_i^T Omega_2 Phi_j
    (+ Phi^F_i^T Omega_1 Phi^F_j for two attention groups, + the Psi term of W_QK), plus the
    cross terms of the bilinear maps. Every sum over tokens is one gemm (:class:`_TokenSums`):
    the main terms under key ("main", W_i, W_j), the diagonal blocks over unique index pairs
    under ("sym", W_i, W_i) (about a quarter of the flops), the cross terms in their own index
    order under ("cross", W_i, W_j); :func:`_reduced_blocks` assembles the blocks. Products with
    the shared W_1, W_2 are plain matrix products, not per-token batches, and products with an
    identity factor (W_V's Phi^F) are skipped. The attention rows: :func:`_attention_token_sums`;
    the FFN's own blocks: :func:`_ffn_token_sums`.
    """
    t = _pulled_back(f, g)
    # bilinear scores: <Delta, dT/dW_QK> = X^T Delta X / s, summed over the samples
    sums.add("grad", t.flat(f.X).T, t.flat(t.Delta @ f.X))
    y, R = t.alpha["W_1"], t.alpha["W_2"]
    # one scratch buffer for the chunked left operands (d x max(d, d_ff) per token)
    scratch = y.new_empty(min(t.n, _CHUNK_TOKENS) * y.shape[1] * max(y.shape[1], R.shape[1]))
    _attention_token_sums(f, t, sums, scratch)
    _ffn_token_sums(f, t, sums, scratch)


def _pulled_back(f: SimpleNamespace, g: torch.Tensor) -> SimpleNamespace:
    """The loss gradient g (B, L, d) pushed back through LN_2, the FFN, LN_1 and the softmax
    (:func:`_add_token_sums`), and every per-token factor the token sums read, flattened to
    (B L, ...) rows (``flat``; ``n`` = B L tokens)."""
    p, eps = f.p, f.eps
    Bn, L, _ = f.X.shape
    n = Bn * L

    def flat(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(n, *x.shape[2:])

    gs = layernorm_vjp(f.S, p["gamma2"], eps, g)
    Om2 = layernorm_hessian_contract(f.S, p["gamma2"], eps, g)
    gy = (f.Js.transpose(-1, -2) @ gs.unsqueeze(-1)).squeeze(-1)
    Om1 = layernorm_hessian_contract(f.U1, p["gamma1"], eps, gy)
    gf = layernorm_vjp(f.U1, p["gamma1"], eps, gy)
    Gam = gf @ f.XV.transpose(-1, -2)  # gamma_l = X W_V g_F,l: Gam[b, l, j]
    Delta = f.A * (Gam - (f.A * Gam).sum(-1, keepdim=True))  # dl/dT, (B, L, L)
    Om2f = flat(Om2)
    gsl, Ml = flat(gs), flat(f.M)
    return SimpleNamespace(
        n=n,
        flat=flat,
        Delta=Delta,
        alpha={nm: flat(f.alpha[nm]) for nm in REDUCED_GROUPS},
        phi_s={nm: flat(f.phi_s[nm]) for nm in _REDUCED_ATTENTION},
        Om1f=flat(Om1),
        Om2f=Om2f,
        Om2p=_packed_cols(Om2f),
        gfl=flat(gf),
        gsl=gsl,
        Ml=Ml,
        h=Ml * (gsl @ f.p["W_2"].T),  # m_f (W_2 g_S)_f
    )


def _chunked(sums: _TokenSums, n: int, key, left, right) -> None:
    """sums[key] += sum over token chunks of left(sl)^T right(sl), for the terms whose operands
    have (tokens x 1024) or more entries: only one chunk of them exists at a time."""
    for c0 in range(0, n, _CHUNK_TOKENS):
        sl = slice(c0, c0 + _CHUNK_TOKENS)
        sums.add(key, left(sl).T, right(sl))


def _attention_token_sums(f: SimpleNamespace, t: SimpleNamespace, sums: _TokenSums, scratch: torch.Tensor) -> None:
    """The token sums of the rows of the two attention groups (W_QK, W_V) of :func:`_add_token_sums`:
    with each other, with W_1 and with W_2 (main and cross terms)."""
    W1, W2 = f.p["W_1"], f.p["W_2"]
    phi_s, Ml, n = t.phi_s, t.Ml, t.n
    # Phi^S_i^T Omega_2 and Phi^F_i^T Omega_1 (Phi^F of W_V is the identity)
    so2 = {nm: phi_s[nm].transpose(-1, -2) @ t.Om2f for nm in _REDUCED_ATTENTION}
    phi_qk = t.flat(f.phi_f["W_QK"])
    fo1 = {"W_QK": phi_qk.transpose(-1, -2) @ t.Om1f, "W_V": t.Om1f}

    def c_attention(gi: str, gj: str) -> torch.Tensor:
        """C_n of two attention groups: Phi^S_i^T Omega_2 Phi^S_j + Phi^F_i^T Omega_1 Phi^F_j (+ Psi)."""
        C = (so2[gi] @ phi_s[gj]).add_(fo1[gi] @ phi_qk if gj == "W_QK" else fo1[gi])
        if (gi, gj) == ("W_QK", "W_QK"):  # the softmax's own curvature
            C.add_(t.flat(_psi_sandwich(f.X, f.X, f.A, t.Delta)).div_(f.k))
        return C

    y, R, gsl = t.alpha["W_1"], t.alpha["W_2"], t.gsl
    for gi in _REDUCED_ATTENTION:
        ai = t.alpha[gi]
        phi_y = t.flat(f.phi_y[gi])
        sums.add(("sym", gi, gi), _packed_outer_t(ai.T.contiguous()), _packed_cols(c_attention(gi, gi)))
        if gi == "W_QK":
            sums.add(("main", gi, "W_V"), _outer_rows(ai, t.alpha["W_V"]).T, c_attention(gi, "W_V").reshape(n, -1))
            # F bilinear in (A, W_V): d^2<g_F, F>/(dW_QK dW_V), [m, q, p, r]
            sums.add(("cross", gi, "W_V"), _outer_rows(ai, t.gfl).T, t.flat(f.XJX).reshape(n, -1))
        # attention x W_1: C = Phi^S_i^T Omega_2 W_2^T diag(m); y-W_1 cross term of S (Lemma 1)
        # contracted with g_S, [i, f, a, j]
        _chunked(
            sums,
            n,
            ("main", gi, "W_1"),
            lambda sl, ai=ai: _outer_rows(ai[sl], y[sl], scratch),
            lambda sl, gi=gi: (so2[gi][sl] @ W2.T).mul_(Ml[sl].unsqueeze(-2)).flatten(1),
        )
        _chunked(
            sums,
            n,
            ("cross", gi, "W_1"),
            lambda sl, ai=ai: _outer_rows(ai[sl], t.h[sl], scratch),
            lambda sl, py=phi_y: py[sl].flatten(1),
        )
        # attention x W_2: C = Phi^S_i^T Omega_2; cross term [i, c, j, f] with
        # Xi = (Phi^Y^T W_1) diag(m), [n, j, f]
        _chunked(
            sums,
            n,
            ("main", gi, "W_2"),
            lambda sl, ai=ai: _outer_rows(ai[sl], R[sl], scratch),
            lambda sl, gi=gi: so2[gi][sl].flatten(1),
        )
        _chunked(
            sums,
            n,
            ("cross", gi, "W_2"),
            lambda sl, ai=ai: _outer_rows(ai[sl], gsl[sl], scratch),
            # Phi^Y^T made contiguous first: then one product with the shared W_1, not a batch
            lambda sl, py=phi_y: (py[sl].mT.contiguous() @ W1).mul_(Ml[sl].unsqueeze(-2)).flatten(1),
        )


def _ffn_token_sums(f: SimpleNamespace, t: SimpleNamespace, sums: _TokenSums, scratch: torch.Tensor) -> None:
    """The token sums of the FFN's own blocks (W_1 x W_1, W_1 x W_2, W_2 x W_2) of
    :func:`_add_token_sums`."""
    W2 = f.p["W_2"]
    y, R, Om2f, Ml, gsl, n = t.alpha["W_1"], t.alpha["W_2"], t.Om2f, t.Ml, t.gsl, t.n
    # W_1 x W_1: diag(m) W_2 Omega_2 W_2^T diag(m), the mask applied packed
    yy = _packed_outer_t(y.T.contiguous())
    _chunked(
        sums, n, ("sym", "W_1", "W_1"), lambda sl: yy[:, sl].T, lambda sl: _packed_sandwich_t(Om2f[sl], W2, Ml[sl]).T
    )
    # W_1 x W_2: C = diag(m) W_2 Omega_2, plus [a, f, f, c] += sum_n y_a m_f g_S,c
    _chunked(
        sums,
        n,
        ("main", "W_1", "W_2"),
        lambda sl: _outer_rows(y[sl], R[sl], scratch),
        lambda sl: torch.matmul(W2, Om2f[sl]).mul_(Ml[sl].unsqueeze(-1)).flatten(1),  # W_2 Omega_2 (symmetric)
    )
    _chunked(sums, n, ("diag", "W_1", "W_2"), lambda sl: _outer_rows(y[sl], Ml[sl], scratch), lambda sl: gsl[sl])
    _chunked(sums, n, ("sym", "W_2", "W_2"), lambda sl: _packed_outer_t(R[sl].T.contiguous()).T, lambda sl: t.Om2p[sl])


def _reduced_blocks(sums: _TokenSums, f: SimpleNamespace):
    """The reduced blocks from the token sums of :func:`_add_token_sums`: first ("grad", "W_QK",
    dl/dW_QK) (d x d), then (W_i, W_j, block) for i <= j over :data:`REDUCED_GROUPS`, each block
    a 4-index tensor in the factor layout [i, k, j, l] (row entry (i, j) of W_i, column entry
    (k, l) of W_j); :func:`_block_2d` makes it a matrix. Consumes ``sums``."""
    s = math.sqrt(f.k)
    yield "grad", "W_QK", sums.pop("grad").div_(s)
    shape = reduced_shapes(f.p)
    for a, gi in enumerate(REDUCED_GROUPS):
        for gj in REDUCED_GROUPS[a:]:
            (pi, qi), (pj, qj) = shape[gi], shape[gj]
            if gi == gj:
                t = _unpack(sums.pop(("sym", gi, gi)), pi, qi)
            else:
                t = sums.pop(("main", gi, gj)).view(pi, pj, qi, qj)
            cross = sums.pop(("cross", gi, gj), None)
            if (gi, gj) == ("W_QK", "W_V"):  # [m, q, p, r] -> [m, p, r, q]
                t += cross.view(pi, qj, pj, qi).permute(0, 2, 3, 1) / s
            elif gj == "W_1" and gi != "W_1":  # [i, f, a, j] -> [i, a, j, f]
                t += cross.view(pi, qj, pj, qi).permute(0, 2, 3, 1)
            elif gj == "W_2" and gi in _REDUCED_ATTENTION:  # [i, c, j, f] -> [i, f, j, c]
                t += cross.view(pi, qj, qi, pj).permute(0, 3, 2, 1)
            elif (gi, gj) == ("W_1", "W_2"):  # t[a, f, f, c] += sum_n y_a m_f g_S,c
                t.diagonal(0, 1, 2).add_(sums.pop(("diag", gi, gj)).view(pi, qi, qj).transpose(1, 2))
            yield gi, gj, t


def _block_perm(t: torch.Tensor) -> torch.Tensor:
    """[i, k, j, l] factor layout -> [i, j, k, l]: row index pair, column index pair (vec_r)."""
    return t.permute(0, 2, 1, 3)


def _block_2d(t: torch.Tensor) -> torch.Tensor:
    t = _block_perm(t)
    return t.reshape(t.shape[0] * t.shape[1], t.shape[2] * t.shape[3])


def _functional_factored(f: SimpleNamespace, g: torch.Tensor) -> dict:
    """All 25 functional blocks (dict form) from :func:`_functional_upper`."""
    out = {}
    for gi, gj, t in _functional_upper(f, g):
        blk = _block_2d(t)
        out[(gi, gj)] = blk
        if gi != gj:
            out[(gj, gi)] = blk.T
    return out


_TILE = 512


def _copy_transposed(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst <- src^T, tile by tile (a strided transpose of a large matrix is cache-hostile)."""
    m, n = src.shape
    for i in range(0, m, _TILE):
        for j in range(0, n, _TILE):
            dst[j : j + _TILE, i : i + _TILE].copy_(src[i : i + _TILE, j : j + _TILE].T)


def _symmetrize(blk: torch.Tensor) -> None:
    """blk <- (blk + blk^T)/2 in place, tile by tile (exact symmetry; gemm rounding is not)."""
    n = blk.shape[0]
    for i in range(0, n, _TILE):
        for j in range(i, n, _TILE):
            x, y = blk[i : i + _TILE, j : j + _TILE], blk[j : j + _TILE, i : i + _TILE]
            mean = 0.5 * (x + y.T)
            x.copy_(mean)
            y.copy_(mean.T)


def _write_sym(H: torch.Tensor, off: dict, gi: str, gj: str, t4: torch.Tensor) -> None:
    """Write the factor-layout block t4 into H[gi, gj] and its transpose into H[gj, gi]."""
    dst = H[off[gi], off[gj]]
    tp = _block_perm(t4)
    dst.view(tp.shape).copy_(tp)
    if gi != gj:
        _copy_transposed(H[off[gj], off[gi]], dst)
