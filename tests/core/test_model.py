"""The model is the paper's post-norm block (arXiv 2510.16927, Sec. 4.2; docs/theory.md), written out by hand."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_hessian.core.model import ModelConfig, PostNormBlock, ViT, patchify


def _ln(U, g, b, eps):
    mu = U.mean(-1, keepdim=True)
    var = ((U - mu) ** 2).mean(-1, keepdim=True)
    return g * (U - mu) / torch.sqrt(var + eps) + b


@settings(max_examples=10, deadline=None)
@given(
    L=st.integers(2, 6),
    d=st.integers(2, 7),
    dk=st.integers(1, 5),
    dff=st.integers(1, 9),
    bias=st.booleans(),
    eps=st.sampled_from([1e-5, 1e-1]),
    seed=st.integers(0, 10_000),
)
def test_block_matches_handwritten_formula(L, d, dk, dff, bias, eps, seed):
    torch.manual_seed(seed)
    blk = PostNormBlock(d, dk, dff, ffn_bias=bias, eps=eps).double()
    with torch.no_grad():
        for p in blk.parameters():
            p.add_(0.3 * torch.randn_like(p))
    X = torch.randn(L, d, dtype=torch.float64)
    P = blk.theory_params()
    A = torch.softmax(X @ P["W_Q"] @ P["W_K"].T @ X.T / math.sqrt(dk), dim=1)
    Y = _ln(X + A @ X @ P["W_V"], P["gamma1"], P["beta1"], eps)
    H = Y @ P["W_1"] + (P["b_1"] if bias else 0)
    S = torch.relu(H) @ P["W_2"] + (P["b_2"] if bias else 0) + Y
    Z = _ln(S, P["gamma2"], P["beta2"], eps)
    assert torch.allclose(blk(X), Z, atol=1e-12)
    # vec_r: W.reshape(-1) is the row-major flattening of the math-oriented weight
    W = P["W_1"]
    assert W.shape == (d, dff)
    i, j = torch.meshgrid(torch.arange(d), torch.arange(dff), indexing="ij")
    assert torch.equal(W.reshape(-1)[(i * dff + j).reshape(-1)], W[i, j].reshape(-1))


def test_patchify_and_vit_shapes():
    img = torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).reshape(2, 3, 4, 4)
    p = patchify(img, 2)
    assert p.shape == (2, 4, 12)
    # second patch (grid row 0, col 1), channel 1, pixel (1, 0)
    assert p[0, 1, 4 + 2] == img[0, 1, 1, 2]
    cfg = ModelConfig(image_size=4, channels=3, num_classes=5, patch_size=2, width=8, depth=2, d_k=3, d_ff=11)
    model = ViT(cfg)
    assert model(img).shape == (2, 5)
    groups = model.group_params(1)
    assert [tuple(v.shape) for v in groups.values()] == [(8, 3), (8, 3), (8, 8), (8, 11), (11, 8)]
    # mean over tokens then head
    X = model.block_input(img, 2)
    assert torch.allclose(model(img), model.head(X.mean(1)))
