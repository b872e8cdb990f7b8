"""Every rule of the engine's table alone: for each key one or more small samples (random shapes,
float64, the operation's own settings), the rule's value, tangent, adjoint and adjoint tangent
against torch.func (jvp, vjp and the jvp of the vjp) of the operation itself, and the row terms
of its shared inputs (``row_params``) summed against the same adjoint tangent. A key without a
sample fails :func:`test_every_rule_has_a_sample`: adding an operation is its class, its paragraph
in docs/theory.md and its sample here."""

from __future__ import annotations

import operator

import pytest
import torch
from helpers import rel_err
from torch.fx import Graph, Node
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils import _pytree as pytree

from transformer_hessian.engine.contract import ITEMS, RULES
from transformer_hessian.engine.ops.losses import causal_lm, cross_entropy, mse_loss

from .models import DT

aten = torch.ops.aten
K = 2


def _r(g, *shape, lo=None):
    """A random float64 tensor; with ``lo`` its entries in (lo, lo + 1) (a domain away from 0)."""
    x = torch.randn(shape, dtype=DT, generator=g)
    return x if lo is None else lo + torch.rand(shape, dtype=DT, generator=g)


def _ids(g, high, *shape):
    return torch.randint(0, high, shape, generator=g)


def _mask(g, *shape):
    m = torch.rand(*shape, generator=g) < 0.3
    m[..., 0] = False  # no row fully masked
    return m


def _labels(g):
    t = _ids(g, 5, 2, 4)
    t[0, 2] = -100
    return t


def _pools():
    return [
        (aten.avg_pool1d.default, lambda g: ((_r(g, 2, 3, 7), [3], [2], [1], True, False), {})),
        (aten.max_pool1d.default, lambda g: ((_r(g, 2, 3, 7), [2], [2], [1], [2], True), {})),
        (aten.avg_pool2d.default, lambda g: ((_r(g, 2, 1, 5, 6), [2, 3], [2, 2], [1, 1], False, True, 5), {})),
        (aten.max_pool2d.default, lambda g: ((_r(g, 2, 1, 5, 6), [2, 2], [1, 2], [1, 0]), {})),
        (aten.adaptive_avg_pool1d.default, lambda g: ((_r(g, 2, 3, 6), [3]), {})),
        (aten.adaptive_avg_pool2d.default, lambda g: ((_r(g, 2, 3, 4, 6), [2, 3]), {})),
        (aten._adaptive_avg_pool2d.default, lambda g: ((_r(g, 2, 3, 4, 6), [1, 1]), {})),
    ]


def _unary(op, lo=None, *settings):
    return (op, lambda g: ((_r(g, 2, 3, lo=lo), *settings), {}))


