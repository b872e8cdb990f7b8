"""A GPT-style causal language model of torch modules, for the language-model study.

Token and position embeddings (``tok``, ``pos``), ``depth`` pre-norm blocks (``blocks.{i}``: ``ln1``,
``attn`` with separate ``q``, ``k``, ``v``, ``o`` projections and torch's fused causal attention,
``ln2``, ``mlp`` with ``fc1``, GELU, ``fc2``), a final LayerNorm ``ln_f`` and the LM head tied to the
token embedding (logits = h @ tok.weight^T, no head parameter of its own). The parameter names are
the ones the study addresses (``blocks.0.attn.q.weight``, ...). Its exact Hessian is
:func:`transformer_hessian.exact_hessian` with ``loss="causal_lm"``; no separate code path.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from .model import count_parameters  # re-exported: the one parameter count of a module

__all__ = ["GPT", "GPTConfig", "count_parameters"]

#: The standard deviation of the GPT-2 initialisation of every weight matrix and embedding.
INIT_STD = 0.02


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    """The model's sizes: ``vocab`` symbols (256 bytes by default), ``context`` positions, residual
    ``width``, ``depth`` blocks of ``heads`` attention heads (``width`` a multiple of ``heads``), an
    MLP of ``mlp_ratio * width`` hidden units; ``bias`` for every linear map and LayerNorm."""

    vocab: int = 256
    context: int
    width: int
    depth: int
    heads: int
    mlp_ratio: int = 4
    bias: bool = True

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "bias":
                if not isinstance(value, bool):
                    raise ConfigError(f"GPTConfig.bias: true or false, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"GPTConfig.{f.name}: a positive integer, got {value!r}")
        if self.width % self.heads:
            raise ConfigError(f"GPTConfig: width {self.width} is not a multiple of heads {self.heads}")

    def to_dict(self) -> dict:
        """The config as a plain dict (checkpoints, metrics)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        """The config of :meth:`to_dict`; :class:`ConfigError` for an unknown or missing key."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"GPTConfig: unknown keys {unknown}; known: {sorted(names)}")
        try:
            return cls(**d)
        except TypeError as err:
            raise ConfigError(f"GPTConfig: {err}") from None


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: ``q``, ``k``, ``v`` projections, heads by reshape,
    ``F.scaled_dot_product_attention(..., is_causal=True)``, the output projection ``o``."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads = cfg.heads
        self.q = nn.Linear(cfg.width, cfg.width, bias=cfg.bias)
        self.k = nn.Linear(cfg.width, cfg.width, bias=cfg.bias)
        self.v = nn.Linear(cfg.width, cfg.width, bias=cfg.bias)
        self.o = nn.Linear(cfg.width, cfg.width, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, width) -> (B, T, width)."""
        B, T, C = x.shape
        q, k, v = (proj(x).view(B, T, self.heads, C // self.heads).transpose(1, 2) for proj in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    """``fc2(gelu(fc1(x)))`` with ``mlp_ratio * width`` hidden units (exact GELU)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.width, cfg.mlp_ratio * cfg.width, bias=cfg.bias)
        self.fc2 = nn.Linear(cfg.mlp_ratio * cfg.width, cfg.width, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, width) -> (B, T, width)."""
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """A pre-norm block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.width, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.width, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, width) -> (B, T, width)."""
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """The causal language model of :class:`GPTConfig` (see the module docstring). Initialised as
    GPT-2: every linear weight and embedding normal(0, :data:`INIT_STD`), biases zero, LayerNorms
    the identity; deterministic given ``torch.manual_seed``."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.tok = nn.Embedding(config.vocab, config.width)
        self.pos = nn.Embedding(config.context, config.width)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.depth)])
        self.ln_f = nn.LayerNorm(config.width, bias=config.bias)
        self.apply(_init)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, T, vocab)`` of token ids ``(B, T)``, ``T <= context``."""
        T = input_ids.shape[-1]
        if T > self.config.context:
            raise ValueError(f"input_ids: {T} positions, but the model has context {self.config.context}")
        h = self.tok(input_ids) + self.pos(torch.arange(T, device=input_ids.device))
        for block in self.blocks:
            h = block(h)
        return F.linear(self.ln_f(h), self.tok.weight)


def _init(module: nn.Module) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
