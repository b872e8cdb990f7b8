"""Builders shared by the encoder's tests (test_encoder_hessian.py, test_pooled.py): seeded float64
torch encoder stacks, the reverse-over-reverse autograd reference Hessian of their loss, the relative
error, and a spy on the factored sweeps. Not a test module."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call
from torch.nn.attention import SDPBackend, sdpa_kernel

DT = torch.float64
TOL = 1e-10


def _named(model, head):
    named = dict(model.named_parameters())
    if head is not None:
        named.update({f"head.{n}": p for n, p in head.named_parameters()})
    return named


def reference_hessian(model, x, t, *, loss="mse", head=None, params=None, mask=None, is_causal=False):
    """Reverse-over-reverse autograd Hessian of the torch module's own loss."""
    named = _named(model, head)
    names = list(dict(model.named_parameters())) if params is None else list(params)
    sizes = [named[n].numel() for n in names]
    base = {n: p.detach() for n, p in named.items()}
    M = mask
    if is_causal and M is None:
        M = nn.Transformer.generate_square_subsequent_mask(x.shape[1], dtype=x.dtype)
    key = "src_mask" if isinstance(model, nn.TransformerEncoderLayer) else "mask"

    def f(flat):
        ps, o = dict(base), 0
        for n, s in zip(names, sizes, strict=True):
            ps[n] = flat[o : o + s].view(named[n].shape)
            o += s
        kw = {key: M}
        if is_causal:
            kw["is_causal"] = True
        out = functional_call(model, {n: v for n, v in ps.items() if not n.startswith("head.")}, (x,), kw)
        if loss == "mse":
            return F.mse_loss(out, t)
        hp = {n[5:]: v for n, v in ps.items() if n.startswith("head.")}
        return F.cross_entropy(functional_call(head, hp, (out.mean(1),)), t)

    flat = torch.cat([named[n].detach().reshape(-1) for n in names])
    with sdpa_kernel(SDPBackend.MATH), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.autograd.functional.hessian(f, flat)


def build(seed, d, nhead, d_ff, n_layers, norm_first, act, bias, eps, final_norm):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(
        d,
        nhead,
        d_ff,
        dropout=0.0,
        batch_first=True,
        norm_first=norm_first,
        activation=act,
        bias=bias,
        layer_norm_eps=eps,
        dtype=DT,
    )
    if n_layers == 1 and not final_norm:
        model = layer
    else:
        norm = nn.LayerNorm(d, eps=eps, bias=bias, dtype=DT) if final_norm else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = nn.TransformerEncoder(layer, n_layers, norm=norm, enable_nested_tensor=False)
    with torch.no_grad():
        for p in model.parameters():  # away from the initial LN ones/zeros: every term matters
            p.add_(0.3 * torch.randn_like(p))
    return model


def _spy_factored(monkeypatch) -> tuple[list[bool], list[int]]:
    """Record, per sweep, whether it was factored (ops.Hess.rows' flag), and which part of in_proj
    (0: W_q, 1: W_k, 2: W_v) seeded the sweeps that added the columns not row by row (attention.add_mixed_columns)."""
    from transformer_hessian.encoder import attention, ops

    seen, kv, rows, add_kv = [], [], ops.Hess.rows, attention.add_mixed_columns

    def spy(self, pieces, factored=False):
        seen.append(factored)
        return rows(self, pieces, factored)

    def spy_kv(core, in_proj, hess):
        kv.append(in_proj.w.seed[1] // in_proj.w.value.shape[1])  # 0: seeded at W_q, 1: at W_k, 2: at W_v
        return add_kv(core, in_proj, hess)

    monkeypatch.setattr(ops.Hess, "rows", spy)
    monkeypatch.setattr(attention, "add_mixed_columns", spy_kv)
    return seen, kv
