"""Single-head self-attention derivatives (Ormaniec, Dangel, Singh, ICLR 2025, Thms 3.1/3.2).

    T = X W_Q W_K^T X^T / sqrt(d_K),   A = softmax_row(T),   F = A X W_V,

X in R^{L x d}, W_Q, W_K in R^{d x d_K}, W_V in R^{d x d}. Symbols as in the draft:
M_1 = A X, Z_1 = (I_L (x) X^T) (dA/dT) (X (x) X), K_{m,n} the commutation matrix in the
Magnus-Neudecker convention (:func:`~transformer_hessian.theory.vec.commutation_matrix`).

First derivatives (s = sqrt(d_K)):

    dT/dW_Q = (X (x) X W_K) / s
    dT/dW_K = (X W_Q (x) X) K_{d_K, d} / s          (vec_r(W_K^T) = K_{d_K,d} vec_r(W_K))
    dF/dA   = I_L (x) (X W_V)^T,     dF/dW_V = A X (x) I_d
    dF/dW_Q = (I_L (x) W_V^T) Z_1 (I_d (x) W_K) / s
    dF/dW_K = (I_L (x) W_V^T) Z_1 (W_Q (x) I_d) K_{d_K, d} / s
"""

from __future__ import annotations

import math

import torch

from .vec import (
    chain_rule_second,
    commutation_matrix,
    kron,
    outer_blocks,
    softmax_row_hessian,
    softmax_row_hessian_contract,
    softmax_row_jacobian,
)

__all__ = [
    "ATTENTION_GROUPS",
    "attention_forward",
    "attention_score_jacobians",
    "attention_score_second",
    "attention_jacobians",
    "attention_second_derivatives",
    "attention_outer_kron",
    "attention_hessian_from_loss_derivatives",
    "attention_loss_hessian_parts",
    "attention_loss_hessian",
]

from .. import ATTENTION_GROUPS  # noqa: E402 (the names live in the torch-free package root)


def _d(t: torch.Tensor) -> torch.Tensor:
    return t.detach() if isinstance(t, torch.Tensor) else t


@torch.no_grad()
def attention_forward(X: torch.Tensor, W_Q: torch.Tensor, W_K: torch.Tensor, W_V: torch.Tensor) -> dict:
    """Forward pass: returns dict(T, A, F) with T = X W_Q W_K^T X^T / sqrt(d_K),
    A = softmax_row(T), F = A X W_V. Works on (..., L, d) inputs."""
    s = math.sqrt(W_Q.shape[1])
    T = (X @ W_Q) @ (X @ W_K).transpose(-1, -2) / s
    A = torch.softmax(T, dim=-1)
    return {"T": T, "A": A, "F": A @ (X @ W_V)}


@torch.no_grad()
def attention_score_jacobians(X: torch.Tensor, W_Q: torch.Tensor, W_K: torch.Tensor) -> dict[str, torch.Tensor]:
    """dT/dW_Q = (X (x) X W_K)/sqrt(d_K) and dT/dW_K = (X W_Q (x) X) K_{d_K,d}/sqrt(d_K),
    both (L^2) x (d d_K)."""
    d, k = W_Q.shape
    s = math.sqrt(k)
    K = commutation_matrix(k, d, dtype=X.dtype, device=X.device)
    return {"W_Q": kron(X, X @ W_K) / s, "W_K": kron(X @ W_Q, X) @ K / s}


@torch.no_grad()
def attention_score_second(X: torch.Tensor, d_K: int) -> dict[tuple[str, str], torch.Tensor]:
    """Second derivatives of the (bilinear) scores T, stacked layout (L^2 d d_K) x (d d_K):

        d^2 T_ab / (dW_Q,mr dW_K,nr') = X_am X_bn delta_rr' / sqrt(d_K),

    the (W_K, W_Q) block holds the same numbers with the roles swapped; the (W_Q, W_Q) and
    (W_K, W_K) blocks vanish (T is linear in each factor)."""
    L, d = X.shape
    k = d_K
    Ik = torch.eye(k, dtype=X.dtype, device=X.device)
    t = torch.einsum("am,bn,rR->abmrnR", X, X, Ik) / math.sqrt(k)  # [a,b,(m,r),(n,r')]
    n = d * k
    return {
        ("W_Q", "W_K"): t.reshape(L * L * n, n),
        ("W_K", "W_Q"): t.permute(0, 1, 4, 5, 2, 3).reshape(L * L * n, n),
        ("W_Q", "W_Q"): X.new_zeros(L * L * n, n),
        ("W_K", "W_K"): X.new_zeros(L * L * n, n),
    }


