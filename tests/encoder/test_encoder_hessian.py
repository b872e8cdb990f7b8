"""exact_hessian of torch encoder layers / stacks against reverse-over-reverse autograd (float64).

Reference: torch.autograd.functional.hessian over torch.func.functional_call of the torch
module itself, inside sdpa_kernel(SDPBackend.MATH). Hypothesis draws every option of the
layer (d_model, nhead, d_ff, T, B, norm_first, relu/gelu, bias, layer_norm_eps, 1-3 layers,
final norm), the loss (mse, cross_entropy through a head), the mask (float, bool, causal) and
parameter subsets; the tolerance is 1e-10 relative in the Frobenius norm.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from helpers import rel_err
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_hessian import exact_hessian
from transformer_hessian.encoder import hessian_blocks, split_heads

from .builders import DT, TOL, _named, _spy_factored, build, reference_hessian


@st.composite
def configs(draw):
    n_layers = draw(st.integers(1, 3))
    dh = draw(st.integers(1, 2 if n_layers < 3 else 1))
    nhead = draw(st.integers(1, 3))
    cfg = dict(
        seed=draw(st.integers(0, 10**6)),
        d=dh * nhead,
        nhead=nhead,
        d_ff=draw(st.integers(1, 5)),
        n_layers=n_layers,
        norm_first=draw(st.booleans()),
        act=draw(st.sampled_from(["relu", "gelu"])),
        bias=draw(st.booleans()),
        eps=draw(st.sampled_from([1e-5, 1e-3, 0.1])),
        final_norm=draw(st.booleans()),
    )
    if cfg["d"] < 3:  # width 1: LN is constant; width 2: LN(x) = +-1 up to eps, its Hessian is O(eps)
        cfg["d"], cfg["nhead"] = 3, 1  # cancellation, to which neither computation is accurate to 1e-10
    return cfg


@st.composite
def problems(draw):
    cfg = draw(configs())
    T, B = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    mask_kind = draw(st.sampled_from(["none", "float", "bool", "causal"]))
    loss = draw(st.sampled_from(["mse", "cross_entropy"]))
    subset = draw(st.booleans())
    return cfg, T, B, mask_kind, loss, subset, draw(st.randoms(use_true_random=False))


def make_problem(cfg, T, B, mask_kind, loss, rnd):
    model = build(**cfg)
    g = torch.Generator().manual_seed(cfg["seed"] + 1)
    x = torch.randn(B, T, cfg["d"], dtype=DT, generator=g)
    head, mask, causal = None, None, False
    if loss == "mse":
        t = torch.randn(B, T, cfg["d"], dtype=DT, generator=g)
    else:
        C = 3
        head = nn.Linear(cfg["d"], C, bias=rnd.random() < 0.7, dtype=DT)
        t = torch.randint(0, C, (B,), generator=g)
    if mask_kind == "float":
        mask = torch.randn(T, T, dtype=DT, generator=g)
        if T > 1:
            mask[0, T - 1] = float("-inf")
    elif mask_kind == "bool":
        mask = torch.rand(T, T, generator=g) < 0.4
        mask.fill_diagonal_(False)
    elif mask_kind == "causal":
        causal = True
    return model, x, t, head, mask, causal


@pytest.mark.slow  # about 260 s
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_exact_hessian_matches_autograd(prob):
    cfg, T, B, mask_kind, loss, subset, rnd = prob
    model, x, t, head, mask, causal = make_problem(cfg, T, B, mask_kind, loss, rnd)
    names = list(_named(model, head))
    params = None  # with a head: half the time the model's parameters only (pooled's J^T Lambda J), else all
    if subset or (head is not None and rnd.random() < 0.5):
        params = rnd.sample(names, rnd.randint(1, len(names))) if subset else names
    kw = dict(loss=loss, head=head, params=params, mask=mask, is_causal=causal)
    H = exact_hessian(model, x, t, **kw, tangent_block=rnd.choice([1, 5, 256]))  # rows of H per sweep
    R = reference_hessian(model, x, t, **kw)
    assert H.shape == R.shape and H.dtype == DT
    assert R.norm() > 0
    assert rel_err(H, R) <= TOL, (cfg, T, B, mask_kind, loss, params, rel_err(H, R))


@pytest.mark.slow  # about 5 s
def test_small_chunks_equal_one_chunk():
    model = build(3, 6, 2, 5, 2, True, "gelu", True, 1e-5, True)
    x = torch.randn(5, 4, 6, dtype=DT)
    t = torch.randn_like(x)
    H1 = exact_hessian(model, x, t, is_causal=True)
    H2 = exact_hessian(model, x, t, is_causal=True, chunk_bytes=1)  # one sample per chunk
    assert rel_err(H2, H1) <= 1e-13
    H3 = exact_hessian(model, x, t, is_causal=True, tangent_block=10**9)  # all tangents in one sweep
    assert rel_err(H3, H1) <= 1e-13
    assert rel_err(H1, reference_hessian(model, x, t, is_causal=True)) <= TOL


@pytest.mark.parametrize("workers", [2, 3, pytest.param(64, marks=pytest.mark.slow)])  # 64: about 3 s
def test_parallel_sweeps_equal_one_sweep_at_a_time(workers):
    """Blocks swept on worker threads write disjoint rows of H: the same bits as in order."""
    model = build(3, 6, 2, 5, 2, True, "gelu", True, 1e-5, True)
    x = torch.randn(3, 4, 6, dtype=DT)
    t = torch.randn_like(x)
    H1 = exact_hessian(model, x, t, is_causal=True, tangent_block=7, workers=1)
    Hw = exact_hessian(model, x, t, is_causal=True, tangent_block=7, workers=workers)
    assert torch.equal(Hw, H1)
    assert rel_err(H1, reference_hessian(model, x, t, is_causal=True)) <= TOL


def test_a_failing_worker_stops_the_sweeps(monkeypatch):
    """An error in one block reaches the caller, and the blocks not yet started are dropped."""
    from transformer_hessian.encoder import sweeps

    calls = []

    def failing(*args):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("boom in a block")

    monkeypatch.setattr(sweeps, "chunk_hessian", failing)
    model = build(3, 6, 2, 5, 2, True, "gelu", True, 1e-5, True)
    x = torch.randn(1, 4, 6, dtype=DT)
    P = sum(p.numel() for p in model.parameters())
    with pytest.raises(RuntimeError, match="boom in a block"):
        exact_hessian(model, x, torch.randn_like(x), tangent_block=1, workers=2)
    assert 3 <= len(calls) < P / 2  # one chunk per block: most of the P blocks never ran


@pytest.mark.parametrize(
    "case, tangent_block, chunk_bytes",
    [  # stack and pooled at one tangent a block and one sample a chunk are slow (about 3 s and 6 s)
        pytest.param(case, block, chunk, marks=pytest.mark.slow if case in ("stack", "pooled") and block == 1 else ())
        for case in ["stack", "gpt", "head", "onehead", "pooled"]
        for block, chunk in [(1, 1), (5, 1 << 30), (64, 1)]
    ],
)
def test_factored_sweeps_equal_the_dense_sweep(monkeypatch, case, tangent_block, chunk_bytes):
    """Linear weights after the last row-mixing operation (the last attention for MSE and for
    cross-entropy without the head's parameters, whose loss curvature enters as pooled's
    J^T Lambda J; the head after the token mean when its parameters are asked for) and the W_q,
    W_k and W_v rows of the last attention's in_proj are swept factored (ops.Hess,
    attention.add_mixed_columns): the same Hessian as the dense sweep, also with one sample per
    chunk (a new scale per chunk, one sample per Jacobian) and with a weight's rows split over
    several blocks (for "onehead" at tangent_block 1, blocks of 3 of a head's 10 rows of W_q,
    W_k and W_v)."""
    d = 10 if case == "onehead" else 6
    if case == "gpt":  # pre-norm, gelu, biases, causal, one layer, 3 heads
        model = build(13, 6, 3, 7, 1, True, "gelu", True, 1e-5, False)
    elif case == "pooled":  # pre-norm, gelu, biases, two layers, 3 heads, final norm
        model = build(19, 6, 3, 5, 2, True, "gelu", True, 1e-4, True)
    elif case == "onehead":  # pre-norm, gelu, biases, one head of 10
        model = build(17, 10, 1, 5, 1, True, "gelu", True, 1e-5, False)
    else:  # post-norm, two layers, 2 heads, no biases
        model = build(11, 6, 2, 7, 2, False, "relu", False, 1e-3, True)
    g = torch.Generator().manual_seed(12)
    x = torch.randn(3, 5, d, dtype=DT, generator=g)
    kw = dict(is_causal=True) if case == "gpt" else dict(mask=torch.randn(5, 5, dtype=DT, generator=g))
    if case == "head":
        head = nn.Linear(6, 4, dtype=DT)
        t = torch.tensor([0, 3, 1])
        kw.update(loss="cross_entropy", head=head, params=["layers.1.linear2.weight", "head.weight", "head.bias"])
    elif case == "pooled":
        t = torch.tensor([2, 0, 2])
        kw.update(loss="cross_entropy", head=nn.Linear(6, 3, dtype=DT))
    else:
        t = torch.randn(3, 5, d, dtype=DT, generator=g)
    seen, kv = _spy_factored(monkeypatch)
    H = exact_hessian(model, x, t, tangent_block=tangent_block, chunk_bytes=chunk_bytes, **kw)
    assert any(seen) and not all(seen)
    assert set(kv) == (set() if case == "head" else {0, 1, 2})
    seen.clear()
    H0 = exact_hessian(model, x, t, tangent_block=tangent_block, chunk_bytes=chunk_bytes, fast_path=False, **kw)
    assert not any(seen)
    assert rel_err(H, H0) <= 1e-13
    assert rel_err(H, reference_hessian(model, x, t, **kw)) <= TOL


def test_factored_keys_with_heads_of_width_one():
    """Heads of width 1 (d 3, 3 heads): a W_k block's scale q[:, h, :, u0:u1] is a strided slice,
    whose products with a row's values once came out non-contiguous (found by the property test
    at 200 examples: a view error instead of a Hessian)."""
    model = build(0, 3, 3, 1, 1, False, "relu", False, 1e-5, False)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 2, 3, dtype=DT, generator=g)
    t = torch.randn(1, 2, 3, dtype=DT, generator=g)
    assert rel_err(exact_hessian(model, x, t), reference_hessian(model, x, t)) <= TOL


def test_eval_mode_ignores_dropout():
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(4, 2, 6, dropout=0.3, batch_first=True, dtype=DT).eval()
    x = torch.randn(2, 3, 4, dtype=DT)
    t = torch.randn_like(x)
    assert rel_err(exact_hessian(layer, x, t), reference_hessian(layer, x, t)) <= TOL


def test_blocks_and_heads():
    model = build(5, 6, 3, 4, 1, False, "relu", True, 1e-5, False)
    x = torch.randn(2, 3, 6, dtype=DT)
    t = torch.randn_like(x)
    H = exact_hessian(model, x, t)
    blocks = hessian_blocks(model, x, t)
    names = list(dict(model.named_parameters()))
    assert torch.equal(torch.cat([torch.cat([blocks[(a, b)] for b in names], 1) for a in names], 0), H)
    heads = split_heads(blocks, nhead=3)
    W = "self_attn.in_proj_weight"
    # head 1 of K: rows 6 + 2 .. 6 + 4 of the packed (18, 6) weight, entries (row, column) row-major
    idx = torch.arange(18 * 6).view(18, 6)[8:10].reshape(-1)
    assert torch.equal(heads[(f"{W}.K1", f"{W}.K1")], H[idx][:, idx])
    assert torch.equal(heads[(f"{W}.Q0", "linear1.weight")], blocks[(W, "linear1.weight")][:12])
    assert len([k for k in heads if k[0] == k[1]]) == len(names) - 2 + 2 * 9


def _layer(**kw):
    base = dict(d_model=4, nhead=2, dim_feedforward=6, dropout=0.0, batch_first=True, dtype=DT)
    base.update(kw)
    return nn.TransformerEncoderLayer(**base)


@pytest.mark.parametrize(
    ("model", "kw", "match"),
    [
        (_layer(activation=torch.tanh), {}, "activation"),
        (_layer(activation=nn.GELU(approximate="tanh")), {}, "approximate"),
        (_layer(dropout=0.1), {}, "dropout"),
        (_layer(batch_first=False), {}, "batch_first"),
        (_layer(), {"mask": torch.zeros(2, 3, 3)}, "mask"),
        (_layer(), {"mask": torch.zeros(3, 3, dtype=torch.long)}, "mask"),
        (_layer(), {"loss": "huber"}, "loss"),
        (_layer(), {"loss": "cross_entropy"}, "head"),
        (_layer(), {"params": ["nope"]}, "params"),
        (_layer(), {"workers": 0}, "workers"),
        (_layer(), {"workers": 1.5}, "workers"),
        (object(), {}, "model"),  # any nn.Module is taken now (the graph engine); this is none
    ],
)
def test_clear_errors(model, kw, match):
    x = torch.randn(2, 3, 4, dtype=DT)
    with pytest.raises((ValueError, TypeError, KeyError), match=match):
        exact_hessian(model, x, torch.randn_like(x), **kw)


def test_too_large_hessian_says_bytes(monkeypatch):
    from transformer_hessian.encoder import api

    monkeypatch.setattr(api, "available_bytes", lambda device: 1000)
    x = torch.randn(2, 3, 4, dtype=DT)
    P = sum(p.numel() for p in _layer().parameters())
    with pytest.raises(MemoryError, match=f"{P * P * 8} bytes"):
        exact_hessian(_layer(), x, torch.randn_like(x))


def encoder_layer_from_block(block) -> nn.TransformerEncoderLayer:
    """The project's PostNormBlock (single head, no W_O, d_k = d) as a torch encoder layer with
    out_proj = I: torch's W_q = W_Q^T, W_k = W_K^T, W_v = W_V^T, linear1 = W_1^T, linear2 = W_2^T."""
    d, d_ff = block.d, block.d_ff
    layer = nn.TransformerEncoderLayer(
        d, 1, d_ff, dropout=0.0, batch_first=True, bias=False, layer_norm_eps=block.eps, dtype=DT
    )
    layer.norm1 = nn.LayerNorm(d, eps=block.eps, dtype=DT)  # the block's LayerNorms have a shift
    layer.norm2 = nn.LayerNorm(d, eps=block.eps, dtype=DT)
    with torch.no_grad():
        layer.self_attn.in_proj_weight.copy_(torch.cat([block.W_Q.T, block.W_K.T, block.W_V.T]))
        layer.self_attn.out_proj.weight.copy_(torch.eye(d, dtype=DT))
        layer.linear1.weight.copy_(block.W_1.T)
        layer.linear2.weight.copy_(block.W_2.T)
        for i in (1, 2):
            getattr(layer, f"norm{i}").weight.copy_(getattr(block, f"gamma{i}"))
            getattr(layer, f"norm{i}").bias.copy_(getattr(block, f"beta{i}"))
    return layer


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 10**6), st.integers(2, 5), st.integers(2, 9), st.integers(1, 5))
def test_paper_block_is_the_special_case(seed, d, d_ff, B):
    """The paper's block (Theorems 4-5; the project's closed form model_loss_hessian) is the
    1-head, bias-free, post-norm, ReLU encoder layer with W_O = I: equal on the common groups."""
    from transformer_hessian.core.model import ModelConfig, ViT
    from transformer_hessian.theory import model_loss_hessian

    torch.manual_seed(seed)
    vit = ViT(ModelConfig(image_size=4, channels=1, num_classes=3, patch_size=2, width=d, depth=1, d_k=d, d_ff=d_ff))
    vit = vit.to(DT)
    blk = vit.blocks[0]
    with torch.no_grad():
        for p in (blk.gamma1, blk.beta1, blk.gamma2, blk.beta2):
            p.add_(0.3 * torch.randn_like(p))
    images = torch.randn(B, 1, 4, 4, dtype=DT)
    labels = torch.randint(0, 3, (B,))
    closed = model_loss_hessian(vit, images, labels).dense
    layer = encoder_layer_from_block(blk)
    with torch.no_grad():
        X = vit.block_input(images, 0)
        assert torch.allclose(layer(X), blk(X), atol=1e-12)
    names = ["self_attn.in_proj_weight", "linear1.weight", "linear2.weight"]
    H = exact_hessian(layer, X, labels, loss="cross_entropy", head=vit.head, params=names)
    # torch's order: vec_r(W_Q^T), vec_r(W_K^T), vec_r(W_V^T), vec_r(W_1^T), vec_r(W_2^T)
    perm, off = [], 0
    for p, q in [(d, d), (d, d), (d, d), (d, d_ff), (d_ff, d)]:
        perm.append(off + torch.arange(p * q).view(p, q).T.reshape(-1))  # torch entry (j, i) = W[i, j]
        off += p * q
    perm = torch.cat(perm)
    assert rel_err(H, closed[perm][:, perm]) <= TOL


