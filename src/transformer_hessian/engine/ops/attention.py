"""Token-mixing operations: scaled dot-product attention (torch's fused kernels in the model, the
formulas here: float and bool masks, ``is_causal``, ``scale``, grouped-query heads) and the
softmax and log-softmax of hand-written attention and losses.

Per batch and head, with s the scale and M the additive mask: S = s q k^T + M, A = softmax(S),
o = A v. Tangents S' = s (q' k^T + q k'^T) + M', A' = A * (S' - rowsum(A * S')), o' = A' v + A v';
adjoints g_A = g v^T, g_v = A^T g, g_S = A * (g_A - rowsum(A * g_A)), g_q = s g_S k,
g_k = s g_S^T q, g_M = g_S; their tangents are the second-order chain rule of the softmax and the
two products (docs/theory.md, "Operations of any model": attention). Masked entries have A = 0.
A float mask may depend on the parameters (T5's relative position bias): M' and g_M' = g_S'
(summed over the axes it is broadcast along)."""

from __future__ import annotations

import torch

from ..contract import Op, as_tangent, node_arg, rule, shape_of, sum_to, tadd

aten = torch.ops.aten


def _t(x):
    return x.transpose(-1, -2)


def _lmm(x, y):
    """x @ y for K tangents x (K, *batch, R, C) and a value y (*batch, C, M): the K axis folded into
    the rows, so that each (batch) product is one (K R, C) x (C, M) matrix product instead of K
    small ones. Folding copies x: worth it for a narrow x (C, M the head width, as in q' k^T), not
    for an attention-sized one (A' v); docs/timings.md, "Measurements that were code comments"."""
    if x is None or y is None:
        return None
    if x.dim() != y.dim() + 1 or x.shape[1:-2] != y.shape[:-2]:
        return x @ y
    K, R = x.shape[0], x.shape[-2]
    z = x.movedim(0, -3).reshape(*y.shape[:-2], K * R, x.shape[-1]) @ y
    return z.reshape(*y.shape[:-2], K, R, y.shape[-1]).movedim(-3, 0)


def _kmm(x, y):
    """x @ y for K tangents x (K, *batch, R, C) and a value y (*batch, C, M), without copying x
    where its memory has the batch axes, then K, outside the matrices (as :func:`_lmm`'s products
    and in-place updates of them leave it, transposed or not): folded into rows as in :func:`_lmm`
    when the matrices are contiguous, else one batched product over (*batch, K) with y repeated K
    times (a head's width); torch's broadcasting product otherwise (which would copy an
    attention-sized x: 2 of them a call, a third of the attention rule's time in the GPT-2-like
    bench model)."""
    if x is None or y is None:
        return None
    if x.dim() != y.dim() + 1 or x.shape[1:-2] != y.shape[:-2]:
        return x @ y
    xb = x.movedim(0, -3)
    if xb.is_contiguous():
        return _lmm(x, y)
    K, R, C, M = x.shape[0], x.shape[-2], x.shape[-1], y.shape[-1]
    try:
        x3 = xb.view(-1, R, C)
    except RuntimeError:
        return x @ y
    y3 = y.unsqueeze(-3).expand(*y.shape[:-2], K, C, M).reshape(-1, C, M)
    return torch.bmm(x3, y3).view(*y.shape[:-2], K, R, M).movedim(-3, 0)


def _rmm(y, x):
    """y @ x for a value y (*batch, R, C) and K tangents x (K, *batch, C, M), as (x^T y^T)^T with
    the K axis folded into the rows: torch's broadcasting product would copy y K times (an
    attention matrix per tangent)."""
    if x is None or y is None:
        return None
    return _t(_lmm(_t(x), _t(y)))


