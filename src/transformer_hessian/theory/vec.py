"""Shared helpers for the closed forms: vec_r, Kronecker and commutation matrices, softmax
derivatives and the stacked second-order chain rule.

Conventions (the paper's, see docs/theory.md):

* ``vec_r(W) = W.reshape(-1)``: row-wise vectorisation of a p x q matrix, entry (i, j) at
  position ``i * q + j``.
* Numerator layout: dN/dW := d vec_r(N) / d vec_r(W)^T, shape (n d) x (p q).
* Stacked second derivative: d^2N/(dW_i dW_j) := d vec_r(dN/dW_i) / d vec_r(W_j)^T, shape
  (n d * p_i q_i) x (p_j q_j); row ``a * p_i q_i + alpha`` holds the second derivatives of
  entry ``a`` of vec_r(N) w.r.t. entry ``alpha`` of vec_r(W_i) and every entry of vec_r(W_j).
* Product rule used everywhere: vec_r(A M B) = (A (x) B^T) vec_r(M).

No function here uses autograd; all work under ``torch.no_grad()``.
"""

from __future__ import annotations

import torch

__all__ = [
    "vec_r",
    "unvec_r",
    "kron",
    "commutation_matrix",
    "block_diag_rows",
    "softmax_row_jacobian",
    "softmax_row_jacobian_rows",
    "softmax_row_hessian",
    "softmax_row_hessian_rows",
    "softmax_row_hessian_contract",
    "chain_rule_second",
    "contract_stacked",
    "left_products",
    "outer_blocks",
]


@torch.no_grad()
def vec_r(M: torch.Tensor) -> torch.Tensor:
    """Row-wise vectorisation vec_r(M) = M.reshape(-1) (row-major flatten)."""
    return M.reshape(-1)


