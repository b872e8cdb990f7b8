"""Tests of transformer_hessian.core.gpt: the parameter names the language-model study addresses, the
tied head, causality, the GPT-2 initialisation, the config's checks, and the exact Hessian of the
causal LM loss (``exact_hessian(..., loss="causal_lm")``) against reverse-over-reverse autograd
with the math attention kernel, float64, on property-drawn small models."""

from __future__ import annotations

import fnmatch

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.func import functional_call
from torch.nn.attention import SDPBackend, sdpa_kernel

from transformer_hessian import exact_hessian
from transformer_hessian.core.gpt import GPT, INIT_STD, GPTConfig, count_parameters
from transformer_hessian.engine.ops.losses import causal_lm
from transformer_hessian.errors import ConfigError

#: relative Frobenius distance to autograd (rounding gives about 1e-15)
TOL = 1e-10


def test_parameter_names_and_count():
    cfg = GPTConfig(context=6, width=8, depth=2, heads=2)
    model = GPT(cfg)
    block = [
        "ln1.weight", "ln1.bias", "attn.q.weight", "attn.q.bias", "attn.k.weight", "attn.k.bias", "attn.v.weight",
        "attn.v.bias", "attn.o.weight", "attn.o.bias", "ln2.weight", "ln2.bias", "mlp.fc1.weight", "mlp.fc1.bias",
        "mlp.fc2.weight", "mlp.fc2.bias",
    ]  # fmt: skip
    names = [n for n, _ in model.named_parameters()]
    assert names == ["tok.weight", "pos.weight"] + [f"blocks.{i}.{n}" for i in range(2) for n in block] + [
        "ln_f.weight",
        "ln_f.bias",
    ]
    d, V, T, f = 8, 256, 6, 32
    per_block = 4 * (d * d + d) + (d * f + f) + (f * d + d) + 4 * d
    assert count_parameters(model) == V * d + T * d + 2 * per_block + 2 * d
    assert list(model.state_dict()) == names  # the head has no parameter of its own
    nobias = GPT(GPTConfig(context=6, width=8, depth=1, heads=4, bias=False, mlp_ratio=2))
    assert not [n for n, _ in nobias.named_parameters() if n.endswith("bias")]


def test_forward_is_causal_with_the_head_tied_to_the_token_embedding():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab=11, context=5, width=6, depth=2, heads=3)).double()
    ids = torch.randint(0, 11, (2, 5))
    logits = model(ids)
    assert logits.shape == (2, 5, 11)
    h = model.tok(ids) + model.pos(torch.arange(5))
    for block in model.blocks:
        h = block(h)
    assert torch.allclose(logits, model.ln_f(h) @ model.tok.weight.T, atol=1e-12)
    later = ids.clone()
    later[:, 3:] = (later[:, 3:] + 1) % 11
    assert torch.allclose(model(later)[:, :3], logits[:, :3], atol=1e-12)
    assert not torch.allclose(model(later)[:, 3:], logits[:, 3:])
    assert model(ids[:, :3]).shape == (2, 3, 11)
    with pytest.raises(ValueError, match="context 5"):
        model(torch.zeros(1, 6, dtype=torch.long))


def test_gpt2_initialisation_is_seeded():
    cfg = GPTConfig(context=16, width=32, depth=2, heads=4)
    torch.manual_seed(3)
    a = GPT(cfg)
    torch.manual_seed(3)
    b = GPT(cfg)
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), name
        if "ln" in name:
            assert torch.equal(p, torch.ones_like(p) if name.endswith("weight") else torch.zeros_like(p)), name
        elif name.endswith("bias"):
            assert not p.any(), name
        else:
            assert abs(p.std().item() - INIT_STD) < 0.15 * INIT_STD and abs(p.mean().item()) < 0.01, name


def test_config_checks_and_round_trip():
    cfg = GPTConfig(context=8, width=12, depth=1, heads=3, mlp_ratio=2, bias=False)
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="not a multiple of heads"):
        GPTConfig(context=8, width=10, depth=1, heads=3)
    with pytest.raises(ConfigError, match="depth"):
        GPTConfig(context=8, width=12, depth=0, heads=3)
    with pytest.raises(ConfigError, match="unknown keys"):
        GPTConfig.from_dict({**cfg.to_dict(), "dropout": 0.1})
    with pytest.raises(ConfigError):
        GPTConfig.from_dict({"width": 4})


def reference(model, ids, names) -> torch.Tensor:
    """torch.autograd.functional.hessian of the causal LM loss over functional_call, math kernel."""
    base = {n: p.detach() for n, p in model.named_parameters()}

    def loss(*flat):
        params = dict(base) | dict(zip(names, flat, strict=True))
        return causal_lm(functional_call(model, params, (ids,)), ids)

    with sdpa_kernel(SDPBackend.MATH):
        blocks = torch.autograd.functional.hessian(loss, tuple(base[n] for n in names))
    sizes = [base[n].numel() for n in names]
    return torch.cat([torch.cat([blocks[i][j].reshape(sizes[i], sizes[j]) for j in range(len(names))], 1) for i in range(len(names))])  # fmt: skip


