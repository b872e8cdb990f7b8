"""Spectral-norm bounds on the loss Hessian of the full post-norm block (paper's Theorem 6).

Block on one sample X (L x d), as in :mod:`transformer_hessian.theory.reference`:

    F = softmax_row(X W_Q W_K^T X^T / sqrt(d_K)) X W_V,  U = X + F,  Y = LN_1(U),
    S = ReLU(Y W_1 [+ b_1]) W_2 [+ b_2] + Y,  Z = LN_2(S),   groups [W_Q, W_K, W_V, W_1, W_2].

Project bound (:func:`block_bound`, any loss through :func:`block_bound_from_loss_derivatives`).
For a loss l(Z) with gradient g = dl/dZ and Hessian G = d^2 l/dZ^2, H_ij = B_i^T G B_j +
(g^T (x) I) d^2Z/(dW_i dW_j), B_i = dZ/dW_i. Push g back through the chain (as the factored
closed form does): g_S = J_2^T g, Omega_2 = <g, d^2 LN_2/dS^2>, g_Y = (dS/dY)^T g_S,
Omega_1 = <g_Y, d^2 LN_1/dU^2>, g_F = J_1^T g_Y. Then, exactly,

    (g^T (x) I) d^2Z_ij = (dS/dW_i)^T Omega_2 (dS/dW_j) + <g_S, d^2 S/(dW_i dW_j)>,
    <g_S, d^2S_ij> = (dF_i)^T Omega_1 (dF_j) + <g_F, d^2F_ij>      (i, j attention; d^2S/dY^2 = 0)
                   = (dY_i)^T C_j                                  (i attention, j in W_1, W_2)
                   = D_12                                          (i, j = W_1, W_2)
                   = 0                                             (W_1-W_1, W_2-W_2, Lemma 1)

and the triangle inequality with sub-multiplicativity gives, per pair,

    ||H_ij|| <= ||G|| ||B_i|| ||B_j|| + ||dS_i|| ||Omega_2|| ||dS_j||
                + [ ||dF_i|| ||Omega_1|| ||dF_j|| + N^F_ij(g_F) | ||dY_i|| ||C_j|| | ||D_12|| ],

every factor's spectral norm computed from the actual tensors: the Jacobians B_i, dS_i, dY_i,
dF_i exactly (Gram matrix of their per-token factors alpha_l (x) Phi_l), ||Omega_k|| =
max_l ||Omega_{k,l}|| (block diagonal, LayerNorm with eps and gamma), N^F_ij the attention
functional bound of :mod:`.attention` with R = g_F (exact softmax-Jacobian/Hessian row norms),
||C_{W_1}|| = ||m o (g_S W_2^T)|| (C_{W_1} is a permutation of that L x d_ff matrix (x) I_d),
||C_{W_2}|| from the Gram matrix of its rows [(l,e),(f,c)] = m_lf (W_1)_ef (g_S)_lc, and
||D_12|| = max_f ||sum_l m_lf y_l g_{S,l}^T|| (block diagonal up to permutations).
The total is ||[N_ij]||_2 over the 5 x 5 matrix of pair bounds.

The paper's bound (:func:`block_bound_paper`): Theorem 6 with the explicit terms of its proof
(App. C.6) and Lemma 4; the choices the paper leaves open are documented in docs/theory.md.
"""

from __future__ import annotations

import math

import torch

from ... import GROUPS
from ...theory import detached_block_params, token_factors
from ...theory.layernorm import layernorm_hessian_contract, layernorm_vjp
from .attention import (
    ATTENTION_GROUPS,
    _factor_norm,
    _spec2,
    attention_functional_bounds,
    opnorm,
    total_from_pairs,
)

__all__ = [
    "block_bound",
    "block_bound_ce",
    "block_bound_from_loss_derivatives",
    "block_bound_paper",
    "lemma4_bounds",
]

FFN_GROUPS = ("W_1", "W_2")


def _gram_top(G: torch.Tensor) -> torch.Tensor:
    G = 0.5 * (G + G.transpose(-1, -2))
    lam = torch.linalg.eigvalsh(G)[..., -1]
    pad = 8 * G.shape[-1] * torch.finfo(G.dtype).eps * lam.abs()
    return torch.sqrt((lam + pad).clamp_min(0.0))


