"""exact_hessian of eighteen more Hugging Face architectures (tests/engine/zoo.py) against
reverse-over-reverse autograd, float64 throughout, on a drawn seed each: every parameter of a
one-layer model, through its own default attention implementation; and the Hessian-vector product
operator against the dense Hessian."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
from helpers import rel_err
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from transformer_hessian import HessianOperator, exact_hessian
from transformer_hessian.engine.capture import UnsupportedOperation
from transformer_hessian.engine.ops.losses import causal_lm, cross_entropy, mse_loss
from transformer_hessian.engine.precision import Float64Throughout

from .models import TOL, reference
from .zoo import NAMES, NATIVE, build

pytestmark = pytest.mark.slow
#: architectures with a custom autograd.Function on the way to the loss (its class names)
CUSTOM_FORWARD = {"bloom": ["GeLUFunction"]}
LOSS_FNS = {"causal_lm": causal_lm, "cross_entropy": cross_entropy, "mse": mse_loss}


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.generate])
@given(seed=st.integers(0, 2**16))
def test_architecture(name, seed):
    model, inputs, targets, loss = build(name, seed)
    names = [n for n, _ in model.named_parameters()]
    # the engine computes a float64 model's float32 casts in float64 by default; autograd as asked.
    # Bloom's GELU is a custom autograd.Function whose backward is its forward's derivative: refused
    # by default, its forward differentiated when asked (and said so)
    opts = {"custom_functions": "forward"} if name in CUSTOM_FORWARD else {}
    if opts:
        with pytest.raises(UnsupportedOperation, match="autograd.Function"):
            exact_hessian(model, inputs, targets, loss=loss, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        H = exact_hessian(model, inputs, targets, loss=loss, progress=False, **opts)
        op = HessianOperator(model, inputs, targets, loss=loss, **opts)
    assert [f.split(" ")[0].rsplit(".", 1)[-1] for f in op.metadata["custom_functions"]] == CUSTOM_FORWARD.get(name, [])
    with contextlib.nullcontext() if name in NATIVE else Float64Throughout():
        R = reference(model, inputs, targets, LOSS_FNS[loss], names)
    assert H.shape == R.shape
    assert rel_err(H, R) <= TOL
    V = torch.randn(H.shape[0], 2, dtype=H.dtype, generator=torch.Generator().manual_seed(seed))
    assert rel_err(op @ V, H @ V) <= TOL  # the products with the model's own fused attention
