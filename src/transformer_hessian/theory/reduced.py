"""The reduced parametrisation W_QK = W_Q W_K^T of the attention scores (docs/theory.md §19).

The scores X W_Q W_K^T X^T / s depend on W_Q and W_K only through their product, so the closed
forms sum over tokens in four groups instead of five and expand the W_QK blocks to W_Q and W_K
by the chain rule afterwards (:func:`_expand_pair`).
"""

from __future__ import annotations

import torch

#: The groups the sums over tokens run over: W_QK = W_Q W_K^T (d x d) in place of W_Q and W_K.
REDUCED_GROUPS = ("W_QK", "W_V", "W_1", "W_2")
_REDUCED_ATTENTION = ("W_QK", "W_V")


def reduced_shapes(params: dict) -> dict[str, tuple[int, int]]:
    """{name: (p, q)} of :data:`REDUCED_GROUPS` for the block parameters ``params``: W_QK is
    d x d, the others as in ``params``."""
    d = params["W_Q"].shape[0]
    return {"W_QK": (d, d), **{n: tuple(params[n].shape) for n in REDUCED_GROUPS[1:]}}


def _expand_rows(t: torch.Tensor, to: str, WQ: torch.Tensor, WK: torch.Tensor) -> torch.Tensor:
    """Row group W_QK -> W_Q or W_K of a factor-layout block [i, k, j, l] (row entry (i, j)):
    dW_QK[i, j]/dW_Q[i, a] = W_K[j, a] and dW_QK[i, j]/dW_K[j, a] = W_Q[i, a]."""
    if to == "W_Q":
        return torch.einsum("ikjl,ja->ikal", t, WK)
    return torch.einsum("ikjl,ia->jkal", t, WQ)


def _expand_cols(t: torch.Tensor, to: str, WQ: torch.Tensor, WK: torch.Tensor) -> torch.Tensor:
    """Column group W_QK -> W_Q or W_K of a factor-layout block [i, k, j, l] (column entry (k, l))."""
    if to == "W_Q":
        return torch.einsum("ikjl,la->ikja", t, WK)
    return torch.einsum("ikjl,ka->ilja", t, WQ)


def _expand_pair(gi: str, gj: str, t: torch.Tensor, WQ: torch.Tensor, WK: torch.Tensor, grad=None):
    """The five-group blocks of one reduced block (gi <= gj in :data:`REDUCED_GROUPS` order):
    W_QK becomes W_Q and W_K by the chain rule, H_QQ = D_Q^T H_QK,QK D_Q with D_Q = dW_QK/dW_Q
    and so on. ``grad`` = dl/dW_QK (d x d) adds the term of the bilinear map itself to the
    (W_Q, W_K) block, d^2 W_QK[i, k]/(dW_Q[i, a] dW_K[k, a']) = [a = a']:
    (W_Q[i, a], W_K[k, a']) += grad[i, k] [a = a']; pass it for the functional part only.
    Yields (W_i, W_j, block) in the factor layout, i <= j in GROUPS order."""
    rows = ("W_Q", "W_K") if gi == "W_QK" else (gi,)
    cols = ("W_Q", "W_K") if gj == "W_QK" else (gj,)
    for a, ri in enumerate(rows):
        tr = _expand_rows(t, ri, WQ, WK) if gi == "W_QK" else t
        for cj in cols[a if gi == gj else 0 :]:
            tc = _expand_cols(tr, cj, WQ, WK) if gj == "W_QK" else tr
            if (ri, cj) == ("W_Q", "W_K") and grad is not None:
                tc.diagonal(0, 2, 3).add_(grad.unsqueeze(-1))
            yield ri, cj, tc
