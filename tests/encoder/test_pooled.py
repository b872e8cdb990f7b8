"""pooled.logit_jacobian (the per-sample Jacobian of the logits, from a backward sweep of the
graph with unit adjoint tangents at the logits) against autograd's, in float64: the J of the
Gauss-Newton term that the factored sweeps of a pooled cross-entropy loss leave out."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch
from helpers import rel_err
from torch import nn
from torch.func import functional_call
from torch.nn.attention import SDPBackend, sdpa_kernel

from transformer_hessian import exact_hessian
from transformer_hessian.encoder import api, pooled, sweeps
from transformer_hessian.encoder.ops import Slot

from .builders import DT, TOL, _spy_factored, build, reference_hessian


def _spec(model, head, layers: int, mask) -> SimpleNamespace:
    """api's spec of a cross-entropy loss through ``head``, split at the token mean."""
    values = {id(p): Slot(p.detach(), None) for p in head.parameters()}
    x = torch.zeros(3, 1, 1, dtype=DT)  # only its number of samples is read (the loss's normaliser)
    spec = api._spec(
        [model] if layers == 1 else list(model.layers), ["gelu"] * layers, None, head, "cross_entropy", x, values
    )
    spec.mask, spec.pooled_split = mask, True
    return spec


@pytest.mark.parametrize("layers, norm_first, causal, bias", [(1, False, True, True), (2, True, False, False)])
def test_logit_jacobian_equals_autograd(layers, norm_first, causal, bias):
    """All parameters, and a subset (an in_proj and a LayerNorm bias of the first layer), with a
    causal mask or none, a head with a bias or none."""
    model = build(23, 6, 2, 5, layers, norm_first, "gelu", True, 1e-5, False)
    head = nn.Linear(6, 4, bias=bias, dtype=DT)
    x = torch.randn(3, 5, 6, dtype=DT, generator=torch.Generator().manual_seed(4))
    named = dict(model.named_parameters())
    mask = api._additive_mask(None, causal, 5, DT, x.device)
    key = "src_mask" if layers == 1 else "mask"
    subset = ["layers.0.self_attn.in_proj_weight", "layers.0.norm2.bias"] if layers == 2 else ["norm1.weight"]
    for names in (list(named), subset):
        cols = sweeps.columns(names, named)
        slots = {id(p): Slot(p.detach(), cols.get(n)) for n, p in named.items()}
        slots.update({id(p): Slot(p.detach(), None) for p in head.parameters()})
        P = sum(named[n].numel() for n in names)
        z, J = pooled.logit_jacobian(_spec(model, head, layers, mask), slots, P, x)

        def logits(*ps, names=names):
            values = {n: p.detach() for n, p in named.items()} | dict(zip(names, ps, strict=True))
            with sdpa_kernel(SDPBackend.MATH), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return head(functional_call(model, values, (x,), {key: mask}).mean(1))

        R = torch.autograd.functional.jacobian(logits, tuple(named[n].detach() for n in names))
        R = torch.cat([r.flatten(2) for r in R], -1)
        assert J.shape == (3, 4, P)
        assert torch.allclose(z, logits(*(named[n].detach() for n in names)).detach(), rtol=0, atol=1e-13)
        assert rel_err(J, R) <= 1e-12


def test_jacobian_chunks_fit_the_bytes():
    """samples_per_jacobian: at least one sample, at most the batch, fewer for fewer bytes, and
    J with Lambda J (2 b C P entries of 8 bytes) within the bytes."""
    model = build(3, 6, 2, 5, 2, False, "relu", True, 1e-5, False)
    head = nn.Linear(6, 4, dtype=DT)
    spec = _spec(model, head, 2, None)
    x = torch.zeros(64, 5, 6, dtype=DT)
    sizes = [pooled.samples_per_jacobian(spec, x, 100, b) for b in (1, 1 << 20, 1 << 24, 1 << 40)]
    assert sizes[0] == 1 and sizes[-1] == 64
    assert sizes == sorted(sizes) and sizes[1] < sizes[2]
    assert pooled.samples_per_jacobian(spec, x, 10**6, 1 << 30) == (1 << 30) // (2 * 4 * 10**6 * 8) == 16


@pytest.mark.parametrize("classes, factored", [(10, True), (11, False)])
def test_many_classes_keep_the_dense_sweep(monkeypatch, classes, factored):
    """The factored sweeps run through the token mean only for at most 2 T classes (T = 5 here):
    beyond that J^T Lambda J would cost more than the sweep it replaces. Either way the Hessian
    equals autograd's."""
    model = build(29, 6, 2, 5, 1, True, "relu", True, 1e-5, False)
    head = nn.Linear(6, classes, dtype=DT)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 5, 6, dtype=DT, generator=g)
    t = torch.randint(0, classes, (2,), generator=g)
    seen, _ = _spy_factored(monkeypatch)
    H = exact_hessian(model, x, t, loss="cross_entropy", head=head)
    assert any(seen) == factored
    assert rel_err(H, reference_hessian(model, x, t, loss="cross_entropy", head=head)) <= TOL
