"""LayerNorm derivatives in closed form (paper's Theorems 2 and 3), with eps kept.

LayerNorm acts on each row u (length n) of U in R^{m x n}:

    mu = 1^T u / n,   c = u - mu 1 = P u  (P = I_n - 1 1^T / n),
    v = c^T c / n (biased variance),   sigma = sqrt(v + eps),   xhat = c / sigma,
    LN(u) = gamma o xhat + beta.

The paper writes LN(U) = P(U) M(U) (M: centring, linear; P: per-row scaling by 1/sigma);
the product rule gives the two terms of the Jacobian below. Everything is per row, so under
vec_r the Jacobian is block diagonal (one n x n block per row) and the Hessian is nonzero
only within a row.
"""

from __future__ import annotations

import torch

from .vec import block_diag_rows

__all__ = [
    "layernorm_forward",
    "layernorm_row_stats",
    "layernorm_jacobian_rows",
    "layernorm_jacobian",
    "layernorm_hessian_rows",
    "layernorm_hessian",
    "layernorm_hessian_contract",
    "layernorm_vjp",
]


@torch.no_grad()
def layernorm_row_stats(U: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(xhat, sigma) per row: xhat = (u - mean u) / sigma, sigma = sqrt(var_biased(u) + eps).

    Shapes: xhat like U (..., m, n), sigma (..., m, 1).
    """
    c = U - U.mean(-1, keepdim=True)
    var = (c * c).mean(-1, keepdim=True)
    sigma = torch.sqrt(var + eps)
    return c / sigma, sigma


@torch.no_grad()
def layernorm_forward(U: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float) -> torch.Tensor:
    """LN(U)_ij = gamma_j (U_ij - mu_i) / sqrt(sigma_i^2 + eps) + beta_j (rows of U)."""
    xhat, _ = layernorm_row_stats(U, eps)
    return gamma * xhat + beta


@torch.no_grad()
def layernorm_jacobian_rows(U: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    """Per-row Jacobian blocks (Theorem 2), shape (..., m, n, n):

        d LN(u) / du^T = diag(gamma) (1 / sigma) (I_n - 1 1^T / n - xhat xhat^T / n),

    sigma = sqrt(var + eps) and xhat = (u - mu) / sigma *including* eps. The first two terms
    come from the centring M (times 1/sigma), the rank-one term from d(1/sigma)/du.
    """
    xhat, sigma = layernorm_row_stats(U, eps)
    n = U.shape[-1]
    eye = torch.eye(n, dtype=U.dtype, device=U.device)
    P = eye - 1.0 / n
    # (P - xhat xhat^T / n) / sigma, then diag(gamma), in place: one (..., m, n, n) buffer
    K = (xhat.unsqueeze(-1) * xhat.unsqueeze(-2)).div_(-n).add_(P)
    return K.div_(sigma.unsqueeze(-1)).mul_(gamma.reshape(-1, 1))


@torch.no_grad()
def layernorm_jacobian(U: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float) -> torch.Tensor:
    """Theorem 2: d vec_r LN(U) / d vec_r(U)^T for U in R^{m x n}, shape (m n) x (m n).

        dLN/dU = blockdiag_i [ diag(gamma) (1/sigma_i) (I_n - 1 1^T/n - xhat_i xhat_i^T/n) ],

    one block per row i (rows are normalised independently). ``beta`` does not enter.
    """
    del beta
    return block_diag_rows(layernorm_jacobian_rows(U, gamma, eps))


@torch.no_grad()
def layernorm_hessian_rows(U: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    """Per-row second derivatives (Theorem 3), shape (..., m, n, n, n), entry [i, a, b, e]:

        d^2 LN_a / (du_b du_e) = gamma_a / (n sigma^2) *
            ( 3 xhat_a xhat_b xhat_e / n - P_ab xhat_e - P_ae xhat_b - P_be xhat_a ),

    P = I - 1 1^T / n, sigma and xhat including eps (row index i omitted). The centring is
    linear (d^2 M = 0); all curvature comes from 1/sigma: its second derivative (the cubic
    term) and its first derivative times dM (the three P terms).
    """
    xhat, sigma = layernorm_row_stats(U, eps)
    n = U.shape[-1]
    P = torch.eye(n, dtype=U.dtype, device=U.device) - 1.0 / n
    xa = xhat[..., :, None, None]
    xb = xhat[..., None, :, None]
    xe = xhat[..., None, None, :]
    core = 3.0 * xa * xb * xe / n - P[:, :, None] * xe - P[:, None, :] * xb - P[None, :, :] * xa
    scale = (1.0 / (n * sigma * sigma))[..., None, None]  # (..., m, 1, 1, 1)
    return gamma.reshape(-1, 1, 1) * core * scale


@torch.no_grad()
def layernorm_hessian(U: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float) -> torch.Tensor:
    """Theorem 3: d^2 LN(U) / dU^2 in the stacked layout, shape (m n * m n) x (m n).

    Row ((i, a), (i', b)), column (i'', e) holds d^2 LN_ia / (dU_i'b dU_i''e): zero unless
    i = i' = i'', otherwise the per-row formula of :func:`layernorm_hessian_rows`.
    """
    del beta
    m, n = U.shape
    rows = layernorm_hessian_rows(U, gamma, eps)  # m, n, n, n
    out = U.new_zeros(m, n, m, n, m, n)
    idx = torch.arange(m, device=U.device)
    out[idx, :, idx, :, idx, :] = rows
    return out.reshape(m * n * m * n, m * n)


@torch.no_grad()
def layernorm_hessian_contract(U: torch.Tensor, gamma: torch.Tensor, eps: float, G: torch.Tensor) -> torch.Tensor:
    """Per-row Hessian of the scalar <G, LN(U)> w.r.t. U, shape (..., m, n, n):
    (vec_r(G)^T (x) I) d^2LN/dU^2, restricted to the diagonal row blocks. With h = gamma o g_i,
    s = <h, xhat>, Ph = h - mean(h):

        Omega_i = 1/(n sigma^2) * ( 3 s xhat xhat^T / n - Ph xhat^T - xhat Ph^T - s P ).

    Never forms the third-order tensor: O(m n^2) instead of O(m n^3).
    """
    xhat, sigma = layernorm_row_stats(U, eps)
    n = U.shape[-1]
    h = G * gamma
    s = (h * xhat).sum(-1, keepdim=True)  # (..., m, 1)
    Ph = h - h.mean(-1, keepdim=True)
    P = torch.eye(n, dtype=U.dtype, device=U.device) - 1.0 / n
    # 3 s xhat xhat^T / n - Ph xhat^T - xhat Ph^T - s P, in place: one (..., m, n, n) buffer
    out = (3.0 * s.unsqueeze(-1) * xhat.unsqueeze(-1) * xhat.unsqueeze(-2)).div_(n)
    out.addcmul_(Ph.unsqueeze(-1), xhat.unsqueeze(-2), value=-1.0)
    out.addcmul_(xhat.unsqueeze(-1), Ph.unsqueeze(-2), value=-1.0)
    out.addcmul_(s.unsqueeze(-1), P, value=-1.0)
    return out.div_((n * sigma * sigma).unsqueeze(-1))


@torch.no_grad()
def layernorm_vjp(U: torch.Tensor, gamma: torch.Tensor, eps: float, G: torch.Tensor) -> torch.Tensor:
    """(dLN/dU)^T vec_r(G) reshaped like U: per row (1/sigma)(P - xhat xhat^T/n)(gamma o g)."""
    xhat, sigma = layernorm_row_stats(U, eps)
    h = G * gamma
    Ph = h - h.mean(-1, keepdim=True)
    s = (h * xhat).sum(-1, keepdim=True)
    return (Ph - xhat * s / U.shape[-1]) / sigma
