"""Hessian extraction: every method against torch.func.hessian in float64."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_vit
from torch.func import functional_call

from transformer_hessian import GROUPS
from transformer_hessian.core.hessian import (
    block_norms,
    compute_hessian,
    fixed_batch,
    group_layout,
    hessian_curvlinops,
    hessian_vmap,
    weight_norms,
)


def _model(depth=1, width=5, d_k=3, d_ff=7, bias=False, seed=0):
    model = tiny_vit(width, d_k, d_ff, depth, bias, seed)
    x = torch.randn(6, 1, 4, 4, dtype=torch.float64)
    y = torch.randint(0, 3, (6,))
    return model, x, y


def _reference(model, block, x, y):
    """torch.func.hessian of the loss w.r.t. the five groups, assembled densely."""
    names = [f"blocks.{block}.{n}" for n in GROUPS]
    fixed = {k: v.detach() for k, v in model.named_parameters()}

    def loss(groups):
        return F.cross_entropy(functional_call(model, {**fixed, **groups}, (x,)), y)

    groups = {n: fixed[n] for n in names}
    Hd = torch.func.hessian(loss)(groups)
    rows = []
    for a in names:
        rows.append(torch.cat([Hd[a][b].reshape(groups[a].numel(), groups[b].numel()) for b in names], 1))
    return torch.cat(rows, 0)


@pytest.mark.parametrize("depth,block,bias", [(1, 0, False), (2, 1, True), (2, 0, False)])
def test_vmap_and_curvlinops_match_torch_func(depth, block, bias):
    model, x, y = _model(depth=depth, bias=bias)
    ref = _reference(model, block, x, y)
    for H in (hessian_vmap(model, block, x, y, chunk_size=17), hessian_curvlinops(model, block, x, y)):
        assert H.shape == ref.shape
        assert (H - ref).abs().max() <= 1e-10 * ref.abs().max()
    assert torch.allclose(ref, ref.T, atol=1e-12)


def test_compute_hessian_auto_uses_vmap_for_deep_models():
    model, x, y = _model(depth=2)
    H, method, seconds = compute_hessian(model, 1, x.float(), y, "auto")
    assert method == "vmap" and H.dtype == torch.float64 and seconds >= 0
    with pytest.raises(ValueError, match="hessian.method"):
        compute_hessian(model, 0, x, y, "nope")


def test_layout_and_norms_against_numpy():
    model, x, y = _model()
    names, shapes, off = group_layout(model, 0)
    assert names == list(GROUPS)
    assert shapes == [(5, 3), (5, 3), (5, 5), (5, 7), (7, 5)]
    assert off.tolist() == [0, 15, 30, 55, 90, 125]
    H = np.random.default_rng(0).standard_normal((125, 125))
    rows = block_norms(H, off, names)
    assert len(rows) == 25
    for r in rows:
        i, j = names.index(r["row"]), names.index(r["col"])
        blk = H[off[i] : off[i + 1], off[j] : off[j + 1]]
        assert r["fro"] == pytest.approx(np.linalg.norm(blk, "fro"))
        assert r["spectral"] == pytest.approx(np.linalg.svd(blk, compute_uv=False)[0])
        assert r["max_abs"] == pytest.approx(np.abs(blk).max())
    wn = weight_norms(model, 0)
    W = model.blocks[0].W_1.detach().numpy()
    assert wn["W_1"]["spectral"] == pytest.approx(np.linalg.norm(W, 2))
    assert wn["W_1"]["fro"] == pytest.approx(np.linalg.norm(W))


def test_fixed_batch_is_deterministic_and_seeded():
    x = torch.arange(100.0).reshape(100, 1)
    y = torch.arange(100)
    a, b = fixed_batch(x, y, 10, 3), fixed_batch(x, y, 10, 3)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert torch.equal(a[0][:, 0].long(), a[1])
    assert not torch.equal(fixed_batch(x, y, 10, 4)[1], a[1])
    assert len(fixed_batch(x, y, 1000, 0)[1]) == 100
