"""Loss Hessians of one block from the loss derivatives w.r.t. its output (Gauss-Newton split).

For any loss l(Z) of the block output with gradient g and Hessian G,

    H_ij = B_i^T G B_j + (g^T (x) I_{p_i q_i}) d^2Z/(dW_i dW_j),   B_i = dZ/dW_i,

and the paper's MSE loss l = ||Z - T||_F^2 / (L d) is the special case g = 2 vec_r(Z - T)/(L d),
G = 2/(L d) I.
"""

from __future__ import annotations

import torch

from .. import GROUPS
from .factored import _dense_jacobian, _functional_factored, _token_factors
from .layout import _prep
from .reference import block_forward, block_output_hessian
from .vec import contract_stacked, outer_blocks


@torch.no_grad()
def block_hessian_from_loss_derivatives(
    X: torch.Tensor,
    params: dict,
    g: torch.Tensor,
    G: torch.Tensor | float,
    eps: float = 1e-5,
    materialise: bool = False,
) -> tuple[dict, dict]:
    """Loss-agnostic Gauss-Newton split (Theorems 4-5 + chain rule). For any loss l(Z) with
    gradient g = dl/dvec_r(Z) (L d) and Hessian G (L d x L d; a float c stands for c I):

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
        if not isinstance(G, float):
            G = G.detach().reshape(L * d, L * d)
        f = _token_factors(X.unsqueeze(0), p, eps)
        Bm = {n: _dense_jacobian(f, n)[0] for n in GROUPS}
        outer = outer_blocks(Bm, G)
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
        return block_hessian_from_loss_derivatives(X, params, g, c, eps, materialise)  # G = c I


@torch.no_grad()
def block_loss_hessian(
    X: torch.Tensor, params: dict, target: torch.Tensor, eps: float = 1e-5, materialise: bool = False
) -> dict:
    """Hessian blocks {(W_i, W_j): (p_i q_i) x (p_j q_j)} of ||Z - T||_F^2 / (L d) (one sample):
    outer-product part + functional part (Theorems 4-5 with the Gauss-Newton split)."""
    outer, fun = block_loss_hessian_parts(X, params, target, eps, materialise)
    return {key: outer[key] + fun[key] for key in outer}