@pytest.mark.slow  # about 128 s: 600 sequential reverse-over-reverse backward passes
def test_readme_example_runs(root):
    """The README's "Use it on your own model" examples run as written and are exact: GPT-2's
    attention block, a nanoGPT block with the tied embedding, torch's encoder layer."""
    import fnmatch

    from tests.engine.models import reference
    from transformer_hessian.engine.ops.losses import causal_lm

    text = (root / "README.md").read_text()
    sec = text[text.index("## Use it on your own model") :]
    sec = sec[: sec.index("\n## ")]
    ns: dict = {}
    start = 0
    while "```python\n" in sec[start:]:
        a = sec.index("```python\n", start) + 10
        b = sec.index("```\n", a)
        exec(compile(sec[a:b], "README example", "exec"), ns)  # noqa: S102 - the README's own code
        start = b + 4
    model, ids, gpt = ns["model"], ns["ids"], ns["gpt"]
    names = [n for n, _ in model.named_parameters() if fnmatch.fnmatchcase(n, "transformer.h.1.attn.*")]
    assert rel_err(ns["H"], reference(model, {"input_ids": ids}, ids, causal_lm, names)) <= TOL
    v = torch.randn(ns["op"].shape[0], dtype=DT)
    assert ns["op"].shape[0] == sum(p.numel() for p in model.parameters())
    assert torch.isfinite(ns["op"] @ v).all()
    names = ["blocks.0.attn.qkv.weight", "blocks.0.attn.qkv.bias", "tok.weight"]
    assert rel_err(ns["H2"], reference(gpt, ids, ids, causal_lm, names)) <= TOL
    # the next section's data-set example: the mean over every batch's terms (the encoder's example
    # is in docs/api.md, run as a doctest)
    sec = text[text.index("## Curvature over a data set") :]
    a = sec.index("```python\n") + 10
    exec(compile(sec[a : sec.index("```\n", a)], "README example", "exec"), ns)  # noqa: S102
    batches = ns["batches"]
    terms = [t[:, 1:].numel() for _, t in batches]
    names = [n for n, _ in gpt.named_parameters() if fnmatch.fnmatchcase(n, "blocks.1.*")]
    R = sum(n * reference(gpt, x, t, causal_lm, names) for n, (x, t) in zip(terms, batches, strict=True)) / sum(terms)
    assert rel_err(ns["H4"], R) <= TOL and ns["op"].n_terms == sum(terms) == 42


