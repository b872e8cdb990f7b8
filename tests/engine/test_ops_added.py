"""Operations added after the first rule table (linear layers, attention, norms), each against autograd on drawn shapes: ``baddbmm`` with
every input differentiated, ``square``, ``where`` with a number for a branch, an attention mask
that is a parameter (with grouped-query heads), a convolution with ``padding="same"``, and in-place
operations in a model's code (``a += b``, ``a.mul_(b)``, ``relu_``): taken as their functional form
where no later reader sees the difference (autograd runs them in place); refused, naming the
operation, where a view made before the write is read after it or the write goes into the model's
input. Tiling, padding, rolling, bilinear resizing and adaptive pooling are checked inside the
models of tests/engine/test_zoo.py (DeBERTa, Swin, BEiT)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from helpers import rel_err
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_hessian import exact_hessian
from transformer_hessian.engine.api import prepare
from transformer_hessian.engine.capture import UnsupportedOperation
from transformer_hessian.engine.ops.losses import mse_loss

from .models import DT, TOL, reference


class BiasedAttention(nn.Module):
    """Scores by ``baddbmm`` onto a learned bias, a squared-ReLU value path, ``where`` with a
    number, and a fused attention whose float mask is a parameter (grouped-query heads)."""

    def __init__(self, d: int, h: int, kv: int, T: int):
        super().__init__()
        self.h, self.kv, self.dh = h, kv, d // h
        self.q, self.k = nn.Linear(d, d), nn.Linear(d, kv * self.dh)
        self.v = nn.Linear(d, kv * self.dh, bias=False)
        self.bias = nn.Parameter(0.3 * torch.randn(h, T, T))
        self.scores_bias = nn.Parameter(0.3 * torch.randn(T, T))

    def forward(self, x):
        B, T, d = x.shape
        q = self.q(x).view(B, T, self.h, self.dh).transpose(1, 2)
        k = self.k(x).view(B, T, self.kv, self.dh).transpose(1, 2)
        v = torch.square(F.relu(self.v(x))).view(B, T, self.kv, self.dh).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias[:, :T, :T], enable_gqa=True)
        keep = torch.ones(T, T, dtype=torch.bool).tril()
        c = torch.where(keep, self.scores_bias, 0.0).expand(B, T, T)
        s = torch.baddbmm(c, self.q(x), x.transpose(1, 2) * 0.5, beta=0.7, alpha=1.3)
        s = torch.where(keep, s, -2.0) + torch.where(keep, 0.5, s)  # either branch a number
        return o.transpose(1, 2).reshape(B, T, d) + s.softmax(-1) @ x


@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    heads=st.sampled_from([(2, 1), (2, 2), (4, 2)]), dh=st.integers(1, 2), T=st.integers(2, 4),
    B=st.integers(1, 2), seed=st.integers(0, 2**16),
)  # fmt: skip
def test_baddbmm_square_where_and_a_parameter_as_attention_mask(heads, dh, T, B, seed):
    torch.manual_seed(seed)
    h, kv = heads
    model = BiasedAttention(h * dh, h, kv, T).to(DT).eval()
    x, y = torch.randn(B, T, h * dh, dtype=DT), torch.randn(B, T, h * dh, dtype=DT)
    names = [n for n, _ in model.named_parameters()]
    H = exact_hessian(model, x, y, loss="mse", progress=False)
    assert rel_err(H, reference(model, x, y, mse_loss, names)) <= TOL
    # the first-order adjoints of the new rules (the mask's, baddbmm's third input) in the gradient
    w = [p for _, p in model.named_parameters()]
    g = torch.autograd.grad(mse_loss(model(x), y), w)
    assert rel_err(prepare(model, x, y).gradient(), torch.cat([t.reshape(-1) for t in g])) <= TOL


class InPlace(nn.Module):
    def __init__(self, d: int, mode: str):
        super().__init__()
        self.lin1, self.lin2, self.mode = nn.Linear(d, d), nn.Linear(d, d), mode

    def forward(self, x):
        a = self.lin1(x)
        b = torch.tanh(self.lin2(x))
        if self.mode == "chain":
            a += b
            a.mul_(b)
            a.sub_(0.5).relu_()
            return a * b  # reads the twice-written a
        if self.mode == "view before":
            v = a.view(-1)
            a += b
            return v.view_as(b) * b  # a view made before the write, read after it
        x += b  # into the model's input
        return a * x


@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(d=st.integers(2, 4), n=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_in_place_arithmetic_equals_autograd(d, n, seed):
    torch.manual_seed(seed)
    model = InPlace(d, "chain").to(DT).eval()
    x, y = torch.randn(n, d, dtype=DT), torch.randn(n, d, dtype=DT)
    H = exact_hessian(model, x, y, loss="mse", progress=False)
    R = reference(model, x, y, mse_loss, [n for n, _ in model.named_parameters()])
    assert rel_err(H, R) <= TOL


@pytest.mark.parametrize(
    "mode, message", [("view before", "reads afterwards"), ("input", "writes into the model's input")]
)
def test_in_place_writes_a_later_reader_would_see_are_refused(mode, message):
    model = InPlace(3, mode).to(DT).eval()
    with pytest.raises(UnsupportedOperation, match=message) as err:
        exact_hessian(model, torch.randn(2, 3, dtype=DT), torch.randn(2, 3, dtype=DT), progress=False)
    assert "aten.add_" in str(err.value) and "test_ops_added.py" in str(err.value)


class SameConv(nn.Module):
    def __init__(self, c: int, k: int, dilation: int):
        super().__init__()
        self.conv = nn.Conv2d(1, c, k, padding="same", dilation=dilation)
        self.out = nn.Linear(c, 2)

    def forward(self, x):
        return self.out(torch.tanh(self.conv(x)).flatten(2).transpose(1, 2))


@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(c=st.integers(1, 3), k=st.sampled_from([1, 3]), dilation=st.integers(1, 2), n=st.integers(3, 5))
def test_convolution_with_same_padding(c, k, dilation, n):
    torch.manual_seed(n + 10 * c)
    model = SameConv(c, k, dilation).to(DT).eval()
    x, y = torch.randn(2, 1, n, n, dtype=DT), torch.randn(2, n * n, 2, dtype=DT)
    H = exact_hessian(model, x, y, progress=False)
    assert rel_err(H, reference(model, x, y, mse_loss, [n for n, _ in model.named_parameters()])) <= TOL
    with pytest.raises(UnsupportedOperation, match="padding='same' with an even kernel"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's note on even kernels, at capture
        exact_hessian(SameConv(c, 2, 1).to(DT).eval(), x, y, progress=False)


#: each new elementwise function, as a model's code calls it
ACTIVATIONS = {
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "relu6": F.relu6,
    "hardtanh": lambda x: F.hardtanh(x, -0.5, 0.7),
    "clamp": lambda x: x.clamp(-0.4, 0.6),
    "clamp_min": lambda x: x.clamp(min=-0.3),
    "abs": torch.abs,
    "elu": lambda x: F.elu(x, 0.7),
    "selu": F.selu,
    "celu": lambda x: F.celu(x, 0.5),
    "softplus": lambda x: F.softplus(x, beta=2.0, threshold=1.0),
    "hardswish": F.hardswish,
    # autograd has no second derivative of hardsigmoid ("derivative for aten::hardsigmoid_backward
    # is not implemented"): its reference is the same function written out
    "hardsigmoid": (F.hardsigmoid, lambda x: (x / 6 + 0.5).clamp(0.0, 1.0)),
    "mish": F.mish,
    "logsigmoid": F.logsigmoid,
    "log1p": lambda x: torch.log1p(x.exp()),
    "expm1": torch.expm1,
    "erf": torch.erf,
    "where(x > 0)": lambda x: torch.where(x > 0, x, 0.05 * x),  # a comparison: a constant of the point
    "x * (x > 0)": lambda x: x * (x > 0),
    "sign": lambda x: x * torch.sign(x) + x.floor(),
}


class Activation(nn.Module):
    def __init__(self, d: int, f):
        super().__init__()
        self.inp, self.out, self.f = nn.Linear(d, 2 * d), nn.Linear(2 * d, 2), f

    def forward(self, x):
        return self.out(self.f(3.0 * self.inp(x)))


@pytest.mark.parametrize("name", list(ACTIVATIONS))
@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(d=st.integers(1, 3), n=st.integers(2, 5), seed=st.integers(0, 2**16))
def test_activation_and_comparisons(name, d, n, seed):
    torch.manual_seed(seed)
    f, f_ref = ACTIVATIONS[name] if isinstance(ACTIVATIONS[name], tuple) else (ACTIVATIONS[name],) * 2
    model = Activation(d, f).to(DT).eval()
    x, y = torch.randn(n, d, dtype=DT), torch.randn(n, 2, dtype=DT)
    H = exact_hessian(model, x, y, progress=False)
    model.f = f_ref
    assert rel_err(H, reference(model, x, y, mse_loss, [n for n, _ in model.named_parameters()])) <= TOL


class PositiveAxes(nn.Module):
    """Softmax and log-softmax over axes named from the front (dim=1 of (n, c), dim=3 of scores)."""

    def __init__(self, d: int):
        super().__init__()
        self.q, self.k, self.out = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        s = (self.q(x).unsqueeze(1) @ self.k(x).unsqueeze(1).transpose(2, 3)).softmax(dim=3)
        h = (s @ x.unsqueeze(1)).squeeze(1)
        return F.log_softmax(self.out(h), dim=2) + torch.softmax(h, dim=1)


@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(d=st.integers(2, 4), T=st.integers(2, 4), B=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_softmax_over_an_axis_named_from_the_front(d, T, B, seed):
    # these rules once reduced a tangent (K entries in front) over the axis before the one named
    torch.manual_seed(seed)
    model = PositiveAxes(d).to(DT).eval()
    x, y = torch.randn(B, T, d, dtype=DT), torch.randn(B, T, d, dtype=DT)
    H = exact_hessian(model, x, y, progress=False)
    assert rel_err(H, reference(model, x, y, mse_loss, [n for n, _ in model.named_parameters()])) <= TOL


#: torch's own losses in a callable loss (each becomes torch's decomposition of it); targets:
#: class ids with an ignored one, or probabilities
LOSSES = {
    "cross_entropy, ignore_index": (lambda o, t: F.cross_entropy(o, t), "ids"),
    "cross_entropy, label_smoothing, sum": (
        lambda o, t: F.cross_entropy(o, t.clamp(min=0), label_smoothing=0.1, reduction="sum"),
        "ids",
    ),
    "cross_entropy, probabilities": (lambda o, t: F.cross_entropy(o, t), "probs"),
    "nll_loss of log_softmax": (lambda o, t: F.nll_loss(F.log_softmax(o, 1), t), "ids"),
    "kl_div": (lambda o, t: F.kl_div(F.log_softmax(o, -1), t, reduction="batchmean"), "probs"),
    "mse_loss, sum": (lambda o, t: F.mse_loss(o, t, reduction="sum"), "probs"),
    "l1_loss": (F.l1_loss, "probs"),
    "huber_loss": (lambda o, t: F.huber_loss(o, t, delta=0.3), "probs"),
    "smooth_l1_loss": (lambda o, t: F.smooth_l1_loss(o, t, beta=0.3), "probs"),
    "binary_cross_entropy_with_logits": (F.binary_cross_entropy_with_logits, "probs"),
}


@pytest.mark.parametrize("name", list(LOSSES))
@settings(max_examples=2, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(n=st.integers(2, 6), c=st.integers(2, 5), seed=st.integers(0, 2**16))
def test_torch_losses_in_a_callable_loss(name, n, c, seed):
    torch.manual_seed(seed)
    loss, kind = LOSSES[name]
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, c)).to(DT)
    x = torch.randn(n, 3, dtype=DT)
    if kind == "ids":
        t = torch.randint(0, c, (n,))
        t[0] = -100  # ignored (F.cross_entropy's and F.nll_loss's default ignore_index)
    else:
        t = torch.rand(n, c, dtype=DT).softmax(-1)
    H = exact_hessian(model, x, t, loss=loss, progress=False)
    assert rel_err(H, reference(model, x, t, loss, [n for n, _ in model.named_parameters()])) <= TOL
