"""The full post-norm block (paper's Theorems 4-5) and the loss Hessians built on it.

Block on one sample X in R^{L x d}:

    T = X W_Q W_K^T X^T / sqrt(d_K),  A = softmax_row(T),  F = A X W_V
    U_1 = X + F,  Y = LN_1(U_1),  S = ReLU(Y W_1 + b_1) W_2 + b_2 + Y,  Z = LN_2(S).

Two ways to the same numbers:

* *materialised* (paper's formulas verbatim, small sizes): Jacobians as Kronecker products and
  the stacked third-order tensors d^2Z/(dW_i dW_j), assembled with
  d^2Z/(dW_i dW_j) = (J_Z (x) I_{n_i}) xi_ij + (I_{L d} (x) B_i^T) H_Z B_j.
* *factored* (fast): every map after the scores is row-wise, so for token l the Jacobian of
  F_l, Y_l, S_l, Z_l w.r.t. each group is a Kronecker-like product alpha_l (x) Phi_l of a
  vector and a small matrix (see docs/theory.md, "Per-token factorisation"). The functional
  part (g^T (x) I) d^2Z/dW^2 is then a sum over tokens of small contractions, with g pushed
  back through LN_2, the FFN, LN_1 and the softmax; no third-order tensor is formed.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import NamedTuple

import torch

from .. import GROUPS
from .attention import (
    ATTENTION_GROUPS,
    attention_forward,
    attention_jacobians,
    attention_second_derivatives,
)
from .ffn import ffn_forward, ffn_jacobians, ffn_mask, ffn_second_derivatives
from .layernorm import (
    layernorm_forward,
    layernorm_hessian,
    layernorm_hessian_contract,
    layernorm_jacobian,
    layernorm_jacobian_rows,
    layernorm_vjp,
)
from .vec import chain_rule_second, contract_stacked, softmax_row_hessian_contract

__all__ = [
    "HessianResult",
    "group_shapes",
    "blocks_to_dense",
    "dense_to_blocks",
    "block_forward",
    "block_jacobians",
    "block_output_hessian",
    "block_hessian_from_loss_derivatives",
    "block_loss_hessian_parts",
    "block_loss_hessian",
    "model_loss_hessian_parts",
    "model_loss_hessian",
]

_PARAM_KEYS = ("W_Q", "W_K", "W_V", "W_1", "W_2", "gamma1", "beta1", "gamma2", "beta2")


class HessianResult(NamedTuple):
    """A Hessian over the five groups: ``dense`` (P x P, GROUPS order) and ``blocks``
    ({(name_i, name_j): (p_i q_i) x (p_j q_j)}, views into ``dense``)."""

    dense: torch.Tensor
    blocks: dict


# ----------------------------------------------------------------------------- helpers


def _prep(params: dict) -> dict:
    missing = [k for k in _PARAM_KEYS if k not in params]
    if missing:
        raise KeyError(
            f"theory params are missing {missing}; expected keys {list(_PARAM_KEYS)} "
            "(optionally b_1, b_2), e.g. from PostNormBlock.theory_params()"
        )
    p = {k: params[k].detach() for k in _PARAM_KEYS}
    for k in ("b_1", "b_2"):
        v = params.get(k)
        p[k] = None if v is None else v.detach()
    return p


def group_shapes(params: dict) -> dict[str, tuple[int, int]]:
    """{name: (p, q)} for the five groups, in GROUPS order."""
    return {n: tuple(params[n].shape) for n in GROUPS}


def blocks_to_dense(blocks: dict, shapes: dict[str, tuple[int, int]]) -> torch.Tensor:
    """Assemble {(i, j): block} into the dense P x P matrix in GROUPS order."""
    sizes = [shapes[n][0] * shapes[n][1] for n in GROUPS]
    return torch.cat([torch.cat([blocks[(i, j)] for j in GROUPS], 1) for i in GROUPS], 0).reshape(
        sum(sizes), sum(sizes)
    )


def dense_to_blocks(H: torch.Tensor, shapes: dict[str, tuple[int, int]]) -> dict:
    """Views {(i, j): H[rows of W_i, cols of W_j]} of a dense P x P matrix (GROUPS order)."""
    off, o = {}, 0
    for n in GROUPS:
        sz = shapes[n][0] * shapes[n][1]
        off[n] = (o, o + sz)
        o += sz
    return {(i, j): H[off[i][0] : off[i][1], off[j][0] : off[j][1]] for i in GROUPS for j in GROUPS}


@torch.no_grad()
def block_forward(X: torch.Tensor, params: dict, eps: float = 1e-5) -> torch.Tensor:
    """Z = LN_2(ReLU(Y W_1 + b_1) W_2 + b_2 + Y), Y = LN_1(X + softmax_row(X W_Q W_K^T X^T /
    sqrt(d_K)) X W_V). X of shape (L, d) or (B, L, d)."""
    with torch.no_grad():
        p = _prep(params)
        X = X.detach()
        F = attention_forward(X, p["W_Q"], p["W_K"], p["W_V"])["F"]
        Y = layernorm_forward(X + F, p["gamma1"], p["beta1"], eps)
        S = ffn_forward(Y, p["W_1"], p["W_2"], p["b_1"], p["b_2"])
        return layernorm_forward(S, p["gamma2"], p["beta2"], eps)


# ------------------------------------------------------------------ materialised path


def _materialised_first(X: torch.Tensor, p: dict, eps: float) -> SimpleNamespace:
    F = attention_forward(X, p["W_Q"], p["W_K"], p["W_V"])["F"]
    U1 = X + F
    Y = layernorm_forward(U1, p["gamma1"], p["beta1"], eps)
    S = ffn_forward(Y, p["W_1"], p["W_2"], p["b_1"], p["b_2"])
    J1 = layernorm_jacobian(U1, p["gamma1"], p["beta1"], eps)
    J2 = layernorm_jacobian(S, p["gamma2"], p["beta2"], eps)
    dF = attention_jacobians(X, p)
    dffn = ffn_jacobians(Y, p["W_1"], p["W_2"], p["b_1"])
    dY = {n: J1 @ dF[n] for n in ATTENTION_GROUPS}
    dS = {n: dffn["Y"] @ dY[n] for n in ATTENTION_GROUPS}
    dS["W_1"], dS["W_2"] = dffn["W_1"], dffn["W_2"]
    return SimpleNamespace(U1=U1, Y=Y, S=S, J1=J1, J2=J2, dF=dF, dY=dY, dS=dS, JS=dffn["Y"])


@torch.no_grad()
def block_jacobians(X: torch.Tensor, params: dict, eps: float = 1e-5, method: str = "kron") -> dict:
    """dZ/dW_i, (L d) x (p_i q_i), for the five groups (Theorems 4-5, first order):

        dZ/dW_i = J_2 B_i,   J_2 = dLN_2/dS (Theorem 2),   B_i = dS/dW_i with
        B_{W_1} = (I_L (x) W_2^T) D_M (Y (x) I_{d_ff}),  B_{W_2} = ReLU(Y W_1 + b_1) (x) I_d  (Lemma 1),
        B_{W_a} = (dS/dY) J_1 dF/dW_a for W_a in {W_Q, W_K, W_V} (LN_1 in the path),
        dS/dY = I + (I_L (x) W_2^T) D_M (I_L (x) W_1^T),  dF/dW_a from Ormaniec et al. (2025).

    ``method="kron"`` builds the Kronecker products; ``"factored"`` uses the per-token
    factorisation (same numbers, cheaper at large sizes).
    """
    with torch.no_grad():
        p = _prep(params)
        X = X.detach()
        if method == "factored":
            f = _token_factors(X.unsqueeze(0), p, eps)
            return {n: _dense_jacobian(f, n)[0] for n in GROUPS}
        if method != "kron":
            raise ValueError(f"method={method!r}: use 'kron' or 'factored'")
        m = _materialised_first(X, p, eps)
        return {n: m.J2 @ m.dS[n] for n in GROUPS}


@torch.no_grad()
def block_output_hessian(X: torch.Tensor, params: dict, eps: float = 1e-5) -> dict:
    """Stacked d^2Z/(dW_i dW_j), (L d p_i q_i) x (p_j q_j), all 25 ordered pairs (Thms 4-5):

        d^2Z/(dW_i dW_j) = (J_2 (x) I_{n_i}) xi_ij + (I_{L d} (x) B_i^T) H_2 B_j,

    H_2 = d^2LN_2/dS^2 (Theorem 3), B_i = dS/dW_i, xi_ij = d^2S/(dW_i dW_j):
      attention x attention: xi = (dS/dY (x) I) d^2Y_ij (d^2S/dY^2 = 0, Lemma 1), with
          d^2Y_ij = (J_1 (x) I) d^2F_ij + (I (x) (dF/dW_i)^T) H_1 dF/dW_j   (LN_1 in the path);
      attention i, FFN j: xi = (I (x) (dY/dW_i)^T) d^2S/(dY dW_j);
      FFN i, attention j: xi = d^2S/(dW_i dY) dY/dW_j;
      FFN x FFN: Lemma 1 (W_1-W_1 and W_2-W_2 vanish, only the W_1-W_2 cross term remains).
    Materialised third-order tensors: use for small sizes (tests, illustrations).
    """
    with torch.no_grad():
        p = _prep(params)
        X = X.detach()
        m = _materialised_first(X, p, eps)
        L, d = X.shape
        n_out = L * d
        H1 = layernorm_hessian(m.U1, p["gamma1"], p["beta1"], eps)
        H2 = layernorm_hessian(m.S, p["gamma2"], p["beta2"], eps)
        d2F = attention_second_derivatives(X, p)
        d2S = ffn_second_derivatives(m.Y, p["W_1"], p["W_2"], p["b_1"])
        out = {}
        for i in GROUPS:
            ni = m.dS[i].shape[1]
            for j in GROUPS:
                nj = m.dS[j].shape[1]
                if i in ATTENTION_GROUPS and j in ATTENTION_GROUPS:
                    d2Y = chain_rule_second(m.J1, H1, m.dF[i], m.dF[j], d2F[(i, j)])
                    xi = chain_rule_second(m.JS, None, m.dY[i], m.dY[j], d2Y)
                elif i in ATTENTION_GROUPS:
                    t = d2S[("Y", j)].reshape(n_out, n_out, nj)
                    xi = torch.einsum("ayj,yi->aij", t, m.dY[i]).reshape(n_out * ni, nj)
                elif j in ATTENTION_GROUPS:
                    xi = d2S[(i, "Y")] @ m.dY[j]
                else:
                    xi = d2S[(i, j)]
                out[(i, j)] = chain_rule_second(m.J2, H2, m.dS[i], m.dS[j], xi)
        return out


# ---------------------------------------------------------------------- factored path


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
        X=X, XQ=XQ, XK=XK, XV=XV, A=A, AX=AX, U1=U1, Y=Y, M=M, R=R, S=S, Z=Z, j1=j1, j2=j2,
        Js=Js, XJX=XJX, phi_f=phi_f, phi_y=phi_y, phi_s=phi_s, alpha=alpha, p=p, eps=eps, k=k,
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


def _offsets(shapes: dict) -> dict:
    off, o = {}, 0
    for nm in GROUPS:
        sz = shapes[nm][0] * shapes[nm][1]
        off[nm] = slice(o, o + sz)
        o += sz
    return off


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


@torch.no_grad()
def block_hessian_from_loss_derivatives(
    X: torch.Tensor,
    params: dict,
    g: torch.Tensor,
    G: torch.Tensor,
    eps: float = 1e-5,
    materialise: bool = False,
) -> tuple[dict, dict]:
    """Loss-agnostic Gauss-Newton split (Theorems 4-5 + chain rule). For any loss l(Z) with
    gradient g = dl/dvec_r(Z) (L d) and Hessian G (L d x L d):

        H_ij = B_i^T G B_j  +  (g^T (x) I_{p_i q_i}) d^2Z/(dW_i dW_j),   B_i = dZ/dW_i.

    Returns (outer, functional) dicts over all 25 ordered pairs. ``materialise=False`` (default)
    contracts g through the chain (no third-order tensor); ``True`` forms d^2Z/(dW_i dW_j)
    with :func:`block_output_hessian` (small sizes only).
    """
    with torch.no_grad():
        p = _prep(params)
        X = X.detach()
        L, d = X.shape
        g = g.detach().reshape(L * d)
        G = G.detach().reshape(L * d, L * d)
        f = _token_factors(X.unsqueeze(0), p, eps)
        Bm = {n: _dense_jacobian(f, n)[0] for n in GROUPS}
        outer = {(i, j): Bm[i].T @ G @ Bm[j] for i in GROUPS for j in GROUPS}
        if materialise:
            d2Z = block_output_hessian(X, p, eps)
            fun = {(i, j): contract_stacked(g, d2Z[(i, j)], Bm[i].shape[1]) for i in GROUPS for j in GROUPS}
        else:
            fun = _functional_factored(f, g.reshape(1, L, d))
        return outer, fun


@torch.no_grad()
def block_loss_hessian_parts(
    X: torch.Tensor, params: dict, target: torch.Tensor, eps: float = 1e-5, materialise: bool = False
) -> tuple[dict, dict]:
    """(outer, functional) for the MSE loss l = ||Z - T||_F^2 / (L d) of one sample:
    g = 2 vec_r(Z - T)/(L d), G = 2/(L d) I, then :func:`block_hessian_from_loss_derivatives`."""
    with torch.no_grad():
        L, d = X.shape
        Z = block_forward(X, params, eps)
        c = 2.0 / (L * d)
        g = c * (Z - target.detach()).reshape(-1)
        G = c * torch.eye(L * d, dtype=X.dtype, device=X.device)
        return block_hessian_from_loss_derivatives(X, params, g, G, eps, materialise)


@torch.no_grad()
def block_loss_hessian(
    X: torch.Tensor, params: dict, target: torch.Tensor, eps: float = 1e-5, materialise: bool = False
) -> dict:
    """Hessian blocks {(W_i, W_j): (p_i q_i) x (p_j q_j)} of ||Z - T||_F^2 / (L d) (one sample):
    outer-product part + functional part (Theorems 4-5 with the Gauss-Newton split)."""
    outer, fun = block_loss_hessian_parts(X, params, target, eps, materialise)
    return {key: outer[key] + fun[key] for key in outer}


# ------------------------------------------------------------------ the pipeline's loss


def _model_parts(model, images: torch.Tensor, labels: torch.Tensor, block: int, split: bool):
    depth = len(model.blocks)
    if block < 0:
        block += depth
    if block != depth - 1:
        raise ValueError(
            f"model_loss_hessian: block={block} is not the last block of a depth-{depth} model; "
            "the closed form covers the block that feeds the mean-pool and head directly "
            "(use a single-block model, model.depth == 1, or the last block)"
        )
    with torch.no_grad():
        blk = model.blocks[block]
        X = model.block_input(images, block).detach()
        p = _prep(blk.theory_params())
        eps = blk.eps
        Wh = model.head.weight.detach()
        bh = model.head.bias.detach() if model.head.bias is not None else None
        Bn, L, d = X.shape
        f = _token_factors(X, p, eps)
        logits = f.Z.mean(1) @ Wh.T
        if bh is not None:
            logits = logits + bh
        prob = torch.softmax(logits, -1)
        onehot = torch.nn.functional.one_hot(labels.to(X.device).long(), Wh.shape[0]).to(X.dtype)
        # d logits / d vec_r(Z_b) = (1/L) (1_L^T (x) W_h); CE: grad p - e_y, Hessian diag(p) - p p^T.
        shapes = group_shapes(p)
        sizes = [shapes[n][0] * shapes[n][1] for n in GROUPS]
        P = sum(sizes)
        Jl = torch.cat(
            [
                _to_vec_order(
                    torch.einsum("bli,oc,blcj->boij", f.alpha[n], Wh, f.j2 @ f.phi_s[n]) / L, n
                ).reshape(Bn, Wh.shape[0], -1)
                for n in GROUPS
            ],
            dim=2,
        )  # (B, C, P): d logits_b / d w
        # outer = sum_b J_b^T (diag p_b - p_b p_b^T) J_b / B = Jw^T Jw with Jw_b = V_b^T J_b / sqrt(B),
        # V_b sqrt-eigen factor of the CE Hessian (rank C - 1: its null vector is the ones vector)
        Hce = torch.diag_embed(prob) - prob.unsqueeze(-1) * prob.unsqueeze(-2)
        lam, vec = torch.linalg.eigh(Hce)
        lam, vec = lam[:, 1:].clamp_min(0.0), vec[:, :, 1:]  # drop the zero eigenvalue
        Vb = vec * lam.sqrt().unsqueeze(-2)  # (B, C, C-1), Hce_b = V_b V_b^T
        Jw = torch.einsum("bor,boP->brP", Vb, Jl).reshape(-1, P) / math.sqrt(Bn)
        g = ((prob - onehot) @ Wh / (Bn * L)).unsqueeze(1).expand(Bn, L, d)
        off = _offsets(shapes)
        H_outer = X.new_empty(P, P)
        H_fun = X.new_empty(P, P) if split else H_outer
        for gi, gj, t4 in _functional_upper(f, g):
            H_outer[off[gi], off[gj]] = Jw[:, off[gi]].T @ Jw[:, off[gj]]
            _write_sym(H_fun, off, gi, gj, t4, add=not split)
            if split and gi != gj:
                _copy_transposed(H_outer[off[gj], off[gi]], H_outer[off[gi], off[gj]])
            del t4
        for nm in GROUPS:  # exact symmetry of the diagonal blocks (gemm rounding is not)
            for H in {id(H_outer): H_outer, id(H_fun): H_fun}.values():
                _symmetrize(H[off[nm], off[nm]])
        if split:
            return (
                HessianResult(H_outer, dense_to_blocks(H_outer, shapes)),
                HessianResult(H_fun, dense_to_blocks(H_fun, shapes)),
            )
        return HessianResult(H_outer, dense_to_blocks(H_outer, shapes))


@torch.no_grad()
def model_loss_hessian(model, images: torch.Tensor, labels: torch.Tensor, block: int = 0) -> HessianResult:
    """Exact Hessian of the pipeline's loss, mean over the batch of cross-entropy on
    logits = W_h mean_t(Z_t) + b_h, w.r.t. the five groups of ``block`` (the model's last block,
    i.e. a single-block model). Per sample b, with p_b = softmax(logits_b):

        g_b = (1/(B L)) 1_L (x) W_h^T (p_b - e_y),
        G_b = (1/(B L^2)) (1 1^T) (x) W_h^T (diag p_b - p_b p_b^T) W_h,
        H = sum_b [ B_b^T G_b B_b + (g_b^T (x) I) d^2Z_b/dW^2 ].

    The outer part is computed through the logit Jacobian (rank C per sample), the functional
    part by the factored contraction. Returns HessianResult(dense P x P in GROUPS order,
    blocks dict of views). Runs under torch.no_grad(); dtype follows the model.
    """
    return _model_parts(model, images, labels, block, split=False)


@torch.no_grad()
def model_loss_hessian_parts(
    model, images: torch.Tensor, labels: torch.Tensor, block: int = 0
) -> tuple[HessianResult, HessianResult]:
    """(outer, functional) parts of :func:`model_loss_hessian`, each a HessianResult."""
    return _model_parts(model, images, labels, block, split=True)
