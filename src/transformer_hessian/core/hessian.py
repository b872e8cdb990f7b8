"""Exact dense Hessians of the training loss w.r.t. parameter groups of one block.

Figures 3-5 use the five matrix groups ``GROUPS = (W_Q, W_K, W_V, W_1, W_2)`` (:func:`compute_hessian`);
Appendix A.1 (Figure 10) also needs the LayerNorm scales and shifts, ``ALL_GROUPS = GROUPS +
(gamma1, beta1, gamma2, beta2)`` (:func:`hessian_all_groups`). Every function that takes ``groups``
lays the flat vector out the same way: row-major per group, concatenated in ``groups`` order.

The loss is the model's mean cross-entropy on one fixed batch of the training set (the paper
takes one batch from the train loader). All curvature computations run in float64.

Methods (config key ``hessian.method``):

- ``curvlinops``: ``curvlinops.HessianLinearOperator @ I`` (the reference).
- ``vmap``: forward-over-reverse Hessian-vector products vectorised with ``torch.func.vmap``
  over chunks of basis vectors.
- ``closed_form``: the paper's explicit block Hessian (``transformer_hessian.theory``),
  single-block models only.
- ``auto``: ``closed_form`` for single-block models, else ``vmap``.

:func:`hessian_all_groups` takes the closed form of all nine groups for the model's last block
(``theory.model_loss_hessian_all_groups``, docs/theory.md section 20) and vmapped Hessian-vector
products for the others.
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, jvp, vmap

from .. import ALL_GROUPS, GROUPS, LN_GROUPS  # noqa: F401 (LN_GROUPS re-exported)
from .model import ViT


def fixed_batch(train_x: torch.Tensor, train_y: torch.Tensor, batch_size: int, seed: int):
    """The first batch of a seeded shuffle of the training set (same for every stage)."""
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(train_x), generator=gen)[: min(batch_size, len(train_x))]
    return train_x[idx], train_y[idx]


def group_layout(model: ViT, block: int, groups=GROUPS):
    """(names, shapes, offsets): group ``groups[i]`` occupies ``w[offsets[i]:offsets[i+1]]``
    (``theory.layout.flat_layout``)."""
    from ..theory.layout import flat_layout

    blk = model.blocks[block]
    return flat_layout({n: getattr(blk, n) for n in groups}, groups)


def loss_of_groups(model: ViT, block: int, images: torch.Tensor, labels: torch.Tensor, groups=GROUPS):
    """(f, w0): f(w) = mean cross-entropy of the model with ``groups`` of ``block`` set from the
    flat vector w; w0 = their current values."""
    names = [f"blocks.{block}.{n}" for n in groups]
    shapes = [model.get_parameter(n).shape for n in names]
    sizes = [s.numel() for s in shapes]
    fixed = {k: v.detach() for k, v in model.named_parameters() if k not in names}

    def f(flat: torch.Tensor) -> torch.Tensor:
        parts = torch.split(flat, sizes)
        groups = {n: p.reshape(s) for n, p, s in zip(names, parts, shapes)}
        logits = functional_call(model, {**fixed, **groups}, (images,))
        return F.cross_entropy(logits, labels)

    flat0 = torch.cat([model.get_parameter(n).detach().reshape(-1) for n in names])
    return f, flat0


def hessian_vmap(model: ViT, block: int, images, labels, chunk_size: int = 64) -> torch.Tensor:
    """Dense Hessian by vmapped Hessian-vector products (forward-over-reverse), chunk_size columns at a time."""
    f, w = loss_of_groups(model, block, images, labels)
    g = grad(f)

    def hvp(v):
        return jvp(g, (w,), (v,))[1]

    P = w.numel()
    eye = torch.eye(P, dtype=w.dtype, device=w.device)
    # Row i is H e_i, i.e. row i of the symmetric H.
    return torch.cat([vmap(hvp)(eye[i : i + chunk_size]) for i in range(0, P, chunk_size)], dim=0)


def hessian_curvlinops(model: ViT, block: int, images, labels, chunk_size: int = 64) -> torch.Tensor:
    """Dense Hessian as curvlinops' HessianLinearOperator applied to column blocks of I."""
    from curvlinops import HessianLinearOperator

    params = [model.get_parameter(f"blocks.{block}.{n}") for n in GROUPS]
    for p in model.parameters():
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    op = HessianLinearOperator(
        model, torch.nn.CrossEntropyLoss(), params, [(images, labels)], check_deterministic=False
    )
    P = sum(p.numel() for p in params)
    eye = torch.eye(P, dtype=images.dtype, device=images.device)
    # H @ I in column chunks: curvlinops vmaps over all columns at once, whose memory grows
    # with P (about 8 GB at P = 2816, batch 64); chunks bound it.
    return torch.cat([op @ eye[:, i : i + chunk_size] for i in range(0, P, chunk_size)], dim=1)