def _token_norm(alpha: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """Cheap upper bound on the spectral norm of the Jacobian with row blocks alpha_l^T (x) Phi_l:
    ||J||^2 <= sum_l ||alpha_l^T (x) Phi_l||^2 = sum_l ||alpha_l||^2 ||Phi_l||^2."""
    return torch.sqrt((alpha.pow(2).sum(-1) * _spec2(phi).pow(2)).sum(-1))


def _functional_and_jacobians(X: torch.Tensor, p: dict, g: torch.Tensor, eps: float, exact: bool = True):
    """(f, nZ, fun): token factors, ||dZ/dW_i|| per sample and the functional-part bounds
    {(i, j): (B,)} >= ||(g_b^T (x) I) d^2Z_b/(dW_i dW_j)|| (module docstring). ``exact=False``
    replaces the exact Jacobian norms by :func:`_token_norm` and ||C_{W_2}|| by its per-token
    bound (cheaper, looser)."""
    f = token_factors(X, p, eps)
    W1, W2 = p["W_1"], p["W_2"]
    g = g.detach().to(X.dtype)
    jn = _factor_norm if exact else _token_norm
    # Jacobian norms: dZ = J_2 dS, dS, dY = J_1 dF, dF
    nZ = {n: jn(f.alpha[n], f.j2 @ f.phi_s[n]) for n in GROUPS}
    nS = {n: jn(f.alpha[n], f.phi_s[n]) for n in GROUPS}
    nY = {n: jn(f.alpha[n], f.phi_y[n]) for n in ATTENTION_GROUPS}
    nF = {n: jn(f.alpha[n], f.phi_f[n]) for n in ("W_Q", "W_K")}
    nF["W_V"] = _spec2(f.AX)  # A X (x) I_d, exact
    # loss gradient pushed back through the chain
    gs = layernorm_vjp(f.S, p["gamma2"], eps, g)
    nOm2 = _spec2(layernorm_hessian_contract(f.S, p["gamma2"], eps, g)).amax(-1)
    gy = torch.einsum("blce,blc->ble", f.Js, gs)
    nOm1 = _spec2(layernorm_hessian_contract(f.U1, p["gamma1"], eps, gy)).amax(-1)
    gf = layernorm_vjp(f.U1, p["gamma1"], eps, gy)
    attF = attention_functional_bounds(X, p["W_Q"], p["W_K"], p["W_V"], f.A, gf)
    h = f.M * (gs @ W2.T)  # (B, L, d_ff)
    nC = {"W_1": _spec2(h)}
    Bn, L, d = X.shape
    # C_{W_2} rows (l, e): Gram [(l,e),(l',e')] = (W_1 diag(m_l o m_l') W_1^T)[e,e'] <g_S,l, g_S,l'>
    W1m = W1.unsqueeze(0).unsqueeze(0) * f.M.unsqueeze(-2)  # (B, L, d, d_ff) = W_1 diag(m_l)
    if exact:
        Gc = torch.einsum("blef,bmEf->blemE", W1m, W1m) * (gs @ gs.transpose(-1, -2))[:, :, None, :, None]
        nC["W_2"] = _gram_top(Gc.reshape(Bn, L * d, L * d))
    else:  # row block l is (W_1 diag m_l) (x) g_S,l^T: ||C||^2 <= sum_l ||W_1 diag m_l||^2 ||g_S,l||^2
        nC["W_2"] = torch.sqrt((_spec2(W1m).pow(2) * gs.pow(2).sum(-1)).sum(-1))
    N12 = torch.einsum("blf,bla,blc->bfac", f.M, f.Y, gs)  # (B, d_ff, d, d)
    nD12 = _spec2(N12).amax(-1)
    fun = {}
    for a, i in enumerate(GROUPS):
        for j in GROUPS[a:]:
            b = nS[i] * nOm2 * nS[j]
            if i in ATTENTION_GROUPS and j in ATTENTION_GROUPS:
                b = b + nF[i] * nOm1 * nF[j] + attF[(i, j)]
            elif i in ATTENTION_GROUPS:
                b = b + nY[i] * nC[j]
            elif (i, j) == ("W_1", "W_2"):
                b = b + nD12
            fun[(i, j)] = b
            fun[(j, i)] = b
    return f, nZ, fun


@torch.no_grad()
def block_bound_from_loss_derivatives(
    X: torch.Tensor, params: dict, g: torch.Tensor, G_norm: torch.Tensor, eps: float = 1e-5
) -> dict:
    """Per-sample bounds {(name_i, name_j): (B,)} on ||H_ij||_2 for a batch X (B, L, d) of
    single-sample losses with gradients g (B, L, d) = dl_b/dZ_b and ||d^2 l_b/dZ_b^2||_2 <=
    G_norm (B,): G_norm ||dZ_i|| ||dZ_j|| + functional bound (module docstring)."""
    _, nZ, fun = _functional_and_jacobians(X.detach(), detached_block_params(params), g, eps)
    return {(i, j): G_norm * nZ[i] * nZ[j] + fun[(i, j)] for i in GROUPS for j in GROUPS}


@torch.no_grad()
def block_bound(X: torch.Tensor, params: dict, target: torch.Tensor, eps: float = 1e-5) -> dict:
    """The project's proven bound for the post-norm block under l = ||Z - target||_F^2/(L d)
    (one sample X (L, d)): {(name_i, name_j): float >= ||H_ij||_2} over the 25 pairs of
    [W_Q, W_K, W_V, W_1, W_2] and ``"total"`` >= ||H||_2. Here g = 2 vec_r(Z - target)/(L d),
    G = 2/(L d) I; formula in the module docstring."""
    if X.dim() != 2:
        raise ValueError(f"X must be one sample of shape (L, d), got {tuple(X.shape)}")
    L, d = X.shape
    Xb = X.detach().unsqueeze(0)
    f = token_factors(Xb, detached_block_params(params), eps)
    c = 2.0 / (L * d)
    g = c * (f.Z - target.detach().to(X.dtype).reshape(1, L, d))
    pairs = block_bound_from_loss_derivatives(Xb, params, g, torch.full((1,), c, dtype=X.dtype, device=X.device), eps)
    out = {key: float(v[0]) for key, v in pairs.items()}
    out["total"] = float(total_from_pairs(pairs, GROUPS)[0])
    return out


@torch.no_grad()
def block_bound_ce(model, images: torch.Tensor, labels: torch.Tensor, block: int = 0, exact: bool = False) -> dict:
    """Proven bound on the blocks of the pipeline's loss Hessian (mean cross-entropy over the
    batch, logits = W_h mean_t Z_t + b_h, the model's single block; the loss of Figures 3-5).

    The batch loss is a sum of per-sample losses l_b(Z_b) with (see
    :func:`transformer_hessian.theory.model_loss_hessian`)
    g_b = dl/dZ_b = (1/(B L)) 1_L (x) W_h^T (p_b - e_y), Hce_b = diag p_b - p_b p_b^T, and
    H = (1/B) sum_b J_b^T Hce_b J_b + sum_b (g_b^T (x) I) d^2Z_b/dW^2 (J_b = d logits_b/dW).
    Outer part: with Hce_b = V_b V_b^T it is W^T W, W_b = V_b^T J_b / sqrt(B), so
    ||outer_ij|| <= ||W_i|| ||W_j|| (exact norms). Functional part: the sum over samples of the
    per-sample functional bounds (module docstring), with the Jacobian norms replaced by the
    per-token bound sqrt(sum_l ||alpha_l||^2 ||Phi_l||^2) unless ``exact`` (64 samples x 16
    exact norms would dominate the rule's time). Returns {(name_i, name_j): float} plus ``"total"``."""
    if len(model.blocks) != 1 or block not in (0, -1):
        raise ValueError("block_bound_ce covers a single-block model (model.depth == 1)")
    blk = model.blocks[0]
    X = model.block_input(images, 0).detach()
    p = detached_block_params(blk.theory_params())
    Bn, L, d = X.shape
    f = token_factors(X, p, blk.eps)
    Wh = model.head.weight.detach().to(X.dtype)
    logits = f.Z.mean(1) @ Wh.T
    if model.head.bias is not None:
        logits = logits + model.head.bias.detach()
    prob = torch.softmax(logits, -1)
    onehot = torch.nn.functional.one_hot(labels.to(X.device).long(), Wh.shape[0]).to(X.dtype)
    g = ((prob - onehot) @ Wh / (Bn * L)).unsqueeze(1).expand(Bn, L, d)
    Hce = torch.diag_embed(prob) - prob.unsqueeze(-1) * prob.unsqueeze(-2)
    _, _, fun = _functional_and_jacobians(X, p, g, blk.eps, exact=exact)
    # outer part exactly: (1/B) sum_b J_b^T Hce_b J_b = W^T W with W_b = V_b^T J_b / sqrt(B),
    # Hce_b = V_b V_b^T; ||outer_ij|| <= ||W_i|| ||W_j||, J_b = d logits_b / dW (C x p q)
    lam, vec = torch.linalg.eigh(Hce)
    V = vec * lam.clamp_min(0.0).sqrt().unsqueeze(-2)  # (B, C, C)
    nW = {}
    for n in GROUPS:
        t = torch.einsum("bli,oc,blcj->boij", f.alpha[n], Wh, f.j2 @ f.phi_s[n]) / L  # (B, C, a, q)
        Jb = torch.einsum("bor,boij->brij", V, t).reshape(Bn * Wh.shape[0], -1) / math.sqrt(Bn)
        nW[n] = float(opnorm(Jb))
    pairs = {(i, j): nW[i] * nW[j] + float(fun[(i, j)].sum()) for i in GROUPS for j in GROUPS}
    out = dict(pairs)
    out["total"] = float(total_from_pairs(pairs, GROUPS))
    return out


# ------------------------------------------------------------------------ the paper's bound


@torch.no_grad()
def lemma4_bounds(U: torch.Tensor, reading: str = "statement", norm_U: float | None = None) -> tuple[float, float]:
    """Lemma 4 of arXiv 2510.16927 for LayerNorm on U (m x n):

        ||J_LN|| <= 1/s + ||U||^2 / (sqrt(n) s^3),
        ||H_LN|| <= ||U||/s^3 (1 + sqrt(m/n)) + ||U||^2/(sqrt(n) s^3) + 3 ||U||^3/(n s^5),

    with s = sigma_min. ``reading="statement"``: s = min_i ||M_i||_2, the smallest row norm of
    the centred U (the Lemma's words); ``"proof"``: s = min_i ||M_i||_2 / sqrt(n), the smallest
    row standard deviation (what the proof uses: ||P|| = ||D^{-1}|| = 1/sigma_min). No eps, no
    gamma (the paper's LayerNorm). ``norm_U`` replaces ||U||_2 (e.g. by Proposition 10's bound).
    Returns (J bound, H bound)."""
    m, n = U.shape
    M = U - U.mean(-1, keepdim=True)
    rn = M.norm(dim=-1).min()
    s = float(rn if reading == "statement" else rn / math.sqrt(n))
    if reading not in ("statement", "proof"):
        raise ValueError(f"reading={reading!r}: use 'statement' or 'proof'")
    u = float(torch.linalg.matrix_norm(U, ord=2)) if norm_U is None else float(norm_U)
    J = 1 / s + u**2 / (math.sqrt(n) * s**3)
    H = u / s**3 * (1 + math.sqrt(m / n)) + u**2 / (math.sqrt(n) * s**3) + 3 * u**3 / (n * s**5)
    return J, H


@torch.no_grad()
def block_bound_paper(
    X: torch.Tensor, params: dict, target: torch.Tensor, eps: float = 1e-5, reading: str = "statement"
) -> dict:
    """Theorem 6 of arXiv 2510.16927 with the explicit terms of its proof (App. C.6), literally:

        pair(i, j) = 2/(L d_V) ||dZ/dW_i|| ||dZ/dW_j|| + ||R_m^tr|| ||H_tr^(i,j)||,
        ||dZ/dW_i|| <= ||J_Z|| ||B_i||,   ||R_m^tr|| = ||vec_r(Z - Target)^T (x) I|| = ||Z - Target||_F,
        ||H_tr^(i,j)|| <= ||J_Z|| ||xi_ij|| + ||B_i|| ||H_Z|| ||B_j||          (eq. block_bound_transformer)
        "total" = M_tr = sqrt(25) max_ij pair(i, j)                              (eq. full_bound_transformer)

    with ||B_1|| = ||W_2|| ||Y||, ||B_2|| = ||ReLU(Y W_1)||, ||B_k|| = ||J_SY|| ||J_Y|| ||G_k||,
    ||J_SY|| = ||W_2|| ||W_1|| + 1, ||G_V|| = L ||X||, ||G_Q|| = ||W_V|| ||W_K|| ||X||^3/(L sqrt(d_K)),
    ||G_K|| = ||W_V|| ||W_Q|| ||X||^3/(L sqrt(d_K)); xi_11 = xi_22 = 0, xi_12 = sqrt(d_V) ||Y||,
    xi_21 = sqrt(d_ff) ||W_2||, xi_1k = sqrt(d_ff) ||W_2|| ||J_Y|| ||G_k||,
    xi_2k = sqrt(d_V) ||W_1|| ||J_Y|| ||G_k||, xi_kl = ||J_SY|| (||G_k|| ||H_Y|| ||G_l|| + ||J_Y|| ||Phi_kl||);
    Phi_VV = 0, Phi_QQ = 12/(L d_V d_K) ||W_V|| ||W_K||^2 ||X||^5,
    Phi_VQ = 2/(L^2 sqrt(d_V d_K)) ||W_K|| ||X||^3,
    Phi_QK = 12/(L d_V d_K) ||W_V|| ||W_K|| ||W_Q|| ||X||^5 + 2/(L^2 sqrt(d_V d_K)) ||W_V|| ||X||^3;
    ||Y|| <= sqrt(L d_V), ||S|| <= sqrt(L d_V)(1 + sqrt(min(L, d_ff)) ||W_1|| ||W_2||) (Prop. 10);
    ||J_Y||, ||H_Y|| by Lemma 4 on U = X + F(X) (actual ||U||), ||J_Z||, ||H_Z|| by Lemma 4 on S
    (sigma'_min of the actual S, ||S|| from Prop. 10). Choices where the paper says "etc." (docs):
    Phi_KK = Phi_QQ with W_Q for W_K, Phi_KV = Phi_VK = Phi_VQ with W_Q for W_K,
    Phi_KQ = Phi_QK, Phi_QV = Phi_VQ, xi_k1 = xi_1k, xi_k2 = xi_2k. ``reading`` picks
    Lemma 4's sigma_min (:func:`lemma4_bounds`); ``eps`` only enters the forward pass (Z, S).
    """
    p = detached_block_params(params)
    X = X.detach()
    L, d = X.shape
    k = p["W_Q"].shape[1]
    dff = p["W_1"].shape[1]
    f = token_factors(X.unsqueeze(0), p, eps)

    def nrm(M: torch.Tensor) -> float:
        return float(torch.linalg.matrix_norm(M, ord=2))

    x = nrm(X)
    q, kk, v, w1, w2 = (nrm(p[n]) for n in GROUPS)
    Y_n = math.sqrt(L * d)
    S_n = Y_n * (1 + math.sqrt(min(L, dff)) * w1 * w2)
    JY, HY = lemma4_bounds(f.U1[0], reading)
    JZ, HZ = lemma4_bounds(f.S[0], reading, norm_U=S_n)
    JSY = w2 * w1 + 1
    G = {"W_V": L * x, "W_Q": v * kk * x**3 / (L * math.sqrt(k)), "W_K": v * q * x**3 / (L * math.sqrt(k))}
    a = 12 / (L * d * k)
    b = 2 / (L**2 * math.sqrt(d * k))
    Phi = {
        ("W_V", "W_V"): 0.0,
        ("W_Q", "W_Q"): a * v * kk**2 * x**5,
        ("W_K", "W_K"): a * v * q**2 * x**5,
        ("W_V", "W_Q"): b * kk * x**3,
        ("W_V", "W_K"): b * q * x**3,
        ("W_Q", "W_K"): a * v * kk * q * x**5 + b * v * x**3,
    }
    for i, j in list(Phi):
        Phi[(j, i)] = Phi[(i, j)]
    B = {"W_1": w2 * Y_n, "W_2": nrm(f.R[0])}
    B.update({n: JSY * JY * G[n] for n in ATTENTION_GROUPS})

    def xi(i, j):
        if i in FFN_GROUPS and j in FFN_GROUPS:
            return 0.0 if i == j else (math.sqrt(d) * Y_n if i == "W_1" else math.sqrt(dff) * w2)
        if i in FFN_GROUPS or j in FFN_GROUPS:
            ffn, att = (i, j) if i in FFN_GROUPS else (j, i)
            return (math.sqrt(dff) * w2 if ffn == "W_1" else math.sqrt(d) * w1) * JY * G[att]
        return JSY * (G[i] * HY * G[j] + JY * Phi[(i, j)])

    Rm = float((f.Z[0] - target.detach().to(X.dtype)).norm())
    out = {}
    for i in GROUPS:
        for j in GROUPS:
            Htr = JZ * xi(i, j) + B[i] * HZ * B[j]
            out[(i, j)] = 2 / (L * d) * (JZ * B[i]) * (JZ * B[j]) + Rm * Htr
    out["total"] = 5 * max(out.values())
    return out