@rule(aten.scaled_dot_product_attention.default)
class ScaledDotProductAttention(Op):
    """``F.scaled_dot_product_attention`` (dropout 0) as the formulas above."""

    def __init__(self, node):
        super().__init__(node)
        q, k, v = node.args[:3]
        mask = node_arg(node, 3, "attn_mask")
        dropout = node_arg(node, 4, "dropout_p", 0.0)
        self.causal = bool(node_arg(node, 5, "is_causal", False))
        self.scale = node_arg(node, 6, "scale")
        self.gqa = bool(node_arg(node, 7, "enable_gqa", False))
        if dropout:
            raise NotImplementedError(f"scaled_dot_product_attention with dropout_p={dropout} (call model.eval())")
        if isinstance(mask, torch.fx.Node) and self.causal:
            raise NotImplementedError("scaled_dot_product_attention with both attn_mask and is_causal")
        self.inputs = [q, k, v]
        self.m_shape = None
        if isinstance(mask, torch.fx.Node):
            if mask.meta["val"].is_floating_point():  # an additive bias: it may depend on the parameters (T5)
                self.inputs.append(mask)
                self.m_shape = shape_of(mask)
            else:
                self.index_nodes = [mask]
        self.q_shape, self.k_shape, self.v_shape = shape_of(q), shape_of(k), shape_of(v)
        self.rep = self.q_shape[-3] // self.k_shape[-3] if self.gqa and len(self.q_shape) >= 3 else 1

    def bind(self, index: list) -> None:
        """The mask's value (evaluated once, before the sweeps)."""
        self.mask = index[0] if index else None

    def _additive(self, dtype, device):
        L, S = self.q_shape[-2], self.k_shape[-2]
        mask = getattr(self, "mask", None)
        if self.causal:
            keep = torch.ones(L, S, dtype=torch.bool, device=device).tril()
            return torch.zeros(L, S, dtype=dtype, device=device).masked_fill(~keep, float("-inf"))
        if mask is None:
            return None
        if mask.dtype == torch.bool:
            return torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill(~mask, float("-inf"))
        return mask.to(dtype)

    def _rep(self, t):
        return t if t is None or self.rep == 1 else t.repeat_interleave(self.rep, dim=-3)

    def _unrep(self, t):
        if t is None or self.rep == 1:
            return t
        shape = t.shape
        return t.reshape(*shape[:-3], shape[-3] // self.rep, self.rep, *shape[-2:]).sum(-3)

    def forward(self, xs):
        q, k, v = xs[:3]
        if self.m_shape is not None:
            self.mask = xs[3]
        k, v = self._rep(k), self._rep(v)
        self.s = self.scale if self.scale is not None else q.shape[-1] ** -0.5
        S = (q @ _t(k)) * self.s
        M = self._additive(q.dtype, q.device)
        if M is not None:
            S = S + M
        A = torch.softmax(S, -1)
        if M is not None and torch.isinf(M).all(-1).any():
            raise ValueError(
                "scaled_dot_product_attention: a row of the mask masks every key (its softmax is undefined)"
            )
        o = A @ v
        self.q, self.k, self.v, self.A, self.o = q, k, v, A, o
        self.As = A * self.s
        self._tan = None
        return o

    def _tangents(self, ts):
        # the same tangents as the sweep's forward pass (kept, so that identity cannot be reused by
        # a later sweep's tensors, as ids of freed objects are)
        key = tuple(ts)
        if self._tan is not None and all(a is b for a, b in zip(self._tan[0], key, strict=True)):
            return self._tan[1]
        tq, tk, tv = ts[:3]
        tm = ts[3] if len(ts) > 3 else None
        tk, tv = self._rep(tk), self._rep(tv)
        q, k, A = self.q, self.k, self.A
        # S' = s (q' k^T + q k'^T) + M' (M the additive mask); A' = A * S' - A rowsum(A * S'), in
        # place on the fresh S'
        At = _lmm(tq, _t(k))
        if tk is not None:
            term = q @ _t(tk)
            At = term if At is None else At.add_(term)
        if At is not None:
            At.mul_(self.As)
        if tm is not None:
            term = as_tangent(tm, A.shape) * A
            At = term if At is None else At.add_(term)
        if At is not None:
            At.addcmul_(A, At.sum(-1, keepdim=True), value=-1)
        ot = tadd(_kmm(At, self.v), _rmm(A, tv))
        self._tan = (key, (tk, tv, At, ot))
        return self._tan[1]

    def tangent(self, xs, ts, y):
        return self._tangents(ts)[3]

    def adjoint(self, xs, y, g, need):
        s, q, k, v, A = self.s, self.q, self.k, self.v, self.A
        gA = g @ _t(v)
        r = (A * gA).sum(-1, keepdim=True)
        gS = A * (gA - r)
        self.gA_r, self.gS = gA - r, gS
        out = [(gS @ k) * s, self._unrep(_t(gS) @ q) * s, self._unrep(_t(A) @ g)]
        return out if self.m_shape is None else out + [sum_to(gS, self.m_shape) if need[3] else None]

    def adjoint_tangent(self, xs, ts, y, g, gt, need):
        tq = ts[0]
        tk, tv, At, ot = self._tangents(ts)
        s, q, k, v, A, gS = self.s, self.q, self.k, self.v, self.A, self.gS
        # g_S' = A * (g_A' - rowsum(g' o + g o')) + A' * (g_A - r), in place on the fresh g_A'
        gSt = _lmm(gt, _t(v))
        if tv is not None:
            term = g @ _t(tv)
            gSt = term if gSt is None else gSt.add_(term)
        rt = tadd(None if gt is None else gt * self.o, None if ot is None else g * ot)
        if rt is not None:
            rt = rt.sum(-1, keepdim=True)
            gSt = (-rt).mul(A) if gSt is None else gSt.sub_(rt).mul_(A)
        elif gSt is not None:
            gSt.mul_(A)
        if At is not None:
            gSt = At * self.gA_r if gSt is None else gSt.addcmul_(At, self.gA_r)
        gqt = gkt = gvt = None
        if need[0]:
            gqt = tadd(_kmm(gSt, k), _rmm(gS, tk))
            gqt = None if gqt is None else gqt.mul_(s)
        if need[1]:
            gkt = tadd(_kmm(None if gSt is None else _t(gSt), q), _rmm(_t(gS), tq))
            gkt = None if gkt is None else self._unrep(gkt).mul_(s)
        if need[2]:
            gvt = self._unrep(tadd(_kmm(None if At is None else _t(At), g), _rmm(_t(A), gt)))
        if self.m_shape is None:
            return [gqt, gkt, gvt]
        return [gqt, gkt, gvt, None if gSt is None or not need[3] else sum_to(gSt, self.m_shape, True)]


def _from_end(dim: int, x) -> int:
    """An axis of a value counted from the end, so that it names the same axis of a tangent (which
    has the K entries in front)."""
    return dim - len(shape_of(x)) if dim >= 0 else dim


@rule(aten._softmax.default, aten.softmax.int)
class Softmax(Op):
    """y = softmax(x) on one axis: y' = y (x' - <y, x'>), g_x = y (g - <y, g>),
    g_x' = y (g' - <y, g'>) + y' (g - <y, g>) - y <y', g>."""

    def __init__(self, node):
        super().__init__(node)
        self.inputs = [node.args[0]]
        self.dim = _from_end(node.args[1], node.args[0])
        self.row_local = self.dim == -1

    def _yt(self, y, t):
        return y * (t - (y * t).sum(self.dim, keepdim=True))

    def tangent(self, xs, ts, y):
        return None if ts[0] is None else self._yt(y, ts[0])

    def adjoint(self, xs, y, g, need):
        return [y * (g - (y * g).sum(self.dim, keepdim=True))]

    def adjoint_tangent(self, xs, ts, y, g, gt, need):
        d = self.dim
        out = None if gt is None else y * (gt - (y * gt).sum(d, keepdim=True))
        if ts[0] is not None:
            yt = self._yt(y, ts[0])
            own = yt * (g - (y * g).sum(d, keepdim=True)) - y * (yt * g).sum(d, keepdim=True)
            out = own if out is None else out + own
        return [out]


@rule(aten._log_softmax.default, aten.log_softmax.int)
class LogSoftmax(Op):
    """y = x - logsumexp(x) on one axis, p = exp(y): y' = x' - <p, x'>, g_x = g - p sum(g),
    g_x' = g' - p sum(g') - p' sum(g)."""

    def __init__(self, node):
        super().__init__(node)
        self.inputs = [node.args[0]]
        self.dim = _from_end(node.args[1], node.args[0])
        self.row_local = self.dim == -1

    def tangent(self, xs, ts, y):
        t = ts[0]
        return None if t is None else t - (y.exp() * t).sum(self.dim, keepdim=True)

    def adjoint(self, xs, y, g, need):
        return [g - y.exp() * g.sum(self.dim, keepdim=True)]

    def adjoint_tangent(self, xs, ts, y, g, gt, need):
        d, p = self.dim, y.exp()
        out = None if gt is None else gt - p * gt.sum(d, keepdim=True)
        if ts[0] is not None:
            pt = p * (ts[0] - (p * ts[0]).sum(d, keepdim=True))
            own = -pt * g.sum(d, keepdim=True)
            out = own if out is None else out + own
        return [out]
