"""Spectral-norm bounds on the MSE-loss Hessian of one self-attention layer.

    T = X W_Q W_K^T X^T / sqrt(d_K),   A = softmax_row(T),   F = A X W_V,
    l = ||F - Target||_F^2 / (L d_V)       (one sample, X in R^{L x d_V})

Two bounds live here (docs/theory.md, "Theorem 1"):

* :func:`attention_bound_paper` -- the paper's Theorem 1 (arXiv 2510.16927, Sec. 4.1) as
  printed (``form="statement"``) or as the proof in App. C.1 ends (``form="appendix"``). No
  repairs: both list only the (V,V), (Q,Q), (V,Q), (Q,K) blocks and use ||dA/dT|| <= 1/L,
  so they fail e.g. for W_Q -> W_Q/delta, W_K -> delta W_K (tests/studies/test_bounds_attention.py).
* :func:`attention_bound` -- the project's bound, proven for every input. With c = 2/(L d_V),
  g = c vec_r(F - Target), R = unvec_r(g) and G_i = dF/dW_i,

      ||H_ij|| <= c ||G_i|| ||G_j|| + ||(g^T (x) I) d^2F/(dW_i dW_j)||

  (Gauss-Newton split + triangle inequality), ||G_i|| the exact spectral norm of the
  closed-form Jacobian, and the functional part bounded factor by factor (sub-multiplicativity,
  ||A (x) B|| = ||A|| ||B||, block-diagonal norm = max over blocks) from the closed form of
  :func:`transformer_hessian.theory.attention_hessian_from_loss_derivatives`:

      H_f(Q,Q) = dT_Q^T Psi dT_Q              <= ||dT_Q||^2 ||Psi||
      H_f(K,K) = dT_K^T Psi dT_K              <= ||dT_K||^2 ||Psi||
      H_f(Q,K) = dT_Q^T Psi dT_K + (X^T Delta X (x) I)/s
                                              <= ||dT_Q|| ||Psi|| ||dT_K|| + ||X^T Delta X|| / s
      H_f(V,Q) = (X^T (x) R^T) K_{L,L} J_A dT_Q <= ||X|| ||R|| ||J_A|| ||dT_Q||   (same for K)
      H_f(V,V) = 0,

  s = sqrt(d_K), ||dT_Q|| = ||X|| ||X W_K|| / s, ||dT_K|| = ||X W_Q|| ||X|| / s (exact,
  Kronecker), ||Psi|| = max_l ||<gamma_l, d^2 a_l / dt_l^2>|| with gamma_l = (R W_V^T X^T)_l and
  ||J_A|| = max_l ||diag(a_l) - a_l a_l^T|| (exact block-diagonal norms of the actual attention
  matrix), Delta = unvec_r(J_A^T vec_r(R W_V^T X^T)).

The total is bounded by the spectral norm of the 3 x 3 matrix of block bounds N_ij >= ||H_ij||
(for a block matrix, ||H|| <= ||[||H_ij||]_ij||).
"""

from __future__ import annotations

import math

import torch

from ...theory.attention import ATTENTION_GROUPS
from ...theory.vec import softmax_row_hessian_contract, softmax_row_jacobian_rows

__all__ = [
    "ATTENTION_GROUPS",
    "attention_bound",
    "attention_bound_paper",
    "attention_functional_bounds",
    "attention_jacobian_norms",
    "opnorm",
    "total_from_pairs",
]


