"""Post-norm single-head Vision Transformer, written in the orientation of the theory.

Every weight is stored so that a layer computes ``X @ W``; hence ``W.reshape(-1)`` is
vec_r(W), the row-major vectorisation the closed-form Hessians use.

One block on a sample X (L x d), exactly as in the paper (arXiv 2510.16927, Sec. 3 and 4.2;
docs/theory.md)::

    T = X W_Q W_K^T X^T / sqrt(d_K),   A = softmax_row(T),   F = A X W_V
    Y = LN_1(X + F)
    S = ReLU(Y W_1 [+ b_1]) W_2 [+ b_2] + Y
    Z = LN_2(S)

LayerNorm normalises each row with the biased variance and ``eps`` inside the square root:
LN(u)_j = gamma_j (u_j - mean(u)) / sqrt(var(u) + eps) + beta_j.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .. import GROUPS


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the ViT. ``image_size`` and ``channels`` come from the data set."""

    image_size: int
    channels: int
    num_classes: int
    patch_size: int
    width: int  # d (= d_V)
    depth: int  # number of blocks
    d_k: int
    d_ff: int
    ffn_bias: bool = False
    ln_eps: float = 1e-5

    @property
    def num_tokens(self) -> int:
        """Number of patches L = (image_size / patch_size)^2."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def patch_dim(self) -> int:
        """Length of a flattened patch, channels * patch_size^2."""
        return self.channels * self.patch_size**2

    def to_dict(self) -> dict:
        """The config as a plain dict (stored in checkpoints)."""
        return asdict(self)


def layer_norm(U: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float) -> torch.Tensor:
    """Row-wise LayerNorm with biased variance, ``eps`` inside the square root."""
    return F.layer_norm(U, U.shape[-1:], gamma, beta, eps)


class PostNormBlock(nn.Module):
    """Single-head post-norm Transformer block (no output projection)."""

    def __init__(self, d: int, d_k: int, d_ff: int, ffn_bias: bool = False, eps: float = 1e-5):
        super().__init__()
        self.d, self.d_k, self.d_ff, self.eps = d, d_k, d_ff, eps
        self.W_Q = nn.Parameter(torch.empty(d, d_k))
        self.W_K = nn.Parameter(torch.empty(d, d_k))
        self.W_V = nn.Parameter(torch.empty(d, d))
        self.W_1 = nn.Parameter(torch.empty(d, d_ff))
        self.W_2 = nn.Parameter(torch.empty(d_ff, d))
        self.gamma1 = nn.Parameter(torch.ones(d))
        self.beta1 = nn.Parameter(torch.zeros(d))
        self.gamma2 = nn.Parameter(torch.ones(d))
        self.beta2 = nn.Parameter(torch.zeros(d))
        if ffn_bias:
            self.b_1 = nn.Parameter(torch.zeros(d_ff))
            self.b_2 = nn.Parameter(torch.zeros(d))
        else:
            self.b_1 = self.b_2 = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Seeded initialisation of the weight matrices (LayerNorm gamma = 1, beta = 0)."""
        # Xavier-uniform on the math orientation (fan_in = rows, fan_out = columns).
        for W in (self.W_Q, self.W_K, self.W_V, self.W_1, self.W_2):
            bound = math.sqrt(6.0 / (W.shape[0] + W.shape[1]))
            nn.init.uniform_(W, -bound, bound)

    def theory_params(self) -> dict[str, torch.Tensor]:
        """The block's parameters under the names ``transformer_hessian.theory`` uses."""
        names = ["W_Q", "W_K", "W_V", "W_1", "W_2", "gamma1", "beta1", "gamma2", "beta2"]
        out = {n: getattr(self, n) for n in names}
        if self.b_1 is not None:
            out["b_1"], out["b_2"] = self.b_1, self.b_2
        return out

    def forward(self, X: torch.Tensor) -> torch.Tensor:  # X: (..., L, d)
        """Y = LN_1(X + A X W_V), Z = LN_2(ReLU(Y W_1 + b_1) W_2 + b_2 + Y) for X of shape (..., L, d)."""
        T = X @ self.W_Q @ self.W_K.transpose(0, 1) @ X.transpose(-1, -2) / math.sqrt(self.d_k)
        A = torch.softmax(T, dim=-1)
        Fx = A @ X @ self.W_V
        Y = layer_norm(X + Fx, self.gamma1, self.beta1, self.eps)
        H = Y @ self.W_1
        if self.b_1 is not None:
            H = H + self.b_1
        S = torch.relu(H) @ self.W_2
        if self.b_2 is not None:
            S = S + self.b_2
        S = S + Y
        return layer_norm(S, self.gamma2, self.beta2, self.eps)


def patchify(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, L, C p p): non-overlapping patches, row-major over the grid."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError(f"image size {H}x{W} is not divisible by patch_size={p}")
    x = images.reshape(B, C, H // p, p, W // p, p)
    x = x.permute(0, 2, 4, 1, 3, 5)  # B, gh, gw, C, p, p
    return x.reshape(B, (H // p) * (W // p), C * p * p)


class ViT(nn.Module):
    """Patch embedding + positional embedding -> N post-norm blocks -> token mean -> linear head."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        if cfg.image_size % cfg.patch_size:
            raise ValueError(f"model.patch_size={cfg.patch_size} does not divide the image size {cfg.image_size}")
        self.embed = nn.Linear(cfg.patch_dim, cfg.width)
        self.pos = nn.Parameter(0.02 * torch.randn(cfg.num_tokens, cfg.width))
        self.blocks = nn.ModuleList(
            PostNormBlock(cfg.width, cfg.d_k, cfg.d_ff, cfg.ffn_bias, cfg.ln_eps) for _ in range(cfg.depth)
        )
        self.head = nn.Linear(cfg.width, cfg.num_classes)

    def tokens(self, images: torch.Tensor) -> torch.Tensor:
        """Input of the first block: (B, L, d)."""
        return self.embed(patchify(images, self.cfg.patch_size)) + self.pos

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits: patch embedding + positions, the blocks, mean over tokens, linear head."""
        X = self.tokens(images)
        for block in self.blocks:
            X = block(X)
        return self.head(X.mean(dim=-2))

    def block_input(self, images: torch.Tensor, block: int) -> torch.Tensor:
        """Input X of block ``block`` (0-based), (B, L, d)."""
        X = self.tokens(images)
        for b in self.blocks[:block]:
            X = b(X)
        return X

    def group_params(self, block: int) -> dict[str, nn.Parameter]:
        """The five Hessian groups of one block, in the order GROUPS."""
        blk = self.blocks[block]
        return {name: getattr(blk, name) for name in GROUPS}


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters())