@st.composite
def paper_kind_problems(draw):
    """A layer of the paper's kind (1 head, no biases outside the LayerNorms, post-norm, ReLU,
    no mask, cross-entropy through a head) with every LayerNorm variant torch allows."""
    seed = draw(st.integers(0, 10**6))
    d, d_ff = draw(st.integers(2, 6)), draw(st.integers(2, 9))
    T, B, C = draw(st.integers(1, 5)), draw(st.integers(1, 4)), draw(st.integers(2, 4))
    ln_kind = draw(st.sampled_from(["weight", "weight+bias", "none"]))
    eps = draw(st.sampled_from([1e-5, 1e-2, 0.3]))
    wrap = draw(st.booleans())
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(
        d, 1, d_ff, dropout=0.0, batch_first=True, bias=False, layer_norm_eps=eps, dtype=DT
    )
    for nm in ("norm1", "norm2"):
        if ln_kind != "weight":
            setattr(
                layer,
                nm,
                nn.LayerNorm(d, eps=eps, elementwise_affine=ln_kind != "none", bias=ln_kind == "weight+bias", dtype=DT),
            )
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.4 * torch.randn_like(p))
    model = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False) if wrap else layer
    model.eval()
    head = nn.Linear(d, C, bias=draw(st.booleans()), dtype=DT)
    x = torch.randn(B, T, d, dtype=DT)
    y = torch.randint(0, C, (B,))
    names = list(dict(model.named_parameters()))
    subset = draw(st.lists(st.sampled_from(names), min_size=1, max_size=len(names), unique=True))
    return model, head, x, y, subset


