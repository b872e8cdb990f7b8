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
from .attention import ATTENTION_GROUPS
from .ffn import ffn_mask
from .layernorm import layernorm_forward, layernorm_hessian_contract, layernorm_jacobian_rows, layernorm_vjp
from .vec import softmax_row_hessian_contract


def _token_factors(X: torch.Tensor, p: dict, eps: float) -> SimpleNamespace:
    """Forward pass on X (B, L, d) plus the per-token factors alpha, Phi with

        d F_l / d vec_r(W)  [c, (i, j)] = alpha_l[i] Phi^F_l[c, j]      (W_Q, W_V)
        d S_l / d vec_r(W)  [c, (i, j)] = alpha_l[i] Phi^S_l[c, j]      (all five)

    for W_K the roles of the two indices are swapped (the factor is indexed (r, n) instead
    of vec_r's (n, r)); :func:`_to_vec_order` restores the order at the end.
      W_Q: alpha = x_l,            Phi^F = W_V^T X^T J_{a_l} X W_K / s
      W_K: alpha = (X W_Q)_l,      Phi^F = W_V^T X^T J_{a_l} X / s
      W_V: alpha = (A X)_l,        Phi^F = I_d
      W_1: alpha = y_l,            Phi^S[c, f] = m_lf (W_2)_fc
      W_2: alpha = ReLU(h_l),      Phi^S = I_d
    and Phi^Y = J_{1,l} Phi^F, Phi^S = (dS_l/dY_l) Phi^Y for the attention groups.
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
    Js = Id + torch.einsum("fc,blf,ef->blce", W2, M, W1)
    # X^T J_{a_l} X = sum_j a_lj x_j x_j^T - (A X)_l (A X)_l^T
    XJX = torch.einsum("blj,bjm,bjn->blmn", A, X, X) - AX.unsqueeze(-1) * AX.unsqueeze(-2)
    VXJX = torch.einsum("pc,blpn->blcn", WV, XJX) / s  # W_V^T X^T J X / s
    phi_f = {
        "W_Q": VXJX @ WK,
        "W_K": VXJX,
        "W_V": Id.expand(Bn, L, d, d),
    }
    phi_y = {n: j1 @ phi_f[n] for n in ATTENTION_GROUPS}
    phi_s = {n: Js @ phi_y[n] for n in ATTENTION_GROUPS}
    phi_s["W_1"] = W2.T * M.unsqueeze(-2)  # [c, f] = W2[f, c] m_f
    phi_s["W_2"] = Id.expand(Bn, L, d, d)
    alpha = {"W_Q": X, "W_K": XQ, "W_V": AX, "W_1": Y, "W_2": R}
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


def _to_vec_order(t: torch.Tensor, gi: str, gj: str | None = None) -> torch.Tensor:
    """Undo the (r, n) index order of the W_K factor on a 4-index block [i, j, i', j']
    (gj given) or on a trailing pair of a Jacobian [..., i, j] (gj None)."""
    if gj is None:
        return t.transpose(-1, -2) if gi == "W_K" else t
    if gi == "W_K":
        t = t.permute(1, 0, 2, 3)
    if gj == "W_K":
        t = t.permute(0, 1, 3, 2)
    return t


def _dense_jacobian(f: SimpleNamespace, name: str) -> torch.Tensor:
    """dZ/dW per sample from the factors: (B, L d, p q), [(l, c), (i, j)] = alpha_l[i] (J_2 Phi^S)_l[c, j]."""
    phi_z = f.j2 @ f.phi_s[name]
    t = torch.einsum("bli,blcj->blcij", f.alpha[name], phi_z)
    t = _to_vec_order(t, name)
    B, L, d = t.shape[:3]
    return t.reshape(B, L * d, -1)


def _functional_upper(f: SimpleNamespace, g: torch.Tensor):
    """sum_b (g_b^T (x) I) d^2Z_b/(dW_i dW_j) for X (B, L, d), g (B, L, d) = dl/dZ per sample,
    contracted through the chain without forming d^2Z (see docs/theory.md):

      g_S = J_2^T g,  Omega_2 = <g, d^2LN_2/dS^2>,  g_Y = (dS/dY)^T g_S,
      Omega_1 = <g_Y, d^2LN_1/dU^2>,  g_F = J_1^T g_Y,
      Psi_l = <X W_V g_F,l, d^2 a_l/dt_l^2>,  Delta_l = J_{a_l} X W_V g_F,l.

    Yields (W_i, W_j, block) for i <= j in GROUPS order, one at a time (bounded memory), each
    block a 4-index tensor in the factor layout [i, k, j, l] (row entry (i, j) of W_i, column
    entry (k, l) of W_j, W_K's two indices swapped); :func:`_block_2d` makes it a matrix.
    """
    p = f.p
    eps = f.eps
    W1, W2 = p["W_1"], p["W_2"]
    Bn, L, d = f.X.shape
    k = f.k
    s = math.sqrt(k)
    dt, dev = f.X.dtype, f.X.device
    gs = layernorm_vjp(f.S, p["gamma2"], eps, g)
    Om2 = layernorm_hessian_contract(f.S, p["gamma2"], eps, g)
    gy = torch.einsum("blce,blc->ble", f.Js, gs)
    Om1 = layernorm_hessian_contract(f.U1, p["gamma1"], eps, gy)
    gf = layernorm_vjp(f.U1, p["gamma1"], eps, gy)
    Gam = torch.einsum("bje,ble->blj", f.XV, gf)  # gamma_l = X W_V g_F,l
    Psi = softmax_row_hessian_contract(f.A, Gam)  # (B, L, L, L)
    Delta = f.A * (Gam - (f.A * Gam).sum(-1, keepdim=True))  # dl/dT, (B, L, L)
    n = Bn * L

    def flat(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(n, *t.shape[2:])

    alpha = {nm: flat(v) for nm, v in f.alpha.items()}
    om2phi = {nm: Om2 @ f.phi_s[nm] for nm in GROUPS}
    om1phi = {nm: Om1 @ f.phi_f[nm] for nm in ATTENTION_GROUPS}
    gfl, gsl, Ml = flat(gf), flat(gs), flat(f.M)
    h = Ml * (gsl @ W2.T)  # m_f (W_2 g_S)_f
    for a, gi in enumerate(GROUPS):
        for gj in GROUPS[a:]:
            # per token: C = Phi_i^T Omega Phi_j (+ Psi terms); block = sum_n alpha_i alpha_j^T (x) C
            C = f.phi_s[gi].transpose(-1, -2) @ om2phi[gj]
            if gi in ATTENTION_GROUPS and gj in ATTENTION_GROUPS:
                C = C + f.phi_f[gi].transpose(-1, -2) @ om1phi[gj]
            if (gi, gj) == ("W_Q", "W_Q"):
                C = C + torch.einsum("bjr,bljJ,bJR->blrR", f.XK, Psi, f.XK) / k
            elif (gi, gj) == ("W_K", "W_K"):
                C = C + torch.einsum("bjm,bljJ,bJn->blmn", f.X, Psi, f.X) / k
            elif (gi, gj) == ("W_Q", "W_K"):
                C = C + torch.einsum("bjr,bljJ,bJn->blrn", f.XK, Psi, f.X) / k
            ai, aj = alpha[gi], alpha[gj]
            left = (ai.unsqueeze(2) * aj.unsqueeze(1)).reshape(n, -1)
            Cf = flat(C)
            del C
            t = (left.T @ Cf.reshape(n, -1)).view(ai.shape[1], aj.shape[1], Cf.shape[1], Cf.shape[2])
            del left, Cf
            if (gi, gj) == ("W_Q", "W_K"):
                # bilinear scores: <Delta, d^2T/(dW_Q dW_K)> = (X^T Delta X) (x) I_k / s
                XDX = torch.einsum("blm,blj,bjn->mn", f.X, Delta, f.X)
                t += torch.einsum("mn,rR->mRrn", XDX, torch.eye(k, dtype=dt, device=dev)) / s
            elif (gi, gj) == ("W_Q", "W_V"):
                # F bilinear in (A, W_V): d^2<g_F, F>/(dW_Q dW_V)
                t += torch.einsum("nq,nm,npr->mprq", gfl, ai, flat(f.XJX @ p["W_K"]) / s)
            elif (gi, gj) == ("W_K", "W_V"):
                t += torch.einsum("nq,nr,npN->rpNq", gfl, ai, flat(f.XJX) / s)
            elif gi in ATTENTION_GROUPS and gj == "W_1":
                # y-W_1 cross term of S (Lemma 1) contracted with g_S
                t += torch.einsum("ni,naj,nf->iajf", ai, flat(f.phi_y[gi]), h)
            elif gi in ATTENTION_GROUPS and gj == "W_2":
                Xi = torch.einsum("naj,af,nf->njf", flat(f.phi_y[gi]), W1, Ml)
                t += torch.einsum("ni,njf,nc->ifjc", ai, Xi, gsl)
            elif (gi, gj) == ("W_1", "W_2"):
                ymg = torch.einsum("na,nf,nc->afc", ai, Ml, gsl)
                If = torch.eye(W1.shape[1], dtype=dt, device=dev)
                t += torch.einsum("afc,fF->aFfc", ymg, If)
            yield gi, gj, t


def _block_perm(t: torch.Tensor, gi: str, gj: str) -> torch.Tensor:
    """[i, k, j, l] factor layout -> [row index pair, column index pair] in vec_r order."""
    t = t.permute(0, 2, 1, 3)  # i, j, k, l
    return _to_vec_order(t, gi, gj)


def _block_2d(t: torch.Tensor, gi: str, gj: str) -> torch.Tensor:
    t = _block_perm(t, gi, gj)
    return t.reshape(t.shape[0] * t.shape[1], t.shape[2] * t.shape[3])


def _functional_factored(f: SimpleNamespace, g: torch.Tensor) -> dict:
    """All 25 functional blocks (dict form) from :func:`_functional_upper`."""
    out = {}
    for gi, gj, t in _functional_upper(f, g):
        blk = _block_2d(t, gi, gj)
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


def _write_sym(H: torch.Tensor, off: dict, gi: str, gj: str, t4: torch.Tensor, add: bool) -> None:
    """Write (or add) the factor-layout block t4 into H[gi, gj] and its transpose into H[gj, gi]."""
    dst = H[off[gi], off[gj]]
    tp = _block_perm(t4, gi, gj)
    dst4 = dst.view(tp.shape)
    if add:
        dst4.add_(tp)
    else:
        dst4.copy_(tp)
    if gi != gj:
        _copy_transposed(H[off[gj], off[gi]], dst)
