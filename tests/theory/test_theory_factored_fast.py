"""The optimised factored closed form (theory/factored.py) against independent computations in
float64: its building blocks against plain einsums, and the whole Hessian of the pipeline's loss
against torch.func.hessian on shapes the optimisation was not developed on (9 tokens, width 6, ...;
it was profiled on 49 tokens, width 16, batch 128)."""

from __future__ import annotations

import pytest
import torch
from conftest import func_hessian
from helpers import rel_err
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_hessian.core.model import ModelConfig, ViT
from transformer_hessian.theory import model_loss_hessian
from transformer_hessian.theory.factored import _psi_sandwich
from transformer_hessian.theory.packed import (
    _outer_rows,
    _packed_cols,
    _packed_outer_t,
    _packed_sandwich_t,
    _pair_layout,
    _TokenSums,
    _unpack,
)
from transformer_hessian.theory.vec import softmax_row_hessian_contract

TOL = 1e-12


@pytest.mark.parametrize(("n", "p", "q"), [(11, 3, 5), (4, 7, 2), (1, 1, 1), (5, 20, 17), (3, 64, 3)])
def test_token_sums_and_packed_pairs_match_einsum(n, p, q):
    """Sizes up to 16 pack the upper triangle exactly, larger ones in blocks of rows (20, 17, 64)."""
    g = torch.Generator().manual_seed(n + p + q)
    a = torch.randn(n, p, generator=g, dtype=torch.float64)
    b = torch.randn(n, q + 1, generator=g, dtype=torch.float64)
    C = torch.randn(n, q, q, generator=g, dtype=torch.float64)
    Cs = C + C.transpose(1, 2)
    sums = _TokenSums()
    for sl in (slice(0, n // 2), slice(n // 2, n)):  # two chunks, the first possibly empty
        sums.add("main", _outer_rows(a[sl], b[sl]).T, C[sl].reshape(-1, q * q))
        sums.add("sym", _packed_outer_t(a[sl].T.contiguous()), _packed_cols(Cs[sl]))
    ref = torch.einsum("na,nb,ncd->abcd", a, b, C)
    assert rel_err(sums["main"].view(p, q + 1, q, q), ref, norm="max") < TOL
    assert rel_err(_unpack(sums["sym"], p, q), torch.einsum("na,nb,ncd->abcd", a, a, Cs), norm="max") < TOL
    rows, cols, pos = _pair_layout(p, torch.device("cpu"))
    assert torch.equal(pos, pos.T) and bool(
        (rows[pos] == torch.minimum(*torch.meshgrid(torch.arange(p), torch.arange(p), indexing="ij"))).all()
    )
    packed = _packed_outer_t(a.T.contiguous())
    assert torch.equal(packed, (a[:, rows] * a[:, cols]).T)
    assert torch.equal(packed[pos.reshape(-1)].view(p, p, n), (a.T.unsqueeze(1) * a.T.unsqueeze(0)))
    assert rows.numel() < p * p or p == 1


@pytest.mark.parametrize("f", [7, 20])  # upper triangle; blocks of rows
def test_packed_sandwich_matches_the_explicit_product(f):
    g = torch.Generator().manual_seed(4)
    n, e = 6, 5
    Om = torch.randn(n, e, e, generator=g, dtype=torch.float64)
    Om = Om + Om.transpose(1, 2)
    W = torch.randn(f, e, generator=g, dtype=torch.float64)
    m = (torch.randn(n, f, generator=g) > 0).double()
    full = m.unsqueeze(-1) * (W @ Om @ W.T) * m.unsqueeze(-2)
    rows, cols, _ = _pair_layout(f, torch.device("cpu"))
    assert rel_err(_packed_sandwich_t(Om, W, m).T, full[:, rows, cols], norm="max") < TOL


def test_psi_sandwich_matches_the_materialised_softmax_hessian():
    g = torch.Generator().manual_seed(5)
    B, L, r, R = 2, 5, 3, 4
    A = torch.softmax(torch.randn(B, L, L, generator=g, dtype=torch.float64), -1)
    Gam = torch.randn(B, L, L, generator=g, dtype=torch.float64)
    Delta = A * (Gam - (A * Gam).sum(-1, keepdim=True))
    P = torch.randn(B, L, r, generator=g, dtype=torch.float64)
    Q = torch.randn(B, L, R, generator=g, dtype=torch.float64)
    Psi = softmax_row_hessian_contract(A, Gam)
    ref = torch.einsum("bjr,bljJ,bJR->blrR", P, Psi, Q)
    assert rel_err(_psi_sandwich(P, Q, A, Delta), ref, norm="max") < TOL


def _vit(image, patch, width, d_k, d_ff, classes, bias, seed):
    torch.manual_seed(seed)
    cfg = ModelConfig(
        image_size=image,
        channels=1,
        num_classes=classes,
        patch_size=patch,
        width=width,
        depth=1,
        d_k=d_k,
        d_ff=d_ff,
        ffn_bias=bias,
    )
    model = ViT(cfg).double()
    with torch.no_grad():  # away from the symmetric init: random LN affine and biases too
        for prm in model.parameters():
            prm.add_(0.3 * torch.randn_like(prm))
    return model


@pytest.mark.slow  # about 11 s
@settings(max_examples=4, deadline=None)
@given(
    patch_grid=st.sampled_from([(6, 2), (9, 3), (4, 1)]),  # 9, 9, 16 tokens
    width=st.integers(5, 7),
    d_k=st.integers(3, 6),
    d_ff=st.integers(5, 9),
    batch=st.integers(3, 6),
    bias=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_model_loss_hessian_equals_torch_func_on_unseen_shapes(patch_grid, width, d_k, d_ff, batch, bias, seed):
    image, patch = patch_grid
    model = _vit(image, patch, width, d_k, d_ff, 4, bias, seed)
    g = torch.Generator().manual_seed(seed + 1)
    images = torch.randn(batch, 1, image, image, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 4, (batch,), generator=g)
    H = model_loss_hessian(model, images, labels).dense
    ref = func_hessian(model, images, labels)
    assert H.dtype == torch.float64 and torch.equal(H, H.T)
    assert rel_err(H, ref, norm="max") < TOL


@pytest.mark.parametrize(("width", "d_k"), [(4, 7), (6, 2), (5, 5)])
def test_reduced_parametrisation_for_d_k_above_below_and_at_d(width, d_k):
    """The sums run over W_QK = W_Q W_K^T (d x d) and expand to W_Q, W_K (docs/theory.md §19):
    exact whether W_QK has more entries than W_Q and W_K (d_k = 2), fewer (d_k = 7) or as many."""
    model = _vit(6, 2, width, d_k, 2 * width + 1, 3, True, 31 + d_k)
    g = torch.Generator().manual_seed(d_k)
    images = torch.randn(4, 1, 6, 6, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 3, (4,), generator=g)
    res = model_loss_hessian(model, images, labels)
    ref = func_hessian(model, images, labels)
    assert torch.equal(res.dense, res.dense.T)
    assert rel_err(res.dense, ref, norm="max") < TOL
    assert rel_err(res.blocks[("W_Q", "W_K")], ref[: width * d_k, width * d_k : 2 * width * d_k], norm="max") < TOL


def test_the_named_shape_9_tokens_width_6_batch_5():
    model = _vit(6, 2, 6, 6, 24, 10, False, 7)
    g = torch.Generator().manual_seed(8)
    images = torch.randn(5, 1, 6, 6, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 10, (5,), generator=g)
    H = model_loss_hessian(model, images, labels).dense  # d_ff = 24: the FFN pairs packed in blocks of rows
    assert torch.equal(H, H.T)
    assert rel_err(H, func_hessian(model, images, labels), norm="max") < TOL


@pytest.mark.parametrize(
    ("image", "patch", "batch", "chunk_tokens"),
    [(6, 2, 5, 18), (6, 2, 4, 1), (4, 4, 3, 1), (4, 4, 1, 1), (8, 2, 3, 20)],
)  # 9 tokens in chunks of 18 tokens (the last short) or 1; one token; batch 1; 16 tokens, chunks of 20
def test_chunked_token_sums_equal_torch_func(monkeypatch, image, patch, batch, chunk_tokens):
    """The token sums over chunks of tokens (factored._CHUNK_TOKENS forced small, so that the
    chunked path runs at these small shapes, chunks cutting through samples) give the same
    Hessian."""
    from transformer_hessian.theory import factored

    monkeypatch.setattr(factored, "_CHUNK_TOKENS", chunk_tokens)
    model = _vit(image, patch, 5, 3, 7, 4, True, 11 + batch)
    g = torch.Generator().manual_seed(batch)
    images = torch.randn(batch, 1, image, image, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 4, (batch,), generator=g)
    H = model_loss_hessian(model, images, labels).dense
    assert torch.equal(H, H.T)
    assert rel_err(H, func_hessian(model, images, labels), norm="max") < TOL
