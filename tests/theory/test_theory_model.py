"""The closed forms against independent references on real modules: curvlinops' GGN and Hessian
operators for the block with MSE loss, and torch.func.hessian of the pipeline's own loss
(cross-entropy through mean-pooling and the linear head) for a single-block ViT."""

from __future__ import annotations

import pytest
import torch
from conftest import func_hessian
from curvlinops import GGNLinearOperator, HessianLinearOperator
from helpers import rel_err
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_hessian import GROUPS
from transformer_hessian.core.model import ModelConfig, PostNormBlock, ViT
from transformer_hessian.theory import (
    block_loss_hessian_parts,
    blocks_to_dense,
    dense_to_blocks,
    group_shapes,
    model_loss_hessian,
    model_loss_hessian_parts,
)

TOL = 1e-10


def random_block(seed, L, d, k, dff, bias, eps):
    """A float64 PostNormBlock with random weights and LN affine parameters, an input X and a
    target; ReLU pre-activations kept >= 1e-3 away from 0."""
    g = torch.Generator().manual_seed(seed)
    blk = PostNormBlock(d, k, dff, ffn_bias=bias, eps=eps).double()
    for _ in range(100):
        with torch.no_grad():
            for _, prm in blk.named_parameters():
                prm.copy_(0.8 * torch.randn(prm.shape, generator=g, dtype=torch.float64))
            blk.gamma1.add_(1.0)
            blk.gamma2.add_(1.0)
            X = torch.randn(L, d, generator=g, dtype=torch.float64)
            T = torch.randn(L, d, generator=g, dtype=torch.float64)
            Y = torch.nn.functional.layer_norm(X + _attn(blk, X), (d,), blk.gamma1, blk.beta1, eps)
            pre = Y @ blk.W_1 + (blk.b_1 if bias else 0.0)
        if pre.abs().min() > 1e-3:
            return blk, X, T
    raise RuntimeError("could not draw pre-activations away from 0")


def _attn(blk, X):
    A = torch.softmax(X @ blk.W_Q @ blk.W_K.T @ X.T / blk.d_k**0.5, -1)
    return A @ X @ blk.W_V


@pytest.mark.slow  # about 14 s
@settings(max_examples=6, deadline=None)
@given(
    L=st.integers(2, 4),
    d=st.integers(3, 5),
    k=st.integers(1, 4),
    dff=st.integers(2, 6),
    eps=st.sampled_from([0.0, 1e-5, 1e-1]),
    bias=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_block_parts_match_curvlinops_ggn_and_hessian(L, d, k, dff, eps, bias, seed):
    """MSE on Z of shape (1, L, d): torch's MSELoss(reduction='mean') is ||Z - T||^2/(L d);
    curvlinops' GGN is J^T (d^2 loss/dZ^2) J with that loss, normalised by batch/N = 1."""
    blk, X, T = random_block(seed, L, d, k, dff, bias, eps)
    params = [getattr(blk, n) for n in GROUPS]
    data = [(X.unsqueeze(0), T.unsqueeze(0))]
    P = sum(p.numel() for p in params)
    eye = torch.eye(P, dtype=torch.float64)
    ggn = GGNLinearOperator(blk, torch.nn.MSELoss(), params, data) @ eye
    hess = HessianLinearOperator(blk, torch.nn.MSELoss(), params, data) @ eye
    outer, fun = block_loss_hessian_parts(X, blk.theory_params(), T, eps)
    shapes = group_shapes(blk.theory_params())
    O = blocks_to_dense(outer, shapes)
    Fn = blocks_to_dense(fun, shapes)
    assert rel_err(O, ggn, norm="max") < TOL
    assert rel_err(O + Fn, hess, norm="max") < TOL


def small_vit(bias: bool, seed: int = 0, classes: int = 3):
    torch.manual_seed(seed)
    cfg = ModelConfig(
        image_size=4,
        channels=1,
        num_classes=classes,
        patch_size=2,
        width=5,
        depth=1,
        d_k=3,
        d_ff=7,
        ffn_bias=bias,
        ln_eps=1e-5,
    )
    model = ViT(cfg).double()
    with torch.no_grad():  # move away from the symmetric init: random LN affine, biases
        for prm in model.parameters():
            prm.add_(0.3 * torch.randn_like(prm))
    return model


@pytest.mark.slow  # 3-5 s a case
@pytest.mark.parametrize("bias", [False, True])
def test_model_loss_hessian_matches_torch_func(bias):
    model = small_vit(bias)
    g = torch.Generator().manual_seed(5)
    images = torch.randn(3, 1, 4, 4, generator=g, dtype=torch.float64)
    labels = torch.tensor([0, 2, 1])
    ref = func_hessian(model, images, labels)
    res = model_loss_hessian(model, images, labels, block=0)
    H, blocks = res  # unpacks as (dense, blocks)
    assert H.shape == ref.shape == (sum(p.numel() for p in model.group_params(0).values()),) * 2
    assert rel_err(H, ref, norm="max") < TOL
    shapes = group_shapes(model.blocks[0].theory_params())
    ref_blocks = dense_to_blocks(ref, shapes)
    for key in ref_blocks:
        assert rel_err(blocks[key], ref_blocks[key], norm="max") < TOL or ref_blocks[key].abs().max() == 0
    outer, fun = model_loss_hessian_parts(model, images, labels, block=0)
    assert rel_err(outer.dense + fun.dense, ref, norm="max") < TOL
    # the outer part is curvlinops' GGN of the same loss (cross-entropy, mean over the batch)
    params = list(model.group_params(0).values())
    ggn = GGNLinearOperator(model, torch.nn.CrossEntropyLoss(), params, [(images, labels)]) @ torch.eye(
        H.shape[0], dtype=torch.float64
    )
    assert rel_err(outer.dense, ggn, norm="max") < TOL
    assert torch.equal(outer.dense, outer.dense.T) and torch.equal(H, H.T)


def test_model_loss_hessian_rejects_inner_block():
    cfg = ModelConfig(image_size=4, channels=1, num_classes=3, patch_size=2, width=4, depth=2, d_k=3, d_ff=5)
    model = ViT(cfg).double()
    images, labels = torch.randn(2, 1, 4, 4, dtype=torch.float64), torch.tensor([0, 1])
    with pytest.raises(ValueError, match="last block"):
        model_loss_hessian(model, images, labels, block=0)