@pytest.mark.slow  # about 77 s
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(paper_kind_problems())
def test_paper_kind_fast_path_matches_autograd(prob):
    """The paper's kind of layer goes through the factored closed form pulled back through
    (W_v, W_o) -> W_v^T W_o^T, and equals reverse-over-reverse autograd on any parameter subset."""
    from transformer_hessian.encoder import paper_kind

    model, head, x, y, subset = prob
    calls = []
    real = paper_kind.paper_kind_hessian
    with mock.patch.object(paper_kind, "paper_kind_hessian", lambda *a: calls.append(1) or real(*a)):
        for params in (None, subset):
            H = exact_hessian(model, x, y, loss="cross_entropy", head=head, params=params)
            R = reference_hessian(model, x, y, loss="cross_entropy", head=head, params=params)
            assert rel_err(H, R) <= TOL
            assert torch.equal(H, H.T)  # exactly symmetric, as the sweep's result is
    assert len(calls) == 2


@pytest.mark.parametrize(
    "change",
    [
        pytest.param("mask", marks=pytest.mark.slow),  # about 13 s
        "head_param",
        pytest.param("two_heads", marks=pytest.mark.slow),  # about 9 s
        pytest.param("eps", marks=pytest.mark.slow),  # about 6 s
        pytest.param("mse", marks=pytest.mark.slow),  # about 9 s
        pytest.param("gelu", marks=pytest.mark.slow),  # about 8 s
        pytest.param("norm_first", marks=pytest.mark.slow),  # about 9 s
        "ffn_bias",
    ],
)
def test_paper_kind_only_when_eligible(monkeypatch, change):
    """Anything outside the paper's kind takes the general sweep, and is still exact."""
    from transformer_hessian.encoder import paper_kind

    torch.manual_seed(1)
    d, T, B = 4, 3, 2
    kw = dict(dropout=0.0, batch_first=True, bias=False, dtype=DT)
    if change == "two_heads":
        layer = nn.TransformerEncoderLayer(d, 2, 6, **kw)
    elif change in ("gelu", "norm_first"):
        layer = nn.TransformerEncoderLayer(
            d, 1, 6, activation="gelu" if change == "gelu" else "relu", norm_first=change == "norm_first", **kw
        )
    else:
        layer = nn.TransformerEncoderLayer(d, 1, 6, **kw)
    if change == "eps":
        layer.norm2 = nn.LayerNorm(d, eps=1e-3, bias=False, dtype=DT)
    if change == "ffn_bias":
        layer.linear1 = nn.Linear(d, 6, dtype=DT)
    layer.eval()
    head = nn.Linear(d, 3, dtype=DT)
    x = torch.randn(B, T, d, dtype=DT)
    y = torch.randint(0, 3, (B,))
    args = dict(loss="cross_entropy", head=head)
    if change == "mask":
        args["mask"] = torch.zeros(T, T, dtype=DT)
    if change == "head_param":
        args["params"] = ["linear1.weight", "head.weight"]
    if change == "mse":
        args, y = dict(loss="mse"), torch.randn_like(x)
    monkeypatch.setattr(paper_kind, "paper_kind_hessian", lambda *a: pytest.fail("fast path taken"))
    H = exact_hessian(layer, x, y, **args)
    assert rel_err(H, reference_hessian(layer, x, y, **args)) <= TOL


@pytest.mark.parametrize("P, tile", [(1, 1), (7, 3), (10, 5), (12, 64)])
def test_symmetrize_in_place_equals_the_sum(P, tile):
    """The tiled in-place symmetrisation gives exactly (H + H^T) / 2, for tiles that do and do
    not divide P."""
    from transformer_hessian.encoder.api import symmetrize_

    H = torch.randn(P, P, dtype=DT)
    want = (H + H.T) * 0.5
    got = symmetrize_(H.clone(), tile=tile)
    assert torch.equal(got, want)