SAMPLES = [
    # pointwise
    _unary(aten.abs.default),
    _unary(aten.cos.default),
    _unary(aten.sin.default),
    _unary(aten.erf.default),
    _unary(aten.exp.default),
    _unary(aten.expm1.default),
    _unary(aten.tanh.default),
    _unary(aten.sigmoid.default),
    _unary(aten.silu.default),
    _unary(aten.mish.default),
    _unary(aten.relu.default),
    _unary(aten.neg.default),
    _unary(aten.log_sigmoid.default),
    _unary(aten.log.default, 0.5),
    _unary(aten.log1p.default, 0.5),
    _unary(aten.sqrt.default, 0.5),
    _unary(aten.rsqrt.default, 0.5),
    _unary(aten.reciprocal.default, 0.5),
    _unary(aten.square.default),
    _unary(aten.pow.Tensor_Scalar, 0.5, 2.5),
    _unary(aten.gelu.default),
    (aten.gelu.default, lambda g: ((_r(g, 2, 3),), {"approximate": "tanh"})),
    _unary(aten.leaky_relu.default, None, 0.1),
    _unary(aten.elu.default, None, 1.3),
    _unary(aten.selu.default),
    _unary(aten.celu.default, None, 1.5),
    _unary(aten.softplus.default, None, 1.5, 20.0),
    (aten.hardswish.default, lambda g: ((4 * _r(g, 2, 3),), {})),
    # torch's own derivative of hardsigmoid rounds 1/6 to float32 (3e-8 off): the function written out
    (aten.hardsigmoid.default, lambda g: ((4 * _r(g, 2, 3),), {}), lambda x: aten.relu6.default(x + 3) / 6),
    _unary(aten.hardtanh.default, None, -0.5, 0.5),
    (aten.relu6.default, lambda g: ((8 * _r(g, 2, 3),), {})),
    _unary(aten.clamp.default, None, -0.5, 0.5),
    _unary(aten.clamp_min.default, None, -0.3),
    _unary(aten.clamp_max.default, None, 0.3),
    # products, sums, quotients
    (aten.add.Tensor, lambda g: ((_r(g, 2, 3), _r(g, 3)), {"alpha": 2.0})),
    (aten.sub.Tensor, lambda g: ((_r(g, 2, 3), _r(g, 2, 1)), {})),
    (aten.add.Scalar, lambda g: ((_r(g, 2, 3), 1.5), {})),
    (aten.sub.Scalar, lambda g: ((_r(g, 2, 3), 1.5), {})),
    (aten.rsub.Scalar, lambda g: ((_r(g, 2, 3), 1.5), {})),
    (aten.rsub.Tensor, lambda g: ((_r(g, 2, 3), _r(g, 2, 3)), {})),
    (aten.mul.Tensor, lambda g: ((_r(g, 2, 3), _r(g, 2, 1)), {})),
    (aten.mul.Tensor, lambda g: ((_r(g, 3), _r(g, 2, 4, 3)), {})),  # a factor shared by every row
    (aten.mul.Scalar, lambda g: ((_r(g, 2, 3), 3.0), {})),
    (aten.div.Tensor, lambda g: ((_r(g, 2, 3), _r(g, 3, lo=0.5)), {})),
    (aten.div.Scalar, lambda g: ((_r(g, 2, 3), 2.0), {})),
    (aten.sum.dim_IntList, lambda g: ((_r(g, 2, 3, 4), [1]), {"keepdim": True})),
    (aten.sum.default, lambda g: ((_r(g, 2, 3),), {})),
    (aten.mean.dim, lambda g: ((_r(g, 2, 3, 4), [0, 2]), {})),
    (aten.mean.default, lambda g: ((_r(g, 2, 3),), {})),
    (aten.where.self, lambda g: ((_mask(g, 2, 3), _r(g, 2, 3), _r(g, 3)), {})),
    (aten.where.ScalarOther, lambda g: ((_mask(g, 2, 3), _r(g, 2, 3), 0.5), {})),
    (aten.where.ScalarSelf, lambda g: ((_mask(g, 2, 3), 0.5, _r(g, 2, 3)), {})),
    (aten.masked_fill.Scalar, lambda g: ((_r(g, 2, 3), _mask(g, 2, 3), -1.0), {})),
    (aten.masked_fill.Tensor, lambda g: ((_r(g, 2, 3), _mask(g, 2, 3), torch.tensor(-2.0, dtype=DT)), {})),
    # linear maps
    (aten.linear.default, lambda g: ((_r(g, 2, 3, 4), _r(g, 5, 4), _r(g, 5)), {})),
    (aten.addmm.default, lambda g: ((_r(g, 5), _r(g, 3, 4), _r(g, 4, 5)), {})),
    (aten.matmul.default, lambda g: ((_r(g, 2, 3, 4), _r(g, 4, 5)), {})),
    (aten.mm.default, lambda g: ((_r(g, 3, 4), _r(g, 4, 2)), {})),
    (aten.bmm.default, lambda g: ((_r(g, 2, 3, 4), _r(g, 2, 4, 5)), {})),
    (aten.baddbmm.default, lambda g: ((_r(g, 2, 3, 5), _r(g, 2, 3, 4), _r(g, 2, 4, 5)), {"beta": 0.5, "alpha": 2.0})),
    (aten.embedding.default, lambda g: ((_r(g, 6, 3), _ids(g, 6, 2, 4)), {})),
    (aten.conv2d.default, lambda g: ((_r(g, 2, 2, 5, 4), _r(g, 3, 2, 3, 2), _r(g, 3), [1, 2], [1, 0], [1, 1], 1), {})),
    (aten.conv2d.padding, lambda g: ((_r(g, 2, 2, 5, 4), _r(g, 4, 1, 3, 3), _r(g, 4), [1, 1], "same", [1, 1], 2), {})),
    (aten.conv1d.default, lambda g: ((_r(g, 2, 3, 7), _r(g, 2, 3, 3), _r(g, 2), [2], [1], [1], 1), {})),
    (aten.conv1d.padding, lambda g: ((_r(g, 2, 3, 7), _r(g, 2, 3, 3), None, [1], "valid", [2], 1), {})),
    (
        aten.convolution.default,
        lambda g: ((_r(g, 2, 2, 5, 4), _r(g, 3, 2, 2, 2), _r(g, 3), [1, 1], [0, 1], [1, 1], False, [0, 0], 1), {}),
    ),
    # normalisations, softmax, attention
    (aten.layer_norm.default, lambda g: ((_r(g, 2, 3, 4), [4], _r(g, 4), _r(g, 4), 1e-5), {})),
    (aten.rms_norm.default, lambda g: ((_r(g, 2, 3, 4), [4], _r(g, 4), 1e-6), {})),
    (aten._softmax.default, lambda g: ((_r(g, 2, 3, 4), -1, False), {})),
    (aten.softmax.int, lambda g: ((_r(g, 3, 4), 0), {})),
    (aten._log_softmax.default, lambda g: ((_r(g, 2, 3, 4), 1, False), {})),
    (aten.log_softmax.int, lambda g: ((_r(g, 3, 4), -1), {})),
    (
        aten.scaled_dot_product_attention.default,
        lambda g: ((_r(g, 2, 2, 3, 4), _r(g, 2, 2, 3, 4), _r(g, 2, 2, 3, 4), _r(g, 3, 3)), {"scale": 0.7}),
    ),
    (
        aten.scaled_dot_product_attention.default,
        lambda g: ((_r(g, 1, 4, 3, 2), _r(g, 1, 2, 3, 2), _r(g, 1, 2, 3, 2)), {"is_causal": True, "enable_gqa": True}),
    ),
    # shapes
    (aten.cat.default, lambda g: (([_r(g, 2, 3), _r(g, 2, 1)], 1), {})),
    (aten.concat.default, lambda g: (([_r(g, 2, 3), _r(g, 1, 3)],), {})),
    (aten.stack.default, lambda g: (([_r(g, 2, 3), _r(g, 2, 3)], 1), {})),
    (aten.expand.default, lambda g: ((_r(g, 3, 1), [2, 3, 4]), {})),
    (aten.expand_as.default, lambda g: ((_r(g, 3, 1), torch.zeros(2, 3, 4, dtype=DT)), {})),
    (aten.broadcast_to.default, lambda g: ((_r(g, 1, 4), [3, 4]), {})),
    (aten.gather.default, lambda g: ((_r(g, 3, 4), 1, _ids(g, 4, 3, 2)), {})),
    (aten.index.Tensor, lambda g: ((_r(g, 4, 3), [_ids(g, 4, 5)]), {})),
    (aten.pad.default, lambda g: ((_r(g, 2, 3), [1, 2], "constant", 0.5), {})),
    (aten.constant_pad_nd.default, lambda g: ((_r(g, 2, 3), [1, 1, 0, 2], 0.5), {})),
    (aten.repeat.default, lambda g: ((_r(g, 2, 3), [2, 1, 3]), {})),
    (aten.repeat_interleave.self_int, lambda g: ((_r(g, 2, 3, 2), 3, 1), {})),
    (aten.repeat_interleave.self_int, lambda g: ((_r(g, 2, 3), 2), {})),
    (aten.roll.default, lambda g: ((_r(g, 3, 4), [1, -1], [0, 1]), {})),
    (aten.upsample_bilinear2d.vec, lambda g: ((_r(g, 1, 2, 3, 4), [5, 6], False, None), {})),
    (aten.upsample_bilinear2d.default, lambda g: ((_r(g, 1, 2, 3, 4), [4, 7], True), {})),
    (aten.transpose.int, lambda g: ((_r(g, 2, 3, 4), 0, 2), {})),
    (aten.t.default, lambda g: ((_r(g, 2, 3),), {})),
    (aten.permute.default, lambda g: ((_r(g, 2, 3, 4), [2, 0, 1]), {})),
    (aten.swapaxes.default, lambda g: ((_r(g, 2, 3, 4), 0, 1), {})),
    (aten.numpy_T.default, lambda g: ((_r(g, 2, 3, 4),), {})),
    (aten.view.default, lambda g: ((_r(g, 2, 3, 4), [6, 4]), {})),
    (aten._unsafe_view.default, lambda g: ((_r(g, 2, 3, 4), [2, 12]), {})),
    (aten.reshape.default, lambda g: ((_r(g, 2, 3, 4), [4, -1]), {})),
    (aten.flatten.using_ints, lambda g: ((_r(g, 2, 3, 4), 1, 2), {})),
    (aten.unflatten.int, lambda g: ((_r(g, 2, 6), 1, [3, 2]), {})),
    (aten.squeeze.dim, lambda g: ((_r(g, 2, 1, 3), 1), {})),
    (aten.squeeze.dims, lambda g: ((_r(g, 2, 1, 3, 1), [1, 3]), {})),
    (aten.squeeze.default, lambda g: ((_r(g, 1, 3, 1),), {})),
    (aten.unsqueeze.default, lambda g: ((_r(g, 2, 3), 1), {})),
    (aten.view_as.default, lambda g: ((_r(g, 2, 3), torch.zeros(3, 2, dtype=DT)), {})),
    (aten.reshape_as.default, lambda g: ((_r(g, 2, 3), torch.zeros(6, dtype=DT)), {})),
    (aten.slice.Tensor, lambda g: ((_r(g, 2, 5), 1, 1, 4), {})),
    (aten.select.int, lambda g: ((_r(g, 2, 3, 4), 1, -1), {})),
    (aten.narrow.default, lambda g: ((_r(g, 2, 3, 4), 2, 1, 2), {})),
    (aten.contiguous.default, lambda g: ((_r(g, 2, 3),), {})),
    (aten.clone.default, lambda g: ((_r(g, 2, 3),), {})),
    (aten.alias.default, lambda g: ((_r(g, 2, 3),), {})),
    (aten.lift_fresh_copy.default, lambda g: ((_r(g, 2, 3),), {})),
    (aten._to_copy.default, lambda g: ((_r(g, 2, 3),), {"dtype": DT})),
    (aten.to.dtype, lambda g: ((_r(g, 2, 3), DT), {})),
    (aten.to.dtype_layout, lambda g: ((_r(g, 2, 3),), {"dtype": DT})),
    (aten.to.device, lambda g: ((_r(g, 2, 3), torch.device("cpu"), DT), {})),
    (aten.to.other, lambda g: ((_r(g, 2, 3), torch.zeros(1, dtype=DT)), {})),
    (aten.type_as.default, lambda g: ((_r(g, 2, 3), torch.zeros(1, dtype=DT)), {})),
    (aten.dropout.default, lambda g: ((_r(g, 2, 3), 0.5, False), {})),
    (aten.feature_dropout.default, lambda g: ((_r(g, 2, 3), 0.0, True), {})),
    # the losses by name
    # torch.func's jvp of mse_loss's vjp stops on an immutable zero tensor: the mean written out
    (mse_loss, lambda g: ((_r(g, 2, 3), _r(g, 2, 3)), {}), lambda out, t: ((out - t) ** 2).mean()),
    (cross_entropy, lambda g: ((_r(g, 3, 5), _ids(g, 5, 3)), {})),
    (causal_lm, lambda g: ((_r(g, 2, 4, 5), _labels(g)), {})),
    *_pools(),
]

