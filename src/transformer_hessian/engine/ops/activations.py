"""Elementwise nonlinear functions of one input: activations (ReLU, GELU with erf or tanh, SiLU,
tanh, sigmoid, squared ReLU's square) and the pieces of hand-written norms and activations (powers,
square roots, exp, log, sin, cos). Each gives its first and second derivative (:class:`.contract.Pointwise`)."""

from __future__ import annotations

import math

import torch

from ..contract import Pointwise, node_arg, rule

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
        self.tanh = node_arg(node, 1, "approximate", "none") == "tanh"

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


@rule(aten.pow.Tensor_Scalar, aten.square.default)
class Power(Pointwise):
    """x^p for a number p (``square``, Persimmon's squared ReLU: p = 2): f' = p x^(p-1),
    f'' = p (p-1) x^(p-2)."""

    def __init__(self, node):
        super().__init__(node)
        self.p = 2.0 if node.target is aten.square.default else float(node.args[1])

    def d1(self, x, y):
        p = self.p
        return torch.ones_like(x) if p == 1 else p * x ** (p - 1)

    def d2(self, x, y):
        p = self.p
        if p in (0.0, 1.0):
            return None
        return torch.full_like(x, 2.0) if p == 2 else p * (p - 1) * x ** (p - 2)


@rule(aten.leaky_relu.default)
class LeakyReLU(Pointwise):
    """x for x > 0, a x otherwise: f' = 1 or a, f'' = 0 (almost everywhere)."""

    def __init__(self, node):
        super().__init__(node)
        self.a = float(node_arg(node, 1, "negative_slope", 0.01))

    def d1(self, x, y):
        return (x > 0).to(x.dtype).mul_(1.0 - self.a).add_(self.a)


@rule(aten.hardtanh.default, aten.relu6.default, aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default)
class Clamp(Pointwise):
    """x clipped to [lo, hi] (``hardtanh``, ReLU6, ``clamp``; either bound may be absent): f' = 1
    strictly inside, 0 outside, f'' = 0 (almost everywhere)."""

    def __init__(self, node):
        super().__init__(node)
        t = node.target
        if t is aten.relu6.default:
            self.lo, self.hi = 0.0, 6.0
        elif t is aten.hardtanh.default:
            self.lo, self.hi = node_arg(node, 1, "min_val", -1.0), node_arg(node, 2, "max_val", 1.0)
        elif t is aten.clamp_min.default:
            self.lo, self.hi = node.args[1], None
        elif t is aten.clamp_max.default:
            self.lo, self.hi = None, node.args[1]
        else:
            self.lo, self.hi = node_arg(node, 1, "min", None), node_arg(node, 2, "max", None)
        if any(isinstance(b, torch.fx.Node) for b in (self.lo, self.hi)):
            raise NotImplementedError("clamp with tensor bounds")

    def d1(self, x, y):
        inside = torch.ones_like(x, dtype=torch.bool)
        if self.lo is not None:
            inside &= x > self.lo
        if self.hi is not None:
            inside &= x < self.hi
        return inside.to(x.dtype)


@rule(aten.abs.default)
class Abs(Pointwise):
    """|x|: f' = sign x, f'' = 0 (almost everywhere)."""

    def d1(self, x, y):
        return torch.sign(x)


@rule(aten.elu.default, aten.selu.default, aten.celu.default)
class ELU(Pointwise):
    """s x for x > 0, s a (exp(i x) - 1) otherwise (ELU; SELU with torch's constants; CELU, i = 1/a):
    f' = s or s a i exp(i x), f'' = 0 or s a i^2 exp(i x)."""

    def __init__(self, node):
        super().__init__(node)
        if node.target is aten.selu.default:  # torch's SELU constants
            self.a, self.s, self.i = 1.6732632423543772, 1.0507009873554805, 1.0
        elif node.target is aten.celu.default:  # a (exp(x / a) - 1) below 0
            self.a = float(node_arg(node, 1, "alpha", 1.0))
            self.s, self.i = 1.0, 1.0 / self.a
        else:
            self.a = float(node_arg(node, 1, "alpha", 1.0))
            self.s = float(node_arg(node, 2, "scale", 1.0))
            self.i = float(node_arg(node, 3, "input_scale", 1.0))

    def d1(self, x, y):
        return torch.where(x > 0, self.s, self.s * self.a * self.i * torch.exp(self.i * x.clamp(max=0)))

    def d2(self, x, y):
        return torch.where(x > 0, 0.0, self.s * self.a * self.i**2 * torch.exp(self.i * x.clamp(max=0)))


