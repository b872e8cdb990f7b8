"""The engine's library calls: Hessian-vector products and the operator, parameter globs, the
Krylov tools on the operator, and every bad input refused with the argument's name."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import rel_err
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_hessian import HessianOperator, exact_hessian, hessian_blocks, hvp
from transformer_hessian.core.spectral import hutchinson_trace, top_eigenvalues
from transformer_hessian.engine.capture import UnsupportedOperation

from .models import DT, TOL, nano_gpt


def _gpt(seed=0, vocab=7, T=4, d=4, h=2, layers=1):
    torch.manual_seed(seed)
    return nano_gpt(vocab, T, d, h, layers).to(DT).eval(), torch.randint(0, vocab, (2, T))


def test_hvp_and_operator_equal_the_dense_hessian_on_random_vectors():
    model, ids = _gpt(seed=11, vocab=6, T=3, d=6, h=3)
    H = exact_hessian(model, ids, ids, loss="causal_lm", progress=False)
    op = HessianOperator(model, ids, ids, loss="causal_lm")
    P = H.shape[0]
    assert op.shape == (P, P) and op.dtype == DT and op.device.type == "cpu"
    gen = torch.Generator().manual_seed(5)
    v, V = torch.randn(P, generator=gen, dtype=DT), torch.randn(P, 4, generator=gen, dtype=DT)
    assert rel_err(op @ v, H @ v) <= TOL
    assert rel_err(op @ V, H @ V) <= TOL
    # a block of vectors swept a few columns at a time (the chunks of a large block)
    from transformer_hessian.engine.sweep import hvp_sweep

    W = torch.randn(P, 7, generator=gen, dtype=DT)
    assert rel_err(hvp_sweep(op.run, W, chunk=3), H @ W) <= TOL
    assert rel_err(hvp(model, ids, ids, v, loss="causal_lm"), H @ v) <= TOL
    # scipy takes it
    lo = op.to_scipy()
    assert np.allclose(lo.matvec(v.numpy()), (H @ v).numpy(), rtol=1e-10, atol=1e-14)
    # the project's Krylov tools take it: the top eigenvalue and the trace of the dense matrix
    top = top_eigenvalues(op, None, k=1, steps=P, seed=0)["eigenvalues"][0]
    assert abs(top - float(torch.linalg.eigvalsh(H)[-1])) <= 1e-8 * float(H.norm())
    tr = hutchinson_trace(op, None, n_probes=200, seed=1)
    assert abs(tr["mean"] - float(H.trace())) <= 5 * tr["stderr"] + 1e-12


def test_cuda_graph_bookkeeping_on_the_cpu(monkeypatch):
    """The operator's CUDA-graph path (docs/gpu.md has it run on a GPU): a shape's first two products
    are eager, the third captures, later ones replay into fresh outputs; a shape whose capture fails
    stays eager and says why; at most MAX_GRAPHS shapes get graphs. The capture is played here by
    a stand-in graph whose replay sweeps its input buffer (a CPU has no CUDA graphs)."""
    from transformer_hessian.engine.sweep import hvp_sweep

    model, ids = _gpt(seed=4, vocab=5, T=3, d=4, h=2)
    H = exact_hessian(model, ids, ids, loss="causal_lm", progress=False)
    op = HessianOperator(model, ids, ids, loss="causal_lm")
    assert op.cuda_graphs is False and op.graphs == {}  # off on a CPU
    P, captured = H.shape[0], []

    class Stand:
        def __init__(self, static_in):
            self.static_in, self.static_out = static_in, torch.empty_like(static_in)

        def replay(self):
            self.static_out.copy_(hvp_sweep(op.run, self.static_in))

    def capture(v):
        captured.append(tuple(v.shape))
        if v.dim() == 2 and v.shape[1] == 2:
            return "RuntimeError: a stand-in capture failure"
        g = Stand(v.clone())
        return g, g.static_in, g.static_out

    op.cuda_graphs = True
    monkeypatch.setattr(op, "_capture", capture)
    gen = torch.Generator().manual_seed(9)
    outs = []
    for i in range(5):
        v = torch.randn(P, generator=gen, dtype=DT)
        outs.append(op @ v)
        assert rel_err(outs[-1], H @ v) <= TOL, i
        assert captured == ([(P,)] if i >= 2 else []), (i, captured)
    assert outs[3].data_ptr() != outs[4].data_ptr()  # replays return copies, not the graph's buffer
    for _ in range(4):
        V2 = torch.randn(P, 2, generator=gen, dtype=DT)
        assert rel_err(op @ V2, H @ V2) <= TOL
    assert op.graphs[(P, 2)].startswith("RuntimeError") and captured.count((P, 2)) == 1
    op.MAX_GRAPHS = 2
    for _ in range(3):
        V3 = torch.randn(P, 3, generator=gen, dtype=DT)
        assert rel_err(op @ V3, H @ V3) <= TOL
    assert (P, 3) not in op.graphs and len(op.graphs) == 2


def test_block_size_follows_the_device_default_and_the_memory(monkeypatch):
    """Blocks hold 256 MiB of tangents on a CPU and 16 GiB on CUDA (docs/gpu.md: launch-bound
    sweeps there), at most a quarter of the memory left beside H, and never more rows than P."""
    from transformer_hessian.engine import api

    assert api.default_block_bytes("cpu") == api.DEFAULT_BLOCK_BYTES == 256 << 20
    assert api.default_block_bytes(torch.device("cuda", 0)) == api.CUDA_BLOCK_BYTES == 16 << 30
    model, ids = _gpt(seed=2, vocab=9, T=5, d=8, h=2, layers=2)
    run = api.prepare(model, ids, ids, loss="causal_lm")
    P, per = sum(p.numel() for p in model.parameters()), 3 * run.tangent_bytes()
    monkeypatch.setenv("TRANSFORMER_HESSIAN_MEMORY_BYTES", str(1 << 40))
    assert api.block_size(run) == min(P, (256 << 20) // per)
    assert api.block_size(run, 40 * per) == 40
    monkeypatch.setenv("TRANSFORMER_HESSIAN_MEMORY_BYTES", str(8 * P * P + 4 * 10 * per))  # room for 10 rows
    assert api.block_size(run, 1 << 40) == 10


def test_params_names_globs_blocks_and_tied_weights():
    model, ids = _gpt(seed=2, layers=2)
    H = exact_hessian(model, ids, ids, loss="causal_lm", progress=False)
    names = [n for n, _ in model.named_parameters()]
    sizes = {n: p.numel() for n, p in model.named_parameters()}
    off = {n: sum(sizes[m] for m in names[: names.index(n)]) for n in names}
    sub = exact_hessian(
        model, ids, ids, loss="causal_lm", params=["blocks.1.mlp.fc1.weight", "tok.weight"], progress=False
    )
    a, b = (
        slice(off["blocks.1.mlp.fc1.weight"], off["blocks.1.mlp.fc1.weight"] + sizes["blocks.1.mlp.fc1.weight"]),
        slice(off["tok.weight"], off["tok.weight"] + sizes["tok.weight"]),
    )
    ref = torch.cat([torch.cat([H[a, a], H[a, b]], 1), torch.cat([H[b, a], H[b, b]], 1)], 0)
    assert rel_err(sub, ref) <= TOL
    glob = exact_hessian(model, ids, ids, loss="causal_lm", params="blocks.0.*", progress=False)
    h0 = [n for n in names if n.startswith("blocks.0.")]
    idx = torch.cat([torch.arange(off[n], off[n] + sizes[n]) for n in h0])
    assert rel_err(glob, H[idx][:, idx]) <= TOL
    blocks = hessian_blocks(model, ids, ids, loss="causal_lm", params="blocks.1.ln*", progress=False)
    assert set(blocks) == {
        (x, y)
        for x in ("blocks.1.ln1.weight", "blocks.1.ln1.bias", "blocks.1.ln2.weight", "blocks.1.ln2.bias")
        for y in ("blocks.1.ln1.weight", "blocks.1.ln1.bias", "blocks.1.ln2.weight", "blocks.1.ln2.bias")
    }
    # the head is tied to tok.weight: one parameter, both uses in its rows
    assert "lm_head.weight" not in names


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"params": "nope.*"}, KeyError, "params: 'nope.*' matches no parameter"),
        ({"params": ["blocks.0.mlp.fc1.weight", "blocks.0.mlp.fc1.*"]}, ValueError, "selected twice"),
        ({"params": [3]}, TypeError, "params: expected names"),
        ({"loss": "hinge"}, ValueError, "loss: 'hinge' is not supported"),
        ({"mask": torch.zeros(4, 4)}, ValueError, "mask, is_causal, src_key_padding_mask: only for torch encoder"),
        ({"engine": "encoder"}, ValueError, "engine='encoder': model is GPT"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, error, words):
    model, ids = _gpt()
    with pytest.raises(error, match=words.replace("(", r"\(").replace("*", r"\*").replace(".", r"\.")):
        exact_hessian(model, ids, ids, **{"loss": "causal_lm", **kwargs})


def test_bad_inputs_and_weights_are_refused():
    model, ids = _gpt()
    with pytest.raises(ValueError, match=r"inputs: empty"):
        exact_hessian(model, ids[:0], ids[:0], loss="causal_lm")
    with pytest.raises(ValueError, match=r"inputs: no tokens"):
        exact_hessian(model, ids[:, :0], ids[:, :0], loss="causal_lm")
    with pytest.raises(ValueError, match=r"inputs: on the meta device"):
        exact_hessian(model, ids.to("meta"), ids, loss="causal_lm")
    layer = nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0, batch_first=True).to(DT).eval()
    x = torch.randn(2, 3, 4, dtype=DT)
    x[0, 1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"inputs: has nan entries"):
        exact_hessian(layer, x, torch.zeros_like(x))
    with torch.no_grad():
        model.blocks[0].mlp.fc1.weight[0, 0] = float("inf")
    with pytest.raises(ValueError, match=r"params: 'blocks\.0\.mlp\.fc1\.weight' has non-finite entries"):
        exact_hessian(model, ids, ids, loss="causal_lm", progress=False)
    # a (B, T) key-padding mask with B == T is never read as a (T, T) attention mask: it has its own argument
    x = torch.randn(3, 3, 4, dtype=DT)
    kpm = torch.tensor([[False, False, False], [False, False, True], [False, True, True]])
    Hk = exact_hessian(layer, x, torch.zeros_like(x), src_key_padding_mask=kpm, progress=False)
    Hm = exact_hessian(layer, x, torch.zeros_like(x), mask=kpm)
    assert rel_err(Hk, Hm) > 1e-3
    with pytest.raises(ValueError, match=r"src_key_padding_mask: expected \(3, 3\)"):
        exact_hessian(layer, x, torch.zeros_like(x), src_key_padding_mask=kpm[:, :2])


def _with(x, at, value):
    x = x.clone()
    x[at] = value
    return x


@pytest.mark.parametrize(
    ("case", "error", "words"),
    [
        ("no params", ValueError, r"params: selects no parameter"),
        ("label above", ValueError, r"targets: class index 9 is outside the model's 7 logits \(0\.\.6"),
        ("label below", ValueError, r"targets: entry -5 is negative"),
        ("float labels", TypeError, r"targets: loss='causal_lm' takes integer class indices .* got torch\.float64"),
        ("id outside", ValueError, r"inputs: id 9 is outside the embedding's 7 rows \(0\.\.6\)"),
        ("id dict", ValueError, r"inputs\['ids'\]: id -1 is outside the embedding's 7 rows"),
        ("inf elsewhere", ValueError, r"params: 'blocks\.0\.mlp\.fc1\.weight' has non-finite entries .*not selected"),
        ("int to float", ValueError, r"inputs: torch\.int64 values reach aten\.linear\.default"),
        ("ce float labels", TypeError, r"targets: loss='cross_entropy' takes integer class indices"),
        ("ce label above", ValueError, r"targets: class index 3 is outside the model's 3 logits"),
        ("later batch", ValueError, r"targets: class index 7 is outside the model's 7 logits"),
    ],
)
def test_bad_inputs_are_answered_by_the_library(case, error, words):
    """Each input torch would stop on deep inside (or answer with 'the loss is nan') is refused
    first, naming the argument and the bound."""
    model, ids = _gpt()
    lin = nn.Linear(3, 3).to(DT)
    x = torch.randn(4, 3, dtype=DT)
    calls = {
        "no params": lambda: exact_hessian(model, ids, ids, loss="causal_lm", params=[]),
        "label above": lambda: exact_hessian(model, ids, _with(ids, (1, 2), 9), loss="causal_lm"),
        "label below": lambda: exact_hessian(model, ids, _with(ids, (0, 3), -5), loss="causal_lm"),
        "float labels": lambda: exact_hessian(model, ids, ids.to(DT), loss="causal_lm"),
        "id outside": lambda: exact_hessian(model, _with(ids, (0, 1), 9), ids, loss="causal_lm"),
        "id dict": lambda: exact_hessian(_Keyword(model), {"ids": _with(ids, (1, 0), -1)}, ids, loss="causal_lm"),
        "inf elsewhere": lambda: exact_hessian(
            _poisoned(model), ids, ids, loss="causal_lm", params="blocks.0.attn.qkv.*"
        ),
        "int to float": lambda: exact_hessian(lin, torch.randint(0, 3, (4, 3)), x),
        "ce float labels": lambda: exact_hessian(lin, x, torch.rand(4, 3, dtype=DT), loss="cross_entropy"),
        "ce label above": lambda: exact_hessian(lin, x, torch.tensor([0, 1, 3, 2]), loss="cross_entropy"),
        "later batch": lambda: HessianOperator(
            model, data=[(ids, ids), (ids, _with(ids, (1, 1), 7))], loss="causal_lm", process_group=False
        ),
    }
    with pytest.raises(error, match=words):
        calls[case]()


class _Keyword(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids)


def _poisoned(model):
    with torch.no_grad():
        model.blocks[0].mlp.fc1.weight[0, 0] = float("inf")
    return model


class _Cumulative(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return torch.cumprod(self.lin(x), dim=-1)


def test_an_operation_without_a_rule_is_refused_with_its_module_and_line():
    model = _Cumulative().to(DT)
    x = torch.randn(2, 3, dtype=DT)
    with pytest.raises(UnsupportedOperation) as err:
        exact_hessian(model, x, torch.zeros_like(x), progress=False)
    msg = str(err.value)
    assert "aten.cumprod" in msg and "test_api.py" in msg and "torch.cumprod(self.lin(x), dim=-1)" in msg
    # dropout that is on is refused too (never a wrong matrix)
    drop = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5)).to(DT).train()
    with pytest.raises(UnsupportedOperation, match=r"call model\.eval\(\)"):
        exact_hessian(drop, x, torch.zeros_like(x), progress=False)


@settings(max_examples=2, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    K=st.integers(1, 40),
    kind=st.sampled_from(["gpt", "llama", "hf-llama"]),
    layers=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
@example(K=3, kind="llama", layers=2, seed=0)  # where the id-keyed cache failed
@example(K=5, kind="gpt", layers=2, seed=1)
@example(K=4, kind="hf-llama", layers=1, seed=2)
def test_blocks_of_any_size_equal_autograd(K, kind, layers, seed):
    """Rows in blocks of K entries, each sweep started at its block's first operation and the
    earlier columns filled from transposes: for any K the Hessian equals autograd's, on a GPT with
    tied embeddings (the tied weight's second use lies after every other block's start) and on
    Llama-style models, the bench's and Hugging Face's (grouped-query attention, RoPE, SwiGLU; an
    attention cache keyed by object ids once mixed up the sweeps of two blocks on the bench's:
    4e-2 off at K = 7)."""
    from transformer_hessian.bench.lm_models import TinyLlama
    from transformer_hessian.engine.api import prepare
    from transformer_hessian.engine.ops.losses import causal_lm
    from transformer_hessian.engine.sweep import dense_hessian

    from .models import llama, reference

    torch.manual_seed(seed)
    if kind == "gpt":
        model, inputs = nano_gpt(6, 4, 4, 2, layers, seed % 2 == 0).to(DT).eval(), torch.randint(0, 6, (2, 4))
        ids = inputs
    elif kind == "llama":
        model, ids = TinyLlama(11, 6, 8, 2, 1, 12, layers).to(DT).eval(), torch.randint(0, 11, (2, 6))
        inputs = ids
    else:
        model, ids = llama(9, 6, 8, 4, 2, 6, layers), torch.randint(0, 9, (2, 5))
        inputs = {"input_ids": ids}
    names = [n for n, _ in model.named_parameters()]
    H = dense_hessian(prepare(model, inputs, ids, loss="causal_lm"), K)
    assert rel_err(H, reference(model, inputs, ids, causal_lm, names)) <= TOL


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=5),
    tile=st.integers(1, 7),
    seed=st.integers(0, 2**16),
)
def test_symmetric_completion_tile_by_tile_equals_the_masks(sizes, tile, seed):
    """complete_symmetric_ with tiles smaller than H (its shortcuts for tiles swept on one side or
    on both) against the masks applied to the whole matrix at once."""
    from transformer_hessian.engine.sweep import complete_symmetric_

    g = torch.Generator().manual_seed(seed)
    col_rank = torch.cat([torch.full((n,), r) for r, n in enumerate(sizes)])
    # rows' blocks start at or before their parameter's first use (a block may begin in an earlier one)
    row_first = (col_rank - torch.randint(0, 2, col_rank.shape, generator=g)).clamp(min=0)
    P = len(col_rank)
    S = torch.randn(P, P, dtype=DT, generator=g)
    S = S + S.T  # the swept entries: those of a symmetric matrix
    ma = col_rank.unsqueeze(0) >= row_first.unsqueeze(1)
    swept = torch.where(ma, S, torch.full_like(S, float("nan")))
    want = S.clone()
    H = complete_symmetric_(swept.clone(), row_first, col_rank, tile=tile)
    assert torch.equal(H, H.T)
    assert torch.allclose(H, want, rtol=0, atol=1e-14)
