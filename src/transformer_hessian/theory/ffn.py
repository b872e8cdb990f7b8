"""Derivatives of the residual ReLU FFN  S = ReLU(Y W_1 + b_1) W_2 + b_2 + Y  (paper's Lemma 1).

Notation: Y in R^{L x d}, W_1 in R^{d x d_ff}, W_2 in R^{d_ff x d}, H = Y W_1 + b_1,
M = 1[H > 0] (the ReLU mask, L x d_ff), R = M o H = ReLU(H), D_M = diag(vec_r(M)).

ReLU'' = 0 away from the kinks, so S is piecewise *linear in each of* Y, W_1, W_2 separately:
the Y-Y, W_1-W_1 and W_2-W_2 second derivatives vanish and only the mixed ones remain
(Lemma 1). All formulas hold almost everywhere (pre-activations away from 0).
"""

from __future__ import annotations

import torch

from .vec import kron

__all__ = ["ffn_forward", "ffn_mask", "ffn_jacobians", "ffn_second_derivatives"]


@torch.no_grad()
def ffn_mask(Y: torch.Tensor, W_1: torch.Tensor, b_1: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, R): ReLU mask 1[Y W_1 + b_1 > 0] (as the input's dtype) and R = ReLU(Y W_1 + b_1)."""
    H = Y @ W_1
    if b_1 is not None:
        H = H + b_1
    M = (H > 0).to(Y.dtype)
    return M, H * M


@torch.no_grad()
def ffn_forward(
    Y: torch.Tensor,
    W_1: torch.Tensor,
    W_2: torch.Tensor,
    b_1: torch.Tensor | None = None,
    b_2: torch.Tensor | None = None,
) -> torch.Tensor:
    """S = ReLU(Y W_1 + b_1) W_2 + b_2 + Y (biases optional)."""
    _, R = ffn_mask(Y, W_1, b_1)
    S = R @ W_2 + Y
    if b_2 is not None:
        S = S + b_2
    return S


@torch.no_grad()
def ffn_jacobians(
    Y: torch.Tensor, W_1: torch.Tensor, W_2: torch.Tensor, b_1: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Lemma 1, first derivatives of S (single sample, Y in R^{L x d}):

        dS/dY   = I_{L d} + (I_L (x) W_2^T) D_M (I_L (x) W_1^T)        (L d) x (L d)
        dS/dW_1 = (I_L (x) W_2^T) D_M (Y (x) I_{d_ff})                 (L d) x (d d_ff)
        dS/dW_2 = ReLU(Y W_1 + b_1) (x) I_d                           (L d) x (d_ff d)

    (vec_r(Y W_1) = (Y (x) I) vec_r(W_1) = (I_L (x) W_1^T) vec_r(Y), vec_r(R W_2) = (R (x) I_d) vec_r(W_2)).
    """
    L, d = Y.shape
    M, R = ffn_mask(Y, W_1, b_1)
    IL = torch.eye(L, dtype=Y.dtype, device=Y.device)
    W2T = kron(IL, W_2.T)  # (L d) x (L d_ff)
    DM = torch.diag(M.reshape(-1))
    dY = torch.eye(L * d, dtype=Y.dtype, device=Y.device) + W2T @ DM @ kron(IL, W_1.T)
    dW1 = W2T @ DM @ kron(Y, torch.eye(W_1.shape[1], dtype=Y.dtype, device=Y.device))
    dW2 = kron(R, torch.eye(d, dtype=Y.dtype, device=Y.device))
    return {"Y": dY, "W_1": dW1, "W_2": dW2}


@torch.no_grad()
def ffn_second_derivatives(
    Y: torch.Tensor, W_1: torch.Tensor, W_2: torch.Tensor, b_1: torch.Tensor | None = None
) -> dict[tuple[str, str], torch.Tensor]:
    """Lemma 1, second derivatives of S over u in {Y, W_1, W_2}, stacked layout
    d vec_r(dS/du_a) / d vec_r(u_b)^T, shape (L d * |u_a|) x |u_b|. Index form
    (l, l' tokens; c, e, a in [d]; f, f' in [d_ff]; delta the Kronecker delta):

        d^2 S_lc / (dY_l'e dW1_af)   = delta_ll' delta_ae M_lf W2_fc
        d^2 S_lc / (dY_l'e dW2_fc')  = delta_ll' delta_cc' M_lf W1_ef
        d^2 S_lc / (dW1_af dW2_f'c') = delta_ff' delta_cc' M_lf Y_la
        d^2 S / dY^2 = d^2 S / dW_1^2 = d^2 S / dW_2^2 = 0.

    The mixed (W_2, W_1) block equals d vec_r(R (x) I_d)/dW_1 = d vec_r(dS/dW_2)/dW_1, etc.;
    each pair (a, b) and its mirror (b, a) hold the same numbers in a different stacking.
    Returns all nine ordered pairs. Materialised: meant for small sizes.
    """
    L, d = Y.shape
    dff = W_1.shape[1]
    M, _ = ffn_mask(Y, W_1, b_1)
    IL = torch.eye(L, dtype=Y.dtype, device=Y.device)
    Id = torch.eye(d, dtype=Y.dtype, device=Y.device)
    If = torch.eye(dff, dtype=Y.dtype, device=Y.device)
    # t_YW1[l,c,l',e,a,f]
    t_YW1 = torch.einsum("lm,ea,lf,fc->lcmeaf", IL, Id, M, W_2)
    # t_YW2[l,c,l',e,f,c']
    t_YW2 = torch.einsum("lm,cC,lf,ef->lcmefC", IL, Id, M, W_1)
    # t_W1W2[l,c,a,f,f',c']
    t_W12 = torch.einsum("fF,cC,lf,la->lcafFC", If, Id, M, Y)
    n, n1, n2 = L * d, d * dff, dff * d
    out = {
        ("Y", "Y"): Y.new_zeros(n * n, n),
        ("W_1", "W_1"): Y.new_zeros(n * n1, n1),
        ("W_2", "W_2"): Y.new_zeros(n * n2, n2),
        ("Y", "W_1"): t_YW1.reshape(n * n, n1),
        ("W_1", "Y"): t_YW1.permute(0, 1, 4, 5, 2, 3).reshape(n * n1, n),
        ("Y", "W_2"): t_YW2.reshape(n * n, n2),
        ("W_2", "Y"): t_YW2.permute(0, 1, 4, 5, 2, 3).reshape(n * n2, n),
        ("W_1", "W_2"): t_W12.reshape(n * n1, n2),
        ("W_2", "W_1"): t_W12.permute(0, 1, 4, 5, 2, 3).reshape(n * n2, n1),
    }
    return out
