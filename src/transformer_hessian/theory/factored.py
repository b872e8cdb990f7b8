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

#: Groups of the reduced parametrisation. The scores X W_Q W_K^T X^T / s depend on W_Q and W_K
#: only through their product W_QK = W_Q W_K^T (d x d), so every Hessian block over W_Q, W_K
#: follows from the W_QK block by the chain rule (:func:`_expand_pair`, docs/theory.md §19).
#: The functional part is summed over tokens in these four groups, not the five.
REDUCED_GROUPS = ("W_QK", "W_V", "W_1", "W_2")
_REDUCED_ATTENTION = ("W_QK", "W_V")


def _token_factors(X: torch.Tensor, p: dict, eps: float) -> SimpleNamespace:
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
    parametrisation, :data:`REDUCED_GROUPS`); the W_Q and W_K factors are derived from its.
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
    Js = Id + (M @ (W2.unsqueeze(-1) * W1.T.unsqueeze(-2)).reshape(W2.shape[0], d * d)).view(Bn, L, d, d)
    # X^T J_{a_l} X = sum_j a_lj x_j x_j^T - (A X)_l (A X)_l^T
    XX = (X.unsqueeze(-1) * X.unsqueeze(-2)).reshape(Bn, L, d * d)
    XJX = (A @ XX).view(Bn, L, d, d) - AX.unsqueeze(-1) * AX.unsqueeze(-2)
    VXJX = (WV.T @ XJX) / s  # W_V^T X^T J X / s
    phi_f = {"W_QK": VXJX, "W_V": Id.expand(Bn, L, d, d)}
    phi_y = {"W_QK": j1 @ VXJX, "W_V": j1}  # J_1 Phi^F (J_1 I = J_1 exactly)
    phi_s = {n: Js @ phi_y[n] for n in _REDUCED_ATTENTION}
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