@rule(aten.softplus.default)
class Softplus(Pointwise):
    """log(1 + exp(b x)) / b, x itself where b x > threshold: f' = sigmoid(b x), f'' = b f' (1 - f')."""

    def __init__(self, node):
        super().__init__(node)
        self.b = float(node_arg(node, 1, "beta", 1.0))
        self.th = float(node_arg(node, 2, "threshold", 20.0))

    def d1(self, x, y):
        return torch.where(self.b * x > self.th, 1.0, torch.sigmoid(self.b * x))

    def d2(self, x, y):
        s = torch.sigmoid(self.b * x)
        return torch.where(self.b * x > self.th, 0.0, self.b * s * (1.0 - s))


@rule(aten.hardswish.default, aten.hardsigmoid.default)
class HardSwish(Pointwise):
    """hardsigmoid(x) = clip(x / 6 + 1/2, 0, 1) and hardswish(x) = x hardsigmoid(x): f' = 1/6 or
    x / 3 + 1/2 on -3 < x < 3 (0 below, 0 or 1 above), f'' = 0 or 1/3 there."""

    def __init__(self, node):
        super().__init__(node)
        self.swish = node.target is aten.hardswish.default

    def d1(self, x, y):
        inside = (x > -3.0) & (x < 3.0)
        if not self.swish:
            return inside.to(x.dtype) / 6.0
        return torch.where(inside, x / 3.0 + 0.5, (x >= 3.0).to(x.dtype))

    def d2(self, x, y):
        return ((x > -3.0) & (x < 3.0)).to(x.dtype) / 3.0 if self.swish else None


@rule(aten.mish.default)
class Mish(Pointwise):
    """x tanh(softplus x): with t = tanh(softplus x), s = sigmoid x, u = (1 - t^2) s:
    f' = t + x u, f'' = 2 u + x u (1 - s - 2 t s)."""

    def _tsu(self, x):
        t, s = torch.tanh(torch.nn.functional.softplus(x)), torch.sigmoid(x)
        return t, s, (1.0 - t * t) * s

    def d1(self, x, y):
        t, _, u = self._tsu(x)
        return t + x * u

    def d2(self, x, y):
        t, s, u = self._tsu(x)
        return 2.0 * u + x * u * (1.0 - s - 2.0 * t * s)


@rule(aten.log_sigmoid.default)
class LogSigmoid(Pointwise):
    """log sigmoid x: f' = sigmoid(-x), f'' = -s (1 - s) with s = sigmoid x."""

    def d1(self, x, y):
        return torch.sigmoid(-x)

    def d2(self, x, y):
        s = torch.sigmoid(x)
        return -s * (1.0 - s)


@rule(aten.log1p.default)
class Log1p(Pointwise):
    """log(1 + x): f' = 1 / (1 + x), f'' = -f'^2."""

    def d1(self, x, y):
        return 1.0 / (1.0 + x)

    def d2(self, x, y):
        return -1.0 / (1.0 + x) ** 2


@rule(aten.expm1.default)
class Expm1(Pointwise):
    """exp(x) - 1: f' = f'' = exp x."""

    def d1(self, x, y):
        return torch.exp(x)

    def d2(self, x, y):
        return torch.exp(x)


@rule(aten.erf.default)
class Erf(Pointwise):
    """erf x: f' = 2 exp(-x^2) / sqrt(pi), f'' = -2 x f'."""

    def d1(self, x, y):
        return 2.0 / math.sqrt(math.pi) * torch.exp(-x * x)

    def d2(self, x, y):
        return -2.0 * x * self.d1(x, y)
