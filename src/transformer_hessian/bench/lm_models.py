"""Small language models written with torch modules, for the engine's bench and tests: a
nanoGPT-style GPT (token and position embeddings, pre-norm blocks with a fused ``c_attn``, causal
fused attention, tanh-GELU, a tied LM head) and a Llama-style decoder (RMSNorm, rotary position
embeddings, grouped-query attention, a SwiGLU MLP). ``hand_norm=True`` writes LayerNorm out by hand
(what curvlinops and ``torch.func`` need in torch 2.14.1 to be correct)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class HandLayerNorm(nn.LayerNorm):
    """nn.LayerNorm written out (mean, variance, rsqrt): the same function, no ``native_layer_norm``."""

    def forward(self, x):
        """The module applied to its inputs (see the class docstring)."""
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        y = (x - mu) * torch.rsqrt(var + self.eps)
        if self.weight is not None:
            y = y * self.weight
        return y + self.bias if self.bias is not None else y


class NanoBlock(nn.Module):
    """A nanoGPT-style pre-norm block."""

    def __init__(self, d: int, h: int, bias: bool = True, hand_norm: bool = False):
        super().__init__()
        norm = HandLayerNorm if hand_norm else nn.LayerNorm
        self.h = h
        self.ln_1, self.ln_2 = norm(d, bias=bias), norm(d, bias=bias)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d, bias=bias), nn.Linear(d, d, bias=bias)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d, bias=bias), nn.Linear(4 * d, d, bias=bias)

    def forward(self, x):
        """The module applied to its inputs (see the class docstring)."""
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class NanoGPT(nn.Module):
    """Token and position embeddings, pre-norm blocks, a final LayerNorm, the LM head tied to the
    token embedding."""

    def __init__(self, vocab: int, T: int, d: int, h: int, layers: int, bias: bool = True, hand_norm: bool = False):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(T, d)
        self.h = nn.ModuleList([NanoBlock(d, h, bias, hand_norm) for _ in range(layers)])
        self.ln_f = (HandLayerNorm if hand_norm else nn.LayerNorm)(d, bias=bias)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        """The module applied to its inputs (see the class docstring)."""
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def _rotate(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


class LlamaBlock(nn.Module):
    """RMSNorm, attention with rotary embeddings and grouped-query heads, a SwiGLU MLP."""

    def __init__(self, d: int, h: int, kv: int, d_ff: int):
        super().__init__()
        self.h, self.kv, self.dh = h, kv, d // h
        self.norm1, self.norm2 = nn.RMSNorm(d, eps=1e-6), nn.RMSNorm(d, eps=1e-6)
        self.q, self.k, self.v = (
            nn.Linear(d, d, bias=False),
            nn.Linear(d, kv * self.dh, bias=False),
            nn.Linear(d, kv * self.dh, bias=False),
        )
        self.o = nn.Linear(d, d, bias=False)
        self.gate, self.up, self.down = (
            nn.Linear(d, d_ff, bias=False),
            nn.Linear(d, d_ff, bias=False),
            nn.Linear(d_ff, d, bias=False),
        )

    def forward(self, x, cos, sin):
        """The module applied to its inputs (see the class docstring)."""
        B, T, C = x.shape
        y = self.norm1(x)
        q = self.q(y).view(B, T, self.h, self.dh).transpose(1, 2)
        k = self.k(y).view(B, T, self.kv, self.dh).transpose(1, 2)
        v = self.v(y).view(B, T, self.kv, self.dh).transpose(1, 2)
        q, k = q * cos + _rotate(q) * sin, k * cos + _rotate(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.h != self.kv)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, C))
        y = self.norm2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class TinyLlama(nn.Module):
    """A Llama-style decoder with an untied LM head."""

    def __init__(self, vocab: int, T: int, d: int, h: int, kv: int, d_ff: int, layers: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([LlamaBlock(d, h, kv, d_ff) for _ in range(layers)])
        self.norm = nn.RMSNorm(d, eps=1e-6)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        dh = d // h
        inv = 1.0 / (10000 ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh))
        ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
        ang = torch.cat([ang, ang], -1)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, idx):
        """The module applied to its inputs (see the class docstring)."""
        T = idx.shape[1]
        x = self.emb(idx)
        cos, sin = self.cos[:T].to(x.dtype), self.sin[:T].to(x.dtype)
        for b in self.blocks:
            x = b(x, cos, sin)
        return self.lm_head(self.norm(x))