#: the outputs of a multi-output operation (a split), each a getitem of it (:data:`ITEMS`)
SPLIT_SAMPLES = [
    (aten.split.Tensor, lambda g: ((_r(g, 2, 5), 2, 1), {}), 2),
    (aten.split_with_sizes.default, lambda g: ((_r(g, 2, 3, 4), [1, 3], 2), {}), 1),
    (aten.chunk.default, lambda g: ((_r(g, 4, 3), 2), {}), 0),
    (aten.unbind.int, lambda g: ((_r(g, 2, 3), 1), {}), 2),
]


def test_every_rule_has_a_sample():
    sampled = {op for op, *_ in SAMPLES}
    missing = [str(k) for k in RULES if k not in sampled]
    assert not missing, f"rules without a sample in tests/engine/test_rules.py: {missing}"
    assert {op for op, _, _ in SPLIT_SAMPLES} == set(ITEMS)


def _graph(op, args, kwargs):
    """A one-operation graph: every tensor argument a placeholder with its value."""
    g = Graph()
    flat, spec = pytree.tree_flatten((args, kwargs))
    vals: dict[Node, torch.Tensor] = {}
    nodes = []
    for i, a in enumerate(flat):
        if isinstance(a, torch.Tensor):
            ph = g.placeholder(f"a{i}")
            ph.meta["val"] = a
            vals[ph] = a
            nodes.append(ph)
        else:
            nodes.append(a)
    n_args, n_kwargs = pytree.tree_unflatten(nodes, spec)
    node = g.call_function(op, tuple(n_args), n_kwargs)
    node.meta["val"] = op(*args, **kwargs)
    return node, vals, flat, spec


