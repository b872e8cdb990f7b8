"""Factored sweeps of the graph engine (engine/factored.py): which weights take them, and the dense
Hessian with them against reverse-over-reverse autograd (float64, math attention kernel) and
against the engine's own one-hot sweeps, on drawn shapes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import rel_err
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_hessian.engine import factored
from transformer_hessian.engine.api import prepare
from transformer_hessian.engine.contract import RowTerm
from transformer_hessian.engine.ops.losses import causal_lm, cross_entropy
from transformer_hessian.engine.sweep import dense_hessian

from .models import DT, TOL, TinyLlama, gpt2, llama, reference, seeded_nano_gpt

SETTINGS = settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


class TokenMLP(nn.Module):
    """Embedding, two linear maps with a GELU and a LayerNorm between, a head: every step after the
    embedding is row by row, so every weight (the first included) is swept factored."""

    def __init__(self, vocab, d, d_ff):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.fc, self.norm, self.proj = nn.Linear(d, d_ff), nn.LayerNorm(d_ff), nn.Linear(d_ff, d, bias=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        return self.head(self.proj(self.norm(F.gelu(self.fc(self.emb(ids))))) * 0.5 + self.emb(ids))


class MeanPooled(nn.Module):
    """A linear map per token, a mean over tokens, a classifier: the mean mixes tokens, so only the
    classifier after it is factored (on B rows, not B T)."""

    def __init__(self, d, classes):
        super().__init__()
        self.fc, self.head = nn.Linear(d, d), nn.Linear(d, classes)

    def forward(self, x):
        return self.head(torch.tanh(self.fc(x)).mean(1))


def _names(model):
    return [n for n, _ in model.named_parameters()]


def _factored(run, K=3):
    return [fw.name for fw in factored.factored_weights(run, K)]


def _check(model, inputs, targets, loss, loss_fn, params=None, expect=None):
    """The dense H with factored sweeps: equal to autograd's and to the one-hot sweeps' (blocks of
    3 entries, so that factored sweeps of several unit chunks run too); ``expect``: the names it
    must have factored."""
    names = params or _names(model)
    run = prepare(model, inputs, targets, loss=loss, params=names)
    got = _factored(run)
    if expect is not None:
        assert got == expect
    H = dense_hessian(run, 3)
    assert rel_err(H, dense_hessian(run, 3, factored=False)) <= 1e-13
    assert rel_err(H, reference(model, inputs, targets, loss_fn, names)) <= TOL
    return got


@settings(SETTINGS, max_examples=2)
@given(
    vocab=st.integers(5, 9), T=st.integers(2, 4), h=st.sampled_from([1, 2]), dh=st.integers(2, 3),
    layers=st.integers(1, 2), bias=st.booleans(), B=st.integers(1, 3), seed=st.integers(0, 2**16),
)  # fmt: skip
def test_nanogpt_tail_factored_equals_autograd(vocab, T, h, dh, layers, bias, B, seed):
    model, ids = seeded_nano_gpt(vocab, T, h, dh, layers, bias, B, seed)
    last = f"blocks.{layers - 1}"
    # the head is tied to the embedding (used first): not factored; the last block's after attention are
    expect = [f"{last}.attn.o.weight", f"{last}.mlp.fc1.weight", f"{last}.mlp.fc2.weight"]
    _check(model, ids, ids, "causal_lm", causal_lm, expect=expect)


@settings(SETTINGS, max_examples=2)
@given(
    vocab=st.integers(5, 9), T=st.integers(2, 5), kv=st.sampled_from([1, 2]), d_ff=st.integers(3, 6),
    B=st.integers(1, 2), seed=st.integers(0, 2**16),
)  # fmt: skip
def test_llama_tail_factored_equals_autograd(vocab, T, kv, d_ff, B, seed):
    torch.manual_seed(seed)
    model = TinyLlama(vocab, T, 4, 2, kv, d_ff, 1).to(DT).eval()
    ids = torch.randint(0, vocab, (B, T))
    expect = ["blocks.0.o.weight", "blocks.0.gate.weight", "blocks.0.up.weight", "blocks.0.down.weight"]
    _check(model, ids, ids, "causal_lm", causal_lm, expect=expect + ["lm_head.weight"])


@SETTINGS
@given(vocab=st.integers(4, 8), d=st.integers(2, 4), d_ff=st.integers(2, 5), B=st.integers(1, 3), T=st.integers(2, 4))
def test_a_model_that_is_all_tail(vocab, d, d_ff, B, T):
    torch.manual_seed(vocab * 100 + d * 10 + d_ff)
    model = TokenMLP(vocab, d, d_ff).to(DT)
    ids = torch.randint(0, vocab, (B, T))
    _check(model, ids, ids, "causal_lm", causal_lm, expect=["fc.weight", "proj.weight", "head.weight"])


def test_hugging_face_gpt2_conv1d_and_llama_tails():
    """GPT-2's Conv1D weights (``addmm``, stored (in, out)) and Llama's, with an ignored label."""
    torch.manual_seed(3)
    ids = torch.randint(0, 7, (2, 5))
    labels = ids.clone()
    labels[1, 2] = -100
    mlp = ["transformer.h.1.attn.c_proj.weight", "transformer.h.1.mlp.c_fc.weight", "transformer.h.1.mlp.c_proj.weight"]
    _check(gpt2(7, 5, 4, 2, 2), {"input_ids": ids}, labels, "causal_lm", causal_lm, expect=mlp)
    layer = "model.layers.0"
    tail = [f"{layer}.self_attn.o_proj.weight"] + [f"{layer}.mlp.{n}_proj.weight" for n in ("gate", "up", "down")]
    _check(
        llama(7, 5, 4, 2, 1, 6, 1), {"input_ids": ids}, labels, "causal_lm", causal_lm, expect=tail + ["lm_head.weight"]
    )


def test_a_mean_over_tokens_stops_the_tail():
    torch.manual_seed(0)
    model = MeanPooled(3, 4).to(DT)
    x, y = torch.randn(2, 5, 3, dtype=DT), torch.tensor([1, 3])
    _check(model, (x,), y, "cross_entropy", cross_entropy, expect=["head.weight"])


def test_a_subset_of_parameters_and_a_weight_read_twice():
    torch.manual_seed(1)
    model = TokenMLP(6, 3, 4).to(DT)
    ids = torch.randint(0, 6, (2, 3))
    # only some parameters selected: the others are constants, the tail still factored
    _check(model, ids, ids, "causal_lm", causal_lm, params=["norm.weight", "proj.weight"], expect=["proj.weight"])

    class Twice(TokenMLP):
        def forward(self, ids):
            h = self.fc(self.emb(ids))
            return self.head(self.proj(F.gelu(h)) + self.proj(torch.tanh(h)))

    twice = Twice(6, 3, 4).to(DT)
    # proj is read by two steps: its rows go through the one-hot sweeps
    assert "proj.weight" not in _check(twice, ids, ids, "causal_lm", causal_lm)
    # a weight that fits in one block of one-hot tangents (at most K entries) shares their sweep
    run = prepare(model, ids, ids, loss="causal_lm")
    assert _factored(run, 12) == ["head.weight"] and _factored(run, 18) == []


@pytest.mark.parametrize("left_first", [None, True, False])
def test_weighted_row_products(left_first, monkeypatch):
    """add_row_terms against the sum written out, with the scale's columns in chunks of one."""
    g = torch.Generator().manual_seed(2)
    U, N, m, j, k = 3, 5, 4, 2, 3
    S, R = torch.randn(N, m, dtype=DT, generator=g), torch.randn(U, N, k, dtype=DT, generator=g)
    L = None if left_first is None else torch.randn(N, j, dtype=DT, generator=g)
    if L is None:
        ref = torch.einsum("nc,ank->ack", S, R)
    elif left_first:
        ref = torch.einsum("nc,nj,ank->acjk", S, L, R).reshape(U, m, j * k)
    else:
        ref = torch.einsum("nc,nj,ank->ackj", S, L, R).reshape(U, m, j * k)
    for chunk in (1 << 24, 1):
        monkeypatch.setattr(factored, "CHUNK_ELEMENTS", chunk)
        out = torch.zeros_like(ref)
        factored.add_row_terms(out, S, RowTerm(L, R, bool(left_first)))
        assert rel_err(out, ref) <= 1e-14
