"""Elementwise nonlinear functions of one input: activations (ReLU, GELU with erf or tanh, SiLU,
tanh, sigmoid, squared ReLU's square) and the pieces of hand-written norms and activations (powers,
square roots, exp, log, sin, cos). Each gives its first and second derivative (:class:`.contract.Pointwise`)."""

from __future__ import annotations

import math

import torch

from ..contract import Pointwise, rule

aten = torch.ops.aten

_SQRT_2_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@rule(aten.relu.default)
class ReLU(Pointwise):
    """max(x, 0): f' = [x > 0], f'' = 0 (almost everywhere)."""

    def d1(self, x, y):
        return (x > 0).to(x.dtype)


@rule(aten.gelu.default)
class GELU(Pointwise):
    """x Phi(x) (``approximate="none"``) or 0.5 x (1 + tanh(c (x + 0.044715 x^3))) (``"tanh"``)."""

    def __init__(self, node):
        super().__init__(node)
        self.tanh = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none") == "tanh"

    def _parts(self, x):
        if not self.tanh:
            pdf = torch.exp(-0.5 * x * x) * _INV_SQRT_2PI
            return pdf, None
        u = _SQRT_2_PI * (x + 0.044715 * x**3)
        return None, torch.tanh(u)

    def d1(self, x, y):
        if not self.tanh:
            cdf = 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))
            return cdf + x * torch.exp(-0.5 * x * x) * _INV_SQRT_2PI
        th = self._parts(x)[1]
        du = _SQRT_2_PI * (1.0 + 3 * 0.044715 * x * x)
        return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du

    def d2(self, x, y):
        if not self.tanh:
            return torch.exp(-0.5 * x * x) * _INV_SQRT_2PI * (2.0 - x * x)
        th = self._parts(x)[1]
        sech2 = 1.0 - th * th
        du = _SQRT_2_PI * (1.0 + 3 * 0.044715 * x * x)
        ddu = _SQRT_2_PI * 6 * 0.044715 * x
        return sech2 * du + 0.5 * x * (sech2 * ddu - 2.0 * th * sech2 * du * du)


@rule(aten.silu.default)
class SiLU(Pointwise):
    """x sigma(x): f' = sigma (1 + x (1 - sigma)), f'' = sigma (1 - sigma) (2 + x (1 - 2 sigma))."""

    def d1(self, x, y):
        s = torch.sigmoid(x)
        return s * (1.0 + x * (1.0 - s))

    def d2(self, x, y):
        s = torch.sigmoid(x)
        return s * (1.0 - s) * (2.0 + x * (1.0 - 2.0 * s))


@rule(aten.tanh.default)
class Tanh(Pointwise):
    """tanh: f' = 1 - y^2, f'' = -2 y (1 - y^2)."""

    def d1(self, x, y):
        return 1.0 - y * y

    def d2(self, x, y):
        return -2.0 * y * (1.0 - y * y)


@rule(aten.sigmoid.default)
class Sigmoid(Pointwise):
    """sigma: f' = y (1 - y), f'' = y (1 - y) (1 - 2 y)."""

    def d1(self, x, y):
        return y * (1.0 - y)

    def d2(self, x, y):
        return y * (1.0 - y) * (1.0 - 2.0 * y)


@rule(aten.exp.default)
class Exp(Pointwise):
    """exp: f' = f'' = y."""

    def d1(self, x, y):
        return y

    def d2(self, x, y):
        return y


@rule(aten.log.default)
class Log(Pointwise):
    """log: f' = 1/x, f'' = -1/x^2."""

    def d1(self, x, y):
        return 1.0 / x

    def d2(self, x, y):
        return -1.0 / (x * x)


@rule(aten.sin.default)
class Sin(Pointwise):
    """sin: f' = cos, f'' = -sin."""

    def d1(self, x, y):
        return torch.cos(x)

    def d2(self, x, y):
        return -y


@rule(aten.cos.default)
class Cos(Pointwise):
    """cos: f' = -sin, f'' = -cos."""

    def d1(self, x, y):
        return -torch.sin(x)

    def d2(self, x, y):
        return -y


@rule(aten.rsqrt.default)
class Rsqrt(Pointwise):
    """x^(-1/2): f' = -y^3 / 2, f'' = 3 y^5 / 4."""

    def d1(self, x, y):
        return -0.5 * y**3

    def d2(self, x, y):
        return 0.75 * y**5


@rule(aten.sqrt.default)
class Sqrt(Pointwise):
    """x^(1/2): f' = 1 / (2 y), f'' = -1 / (4 y^3)."""

    def d1(self, x, y):
        return 0.5 / y

    def d2(self, x, y):
        return -0.25 / y**3


@rule(aten.reciprocal.default)
class Reciprocal(Pointwise):
    """1/x: f' = -y^2, f'' = 2 y^3."""

    def d1(self, x, y):
        return -y * y

    def d2(self, x, y):
        return 2.0 * y**3


@rule(aten.square.default)
class Square(Pointwise):
    """x^2 (Persimmon's squared ReLU, ``torch.square``): f' = 2x, f'' = 2."""

    def d1(self, x, y):
        return 2.0 * x

    def d2(self, x, y):
        return torch.full_like(x, 2.0)


@rule(aten.pow.Tensor_Scalar)
class Power(Pointwise):
    """x^p for a number p: f' = p x^(p-1), f'' = p (p-1) x^(p-2)."""

    def __init__(self, node):
        super().__init__(node)
        self.p = float(node.args[1])

    def d1(self, x, y):
        p = self.p
        return torch.ones_like(x) if p == 1 else p * x ** (p - 1)

    def d2(self, x, y):
        p = self.p
        if p in (0.0, 1.0):
            return None
        return torch.full_like(x, 2.0) if p == 2 else p * (p - 1) * x ** (p - 2)