@torch.no_grad()
def attention_jacobians(X: torch.Tensor, params: dict) -> dict[str, torch.Tensor]:
    """dF/dW for W in (W_Q, W_K, W_V), each (L d) x (p q), F = softmax_row(T) X W_V:

        dF/dW_Q = (I_L (x) W_V^T X^T) (dA/dT) (X (x) X W_K) / sqrt(d_K)
        dF/dW_K = (I_L (x) W_V^T X^T) (dA/dT) (X W_Q (x) X) K_{d_K,d} / sqrt(d_K)
        dF/dW_V = A X (x) I_d

    (equivalently (I_L (x) W_V^T) Z_1 (I_d (x) W_K)/s and (I_L (x) W_V^T) Z_1 (W_Q (x) I_d) K/s).
    """
    X = _d(X)
    WQ, WK, WV = (_d(params[n]) for n in ATTENTION_GROUPS)
    L, d = X.shape
    A = attention_forward(X, WQ, WK, WV)["A"]
    JA = softmax_row_jacobian(A)
    dT = attention_score_jacobians(X, WQ, WK)
    dFdA = kron(torch.eye(L, dtype=X.dtype, device=X.device), (X @ WV).T)
    return {
        "W_Q": dFdA @ JA @ dT["W_Q"],
        "W_K": dFdA @ JA @ dT["W_K"],
        "W_V": kron(A @ X, torch.eye(d, dtype=X.dtype, device=X.device)),
    }


@torch.no_grad()
def attention_second_derivatives(X: torch.Tensor, params: dict) -> dict[tuple[str, str], torch.Tensor]:
    """Stacked second derivatives d^2F/(dW_i dW_j), (L d p_i q_i) x (p_j q_j), all 9 pairs.

    For W_i, W_j in {W_Q, W_K} (F linear in A, A = softmax(T), T bilinear):

        d^2A/(dW_i dW_j) = (dA/dT (x) I) d^2T/(dW_i dW_j) + (I_{L^2} (x) (dT/dW_i)^T) d^2A/dT^2 dT/dW_j
        d^2F/(dW_i dW_j) = (dF/dA (x) I_{p_i q_i}) d^2A/(dW_i dW_j),   dF/dA = I_L (x) (X W_V)^T.

    (For i = j = W_Q this is (I_L (x) W_V^T (x) I_d (x) W_K^T) Z_2 (I_d (x) W_K) / d_K with the
    draft's Z_2 = (I_L (x) X^T (x) X^T (x) X^T) d^2A/dT^2 (X (x) X).)
    Mixed with W_V (F bilinear in (A, W_V)), index form with alpha an entry of W_i:

        d^2 F_le / (dW_i,alpha dW_V,pq) = delta_eq sum_b X_bp dA_lb/dW_i,alpha,

    and the (W_V, W_i) block holds the same numbers restacked; d^2F/dW_V^2 = 0.
    """
    X = _d(X)
    WQ, WK, WV = (_d(params[n]) for n in ATTENTION_GROUPS)
    L, d = X.shape
    k = WQ.shape[1]
    A = attention_forward(X, WQ, WK, WV)["A"]
    JA = softmax_row_jacobian(A)
    HA = softmax_row_hessian(A)
    dT = attention_score_jacobians(X, WQ, WK)
    d2T = attention_score_second(X, k)
    dFdA = kron(torch.eye(L, dtype=X.dtype, device=X.device), (X @ WV).T)
    Id = torch.eye(d, dtype=X.dtype, device=X.device)
    out: dict[tuple[str, str], torch.Tensor] = {}
    qk = ("W_Q", "W_K")
    for i in qk:
        for j in qk:
            d2A = chain_rule_second(JA, HA, dT[i], dT[j], d2T[(i, j)])
            out[(i, j)] = chain_rule_second(dFdA, None, JA @ dT[i], JA @ dT[j], d2A)
    nv = d * d
    for i in qk:
        dA = (JA @ dT[i]).reshape(L, L, d * k)  # [l, b, alpha]
        t = torch.einsum("bp,lba,eq->leapq", X, dA, Id)  # [l,e,alpha,p,q]
        out[(i, "W_V")] = t.reshape(L * d * d * k, nv)
        out[("W_V", i)] = t.permute(0, 1, 3, 4, 2).reshape(L * d * nv, d * k)
    out[("W_V", "W_V")] = X.new_zeros(L * d * nv, nv)
    return out


