"""Small language models for the engine's bench and tests: the library's GPT built as nanoGPT
builds it (:func:`nano_gpt`) and a Llama-style decoder (RMSNorm, rotary position embeddings,
grouped-query attention, a SwiGLU MLP). ``hand_norm=True`` writes LayerNorm out by hand (what
curvlinops and ``torch.func`` need in torch 2.14.1 to be correct)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..core.gpt import GPT, GPTConfig


class HandLayerNorm(nn.LayerNorm):
    """nn.LayerNorm written out (mean, variance, rsqrt): the same function, no ``native_layer_norm``."""

    def forward(self, x):
        """(x - mean) / sqrt(var + eps), times ``weight`` plus ``bias``, over the last axis."""
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        y = (x - mu) * torch.rsqrt(var + self.eps)
        if self.weight is not None:
            y = y * self.weight
        return y + self.bias if self.bias is not None else y


def nano_gpt(vocab: int, T: int, d: int, h: int, layers: int, bias: bool = True, hand_norm: bool = False) -> GPT:
    """The library's GPT (:mod:`transformer_hessian.core.gpt`) as nanoGPT builds it: a fused ``qkv``
    projection (nanoGPT's ``c_attn``), tanh-GELU, torch's own initialisation; ``hand_norm`` writes
    its LayerNorms out by hand (:func:`hand_norms`)."""
    cfg = GPTConfig(
        vocab=vocab, context=T, width=d, heads=h, depth=layers, bias=bias, fused_qkv=True, gelu="tanh", init_std=None
    )
    model = GPT(cfg)
    return hand_norms(model) if hand_norm else model


def hand_norms(model: nn.Module) -> nn.Module:
    """``model`` with every ``nn.LayerNorm`` replaced, in place, by a :class:`HandLayerNorm` holding
    the same parameters (the same function, the same parameter names)."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.LayerNorm:
                hand = HandLayerNorm(
                    child.normalized_shape, child.eps, child.elementwise_affine, child.bias is not None
                )
                hand.weight, hand.bias = child.weight, child.bias
                setattr(parent, name, hand)
    return model


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
        """``x + o(attention(RMSNorm(x)))`` with the rotary tables ``cos``, ``sin``, then
        ``x + down(silu(gate(y)) * up(y))`` with y = RMSNorm(x)."""
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
        """Logits ``(B, T, vocab)`` of token ids ``(B, T)``."""
        T = idx.shape[1]
        x = self.emb(idx)
        cos, sin = self.cos[:T].to(x.dtype), self.sin[:T].to(x.dtype)
        for b in self.blocks:
            x = b(x, cos, sin)
        return self.lm_head(self.norm(x))
