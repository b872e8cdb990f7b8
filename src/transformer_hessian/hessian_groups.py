"""Dense Hessian of the training loss w.r.t. all nine parameter groups of one block.

The pipeline's Figures 3-5 use the five matrix groups ``GROUPS = (W_Q, W_K, W_V, W_1, W_2)``
(:mod:`transformer_hessian.hessian`, unchanged). Appendix A.1 of the paper (Figure 10,
"LayerNorm entries visualization") also needs the LayerNorm scales and shifts, so this module
adds ``LN_GROUPS = (gamma1, beta1, gamma2, beta2)`` after them:

    ALL_GROUPS = (W_Q, W_K, W_V, W_1, W_2, gamma1, beta1, gamma2, beta2),
    w = [vec_r W_Q; vec_r W_K; vec_r W_V; vec_r W_1; vec_r W_2; gamma1; beta1; gamma2; beta2],
    H = d^2 loss / dw^2 (float64), loss = mean cross-entropy on one fixed batch.

For the model's last block (a single-block model: its only block) H is the closed form
(``theory.model_loss_hessian_all_groups``: the five-group closed form plus the LayerNorm rows
and columns of docs/theory.md section 20). For other blocks the columns of H are Hessian-vector
products H e_j (forward-over-reverse, ``torch.func.jvp`` of ``torch.func.grad``) vectorised
with ``torch.func.vmap``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, jvp, vmap

from . import ALL_GROUPS, GROUPS, LN_GROUPS  # noqa: F401 (LN_GROUPS re-exported)
from .model import ViT

#: LayerNorm scale and shift of the two LayerNorms of a block (post-attention, post-FFN).


def layout(model: ViT, block: int, groups=ALL_GROUPS):
    """(names, shapes, offsets): group ``groups[i]`` occupies ``w[offsets[i]:offsets[i+1]]``
    (``theory.layout.flat_layout``)."""
    from .theory.layout import flat_layout

    blk = model.blocks[block]
    return flat_layout({n: getattr(blk, n) for n in groups}, groups)


def loss_of(model: ViT, block: int, images: torch.Tensor, labels: torch.Tensor, groups=ALL_GROUPS):
    """(f, w0): f(w) = mean cross-entropy of the model with ``groups`` of ``block`` set from the
    flat vector w (row-major per group, concatenated in ``groups`` order); w0 = current values."""
    names = [f"blocks.{block}.{n}" for n in groups]
    shapes = [model.get_parameter(n).shape for n in names]
    sizes = [s.numel() for s in shapes]
    fixed = {k: v.detach() for k, v in model.named_parameters() if k not in names}

    def f(flat: torch.Tensor) -> torch.Tensor:
        parts = torch.split(flat, sizes)
        logits = functional_call(
            model, {**fixed, **{n: p.reshape(s) for n, p, s in zip(names, parts, shapes)}}, (images,)
        )
        return F.cross_entropy(logits, labels)

    return f, torch.cat([model.get_parameter(n).detach().reshape(-1) for n in names])


def hessian_columns(
    model: ViT, block: int, images, labels, columns, groups=ALL_GROUPS, chunk_size: int = 64
) -> torch.Tensor:
    """H[:, columns] (P x len(columns)) by vmapped Hessian-vector products H e_j."""
    f, w = loss_of(model, block, images, labels, groups)
    g = grad(f)
    cols = torch.as_tensor(np.asarray(columns, dtype=np.int64), device=w.device)
    E = torch.zeros(len(cols), w.numel(), dtype=w.dtype, device=w.device)
    E[torch.arange(len(cols), device=w.device), cols] = 1.0

    def hvp(v):
        return jvp(g, (w,), (v,))[1]

    rows = [vmap(hvp)(E[i : i + chunk_size]) for i in range(0, len(cols), chunk_size)]
    return torch.cat(rows, dim=0).T if rows else w.new_zeros(w.numel(), 0)


def hessian_all_groups(
    model: ViT, block: int, images, labels, method: str = "auto", chunk_size: int = 64
) -> tuple[torch.Tensor, str]:
    """Dense float64 Hessian over ALL_GROUPS (P9 x P9). Returns (H, method used).

    ``closed_form``: :func:`transformer_hessian.theory.model_loss_hessian_all_groups`, every
    block of the nine groups in closed form (docs/theory.md section 20); the model's last block
    only (the one that feeds the mean-pool and head), ValueError otherwise. ``vmap``: every
    column a vmapped Hessian-vector product. ``auto``: ``closed_form`` for the last block,
    ``vmap`` for the others.
    """
    from .theory import model_loss_hessian_all_groups

    if method not in ("auto", "closed_form", "vmap"):
        raise ValueError(f"hessian_all_groups: unknown method {method!r}; choose auto, closed_form or vmap")
    model = model.to(torch.float64)
    images = images.to(torch.float64)
    depth = model.cfg.depth
    last = block in (depth - 1, -1)
    if method == "closed_form" and not last:
        raise ValueError(
            f"hessian_all_groups: method 'closed_form' covers the last block of the model only "
            f"(block {depth - 1} of a depth-{depth} model), not block {block}; use auto or vmap"
        )
    if method != "vmap" and last:
        return model_loss_hessian_all_groups(model, images, labels, block=depth - 1), "closed_form"
    _, _, off = layout(model, block)
    H = hessian_columns(model, block, images, labels, range(int(off[-1])), chunk_size=chunk_size)
    return 0.5 * (H + H.T), "vmap"


def _spectral(blk: torch.Tensor, symmetric: bool) -> float:
    if symmetric:
        return float(torch.linalg.eigvalsh(blk).abs().max())
    return float(torch.linalg.matrix_norm(blk, 2))


def symmetric_block_norms(H, offsets, names) -> np.ndarray:
    """Frobenius, spectral and max|entry| norms of every block H_ij of a symmetric H.

    Returns an array (3, n, n): [0] = ||H_ij||_F, [1] = ||H_ij||_2, [2] = max |(H_ij)_kl|.
    Uses H_ji = H_ij^T (same norms): only i <= j is computed, diagonal blocks through their
    eigenvalues (||A||_2 = max |lambda(A)| for symmetric A). Same numbers as
    ``hessian.block_norms`` up to rounding (tests).
    """
    H = torch.as_tensor(np.asarray(H))
    off = np.asarray(offsets)
    n = len(names)
    out = np.zeros((3, n, n))
    for i in range(n):
        for j in range(i, n):
            blk = H[off[i] : off[i + 1], off[j] : off[j + 1]]
            vals = (float(torch.linalg.matrix_norm(blk, "fro")), _spectral(blk, i == j), float(blk.abs().max()))
            out[:, i, j] = out[:, j, i] = vals
    return out


def weight_norms_all(model: ViT, block: int, groups=ALL_GROUPS) -> np.ndarray:
    """(2, n): [0] spectral, [1] Frobenius norm of each group (a vector's spectral norm is its
    Euclidean norm, equal to its Frobenius norm)."""
    blk = model.blocks[block]
    out = np.zeros((2, len(groups)))
    for k, name in enumerate(groups):
        W = getattr(blk, name).detach().to(torch.float64)
        W2 = W if W.ndim == 2 else W.reshape(1, -1)
        out[0, k] = float(torch.linalg.matrix_norm(W2, 2))
        out[1, k] = float(torch.linalg.matrix_norm(W2, "fro"))
    return out