@torch.no_grad()
def attention_outer_kron(X: torch.Tensor, params: dict, G_scale: float) -> dict[tuple[str, str], torch.Tensor]:
    """Outer-product (Gauss-Newton) blocks for a loss with output Hessian G_scale * I
    (Ormaniec et al. 2025, Thm 3.1; the MSE loss ||F - T||^2/(L d) has G_scale = 2/(L d)):

        H_o(V,V) = c (M_1^T M_1 (x) I_d)
        H_o(Q,Q) = c/d_K (I_d (x) W_K^T) Z_1^T (I_L (x) W_V W_V^T) Z_1 (I_d (x) W_K)
        H_o(V,Q) = c/sqrt(d_K) (M_1^T (x) W_V^T) Z_1 (I_d (x) W_K)
        H_o(Q,K) = c/d_K (I_d (x) W_K^T) Z_1^T (I_L (x) W_V W_V^T) Z_1 (W_Q (x) I_d) K_{d_K,d}
        H_o(K,K) = c/d_K K_{d_K,d}^T (W_Q^T (x) I_d) Z_1^T (I_L (x) W_V W_V^T) Z_1 (W_Q (x) I_d) K_{d_K,d}
        H_o(V,K) = c/sqrt(d_K) (M_1^T (x) W_V^T) Z_1 (W_Q (x) I_d) K_{d_K,d}

    c = G_scale, M_1 = A X, Z_1 = (I_L (x) X^T)(dA/dT)(X (x) X); mirrored blocks are transposes.
    """
    X = _d(X)
    WQ, WK, WV = (_d(params[n]) for n in ATTENTION_GROUPS)
    L, d = X.shape
    k = WQ.shape[1]
    s = math.sqrt(k)
    dt, dev = X.dtype, X.device
    IL, Id = torch.eye(L, dtype=dt, device=dev), torch.eye(d, dtype=dt, device=dev)
    A = attention_forward(X, WQ, WK, WV)["A"]
    M1 = A @ X
    Z1 = kron(IL, X.T) @ softmax_row_jacobian(A) @ kron(X, X)
    K = commutation_matrix(k, d, dtype=dt, device=dev)
    RQ = kron(Id, WK)
    RK = kron(WQ, Id) @ K
    mid = Z1.T @ kron(IL, WV @ WV.T) @ Z1
    left_V = kron(M1.T, WV.T) @ Z1
    c = G_scale
    out = {
        ("W_V", "W_V"): c * kron(M1.T @ M1, Id),
        ("W_Q", "W_Q"): c / k * RQ.T @ mid @ RQ,
        ("W_Q", "W_K"): c / k * RQ.T @ mid @ RK,
        ("W_K", "W_K"): c / k * RK.T @ mid @ RK,
        ("W_V", "W_Q"): c / s * left_V @ RQ,
        ("W_V", "W_K"): c / s * left_V @ RK,
    }
    for i, j in [("W_Q", "W_K"), ("W_V", "W_Q"), ("W_V", "W_K")]:
        out[(j, i)] = out[(i, j)].T
    return out


