"""Closed form of the nine-group Hessian (W_Q, W_K, W_V, W_1, W_2 and the LayerNorm scales and
shifts gamma1, beta1, gamma2, beta2) of the pipeline's loss, against reverse-over-reverse autograd.

Reference: ``torch.autograd.functional.hessian`` (double backward, no vmap) of the mean
cross-entropy written here from ``functional_call``, inside ``sdpa_kernel(SDPBackend.MATH)``,
float64. ``torch.func.hessian`` is not a reference (wrong for LayerNorm mixed derivatives in this
torch, ``tests/core/test_hessian_groups.py``). Shapes are drawn fresh by hypothesis: width, d_K, d_ff,
tokens, classes, batch, eps, FFN biases, depth 1 or 2 (the closed form covers the last block).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.func import functional_call
from torch.nn.attention import SDPBackend, sdpa_kernel

from transformer_hessian.core.hessian import ALL_GROUPS, LN_GROUPS, group_layout, hessian_all_groups
from transformer_hessian.core.model import ModelConfig, ViT
from transformer_hessian.theory import model_loss_hessian, model_loss_hessian_all_groups

TOL = 1e-10


def _model(width, d_k, d_ff, depth, bias, image, patch, classes, eps, seed):
    torch.manual_seed(seed)
    cfg = ModelConfig(
        image_size=image,
        channels=1,
        num_classes=classes,
        patch_size=patch,
        width=width,
        depth=depth,
        d_k=d_k,
        d_ff=d_ff,
        ffn_bias=bias,
        ln_eps=eps,
    )
    model = ViT(cfg).double()
    with torch.no_grad():  # away from gamma = 1, beta = 0 and the symmetric init
        for prm in model.parameters():
            prm.add_(0.4 * torch.randn_like(prm))
    return model


def _reference(model, block, x, y):
    """Reverse-over-reverse Hessian of the mean cross-entropy over the nine groups of ``block``."""
    names = [f"blocks.{block}.{n}" for n in ALL_GROUPS]
    fixed = {k: v.detach() for k, v in model.named_parameters()}
    shapes = [fixed[n].shape for n in names]
    sizes = [s.numel() for s in shapes]

    def loss(flat):
        parts = dict(zip(names, (p.reshape(s) for p, s in zip(torch.split(flat, sizes), shapes))))
        return F.cross_entropy(functional_call(model, {**fixed, **parts}, (x,)), y)

    w = torch.cat([fixed[n].reshape(-1) for n in names])
    with sdpa_kernel(SDPBackend.MATH):
        return torch.autograd.functional.hessian(loss, w)


@pytest.mark.slow  # about 134 s
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    # width >= 3: at d = 2 a LayerNorm row is +-(1, -1) up to eps, its Jacobian ~ eps / sigma^3,
    # and every LayerNorm entry is rounding noise of the order of the five-group scale x 1e-16
    width=st.integers(3, 6),
    d_k=st.integers(1, 6),
    d_ff=st.integers(1, 9),
    depth=st.integers(1, 2),
    bias=st.booleans(),
    grid=st.sampled_from([(4, 2), (6, 2), (6, 3), (4, 4)]),
    classes=st.integers(2, 5),
    batch=st.integers(1, 4),
    eps=st.sampled_from([0.0, 1e-5, 1e-1]),
    seed=st.integers(0, 10_000),
)
def test_nine_group_closed_form_matches_double_backward(width, d_k, d_ff, depth, bias, grid, classes, batch, eps, seed):
    image, patch = grid
    model = _model(width, d_k, d_ff, depth, bias, image, patch, classes, eps, seed)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, 1, image, image, generator=g, dtype=torch.float64)
    y = torch.randint(0, classes, (batch,), generator=g)
    block = depth - 1
    ref = _reference(model, block, x, y)
    H = model_loss_hessian_all_groups(model, x, y, block=block)
    scale = ref.abs().max()
    assert H.shape == ref.shape
    assert float((H - ref).abs().max() / scale) < TOL
    assert torch.equal(H, H.T)
    # the LayerNorm rows are not all zero, and each LayerNorm group is checked on its own scale
    _, _, off = group_layout(model, block, ALL_GROUPS)
    for k, name in enumerate(LN_GROUPS, start=5):
        rows = slice(int(off[k]), int(off[k + 1]))
        s = ref[rows].abs().max()
        assert s > 1e-8 * scale, name
        assert float((H[rows] - ref[rows]).abs().max() / s) < TOL, name
    # the five-group part is the five-group closed form, bit for bit
    P5 = int(off[5])
    assert torch.equal(H[:P5, :P5], model_loss_hessian(model, x, y, block=block).dense)


@pytest.mark.slow  # about 8 s
def test_zero_blocks_of_the_closed_form_are_exact_zeros():
    """The functional part has no (gamma2, gamma2), (gamma2, beta2) or beta2 terms: beta2 enters
    the output additively, gamma2 linearly. So H[beta2, beta2] is the Gauss-Newton part alone;
    checked against the reference's block and against J^T H_CE J from the logits directly."""
    model = _model(5, 3, 7, 1, False, 4, 2, 4, 1e-5, 3)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 1, 4, 4, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 3, 1])
    ref = _reference(model, 0, x, y)
    H = model_loss_hessian_all_groups(model, x, y)
    _, _, off = group_layout(model, 0, ALL_GROUPS)
    b2 = slice(int(off[8]), int(off[9]))
    # beta2 moves every token of Z by the same vector: logits move by W_h beta2, so
    # H[beta2, beta2] = W_h^T mean_b(diag p_b - p_b p_b^T) W_h
    with torch.no_grad():
        p = torch.softmax(model(x), -1)
    Wh = model.head.weight.detach()
    G = (torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)).mean(0)
    assert torch.allclose(H[b2, b2], Wh.T @ G @ Wh, rtol=1e-12, atol=1e-14)
    assert torch.allclose(H[b2, b2], ref[b2, b2], rtol=1e-10, atol=1e-13)


def test_all_group_method_auto_uses_the_closed_form_and_equals_hvp_columns():
    model = _model(4, 3, 6, 2, True, 4, 2, 3, 1e-5, 11)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 1, 4, 4, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 2, 1, 2])
    H, used = hessian_all_groups(model, 1, x, y)
    Hv, used_v = hessian_all_groups(model, 1, x, y, method="vmap")
    assert (used, used_v) == ("closed_form", "vmap")
    assert float((H - Hv).abs().max() / Hv.abs().max()) < 1e-12
    with pytest.raises(ValueError, match="last block"):
        hessian_all_groups(model, 0, x, y, method="closed_form")
    assert hessian_all_groups(model, 0, x, y)[1] == "vmap"