def opnorm(M: torch.Tensor) -> torch.Tensor:
    """Spectral norm ||M||_2 of each matrix in a batch (..., m, n), via the largest eigenvalue
    of the smaller Gram matrix (sqrt(lambda_max(M M^T)) or sqrt(lambda_max(M^T M)))."""
    m, n = M.shape[-2:]
    if m == 0 or n == 0:
        return M.new_zeros(M.shape[:-2])
    G = M @ M.transpose(-1, -2) if m <= n else M.transpose(-1, -2) @ M
    G = 0.5 * (G + G.transpose(-1, -2))
    lam = torch.linalg.eigvalsh(G)[..., -1]
    # eigvalsh is backward stable: |lam - lam_true| <= ~ n u ||G||; pad by that amount so the
    # result is never below the true norm (a bound must not lose to rounding).
    pad = 8 * n * torch.finfo(M.dtype).eps * lam.abs()
    return torch.sqrt((lam + pad).clamp_min(0.0))


def total_from_pairs(pairs: dict, names) -> torch.Tensor | float:
    """||H||_2 <= || N ||_2 with N_ij = bound on ||H_ij||_2 (a non-negative matrix; valid for
    any block partition). Works on floats or batched tensors."""
    N = torch.stack(
        [torch.stack([torch.as_tensor(pairs[(i, j)], dtype=torch.float64).cpu() for j in names], -1) for i in names], -2
    )
    N = 0.5 * (N + N.transpose(-1, -2))
    return torch.linalg.eigvalsh(N)[..., -1] * (1 + 1e-12)


def _spec2(M: torch.Tensor) -> torch.Tensor:
    """Spectral norm of a batch of small matrices (SVD)."""
    return torch.linalg.matrix_norm(M, ord=2) * (1 + 1e-12)


