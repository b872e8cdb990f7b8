"""Models the engine must take, built from tiny random configurations (no weights are downloaded),
and the reference: reverse-over-reverse autograd with the math attention kernel."""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call
from torch.nn.attention import SDPBackend, sdpa_kernel

from transformer_hessian.bench.lm_models import TinyLlama, nano_gpt  # noqa: F401  (the tests' models too)

DT = torch.float64
#: the relative Frobenius distance to autograd that the engine must reach (rounding gives about 1e-15)
TOL = 1e-10


class HandAttentionRMS(nn.Module):
    """Attention written out (matmul, scale, additive mask, softmax, matmul), nn.RMSNorm, a
    SwiGLU MLP (SiLU gate times a linear map) and a sigmoid head on the token sum: the operations
    a model built by hand uses instead of torch's fused ones."""

    def __init__(self, d: int, h: int, d_ff: int, classes: int):
        super().__init__()
        self.h = h
        self.norm = nn.RMSNorm(d, eps=1e-6)
        self.qkv = nn.Linear(d, 3 * d)
        self.gate, self.up, self.down = (
            nn.Linear(d, d_ff, bias=False),
            nn.Linear(d, d_ff, bias=False),
            nn.Linear(d_ff, d),
        )
        self.classifier = nn.Linear(d, classes)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = (t.reshape(B, T, self.h, C // self.h).permute(0, 2, 1, 3) for t in (q, k, v))
        s = q @ k.transpose(-1, -2) / math.sqrt(C // self.h)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        y = (torch.softmax(s, dim=-1) @ v).permute(0, 2, 1, 3).reshape(B, T, C)
        x = x + y
        x = x + self.down(F.silu(self.gate(x)) * self.up(x))
        return self.classifier(torch.tanh(x).sum(1) * 0.5 + torch.sigmoid(x).mean(1))


def hf():
    """The transformers module, its warnings quiet."""
    import transformers

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", module="transformers")
    return transformers


def seeded_nano_gpt(vocab, T, h, dh, layers, bias, B, seed):
    """(float64 nanoGPT-style model of h heads of width dh, (B, T) token ids), seeded."""
    torch.manual_seed(seed)
    return nano_gpt(vocab, T, h * dh, h, layers, bias).to(DT).eval(), torch.randint(0, vocab, (B, T))


def gpt2(vocab, T, d, h, layers):
    tr = hf()
    cfg = tr.GPT2Config(
        vocab_size=vocab, n_positions=T, n_embd=d, n_layer=layers, n_head=h, bos_token_id=0, eos_token_id=0
    )
    return tr.GPT2LMHeadModel(cfg).to(DT).eval()


def llama(vocab, T, d, h, kv, d_ff, layers):
    tr = hf()
    cfg = tr.LlamaConfig(
        vocab_size=vocab, hidden_size=d, intermediate_size=d_ff, num_hidden_layers=layers, num_attention_heads=h,
        num_key_value_heads=kv, max_position_embeddings=T, bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    return tr.LlamaForCausalLM(cfg).to(DT).eval()


def bert(vocab, T, d, h, d_ff, layers, classes):
    tr = hf()
    cfg = tr.BertConfig(
        vocab_size=vocab, hidden_size=d, num_hidden_layers=layers, num_attention_heads=h, intermediate_size=d_ff,
        max_position_embeddings=T, num_labels=classes,
    )  # fmt: skip
    return tr.BertForSequenceClassification(cfg).to(DT).eval()


def vit(image, patch, channels, d, h, d_ff, layers, classes):
    tr = hf()
    cfg = tr.ViTConfig(
        image_size=image, patch_size=patch, num_channels=channels, hidden_size=d, num_hidden_layers=layers,
        num_attention_heads=h, intermediate_size=d_ff, num_labels=classes,
    )  # fmt: skip
    return tr.ViTForImageClassification(cfg).to(DT).eval()


def _llama_rms_float64(self, h):
    """Hugging Face's LlamaRMSNorm without its cast to float32 (the engine keeps float64 there)."""
    return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def reference(model, inputs, targets, loss_fn, names, head=None) -> torch.Tensor:
    """torch.autograd.functional.hessian over functional_call, math attention kernel, float64."""
    named = dict(model.named_parameters())
    own = set(named)
    if head is not None:
        named.update({f"head.{n}": p for n, p in head.named_parameters()})
    base = {n: p.detach() for n, p in named.items()}

    def f(*flat):
        ps = dict(base)
        ps.update(dict(zip(names, flat, strict=True)))
        mp = {n: v for n, v in ps.items() if n in own}
        args = (
            (inputs,)
            if isinstance(inputs, torch.Tensor)
            else tuple(inputs)
            if isinstance(inputs, (tuple, list))
            else ()
        )
        kwargs = dict(inputs) if isinstance(inputs, dict) else {}
        out = functional_call(model, mp, args, kwargs)
        out = out.logits if hasattr(out, "logits") else out.to_tuple() if hasattr(out, "to_tuple") else out
        out = out[0] if isinstance(out, tuple) else out
        if head is not None:
            hp = {n[5:]: v for n, v in ps.items() if n not in own}
            out = functional_call(head, hp, (out.mean(1),))
        return loss_fn(out, targets)

    from unittest import mock

    patches = []
    if "LlamaRMSNorm" in {type(m).__name__ for m in model.modules()}:
        from transformers.models.llama import modeling_llama

        patches.append(mock.patch.object(modeling_llama.LlamaRMSNorm, "forward", _llama_rms_float64))
    # torch's own reverse-over-reverse through _weight_norm is wrong (tests/engine/test_reach.py)
    patches.append(mock.patch("torch._weight_norm", weight_norm_written_out))
    with sdpa_kernel(SDPBackend.MATH), contextlib_all(patches):
        Hs = torch.autograd.functional.hessian(f, tuple(base[n] for n in names))
    sizes = [base[n].numel() for n in names]
    return torch.cat(
        [torch.cat([Hs[i][j].reshape(sizes[i], sizes[j]) for j in range(len(names))], 1) for i in range(len(names))], 0
    )


def weight_norm_written_out(v, g, dim=0):
    """w = g v / ||v||, the norm over every axis but ``dim`` (all when -1): torch._weight_norm's definition."""
    axes = [a for a in range(v.dim()) if a != dim % v.dim()] if dim != -1 else list(range(v.dim()))
    return v * (g / v.pow(2).sum(dim=axes, keepdim=True).sqrt())


class contextlib_all:
    """Enter several context managers."""

    def __init__(self, cms):
        self.cms = cms

    def __enter__(self):
        for cm in self.cms:
            cm.__enter__()

    def __exit__(self, *exc):
        for cm in reversed(self.cms):
            cm.__exit__(*exc)