def hessian_closed_form(model: ViT, block: int, images, labels) -> torch.Tensor:
    """Dense Hessian from the closed forms (theory.model_loss_hessian); single-block models only."""
    from ..theory import model_loss_hessian

    if model.cfg.depth != 1 or block != 0:
        raise ValueError("the closed form covers single-block models only (model.depth == 1)")
    H, _ = model_loss_hessian(model, images, labels, block=0)
    return H


METHODS = {"vmap": hessian_vmap, "curvlinops": hessian_curvlinops, "closed_form": hessian_closed_form}


def resolve_method(method: str, model: ViT) -> str:
    """``auto`` -> closed form for a single block, vmapped HVPs otherwise; ValueError names the key."""
    if method == "auto":
        return "closed_form" if model.cfg.depth == 1 else "vmap"
    if method not in METHODS:
        raise ValueError(f"hessian.method: unknown method {method!r}; choose from auto, {', '.join(METHODS)}")
    return method


def compute_hessian(model: ViT, block: int, images, labels, method: str = "auto") -> tuple[torch.Tensor, str, float]:
    """Dense float64 Hessian (P x P, GROUPS order). Returns (H, method used, seconds)."""
    model = model.to(torch.float64)
    images = images.to(torch.float64)
    method = resolve_method(method, model)
    t0 = time.perf_counter()
    H = METHODS[method](model, block, images, labels)
    return H.detach(), method, time.perf_counter() - t0


def block_pairs(H, offsets, names=GROUPS):
    """Yield (row name, col name, block) over every block pair of a dense GROUPS-ordered H."""
    for i, ri in enumerate(names):
        for j, cj in enumerate(names):
            yield ri, cj, H[offsets[i] : offsets[i + 1], offsets[j] : offsets[j + 1]]


def block_norms(H: np.ndarray, offsets, names=GROUPS) -> list[dict]:
    """Frobenius, spectral norm and max |entry| of every block pair (row-major over GROUPS)."""
    return [
        {
            "row": ri,
            "col": cj,
            "fro": float(torch.linalg.matrix_norm(blk, "fro")),
            "spectral": float(torch.linalg.matrix_norm(blk, 2)),
            "max_abs": float(blk.abs().max()),
        }
        for ri, cj, blk in block_pairs(torch.as_tensor(H), offsets, names)
    ]


def hessian_columns(
    model: ViT, block: int, images, labels, columns, groups=ALL_GROUPS, chunk_size: int = 64
) -> torch.Tensor:
    """H[:, columns] (P x len(columns)) by vmapped Hessian-vector products H e_j."""
    f, w = loss_of_groups(model, block, images, labels, groups)
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
    from ..theory import model_loss_hessian_all_groups

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
    _, _, off = group_layout(model, block, ALL_GROUPS)
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
    :func:`block_norms` up to rounding (tests).
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


def weight_norms(model: ViT, block: int, groups=GROUPS) -> dict[str, dict[str, float]]:
    """{group: {spectral, fro}} of the block's ``groups`` (a vector's spectral norm is its Euclidean
    norm, equal to its Frobenius norm)."""
    blk = model.blocks[block]
    out = {}
    for name in groups:
        W = getattr(blk, name).detach().to(torch.float64)
        W = W if W.ndim == 2 else W.reshape(1, -1)
        out[name] = {
            "spectral": float(torch.linalg.matrix_norm(W, 2)),
            "fro": float(torch.linalg.matrix_norm(W, "fro")),
        }
    return out


def weight_norms_all(model: ViT, block: int, groups=ALL_GROUPS) -> np.ndarray:
    """:func:`weight_norms` as an array (2, n): [0] spectral, [1] Frobenius norm of each group."""
    norms = weight_norms(model, block, groups)
    return np.array([[norms[g]["spectral"] for g in groups], [norms[g]["fro"] for g in groups]])