def _pair_sum(ai: torch.Tensor, aj: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """sum_n ai[n, a] aj[n, a'] C[n, c, c'] as a 4-index tensor [a, a', c, c'], one gemm over n.

    Cost 2 n p p' q q' flops: (ai (x) aj)^T (n x p p') times C (n x q q')."""
    n = ai.shape[0]
    left = (ai.unsqueeze(2) * aj.unsqueeze(1)).reshape(n, -1)
    return (left.T @ C.reshape(n, -1)).view(ai.shape[1], aj.shape[1], C.shape[1], C.shape[2])


def _packed_index(m: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows, cols, map) of the upper triangle of an m x m matrix: map[a, b] is the position of
    (min(a, b), max(a, b)) in the packed list of pairs (rows[k], cols[k]), k < m (m + 1) / 2."""
    rows, cols = torch.triu_indices(m, m, device=device)
    pos = torch.empty(m, m, dtype=torch.long, device=device)
    k = torch.arange(rows.numel(), device=device)
    pos[rows, cols] = k
    pos[cols, rows] = k
    return rows, cols, pos


def _pair_sum_sym(a: torch.Tensor, C: torch.Tensor, packed: bool = False) -> torch.Tensor:
    """:func:`_pair_sum` (a, a, C) for C[n] symmetric (q x q), or C already packed (n, q (q + 1) / 2)
    in the order of :func:`_packed_index` (``packed``). The result is symmetric in (a, a') and in
    (c, c') separately, so only the unique pairs enter the gemm (about a quarter of the flops);
    C's upper triangle is used (its exact symmetry is not required)."""
    n, p = a.shape
    q = int(round((math.sqrt(8 * C.shape[1] + 1) - 1) / 2)) if packed else C.shape[1]
    ra, ca, ma = _packed_index(p, a.device)
    rc, cc, mc = _packed_index(q, a.device)
    right = C if packed else C.reshape(n, q * q)[:, rc * q + cc]
    # row gathers of the transposed factor are contiguous copies (a column gather is not)
    aT = a.T.contiguous()
    leftT = aT.index_select(0, ra).mul_(aT.index_select(0, ca))  # (p (p + 1) / 2, n)
    T = leftT @ right
    return T.index_select(0, ma.reshape(-1)).index_select(1, mc.reshape(-1)).view(p, p, q, q)


def _packed_sandwich(Om: torch.Tensor, W: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Upper triangle, packed as in :func:`_packed_index`, of diag(m_n) W Om_n W^T diag(m_n) for
    symmetric Om (n, e, e), W (f, e), m (n, f): one gemm of Om's packed upper triangle with
    W2P[(e, e'), (f, f')] = W_fe W_f'e' + [e != e'] W_fe' W_f'e, then the mask m_f m_f'."""
    n, e = Om.shape[:2]
    f = W.shape[0]
    re, ce, _ = _packed_index(e, Om.device)
    rf, cf, _ = _packed_index(f, Om.device)
    Wr, Wc = W[rf], W[cf]  # (f pairs, e)
    W2P = Wr[:, re] * Wc[:, ce] + (re != ce) * (Wr[:, ce] * Wc[:, re])  # (f pairs, e pairs)
    out = Om.reshape(n, e * e).index_select(1, re * e + ce) @ W2P.T
    return out.mul_(m.index_select(1, rf)).mul_(m.index_select(1, cf))


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
    return out - pu.unsqueeze(-1) * qa.unsqueeze(-2) - pa.unsqueeze(-1) * qu.unsqueeze(-2)


#: tokens per chunk of the whole functional part (:func:`_functional_upper`), which bounds its
#: per-token temporaries on large problems. Not smaller: every chunk repeats the few hundred
#: small per-token kernels. At the paper's shape (6272 tokens), 1024-token chunks doubled the
#: 2-thread CPU time in an ad-hoc test on the loaded shared machine (OMP_WAIT_POLICY=PASSIVE
#: was set), though one benchmark run there gave the opposite; the cause is not pinned down.
_CHUNK_TOKENS = 8192
#: tokens per chunk of the two packed FFN diagonal blocks, whose (tokens x 2080) temporaries
#: dominate the peak memory at d_ff = 64.
_PACKED_CHUNK = 2048


def _slice_factors(f: SimpleNamespace, b0: int, b1: int) -> SimpleNamespace:
    """The factors of samples b0:b1 (every per-sample tensor, also inside dicts, sliced on
    its batch axis; parameters and scalars shared)."""
    Bn = f.X.shape[0]

    def cut(v):
        if isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == Bn:
            return v[b0:b1]
        if isinstance(v, dict) and v is not f.p:
            return {k: cut(x) for k, x in v.items()}
        return v

    return SimpleNamespace(**{k: cut(v) for k, v in vars(f).items()})


def _reduced_upper(f: SimpleNamespace, g: torch.Tensor, chunk_tokens: int | None = None):
    """:func:`_functional_chunk` summed over chunks of whole samples (about ``chunk_tokens``
    tokens each): every block is a sum over tokens, so the per-chunk blocks add up exactly to
    the full ones, while the per-token temporaries shrink to one chunk. Yields what
    :func:`_functional_chunk` yields: first the score gradient, then the reduced blocks."""
    Bn, L = f.X.shape[:2]
    cb = max(1, (chunk_tokens or _CHUNK_TOKENS) // L)
    if cb >= Bn:
        yield from _functional_chunk(f, g)
        return
    acc = {}
    for b0 in range(0, Bn, cb):
        b1 = min(Bn, b0 + cb)
        for gi, gj, t in _functional_chunk(_slice_factors(f, b0, b1), g[b0:b1]):
            if (gi, gj) in acc:
                acc[(gi, gj)].add_(t)
            else:
                acc[(gi, gj)] = t
            del t
    for key in list(acc):  # the first chunk's order: the gradient first
        yield (*key, acc.pop(key))


def _expand_rows(t: torch.Tensor, to: str, WQ: torch.Tensor, WK: torch.Tensor) -> torch.Tensor:
    """Row group W_QK -> W_Q or W_K of a factor-layout block [i, k, j, l] (row entry (i, j)):
    dW_QK[i, j]/dW_Q[i, a] = W_K[j, a] and dW_QK[i, j]/dW_K[j, a] = W_Q[i, a]."""
    if to == "W_Q":
        return torch.einsum("ikjl,ja->ikal", t, WK)
    return torch.einsum("ikjl,ia->jkal", t, WQ)


def _expand_cols(t: torch.Tensor, to: str, WQ: torch.Tensor, WK: torch.Tensor) -> torch.Tensor:
    """Column group W_QK -> W_Q or W_K of a factor-layout block [i, k, j, l] (column entry (k, l))."""
    if to == "W_Q":
        return torch.einsum("ikjl,la->ikja", t, WK)
    return torch.einsum("ikjl,ka->ilja", t, WQ)


def _expand_pair(gi: str, gj: str, t: torch.Tensor, WQ: torch.Tensor, WK: torch.Tensor, grad=None):
    """The five-group blocks of one reduced block (gi <= gj in :data:`REDUCED_GROUPS` order):
    W_QK becomes W_Q and W_K by the chain rule, H_QQ = D_Q^T H_QK,QK D_Q with D_Q = dW_QK/dW_Q
    and so on. ``grad`` = dl/dW_QK (d x d) adds the term of the bilinear map itself to the
    (W_Q, W_K) block, d^2 W_QK[i, k]/(dW_Q[i, a] dW_K[k, a']) = [a = a']:
    (W_Q[i, a], W_K[k, a']) += grad[i, k] [a = a']; pass it for the functional part only.
    Yields (W_i, W_j, block) in the factor layout, i <= j in GROUPS order."""
    rows = ("W_Q", "W_K") if gi == "W_QK" else (gi,)
    cols = ("W_Q", "W_K") if gj == "W_QK" else (gj,)
    for a, ri in enumerate(rows):
        tr = _expand_rows(t, ri, WQ, WK) if gi == "W_QK" else t
        for cj in cols[a if gi == gj else 0 :]:
            tc = _expand_cols(tr, cj, WQ, WK) if gj == "W_QK" else tr
            if (ri, cj) == ("W_Q", "W_K") and grad is not None:
                tc.diagonal(0, 2, 3).add_(grad.unsqueeze(-1))
            yield ri, cj, tc


def _functional_upper(f: SimpleNamespace, g: torch.Tensor, chunk_tokens: int | None = None):
    """The functional part over the five groups: :func:`_reduced_upper` expanded by
    :func:`_expand_pair`. Yields (W_i, W_j, block) for i <= j in GROUPS order, each block in the
    factor layout [i, k, j, l] (row entry (i, j) of W_i, column entry (k, l) of W_j)."""
    p = f.p
    stream = _reduced_upper(f, g, chunk_tokens)
    _, _, grad = next(stream)
    for gi, gj, t in stream:
        yield from _expand_pair(gi, gj, t, p["W_Q"], p["W_K"], grad)


def _functional_chunk(f: SimpleNamespace, g: torch.Tensor):
    """sum_b (g_b^T (x) I) d^2Z_b/(dW_i dW_j) for X (B, L, d), g (B, L, d) = dl/dZ per sample,
    contracted through the chain without forming d^2Z (see docs/theory.md):

      g_S = J_2^T g,  Omega_2 = <g, d^2LN_2/dS^2>,  g_Y = (dS/dY)^T g_S,
      Omega_1 = <g_Y, d^2LN_1/dU^2>,  g_F = J_1^T g_Y,
      Psi_l = <X W_V g_F,l, d^2 a_l/dt_l^2>,  Delta_l = J_{a_l} X W_V g_F,l.

    Yields first ("grad", "W_QK", dl/dW_QK), the score gradient X^T Delta X / s summed over the
    samples (d x d), which :func:`_expand_pair` needs; then (W_i, W_j, block) for i <= j over
    the reduced groups :data:`REDUCED_GROUPS`, one at a time (bounded memory), each block a
    4-index tensor in the factor layout [i, k, j, l] (row entry (i, j) of W_i, column entry
    (k, l) of W_j); :func:`_block_2d` makes it a matrix.

    Per token n the block is alpha_i alpha_j^T (x) C_n with C_n = Phi_i^T Omega_2 Phi_j
    (+ Phi^F_i^T Omega_1 Phi^F_j for two attention groups, + the Psi term of W_QK), plus
    the cross terms of the bilinear maps; every sum over the n = B L tokens is one gemm
    (:func:`_pair_sum`), the diagonal blocks use only unique index pairs (:func:`_pair_sum_sym`),
    and products with the shared W_2 are plain matrix products, not per-token batches.
    """
    p = f.p
    eps = f.eps
    W1, W2 = p["W_1"], p["W_2"]
    Bn, L, d = f.X.shape
    k = f.k
    s = math.sqrt(k)
    gs = layernorm_vjp(f.S, p["gamma2"], eps, g)
    Om2 = layernorm_hessian_contract(f.S, p["gamma2"], eps, g)
    gy = (f.Js.transpose(-1, -2) @ gs.unsqueeze(-1)).squeeze(-1)
    Om1 = layernorm_hessian_contract(f.U1, p["gamma1"], eps, gy)
    gf = layernorm_vjp(f.U1, p["gamma1"], eps, gy)
    Gam = gf @ f.XV.transpose(-1, -2)  # gamma_l = X W_V g_F,l: Gam[b, l, j]
    Delta = f.A * (Gam - (f.A * Gam).sum(-1, keepdim=True))  # dl/dT, (B, L, L)
    n = Bn * L

    def flat(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(n, *t.shape[2:])

    alpha = {nm: flat(f.alpha[nm]) for nm in REDUCED_GROUPS}
    phi_s = {nm: flat(f.phi_s[nm]) for nm in _REDUCED_ATTENTION}
    phi_f = {nm: flat(f.phi_f[nm]) for nm in _REDUCED_ATTENTION}
    Om1f, Om2f = flat(Om1), flat(Om2)
    gfl, gsl, Ml = flat(gf), flat(gs), flat(f.M)
    # Phi^S_i^T Omega_2 (attention groups) and Omega_1 Phi^F_j
    so2 = {nm: phi_s[nm].transpose(-1, -2) @ Om2f for nm in _REDUCED_ATTENTION}
    o1f = {nm: Om1f @ phi_f[nm] for nm in _REDUCED_ATTENTION}
    Om2W2 = Om2f @ W2.T  # (n, d, f): Omega_2 W_2^T, one gemm with the shared W_2
    h = Ml * (gsl @ W2.T)  # m_f (W_2 g_S)_f

    def c_matrix(gi: str, gj: str) -> torch.Tensor:
        """C_n = Phi^S_i^T Omega_2 Phi^S_j (+ Omega_1 and Psi terms), (n, q_i, q_j)."""
        if gi in _REDUCED_ATTENTION:
            if gj == "W_2":
                return so2[gi]
            if gj == "W_1":
                return (so2[gi] @ W2.T) * Ml.unsqueeze(-2)
            C = so2[gi] @ phi_s[gj] + phi_f[gi].transpose(-1, -2) @ o1f[gj]
            if (gi, gj) == ("W_QK", "W_QK"):  # the softmax's own curvature
                C = C + flat(_psi_sandwich(f.X, f.X, f.A, Delta)) / k
            return C
        if (gi, gj) == ("W_1", "W_2"):
            return Om2W2.transpose(-1, -2) * Ml.unsqueeze(-1)
        return Om2f  # W_2, W_2

    # bilinear scores: <Delta, dT/dW_QK> = X^T Delta X / s, summed over the samples
    yield "grad", "W_QK", flat(f.X).T @ flat(Delta @ f.X) / s
    for a, gi in enumerate(REDUCED_GROUPS):
        for gj in REDUCED_GROUPS[a:]:
            ai, aj = alpha[gi], alpha[gj]
            if (gi, gj) == ("W_1", "W_1"):  # diag(m) W_2 Omega_2 W_2^T diag(m), mask applied packed
                # the packed (tokens, d_ff (d_ff + 1) / 2) temporaries are the largest: a few token chunks
                t = None
                for c0 in range(0, n, _PACKED_CHUNK):
                    sl = slice(c0, c0 + _PACKED_CHUNK)
                    tc = _pair_sum_sym(ai[sl], _packed_sandwich(Om2f[sl], W2, Ml[sl]), packed=True)
                    t = tc if t is None else t.add_(tc)
                    del tc
            elif (gi, gj) == ("W_2", "W_2"):
                t = None
                for c0 in range(0, n, _PACKED_CHUNK):
                    sl = slice(c0, c0 + _PACKED_CHUNK)
                    tc = _pair_sum_sym(ai[sl], Om2f[sl])
                    t = tc if t is None else t.add_(tc)
                    del tc
            else:
                C = c_matrix(gi, gj)
                t = _pair_sum_sym(ai, C) if gi == gj else _pair_sum(ai, aj, C)
                del C
            if (gi, gj) == ("W_QK", "W_V"):
                # F bilinear in (A, W_V): d^2<g_F, F>/(dW_QK dW_V); [m, q, p, r] -> [m, p, r, q]
                t += _pair_sum(ai, gfl, flat(f.XJX)).permute(0, 2, 3, 1) / s
            elif gi in _REDUCED_ATTENTION and gj == "W_1":
                # y-W_1 cross term of S (Lemma 1) contracted with g_S; [i, f, a, j] -> [i, a, j, f]
                t += _pair_sum(ai, h, flat(f.phi_y[gi])).permute(0, 2, 3, 1)
            elif gi in _REDUCED_ATTENTION and gj == "W_2":
                Xi = (flat(f.phi_y[gi]).transpose(-1, -2) @ W1) * Ml.unsqueeze(-2)  # [n, j, f]
                # [i, c, j, f] -> [i, f, j, c]
                t += _pair_sum(ai, gsl, Xi).permute(0, 3, 2, 1)
            elif (gi, gj) == ("W_1", "W_2"):
                # t[a, f, f, c] += sum_n y_a m_f g_S,c
                ymg = ((ai.unsqueeze(2) * Ml.unsqueeze(1)).reshape(n, -1).T @ gsl).view(ai.shape[1], -1, gsl.shape[1])
                t.diagonal(0, 1, 2).add_(ymg.transpose(1, 2))
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
