"""Reference (materialised) closed forms of the post-norm block, paper's Theorems 4-5.

Block on one sample X in R^{L x d}:

    T = X W_Q W_K^T X^T / sqrt(d_K),  A = softmax_row(T),  F = A X W_V
    U_1 = X + F,  Y = LN_1(U_1),  S = ReLU(Y W_1 + b_1) W_2 + b_2 + Y,  Z = LN_2(S).

Jacobians are built as the paper's Kronecker products and the stacked third-order tensors
d^2Z/(dW_i dW_j) are assembled with

    d^2Z/(dW_i dW_j) = (J_Z (x) I_{n_i}) xi_ij + (I_{L d} (x) B_i^T) H_Z B_j.

Memory grows like (L d)^2 n_i n_j: for small sizes (tests, illustrations). The fast path that
gives the same numbers is :mod:`.factored`.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from .. import GROUPS
from .attention import ATTENTION_GROUPS, attention_forward, attention_jacobians, attention_second_derivatives
from .factored import _dense_jacobian, _token_factors
from .ffn import ffn_forward, ffn_jacobians, ffn_second_derivatives
from .layernorm import layernorm_forward, layernorm_hessian, layernorm_jacobian
from .layout import _prep
from .vec import chain_rule_second


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