@torch.no_grad()
def attention_hessian_from_loss_derivatives(
    X: torch.Tensor, params: dict, g: torch.Tensor, G: torch.Tensor | float | None
) -> tuple[dict | None, dict]:
    """Loss-agnostic Gauss-Newton split for self-attention alone. With g = dl/dvec_r(F) (L d)
    and G = d^2 l / dvec_r(F)^2, block (i, j) = B_i^T G B_j + (g^T (x) I) d^2F/(dW_i dW_j),
    B_i = dF/dW_i. The functional part is computed in closed form (Thm 3.2), with
    R = unvec_r(g) (L x d), Gamma = R W_V^T X^T, Psi = blockdiag_l [(gamma_l^T (x) I) d^2a_l/dt_l^2]
    (:func:`~transformer_hessian.theory.vec.softmax_row_hessian_contract`) and
    Delta = unvec_r((dA/dT)^T vec_r(Gamma)):

        H_f(Q,Q) = (dT/dW_Q)^T Psi (dT/dW_Q)
        H_f(K,K) = (dT/dW_K)^T Psi (dT/dW_K)
        H_f(Q,K) = (dT/dW_Q)^T Psi (dT/dW_K) + (X^T Delta X (x) I_{d_K}) / sqrt(d_K)
        H_f(V,Q) = (X^T (x) R^T) K_{L,L} (dA/dT) dT/dW_Q
        H_f(V,K) = (X^T (x) R^T) K_{L,L} (dA/dT) dT/dW_K
        H_f(V,V) = 0    (F is linear in W_V).

    ``G`` a float c stands for c I; ``G=None`` skips the outer part (returned as None).
    """
    X = _d(X)
    WQ, WK, WV = (_d(params[n]) for n in ATTENTION_GROUPS)
    L, d = X.shape
    k = WQ.shape[1]
    dt, dev = X.dtype, X.device
    outer = None
    if G is not None:
        B = attention_jacobians(X, params)
        outer = outer_blocks({i: B[i] for i in ATTENTION_GROUPS}, G)  # (B_i^T G) B_j
    A = attention_forward(X, WQ, WK, WV)["A"]
    R = g.reshape(L, d)
    Gam = R @ WV.T @ X.T
    Psi_rows = softmax_row_hessian_contract(A, Gam)  # L, L, L
    Psi = X.new_zeros(L, L, L, L)
    idx = torch.arange(L, device=dev)
    Psi[idx, :, idx, :] = Psi_rows
    Psi = Psi.reshape(L * L, L * L)
    JA = softmax_row_jacobian(A)
    Delta = (JA.T @ Gam.reshape(-1)).reshape(L, L)
    dT = attention_score_jacobians(X, WQ, WK)
    KLL = commutation_matrix(L, L, dtype=dt, device=dev)
    VA = kron(X.T, R.T) @ KLL @ JA
    fun = {
        ("W_Q", "W_Q"): dT["W_Q"].T @ Psi @ dT["W_Q"],
        ("W_K", "W_K"): dT["W_K"].T @ Psi @ dT["W_K"],
        ("W_Q", "W_K"): dT["W_Q"].T @ Psi @ dT["W_K"]
        + kron(X.T @ Delta @ X, torch.eye(k, dtype=dt, device=dev)) / math.sqrt(k),
        ("W_V", "W_Q"): VA @ dT["W_Q"],
        ("W_V", "W_K"): VA @ dT["W_K"],
        ("W_V", "W_V"): X.new_zeros(d * d, d * d),
    }
    for i, j in [("W_Q", "W_K"), ("W_V", "W_Q"), ("W_V", "W_K")]:
        fun[(j, i)] = fun[(i, j)].T
    return outer, fun


@torch.no_grad()
def attention_loss_hessian_parts(X: torch.Tensor, params: dict, target: torch.Tensor) -> tuple[dict, dict]:
    """(outer, functional) blocks over (W_Q, W_K, W_V) of l = ||F - T||_F^2 / (L d) for one
    sample; outer from :func:`attention_outer_kron` (Thm 3.1, c = 2/(L d)), functional from
    :func:`attention_hessian_from_loss_derivatives` with g = 2 vec_r(F - T)/(L d) (Thm 3.2)."""
    X, target = _d(X), _d(target)
    WQ, WK, WV = (_d(params[n]) for n in ATTENTION_GROUPS)
    L, d = X.shape
    F = attention_forward(X, WQ, WK, WV)["F"]
    c = 2.0 / (L * d)
    g = c * (F - target).reshape(-1)
    _, fun = attention_hessian_from_loss_derivatives(X, params, g, None)  # the outer part: Thm 3.1
    return attention_outer_kron(X, params, c), fun


@torch.no_grad()
def attention_loss_hessian(X: torch.Tensor, params: dict, target: torch.Tensor) -> dict:
    """Hessian blocks over (W_Q, W_K, W_V) of ||F - T||_F^2/(L d): outer + functional part
    (Ormaniec et al. 2025, Thms 3.1 + 3.2)."""
    outer, fun = attention_loss_hessian_parts(X, params, target)
    return {key: outer[key] + fun[key] for key in outer}
