"""The curvature approximations on the paper's ViT, for comparison with the language model: the GGN,
K-FAC and EK-FAC (curvlinops, as :mod:`.approx` runs them on the decoder, but with K-FAC-reduce for
the weights shared over tokens: the ViT's loss comes after the mean over tokens) against the exact Hessian
of one block's five groups ``W_Q, W_K, W_V, W_1, W_2`` that the Hessian study saved (rule
``hessian``, checked by rule ``theory``), on its fixed batch, at initialisation and after training.

curvlinops' K-FAC takes ``nn.Linear`` layers only, and the paper's block multiplies by raw matrices
(``X @ W``, :class:`transformer_hessian.core.model.PostNormBlock`). :class:`LinearViT` is the same
function written with ``nn.Linear`` layers whose weights are the transposes (``weight = W.T``); the
curvature it gives over ``weight`` is brought back to the paper's row-major ``W`` order by
:func:`transpose_order`. Attention is written out (no fused kernel), so curvlinops' forward-mode
derivatives go through it.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch import nn

from ... import GROUPS
from ...util.files import log

__all__ = ["KFAC_APPROX", "LinearViT", "transpose_order", "vit_approx_step", "vit_approximations"]

#: K-FAC's treatment of the weights shared over the tokens: ``reduce``, since the ViT pools its tokens
#: before the loss (Eschenhagen et al. 2023, arXiv 2311.00636: K-FAC-reduce for this setting,
#: K-FAC-expand for a loss per token such as the language model's, :mod:`.approx`)
KFAC_APPROX = "reduce"

#: the ``nn.Linear`` of :class:`LinearBlock` that holds each group of the paper's block
_LINEAR = {"W_Q": "q", "W_K": "k", "W_V": "v", "W_1": "f1", "W_2": "f2"}


def _linear(W: torch.Tensor) -> nn.Linear:
    """``nn.Linear`` without bias computing ``x @ W`` (its weight is ``W.T``)."""
    lin = nn.Linear(W.shape[0], W.shape[1], bias=False, dtype=W.dtype, device=W.device)
    with torch.no_grad():
        lin.weight.copy_(W.detach().T)
    return lin


class LinearBlock(nn.Module):
    """:class:`~transformer_hessian.core.model.PostNormBlock` with its five matrices as ``nn.Linear``."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.d_k, self.eps = block.d_k, block.eps
        for group, name in _LINEAR.items():
            setattr(self, name, _linear(getattr(block, group)))
        self.norm1 = _norm(block.gamma1, block.beta1, block.eps)
        self.norm2 = _norm(block.gamma2, block.beta2, block.eps)
        self.b_1 = None if block.b_1 is None else nn.Parameter(block.b_1.detach().clone())
        self.b_2 = None if block.b_2 is None else nn.Parameter(block.b_2.detach().clone())

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """The paper's block: Y = LN_1(X + softmax(X W_Q W_K^T X^T / sqrt(d_k)) X W_V), Z = LN_2(Y + ReLU(Y W_1) W_2)."""
        T = self.q(X) @ self.k(X).transpose(-1, -2) / math.sqrt(self.d_k)
        Y = self.norm1(X + self.v(torch.softmax(T, dim=-1) @ X))
        H = self.f1(Y)
        if self.b_1 is not None:
            H = H + self.b_1
        S = self.f2(torch.relu(H))
        if self.b_2 is not None:
            S = S + self.b_2
        return self.norm2(S + Y)


def _norm(gamma: torch.Tensor, beta: torch.Tensor, eps: float) -> nn.LayerNorm:
    ln = nn.LayerNorm(gamma.shape[0], eps=eps, dtype=gamma.dtype, device=gamma.device)
    with torch.no_grad():
        ln.weight.copy_(gamma.detach())
        ln.bias.copy_(beta.detach())
    return ln