def _check(rule, vals, f_of):
    """The rule's methods against torch.func on the one operation, ``f_of(dx)`` the operation as a
    function of its differentiated inputs (the rule's floating inputs)."""
    gen = torch.Generator().manual_seed(1)
    rule.bind([vals[i] if isinstance(i, Node) else i for i in rule.index_nodes])
    xs = [vals[i] for i in rule.inputs]
    diff = [x.is_floating_point() for x in xs]
    dx = tuple(x for x, d in zip(xs, diff, strict=True) if d)
    assert dx, "the sample differentiates nothing"
    y_ref = f_of(dx)
    y = rule.forward(xs) if rule.forward is not None else y_ref
    assert rel_err(y, y_ref) <= 1e-13
    ts = [_r(gen, K, *x.shape) if d else None for x, d in zip(xs, diff, strict=True)]
    tk = [tuple(t[k] for t in ts if t is not None) for k in range(K)]
    # tangent
    t = rule.tangent(xs, ts, y)
    ref = torch.stack([torch.func.jvp(lambda *a: f_of(a), dx, tk[k])[1] for k in range(K)])
    assert rel_err(torch.zeros_like(ref) if t is None else t.expand_as(ref), ref) <= 1e-12, "tangent"
    # adjoint
    g = _r(gen, *y.shape)
    _, vjp = torch.func.vjp(lambda *a: f_of(a), *dx)
    ref_adj = vjp(g)
    adj = rule.adjoint(xs, y, g, diff)
    got = [a for a, d in zip(adj, diff, strict=True) if d]
    for a, r in zip(got, ref_adj, strict=True):
        assert rel_err(torch.zeros_like(r) if a is None else a.expand_as(r), r) <= 1e-12, "adjoint"
    # adjoint tangent: d/ds of J(x + s t)^T (g + s g')
    gt = _r(gen, K, *y.shape)

    def pullback(xs_, g_):
        return torch.func.vjp(lambda *a: f_of(a), *xs_)[1](g_)

    refs = [torch.func.jvp(pullback, (dx, g), (tk[k], gt[k]))[1] for k in range(K)]
    into = getattr(rule, "transpose_into", None)
    if into is not None:
        acc = torch.zeros((K, *xs[0].shape), dtype=DT)
        into(acc, gt)
        res = [acc]
    else:
        res = rule.adjoint_tangent(xs, ts, y, g, gt, diff)
    got = [a for a, d in zip(res, diff, strict=True) if d]
    for j, a in enumerate(got):
        r = torch.stack([refs[k][j] for k in range(K)])
        assert rel_err(torch.zeros_like(r) if a is None else a.expand_as(r), r) <= 1e-12, "adjoint tangent"
    # the row terms of inputs shared by every row (what a factored sweep weights row by row)
    for i in rule.row_params:
        j = sum(diff[:i])
        r = torch.stack([refs[k][j] for k in range(K)])
        total = _sum_row_terms(rule.row_terms(i, xs, ts, y, g, gt), K)
        assert rel_err(total.reshape(r.shape), r) <= 1e-12, f"row terms of input {i}"


