"""Builders shared by the theory tests: not a test module.

* ``sample``: a random input X and random parameters of one post-norm block (with ``_attn`` and
  ``_ln``, its attention and LayerNorm written out; test_theory_closed_forms.py,
  test_theory_identity_output_hessian.py).
"""

from __future__ import annotations

import math

import torch


def sample(seed: int, L: int, d: int, k: int, dff: int, bias: bool, eps: float = 1e-5):
    """Random X and block parameters; ReLU pre-activations kept >= 1e-3 away from 0."""
    gen = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0):
        return scale * torch.randn(*shape, generator=gen, dtype=torch.float64)

    for _ in range(100):
        X = r(L, d)
        p = {
            "W_Q": r(d, k, scale=0.8),
            "W_K": r(d, k, scale=0.8),
            "W_V": r(d, d, scale=0.8),
            "W_1": r(d, dff, scale=0.8),
            "W_2": r(dff, d, scale=0.8),
            "gamma1": 1.0 + 0.5 * r(d),
            "beta1": 0.5 * r(d),
            "gamma2": 1.0 + 0.5 * r(d),
            "beta2": 0.5 * r(d),
        }
        if bias:
            p["b_1"], p["b_2"] = 0.3 * r(dff), 0.3 * r(d)
        Y = _ln(X + _attn(X, p), p["gamma1"], p["beta1"], eps)
        pre = Y @ p["W_1"] + (p["b_1"] if bias else 0.0)
        if pre.abs().min() > 1e-3:
            return X, p
    raise RuntimeError("could not draw pre-activations away from 0")


def _attn(X, p):
    T = X @ p["W_Q"] @ p["W_K"].T @ X.T / math.sqrt(p["W_Q"].shape[1])
    return torch.softmax(T, -1) @ X @ p["W_V"]


def _ln(U, g, b, eps):
    return torch.nn.functional.layer_norm(U, U.shape[-1:], g, b, eps)