class LinearViT(nn.Module):
    """:class:`~transformer_hessian.core.model.ViT` (same function, same values) with each block's five
    matrices as ``nn.Linear`` layers, the form curvlinops' K-FAC takes."""

    def __init__(self, vit: nn.Module):
        super().__init__()
        self.patch_size = vit.cfg.patch_size
        self.embed = vit.embed
        self.pos = vit.pos
        self.blocks = nn.ModuleList(LinearBlock(b) for b in vit.blocks)
        self.head = vit.head

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits: patch embedding + positions, the blocks, mean over tokens, linear head."""
        from ...core.model import patchify

        X = self.embed(patchify(images, self.patch_size)) + self.pos
        for block in self.blocks:
            X = block(X)
        return self.head(X.mean(dim=-2))

    def group_weights(self, block: int) -> list[nn.Parameter]:
        """The ``nn.Linear`` weights of block ``block`` in the order GROUPS (each the transpose of the group)."""
        return [getattr(self.blocks[block], _LINEAR[g]).weight for g in GROUPS]


def transpose_order(shapes: list[tuple[int, int]]) -> torch.Tensor:
    """Index ``p`` with ``A_W = A_lin[p][:, p]``: a matrix over the row-major entries of the transposed
    matrices (``nn.Linear`` weights, ``(out, in)``) brought to the row-major order of the matrices
    ``W`` of ``shapes`` (``(in, out)`` each), concatenated."""
    parts, offset = [], 0
    for rows, cols in shapes:
        # entry (i, o) of W sits at o * rows + i of W.T's row-major vector
        parts.append(offset + torch.arange(rows * cols).reshape(cols, rows).T.reshape(-1))
        offset += rows * cols
    return torch.cat(parts)


def vit_approximations(
    model: nn.Module, block: int, images: torch.Tensor, labels: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Dense GGN, K-FAC and EK-FAC (curvlinops; type-2 Fisher, :data:`KFAC_APPROX`) of the mean cross-entropy
    of ``model`` (a :class:`~transformer_hessian.core.model.ViT`) on ``(images, labels)`` w.r.t. block
    ``block``'s five groups, float64, in the order of the exact Hessian (GROUPS, each ``W`` row-major)."""
    from .approx import dense_curvatures

    lin = LinearViT(model.double())
    for p in lin.parameters():
        p.requires_grad_(False)
    params = lin.group_weights(block)
    for p in params:
        p.requires_grad_(True)
    order = transpose_order([tuple(p.shape[::-1]) for p in params])
    approx = dense_curvatures(lin, params, [(images.double(), labels)], KFAC_APPROX)
    return {name: A[order][:, order] for name, A in approx.items()}


def vit_approx_step(
    s, block: int, checkpoints: dict[str, str], hessians: dict[str, str], batch: Any, out: str
) -> dict[str, Any]:
    """Rule lm_vit_approx: the approximations' errors on the paper's ViT (its block ``block``, the
    Hessian study's ``hessian.block``) at each stage (``checkpoints``/``hessians``: stage ->
    checkpoint / the hessian rule's npz); ``batch(checkpoint)``
    gives ``(model, images, labels)``, the Hessian study's fixed batch. Without ``lm.approximations``
    the result records that nothing was computed."""
    from ...util.io import load_hessian
    from .approx import approximation_errors
    from .result import save_result

    result: dict[str, Any] = {"approximations": bool(s.approximations)}
    for stage, ckpt in checkpoints.items() if s.approximations else ():
        saved = load_hessian(hessians[stage])
        if list(saved["names"]) != list(GROUPS):
            raise ValueError(f"{hessians[stage]}: the Hessian's groups are {saved['names']}, expected {list(GROUPS)}")
        model, images, labels = batch(ckpt)
        t0 = time.perf_counter()
        approx = vit_approximations(model, block, images, labels)
        H = torch.as_tensor(saved["H"], dtype=torch.float64, device=images.device)
        sizes = [int(b - a) for a, b in zip(saved["offsets"][:-1], saved["offsets"][1:])]
        errors = approximation_errors(H, approx, list(GROUPS), sizes, [0] * len(GROUPS))
        errors["seconds"] = time.perf_counter() - t0
        errors["P"] = int(H.shape[0])
        errors["batch_size"] = int(len(images))
        errors["block"] = int(block)
        errors["kfac_approx"] = KFAC_APPROX
        result[stage] = errors
        log.info("lm vit approximations (%s): GGN %.3g, K-FAC %.3g", stage, errors["whole"]["GGN"]["fro"],
                 errors["whole"]["K-FAC"]["fro"])  # fmt: skip
    save_result(out, result)
    return result