def _sum_row_terms(terms, k: int) -> torch.Tensor:
    """sum over rows of each :class:`RowTerm`, as (K, entries) in the input's layout."""
    total = 0
    for left, right, left_first in terms:
        if left is None:
            t = right.sum(1)
        else:
            t = torch.einsum("nj,anl->ajl" if left_first else "nj,anl->alj", left, right)
        total = total + t.reshape(k, -1)
    return total


def _ids_of(samples):
    return [f"{getattr(op, '__name__', op)}-{i}" for i, (op, *_) in enumerate(samples)]


@pytest.mark.parametrize("sample", SAMPLES, ids=_ids_of(SAMPLES))
def test_rule_alone_equals_torch_func(sample):
    op, make, ref = (*sample, None)[:3]
    args, kwargs = make(torch.Generator().manual_seed(0))
    node, vals, flat, spec = _graph(op, args, kwargs)
    rule = RULES[op](node)
    where = {id(v): i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)}
    order = [where[id(vals[i])] for i in rule.inputs if vals[i].is_floating_point()]

    def f_of(dx):
        new = list(flat)
        for i, x in zip(order, dx, strict=True):
            new[i] = x
        a, kw = pytree.tree_unflatten(new, spec)
        return (ref or op)(*a, **kw)

    with sdpa_kernel(SDPBackend.MATH):  # torch has no forward-mode derivative of the fused kernels
        _check(rule, vals, f_of)


@pytest.mark.parametrize(("op", "make", "item"), SPLIT_SAMPLES, ids=_ids_of(SPLIT_SAMPLES))
def test_split_items_alone_equal_torch_func(op, make, item):
    args, kwargs = make(torch.Generator().manual_seed(0))
    split, vals, _, _ = _graph(op, args, kwargs)
    node = split.graph.call_function(operator.getitem, (split, item))
    node.meta["val"] = split.meta["val"][item]
    _check(ITEMS[op](node), vals, lambda dx: op(dx[0], *args[1:], **kwargs)[item])