def _factor_norm(alpha: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """Exact spectral norm of the Jacobian J (B, L c, p q) with row block l = alpha_l^T (x) Phi_l
    (entry [(l, c), (i, j)] = alpha_l[i] Phi_l[c, j]; column order is irrelevant for the norm).

    Its Gram matrix over rows is [(l,c),(l',c')] = <alpha_l, alpha_l'> (Phi_l Phi_l'^T)[c, c'].
    """
    Bn, L, c, _ = phi.shape
    aa = alpha @ alpha.transpose(-1, -2)  # (B, L, L)
    pp = torch.einsum("blcj,bmej->blcme", phi, phi)
    G = (aa[:, :, None, :, None] * pp).reshape(Bn, L * c, L * c)
    G = 0.5 * (G + G.transpose(-1, -2))
    lam = torch.linalg.eigvalsh(G)[..., -1]
    pad = 8 * L * c * torch.finfo(G.dtype).eps * lam.abs()
    return torch.sqrt((lam + pad).clamp_min(0.0))


def attention_jacobian_factors(X: torch.Tensor, WQ: torch.Tensor, WK: torch.Tensor, WV: torch.Tensor):
    """Per-token factors of dF/dW (batched X (B, L, d)): (A, alpha, phi) with
    dF_l/dW = alpha_l^T (x) Phi_l (W_K up to a column permutation):

        W_Q: alpha = x_l,        Phi = W_V^T X^T J_l X W_K / s
        W_K: alpha = (X W_Q)_l,  Phi = W_V^T X^T J_l X / s
        W_V: alpha = (A X)_l,    Phi = I_d,          J_l = diag(a_l) - a_l a_l^T.
    """
    k = WQ.shape[1]
    s = math.sqrt(k)
    d = X.shape[-1]
    XQ, XK = X @ WQ, X @ WK
    A = torch.softmax(XQ @ XK.transpose(-1, -2) / s, dim=-1)
    AX = A @ X
    XJX = torch.einsum("blj,bjm,bjn->blmn", A, X, X) - AX.unsqueeze(-1) * AX.unsqueeze(-2)
    VXJX = torch.einsum("pc,blpn->blcn", WV, XJX) / s
    eye = torch.eye(d, dtype=X.dtype, device=X.device).expand(*X.shape[:2], d, d)
    alpha = {"W_Q": X, "W_K": XQ, "W_V": AX}
    phi = {"W_Q": VXJX @ WK, "W_K": VXJX, "W_V": eye}
    return A, alpha, phi


def attention_jacobian_norms(X: torch.Tensor, WQ, WK, WV) -> dict[str, torch.Tensor]:
    """Exact ||dF/dW_i||_2 per sample for X (B, L, d); returns {name: (B,)}."""
    _, alpha, phi = attention_jacobian_factors(X, WQ, WK, WV)
    out = {n: _factor_norm(alpha[n], phi[n]) for n in ("W_Q", "W_K")}
    out["W_V"] = _spec2(alpha["W_V"])  # A X (x) I_d
    return out


def attention_functional_bounds(X: torch.Tensor, WQ, WK, WV, A: torch.Tensor, R: torch.Tensor) -> dict:
    """Bounds on ||(vec_r(R)^T (x) I) d^2F/(dW_i dW_j)||_2 for all 9 pairs (module docstring),
    batched: X, R (B, L, d), A (B, L, L) the attention matrix. Returns {(i, j): (B,)}."""
    k = WQ.shape[1]
    s = math.sqrt(k)
    nX = _spec2(X)
    dTQ = nX * _spec2(X @ WK) / s
    dTK = _spec2(X @ WQ) * nX / s
    Gam = R @ WV.T @ X.transpose(-1, -2)  # (B, L, L)
    nPsi = _spec2(softmax_row_hessian_contract(A, Gam)).amax(-1)
    Delta = A * (Gam - (A * Gam).sum(-1, keepdim=True))  # unvec_r(J_A^T vec_r(Gam))
    nXDX = _spec2(X.transpose(-1, -2) @ Delta @ X)
    nJA = _spec2(softmax_row_jacobian_rows(A)).amax(-1)
    nR = _spec2(R)
    out = {
        ("W_Q", "W_Q"): dTQ * dTQ * nPsi,
        ("W_K", "W_K"): dTK * dTK * nPsi,
        ("W_Q", "W_K"): dTQ * nPsi * dTK + nXDX / s,
        ("W_V", "W_Q"): nX * nR * nJA * dTQ,
        ("W_V", "W_K"): nX * nR * nJA * dTK,
        ("W_V", "W_V"): torch.zeros_like(nX),
    }
    for i, j in [("W_Q", "W_K"), ("W_V", "W_Q"), ("W_V", "W_K")]:
        out[(j, i)] = out[(i, j)]
    return out


def _check(X: torch.Tensor, params: dict, target: torch.Tensor):
    if X.dim() != 2:
        raise ValueError(f"X must be one sample of shape (L, d_V), got {tuple(X.shape)}")
    W = [params[n].detach().to(X.dtype) for n in ATTENTION_GROUPS]
    if target.shape != X.shape:
        raise ValueError(f"target must have the shape of F(X) = {tuple(X.shape)}, got {tuple(target.shape)}")
    return X.detach(), W, target.detach().to(X.dtype)


@torch.no_grad()
def attention_bound(X: torch.Tensor, params: dict, target: torch.Tensor) -> dict:
    """The project's proven bound on the MSE-loss Hessian of one self-attention layer.

    Returns {(name_i, name_j): float >= ||H_ij||_2} for name in (W_Q, W_K, W_V) and
    ``"total"`` >= ||H||_2 of the whole 3 x 3 block matrix, H = d^2 l / dw^2,
    l = ||F(X) - target||_F^2 / (L d_V). Formula: module docstring.
    """
    X, (WQ, WK, WV), target = _check(X, params, target)
    L, d = X.shape
    c = 2.0 / (L * d)
    Xb = X.unsqueeze(0)
    A, _, _ = attention_jacobian_factors(Xb, WQ, WK, WV)
    F = A @ Xb @ WV
    R = c * (F - target)
    nG = attention_jacobian_norms(Xb, WQ, WK, WV)
    fun = attention_functional_bounds(Xb, WQ, WK, WV, A, R)
    pairs = {(i, j): c * nG[i] * nG[j] + fun[(i, j)] for i in ATTENTION_GROUPS for j in ATTENTION_GROUPS}
    total = total_from_pairs(pairs, ATTENTION_GROUPS)
    out = {key: float(v[0]) for key, v in pairs.items()}
    out["total"] = float(total[0])
    return out


@torch.no_grad()
def attention_bound_paper(X: torch.Tensor, params: dict, target: torch.Tensor, form: str = "statement") -> float:
    """Theorem 1 of arXiv 2510.16927 (Sec. 4.1): the bound M on ||H(w)||_2 of one
    self-attention layer under l = ||F - Target||_F^2/(L d_V), transcribed without repairs.

    With x = ||X||_2, q, k, v = ||W_Q||_2, ||W_K||_2, ||W_V||_2, t = ||Target||_2,
    P = L x v + t:

    ``form="statement"`` (main text), r = sqrt(min(L, d_V)):
        M = 3 max( 2L/d_V x^2,
                   8/(L^3 d_V d_K) k^2 v^2 x^6 + 12/(d_V d_K) r P v k^2 x^5,
                   4/(L d_V sqrt(d_K)) v k x^4 + 4 r/(L^2 sqrt(d_K)) P k x^3,
                   8/(L^3 d_V d_K) k q v^2 x^6 + 4 r P/(L d_V sqrt(d_K)) v (3 L k q x^5 + d_V/L x^3) )
    ``form="appendix"`` (the proof's final M, App. C.1), r = sqrt(rank(F(X) - Target)):
        the same with 8 -> 2 (twice), 4 -> 2 (first (V,Q) term),
        4 r/(L^2 sqrt(d_K)) -> 2 r/(L^2 sqrt(d_V d_K)) and
        4 r P/(L d_V sqrt(d_K)) -> 2 r P/(L d_V sqrt(d_V d_K)).
    rank(.) is the numerical rank (torch.linalg.matrix_rank, default tolerance).
    """
    if form not in ("statement", "appendix"):
        raise ValueError(f"form={form!r}: use 'statement' or 'appendix'")
    X, (WQ, WK, WV), target = _check(X, params, target)
    L, dV = X.shape
    dK = WQ.shape[1]
    x, q, k, v = (float(torch.linalg.matrix_norm(M, ord=2)) for M in (X, WQ, WK, WV))
    t = float(torch.linalg.matrix_norm(target, ord=2))
    P = L * x * v + t
    t1 = 2 * L / dV * x**2
    if form == "statement":
        r = math.sqrt(min(L, dV))
        t2 = 8 / (L**3 * dV * dK) * k**2 * v**2 * x**6 + 12 / (dV * dK) * r * P * v * k**2 * x**5
        t3 = 4 / (L * dV * math.sqrt(dK)) * v * k * x**4 + 4 * r / (L**2 * math.sqrt(dK)) * P * k * x**3
        t4 = 8 / (L**3 * dV * dK) * k * q * v**2 * x**6 + 4 * r * P / (L * dV * math.sqrt(dK)) * v * (
            3 * L * k * q * x**5 + dV / L * x**3
        )
    else:
        F = torch.softmax((X @ WQ) @ (X @ WK).T / math.sqrt(dK), dim=-1) @ X @ WV
        r = math.sqrt(int(torch.linalg.matrix_rank(F - target)))
        t2 = 2 / (L**3 * dV * dK) * k**2 * v**2 * x**6 + 12 / (dV * dK) * r * P * v * k**2 * x**5
        t3 = 2 / (L * dV * math.sqrt(dK)) * v * k * x**4 + 2 * r / (L**2 * math.sqrt(dV * dK)) * P * k * x**3
        t4 = 2 / (L**3 * dV * dK) * k * q * v**2 * x**6 + 2 * r * P / (L * dV * math.sqrt(dV * dK)) * v * (
            3 * L * k * q * x**5 + dV / L * x**3
        )
    return 3 * max(t1, t2, t3, t4)
