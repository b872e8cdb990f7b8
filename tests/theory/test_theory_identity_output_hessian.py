"""The output Hessian G = c I given as the float c (what the MSE losses and the bounds rule pass):
the Gauss-Newton blocks B_i^T G B_j have the same bits as with the dense c I, without its product;
and G=None skips the attention's outer part. (The blocks themselves are checked against autograd
in test_theory_closed_forms.py.)"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_hessian.theory import attention_hessian_from_loss_derivatives, block_hessian_from_loss_derivatives

from .builders import sample


@settings(max_examples=8, deadline=None)
@given(
    L=st.integers(2, 6),
    d=st.integers(2, 7),
    k=st.integers(1, 5),
    dff=st.integers(2, 9),
    bias=st.booleans(),
    seed=st.integers(0, 10_000),
    c=st.floats(1e-3, 10.0),
)
def test_scalar_output_hessian_same_bits_as_dense_identity(L, d, k, dff, bias, seed, c):
    X, p = sample(seed, L, d, k, dff, bias)
    g = torch.randn(L * d, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    dense = c * torch.eye(L * d, dtype=torch.float64)
    outer_f, fun_f = block_hessian_from_loss_derivatives(X, p, g, float(c))
    outer_t, fun_t = block_hessian_from_loss_derivatives(X, p, g, dense)
    assert outer_f.keys() == outer_t.keys() and len(outer_f) == 25
    for key in outer_t:
        assert torch.equal(outer_f[key], outer_t[key]), key
        assert torch.equal(fun_f[key], fun_t[key]), key
    pa = {n: p[n] for n in ("W_Q", "W_K", "W_V")}
    a_f, af_f = attention_hessian_from_loss_derivatives(X, pa, g, float(c))
    a_t, af_t = attention_hessian_from_loss_derivatives(X, pa, g, dense)
    a_n, af_n = attention_hessian_from_loss_derivatives(X, pa, g, None)
    assert a_n is None and len(a_t) == 9
    for key in a_t:
        assert torch.equal(a_f[key], a_t[key]), key
        assert torch.equal(af_n[key], af_t[key]) and torch.equal(af_f[key], af_t[key]), key