@pytest.mark.slow
@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    vocab=st.integers(5, 11), context=st.integers(2, 5), heads=st.sampled_from([1, 2]), head_dim=st.integers(2, 3),
    depth=st.integers(1, 2), bias=st.booleans(), batch=st.integers(1, 3), seed=st.integers(0, 2**16),
    params=st.sampled_from(["blocks.0.attn.*", "blocks.*.mlp.*", "tok.weight", "blocks.0.ln*", None]),
)  # fmt: skip
def test_exact_hessian_of_the_causal_lm_loss_matches_autograd(
    vocab, context, heads, head_dim, depth, bias, batch, seed, params
):
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab=vocab, context=context, width=heads * head_dim, depth=depth, heads=heads, bias=bias)
    model = GPT(cfg).double().eval()
    with torch.no_grad():  # away from the initialisation's zeros and ones
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    ids = torch.randint(0, vocab, (batch, context))
    names = [n for n, _ in model.named_parameters() if params is None or fnmatch.fnmatchcase(n, params)]
    H = exact_hessian(model, ids, ids, loss="causal_lm", params=params, progress=False)
    R = reference(model, ids, names)
    assert H.shape == R.shape == (sum(dict(model.named_parameters())[n].numel() for n in names),) * 2
    assert R.norm() > 0 and float((H - R).norm() / R.norm()) < TOL


@pytest.mark.slow
def test_exact_hessian_of_the_whole_two_block_model_with_its_tied_embedding():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab=7, context=5, width=4, depth=2, heads=2)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    ids = torch.randint(0, 7, (2, 5))
    H = exact_hessian(model, ids, ids, loss="causal_lm", progress=False)
    R = reference(model, ids, [n for n, _ in model.named_parameters()])
    assert H.shape == (count_parameters(model),) * 2
    assert float((H - R).norm() / R.norm()) < TOL


def test_fused_and_math_attention_agree_and_the_loss_is_next_token_cross_entropy():
    torch.manual_seed(1)
    model = GPT(GPTConfig(vocab=9, context=4, width=4, depth=1, heads=2)).double()
    ids = torch.randint(0, 9, (2, 4))
    with sdpa_kernel(SDPBackend.MATH):
        math_logits = model(ids)
    assert torch.allclose(model(ids), math_logits, atol=1e-12)
    loss = causal_lm(model(ids), ids)
    expected = F.cross_entropy(model(ids)[:, :-1].reshape(-1, 9), ids[:, 1:].reshape(-1))
    assert torch.allclose(loss, expected)


def test_architecture_options_fused_qkv_tanh_gelu_and_torch_init():
    # the options are left out of to_dict at their defaults (the study's configs read as before)
    assert set(GPTConfig(context=4, width=4, depth=1, heads=2).to_dict()) == {
        "vocab", "context", "width", "depth", "heads", "mlp_ratio", "bias"
    }  # fmt: skip
    cfg = GPTConfig(vocab=9, context=4, width=4, depth=1, heads=2, fused_qkv=True, gelu="tanh", init_std=None)
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg
    for bad in ({"gelu": "relu"}, {"fused_qkv": 1}, {"init_std": 0}, {"init_std": True}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            GPTConfig(context=4, width=4, depth=1, heads=2, **bad)
    torch.manual_seed(3)
    model = GPT(cfg).double()
    names = [n for n, _ in model.named_parameters()]
    assert "blocks.0.attn.qkv.weight" in names and not any(n.startswith("blocks.0.attn.q.") for n in names)
    # the same function written out: one projection split into q, k, v, tanh-GELU, the tied head
    ids = torch.randint(0, 9, (2, 4))
    blk = model.blocks[0]
    h = model.tok(ids) + model.pos(torch.arange(4))
    q, k, v = (t.view(2, 4, 2, 2).transpose(1, 2) for t in blk.attn.qkv(blk.ln1(h)).split(4, dim=2))
    with sdpa_kernel(SDPBackend.MATH):
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 4, 4)
    h = h + blk.attn.o(a)
    h = h + blk.mlp.fc2(F.gelu(blk.mlp.fc1(blk.ln2(h)), approximate="tanh"))
    assert torch.allclose(model(ids), model.ln_f(h) @ model.tok.weight.T, atol=1e-12)
    # torch's own initialisation: the weights are not GPT-2's normal(0, 0.02)
    assert model.blocks[0].mlp.fc1.weight.std() > 5 * INIT_STD
