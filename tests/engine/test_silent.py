"""No silent disagreement with autograd: a custom autograd.Function is refused by name and line
unless its forward is asked for, and a float64 model's casts to float32 are computed in float64 by
default, so that a block is the full Hessian's sub-block whatever ``params=`` selects."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import rel_err
from torch import nn

from transformer_hessian import HessianOperator, exact_hessian
from transformer_hessian.engine.capture import UnsupportedOperation
from transformer_hessian.engine.custom import ForwardFailed
from transformer_hessian.engine.precision import Float64Throughout

from .models import DT, TOL, llama, reference


class _Surrogate(torch.autograd.Function):
    """Forward x^2, backward 3x g: a surrogate gradient autograd would differentiate again."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x * g


class _ThroughNumpy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.from_numpy(np.tanh(x.detach().numpy()))

    @staticmethod
    def backward(ctx, g):
        return g


class _Net(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.a, self.b, self.fn = nn.Linear(3, 4), nn.Linear(4, 2), fn

    def forward(self, x):
        return self.b(self.fn.apply(self.a(x)))


class _Plain(_Net):
    def forward(self, x):
        h = self.a(x)
        return self.b(h * h)


def _data(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(5, 3, dtype=DT, generator=g), torch.randn(5, 2, dtype=DT, generator=g)


def test_a_custom_function_is_refused_by_name_and_line_unless_its_forward_is_asked_for():
    torch.manual_seed(0)
    model = _Net(_Surrogate).to(DT)
    x, y = _data(1)
    with pytest.raises(UnsupportedOperation) as err:
        exact_hessian(model, x, y, progress=False)
    msg = str(err.value)
    assert "test_silent._Surrogate" in msg and "test_silent.py:" in msg and "custom_functions='forward'" in msg
    # parameters before it only: refused too; after it only (b), the Function is not on the way
    with pytest.raises(UnsupportedOperation, match="_Surrogate"):
        exact_hessian(model, x, y, params="a.*", progress=False)
    names = ["b.weight", "b.bias"]
    H_b = exact_hessian(model, x, y, params=names, progress=False)
    plain = _Plain(_Surrogate).to(DT)
    plain.load_state_dict(model.state_dict())
    assert rel_err(H_b, reference(plain, x, y, nn.functional.mse_loss, names)) <= TOL
    # asked for: the forward's Hessian (x^2 written out), with a warning and in the metadata
    with pytest.warns(UserWarning, match=r"forward of the autograd\.Function .*_Surrogate .* is differentiated"):
        op = HessianOperator(model, x, y, custom_functions="forward")
    assert op.metadata["custom_functions"] == [next(iter(op.run.cap.custom))]
    names = [n for n, _ in model.named_parameters()]
    R = reference(plain, x, y, nn.functional.mse_loss, names)
    V = torch.randn(R.shape[0], 2, dtype=DT, generator=torch.Generator().manual_seed(2))
    assert rel_err(op @ V, R @ V) <= TOL
    # autograd's own Hessian goes through the surrogate backward: another matrix, hence the refusal
    assert rel_err(reference(model, x, y, nn.functional.mse_loss, names), R) > 1e-2
    with pytest.raises(ValueError, match="custom_functions: 'refuse' or 'forward'"):
        exact_hessian(model, x, y, custom_functions="backward")


def test_a_custom_function_whose_forward_cannot_be_traced_is_named():
    model = _Net(_ThroughNumpy).to(DT)
    x, y = _data(3)
    with pytest.raises(ForwardFailed, match=r"test_silent\._ThroughNumpy \(.*test_silent\.py:\d+\)"):
        exact_hessian(model, x, y, progress=False)


def _hf_llama(seed):
    torch.manual_seed(seed)
    model = llama(11, 5, 8, 2, 1, 6, 2)
    ids = torch.randint(0, 11, (2, 5), generator=torch.Generator().manual_seed(seed + 1))
    return model, ids


@pytest.mark.parametrize("seed", [0, 7])
def test_a_float64_models_casts_are_float64_by_default_so_a_block_is_a_sub_block(seed):
    """Hugging Face Llama casts RMSNorm, softmax and rotary tables to float32 inside a float64 model."""
    model, ids = _hf_llama(seed)
    names = [n for n, _ in model.named_parameters()]
    H = exact_hessian(model, ids, ids, loss="causal_lm", progress=False)
    sizes = {n: p.numel() for n, p in model.named_parameters()}
    off = dict(zip(names, np.cumsum([0] + [sizes[n] for n in names[:-1]]), strict=True))
    for glob in ("model.layers.1.self_attn.*", "model.layers.0.mlp.*"):
        sub = [n for n in names if n.startswith(glob[:-1])]
        idx = torch.cat([torch.arange(off[n], off[n] + sizes[n]) for n in sub])
        block = exact_hessian(model, ids, ids, loss="causal_lm", params=glob, progress=False)
        assert rel_err(block, H[idx][:, idx]) <= 1e-12
        # as written (precision="model"), the block inherits the float32 casts of what it does not select
        kept = exact_hessian(model, ids, ids, loss="causal_lm", params=glob, precision="model", progress=False)
        assert rel_err(kept, H[idx][:, idx]) > 1e-12
    # the same function as autograd computes under the public mode
    from transformer_hessian.engine.ops.losses import causal_lm

    sub = names[-6:]
    with Float64Throughout():
        R = reference(model, ids, ids, causal_lm, sub)
    idx = torch.cat([torch.arange(off[n], off[n] + sizes[n]) for n in sub])
    assert rel_err(H[idx][:, idx], R) <= TOL
    op = HessianOperator(model, ids, ids, loss="causal_lm", params=sub)
    assert op.metadata == {"precision": "float64", "dtype": "torch.float64", "custom_functions": []}


def test_a_lower_precision_model_warns_of_the_error_to_expect():
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    x, y = (t.float() for t in _data(4))
    with pytest.warns(UserWarning, match=r"torch\.float32 model: computed in torch\.float32, expect .* near 2e-7"):
        H = exact_hessian(model, x, y, progress=False)
    assert H.dtype == torch.float32
    with pytest.raises(ValueError, match="precision: 'float64' or 'model'"):
        exact_hessian(model.double(), x.double(), y.double(), precision="float32")