@torch.no_grad()
def unvec_r(v: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Inverse of :func:`vec_r`: the rows x cols matrix whose vec_r is ``v``."""
    return v.reshape(rows, cols)


@torch.no_grad()
def kron(*mats: torch.Tensor) -> torch.Tensor:
    """Kronecker product A_1 (x) A_2 (x) ... (left to right).

    With row-wise vectorisation, vec_r(A M B) = (A (x) B^T) vec_r(M).
    """
    out = mats[0].contiguous()
    for m in mats[1:]:
        out = torch.kron(out, m.contiguous())
    return out


@torch.no_grad()
def commutation_matrix(m: int, n: int, dtype=torch.float64, device=None) -> torch.Tensor:
    """Commutation matrix K_{m,n} (mn x mn) in the standard (Magnus-Neudecker) convention.

    K_{m,n} vec_c(A) = vec_c(A^T) for A in R^{m x n} (column-wise vec); equivalently, with the
    row-wise vectorisation used throughout this package,

        K_{m,n} vec_r(B) = vec_r(B^T)   for B in R^{n x m}.

    Entries: for B (n x m), vec_r(B)[a * m + b] = B[a, b] goes to vec_r(B^T)[b * n + a], so
    K_{m,n}[b * n + a, a * m + b] = 1. K_{m,n}^T = K_{n,m} = K_{m,n}^{-1}.
    """
    K = torch.zeros(m * n, m * n, dtype=dtype, device=device)
    a = torch.arange(n, device=device).repeat_interleave(m)  # row index of B
    b = torch.arange(m, device=device).repeat(n)  # column index of B
    K[b * n + a, a * m + b] = 1.0
    return K


@torch.no_grad()
def block_diag_rows(blocks: torch.Tensor) -> torch.Tensor:
    """(m, n, n) per-row blocks -> the (m n) x (m n) block-diagonal matrix they form.

    A map applied to each row of an m x n matrix separately has, under vec_r, a block-diagonal
    Jacobian with one n x n block per row.
    """
    m, n, _ = blocks.shape
    out = blocks.new_zeros(m, n, m, n)
    idx = torch.arange(m, device=blocks.device)
    out[idx, :, idx, :] = blocks
    return out.reshape(m * n, m * n)


# --------------------------------------------------------------------------- softmax


@torch.no_grad()
def softmax_row_jacobian_rows(A: torch.Tensor) -> torch.Tensor:
    """Per-row blocks of the row-wise softmax Jacobian: J_i = diag(a_i) - a_i a_i^T.

    ``A`` = softmax_row(T) of shape (..., m, n); returns (..., m, n, n).
    """
    return torch.diag_embed(A) - A.unsqueeze(-1) * A.unsqueeze(-2)


@torch.no_grad()
def softmax_row_jacobian(A: torch.Tensor) -> torch.Tensor:
    """dA/dT for A = softmax_row(T), T in R^{m x n}: the (m n) x (m n) block-diagonal matrix

        dA/dT = blockdiag_i ( diag(a_i) - a_i a_i^T ),

    a_i the i-th row of A (rows do not interact). Ormaniec et al. (2025), Eq. for dA/dT.
    """
    return block_diag_rows(softmax_row_jacobian_rows(A))


@torch.no_grad()
def softmax_row_hessian_rows(A: torch.Tensor) -> torch.Tensor:
    """Per-row second derivatives of softmax, shape (..., m, n, n, n), entry [i, j, k, l]:

        d^2 a_ij / (d t_ik d t_il) = a_j (delta_jk - a_k)(delta_jl - a_l) - a_j a_k (delta_kl - a_l)

    (indices within row i; ``a_j`` means a_ij).
    """
    n = A.shape[-1]
    eye = torch.eye(n, dtype=A.dtype, device=A.device)
    D = eye - A.unsqueeze(-2)  # [.., j, k] = delta_jk - a_k
    a = A
    t1 = a[..., :, None, None] * D[..., :, :, None] * D[..., :, None, :]
    t2 = a[..., :, None, None] * a[..., None, :, None] * D[..., None, :, :]
    return t1 - t2


@torch.no_grad()
def softmax_row_hessian(A: torch.Tensor) -> torch.Tensor:
    """d^2A/dT^2 for A = softmax_row(T) (m x n), stacked layout (m n * m n) x (m n).

    Row ((i, j), (i', k)) and column (i'', l) hold d^2 a_ij / (d t_i'k d t_i''l), which is zero
    unless i = i' = i'' and otherwise given by :func:`softmax_row_hessian_rows`.
    This is the draft's d^2A/dT^2 that enters Z_2 (Ormaniec et al. 2025, Thm 3.2).
    """
    m, n = A.shape
    rows = softmax_row_hessian_rows(A)  # m, n, n, n
    out = A.new_zeros(m, n, m, n, m, n)
    idx = torch.arange(m, device=A.device)
    out[idx, :, idx, :, idx, :] = rows
    return out.reshape(m * n * m * n, m * n)


@torch.no_grad()
def softmax_row_hessian_contract(A: torch.Tensor, Gam: torch.Tensor) -> torch.Tensor:
    """Per-row Hessian of <Gam, softmax_row(T)> w.r.t. T, shape (..., m, n, n).

    For one row with a = softmax(t), weights gamma and c = <a, gamma>, u = a o (gamma - c):

        d^2 <gamma, softmax(t)> / dt dt^T = diag(u) - u a^T - a u^T,

    i.e. (gamma^T (x) I_n) applied to the row's block of d^2A/dT^2.
    """
    c = (A * Gam).sum(-1, keepdim=True)
    u = A * (Gam - c)
    return torch.diag_embed(u) - u.unsqueeze(-1) * A.unsqueeze(-2) - A.unsqueeze(-1) * u.unsqueeze(-2)


# ------------------------------------------------------------------ second-order chain rule


@torch.no_grad()
def chain_rule_second(
    J: torch.Tensor,
    H: torch.Tensor | None,
    B_i: torch.Tensor,
    B_j: torch.Tensor,
    xi: torch.Tensor | None = None,
) -> torch.Tensor:
    """Stacked second derivative of a composition N(u(W)):

        d^2N/(dW_i dW_j) = (J (x) I_{n_i}) xi_ij + (I_{|N|} (x) B_i^T) H B_j,

    J = dN/du (|N| x |u|), H = d^2N/du^2 stacked ((|N| |u|) x |u|), B_i = du/dW_i (|u| x n_i),
    xi_ij = d^2u/(dW_i dW_j) stacked ((|u| n_i) x n_j) or None when u is linear in the weights;
    H = None when N is linear in u.
    This is the assembly of Theorems 4-5 (with N = Z, u = S). Computed with einsum instead
    of forming the Kronecker products.
    """
    nN, nu = J.shape
    ni, nj = B_i.shape[1], B_j.shape[1]
    out = J.new_zeros(nN, ni, nj)
    if H is not None:
        out = out + torch.einsum("auv,ui,vj->aij", H.reshape(nN, nu, nu), B_i, B_j)
    if xi is not None:
        out = out + torch.einsum("au,uij->aij", J, xi.reshape(nu, ni, nj))
    return out.reshape(nN * ni, nj)


@torch.no_grad()
def contract_stacked(g: torch.Tensor, D2: torch.Tensor, n_i: int) -> torch.Tensor:
    """(g^T (x) I_{n_i}) D2 for a stacked second derivative D2 ((|N| n_i) x n_j): the
    second derivative of the scalar <g, vec_r(N)>."""
    nN = g.numel()
    return torch.einsum("a,aij->ij", g.reshape(-1), D2.reshape(nN, n_i, -1))


def left_products(B: dict, G: torch.Tensor | float) -> dict:
    """{i: B_i^T G}. ``G`` a float c stands for the output Hessian c I: then B_i^T G is c B_i^T,
    written contiguous as the product would be, with the same bits (each entry of B_i^T (c I) is a
    sum of one product c B[j, i] and exact zeros) and without the (L d)^2 P_i flops of a product
    with a dense identity."""
    if isinstance(G, float):
        return {i: (G * b.T).contiguous() for i, b in B.items()}
    return {i: b.T @ G for i, b in B.items()}


def outer_blocks(B: dict, G: torch.Tensor | float) -> dict:
    """All ordered pairs (i, j) of B_i^T G B_j, evaluated as (B_i^T G) B_j (:func:`left_products`)."""
    BtG = left_products(B, G)
    return {(i, j): BtG[i] @ B[j] for i in B for j in B}
