"""A GPT-style (nanoGPT / GPT-2) causal language model of torch modules: the language-model
study's model, the engine bench's GPT-2-like model and the README's example.

Token and position embeddings (``tok``, ``pos``), ``depth`` pre-norm blocks (``blocks.{i}``: ``ln1``,
``attn`` with separate ``q``, ``k``, ``v``, ``o`` projections (or one fused ``qkv``, nanoGPT's
``c_attn``, with ``fused_qkv``) and torch's fused causal attention, ``ln2``, ``mlp`` with ``fc1``,
GELU (exact, or tanh's approximation as GPT-2), ``fc2``), a final LayerNorm ``ln_f`` and the LM head
tied to the token embedding (logits = h @ tok.weight^T, no head parameter of its own). The
parameter names are the ones the study addresses (``blocks.0.attn.q.weight``, ...). Its exact
Hessian is :func:`transformer_hessian.exact_hessian` with ``loss="causal_lm"``; no separate code path.
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
    MLP of ``mlp_ratio * width`` hidden units; ``bias`` for every linear map and LayerNorm.
    ``fused_qkv``: one projection ``qkv`` (width -> 3 width) split into q, k, v; ``gelu``: "exact"
    or "tanh"; ``init_std``: the standard deviation of the GPT-2 initialisation, None for torch's
    own initialisation of each module."""

    vocab: int = 256
    context: int
    width: int
    depth: int
    heads: int
    mlp_ratio: int = 4
    bias: bool = True
    fused_qkv: bool = False
    gelu: str = "exact"
    init_std: float | None = INIT_STD

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("bias", "fused_qkv"):
                if not isinstance(value, bool):
                    raise ConfigError(f"GPTConfig.{f.name}: true or false, got {value!r}")
            elif f.name == "gelu":
                if value not in ("exact", "tanh"):
                    raise ConfigError(f"GPTConfig.gelu: 'exact' or 'tanh', got {value!r}")
            elif f.name == "init_std":
                if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                    raise ConfigError(f"GPTConfig.init_std: a positive number or null, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"GPTConfig.{f.name}: a positive integer, got {value!r}")
        if self.width % self.heads:
            raise ConfigError(f"GPTConfig: width {self.width} is not a multiple of heads {self.heads}")

    def to_dict(self) -> dict:
        """The config as a plain dict (checkpoints, metrics); the architecture options left at their
        defaults are left out, so a config reads as it did before they existed."""
        out = asdict(self)
        for name, default in _OPTIONS.items():
            if out[name] == default:
                del out[name]
        return out

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


#: the architecture options of :class:`GPTConfig` and their defaults (left out of ``to_dict``)
_OPTIONS = {"fused_qkv": False, "gelu": "exact", "init_std": INIT_STD}


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: ``q``, ``k``, ``v`` projections (or one ``qkv``), heads by
    reshape, ``F.scaled_dot_product_attention(..., is_causal=True)``, the output projection ``o``."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads = cfg.heads
        d, self.fused = cfg.width, cfg.fused_qkv
        if self.fused:
            self.qkv = nn.Linear(d, 3 * d, bias=cfg.bias)
        else:
            self.q, self.k, self.v = (nn.Linear(d, d, bias=cfg.bias) for _ in range(3))
        self.o = nn.Linear(d, d, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, width) -> (B, T, width)."""
        B, T, C = x.shape
        qkv = self.qkv(x).split(C, dim=2) if self.fused else (self.q(x), self.k(x), self.v(x))
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in qkv)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    """``fc2(gelu(fc1(x)))`` with ``mlp_ratio * width`` hidden units (exact GELU, or tanh's)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.approximate = "none" if cfg.gelu == "exact" else "tanh"
        self.fc1 = nn.Linear(cfg.width, cfg.mlp_ratio * cfg.width, bias=cfg.bias)
        self.fc2 = nn.Linear(cfg.mlp_ratio * cfg.width, cfg.width, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, width) -> (B, T, width)."""
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


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
        if config.init_std is not None:
            self.apply(lambda m: _init(m, config.init_std))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, T, vocab)`` of token ids ``(B, T)``, ``T <= context``."""
        T = input_ids.shape[-1]
        if T > self.config.context:
            raise ValueError(f"input_ids: {T} positions, but the model has context {self.config.context}")
        h = self.tok(input_ids) + self.pos(torch.arange(T, device=input_ids.device))
        for block in self.blocks:
            h = block(h)
        return F.linear(self.ln_f(h), self.tok.weight)


def _init(module: nn.Module, std: float) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
