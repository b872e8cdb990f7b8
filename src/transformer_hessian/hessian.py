"""Exact dense Hessian of the training loss w.r.t. [W_Q, W_K, W_V, W_1, W_2] of one block.

The loss is the model's mean cross-entropy on one fixed batch of the training set (the paper
takes one batch from the train loader). All curvature computations run in float64.

Methods (config key ``hessian.method``):

- ``curvlinops``: ``curvlinops.HessianLinearOperator @ I`` (the reference).
- ``vmap``: forward-over-reverse Hessian-vector products vectorised with ``torch.func.vmap``
  over chunks of basis vectors.
- ``closed_form``: the paper's explicit block Hessian (``transformer_hessian.theory``),
  single-block models only.
- ``auto``: ``closed_form`` for single-block models, else ``vmap``.
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, jvp, vmap

from . import GROUPS
from .model import ViT


def fixed_batch(train_x: torch.Tensor, train_y: torch.Tensor, batch_size: int, seed: int):
    """The first batch of a seeded shuffle of the training set (same for every stage)."""
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(train_x), generator=gen)[: min(batch_size, len(train_x))]
    return train_x[idx], train_y[idx]


def group_layout(model: ViT, block: int):
    """(names, shapes, offsets) of the five groups in GROUPS order (``theory.layout.flat_layout``)."""
    from .theory.layout import flat_layout

    return flat_layout(model.group_params(block), GROUPS)


def _group_names(model: ViT, block: int) -> list[str]:
    return [f"blocks.{block}.{n}" for n in GROUPS]


def loss_of_groups(model: ViT, block: int, images: torch.Tensor, labels: torch.Tensor):
    """f(flat) = mean cross-entropy with the five groups of ``block`` set from ``flat``."""
    names = _group_names(model, block)
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

    params = [model.get_parameter(n) for n in _group_names(model, block)]
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
    from .theory import model_loss_hessian

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


def weight_norms(model: ViT, block: int) -> dict[str, dict[str, float]]:
    """{group: {spectral, frobenius}} of the block's five weight matrices."""
    out = {}
    for name, W in model.group_params(block).items():
        W = W.detach().to(torch.float64)
        out[name] = {
            "spectral": float(torch.linalg.matrix_norm(W, 2)),
            "fro": float(torch.linalg.matrix_norm(W, "fro")),
        }
    return out
