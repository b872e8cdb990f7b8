"""Maps linear in each of two inputs: ``linear`` (x W^T + b), ``addmm`` (b + x W: Hugging Face's
Conv1D), matrix products of two values (hand-written attention, a weight used directly; ``baddbmm``
adds a third value to one, as Bloom's ALiBi scores), embedding
lookups and 2-d convolutions (a ViT's patch embedding). A weight is an input like any other, so a
weight used twice (tied embeddings) gathers the adjoint tangents of both uses."""

from __future__ import annotations

import torch

from ..contract import Op, RowTerm, as_tangent, node_arg, rows_of, rule, shape_of, shared_row, sum_to, tadd

aten = torch.ops.aten


@rule(aten.linear.default)
class Linear(Op):
    """y = x W^T + b on the last axis (W: (o, i)). y' = x' W^T + x W'^T + b';
    g_x = g W, g_W = sum_n g_n^T x_n, g_b = sum_n g_n; the curvature of its own is the bilinear
    cross term: g_x' = g' W + g W', g_W' = sum_n g'_n^T x_n + g_n^T x'_n."""

    row_local = True

    def __init__(self, node):
        super().__init__(node)
        self.inputs = [a for a in node.args[:3] if a is not None]
        self.has_b = len(self.inputs) == 3
        self.x_shape = shape_of(node.args[0])
        self.row_params = (1, 2) if self.has_b else (1,)

    def row_terms(self, i, xs, ts, y, g, gt):
        """W: sum_n gt_n (x) x_n + g_n (x) tx_n; b: sum_n gt_n."""
        if i == 2:
            return [] if gt is None else [RowTerm(None, rows_of(gt, True))]
        out = [] if gt is None else [RowTerm(rows_of(xs[0]), rows_of(gt, True), False)]
        if ts[0] is not None:
            out.append(RowTerm(rows_of(g), rows_of(ts[0], True), True))
        return out

    def tangent(self, xs, ts, y):
        x, W = xs[0], xs[1]
        tx, tW = ts[0], ts[1]
        out = None
        if tx is not None:
            out = tx @ W.T
        if tW is not None:  # (K, N, o) = x (N, i) @ W'^T (K, i, o)
            xw = torch.matmul(rows_of(x, False), tW.transpose(1, 2)).reshape(tW.shape[0], *y.shape)
            out = xw if out is None else out.add_(xw)
        if self.has_b and ts[2] is not None:
            out = tadd(out, as_tangent(ts[2], y.shape))
            if tuple(out.shape[1:]) != tuple(y.shape):
                out = out.expand(out.shape[0], *y.shape)
        return out

    def adjoint(self, xs, y, g, need):
        x, W = xs[0], xs[1]
        g2 = rows_of(g, False)
        out = [(g @ W) if need[0] else None, (g2.T @ rows_of(x, False)) if need[1] else None]
        if self.has_b:
            out.append(g2.sum(0) if need[2] else None)
        return out

    def adjoint_tangent(self, xs, ts, y, g, gt, need):
        x, W = xs[0], xs[1]
        tx, tW = ts[0], ts[1]
        gx = gW = gb = None
        if need[0]:
            gx = None if gt is None else gt @ W
            if tW is not None:
                gx = tadd(gx, _g_times(g, tW))
        if need[1]:
            gW = _xt_g(rows_of(x, False), rows_of(g, False), None if gt is None else rows_of(gt, True), tx)
            gW = None if gW is None else gW.transpose(1, 2)
        if self.has_b and need[2] and gt is not None:
            gb = rows_of(gt, True).sum(1)
        return [gx, gW, gb] if self.has_b else [gx, gW]


def _xt_g(x2, g2, gt2, tx) -> torch.Tensor | None:
    """(K, i, o) = x^T gt + tx^T g for rows x2 (N, i), g2 (N, o) and K tangents gt2 (K, N, o), tx
    (K, .., i) (either None): the adjoint tangent of a weight (transposed for ``linear``), in one
    product and one batched product added in place (faster than gt^T x + g^T tx formed apart;
    docs/timings.md, "Measurements that were code comments")."""
    out = None
    if gt2 is not None:
        out = torch.matmul(x2.T, gt2)
    if tx is not None:
        tx2 = rows_of(tx, True).transpose(1, 2)
        if out is None:
            out = torch.matmul(tx2, g2)
        else:
            out.baddbmm_(tx2, g2.expand(tx2.shape[0], *g2.shape))
    return out


def _g_times(g: torch.Tensor, tW: torch.Tensor) -> torch.Tensor:
    """(K, *g.shape[:-1], i) = g (.., o) @ W' (K, o, i)."""
    K = tW.shape[0]
    return torch.matmul(rows_of(g, False), tW).reshape(K, *g.shape[:-1], tW.shape[-1])


@rule(aten.addmm.default)
class Addmm(Op):
    """y = beta b + alpha x M (x: (N, i), M: (i, o)); Hugging Face's Conv1D (GPT-2) with M its weight."""

    row_local = True

    def __init__(self, node):
        super().__init__(node)
        b, x, M = node.args[:3]
        self.beta = node.kwargs.get("beta", 1)
        self.alpha = node.kwargs.get("alpha", 1)
        self.inputs = [b, x, M]
        self.b_shape = shape_of(b)
        # a bias shared by every row (its row terms are sums over rows)
        self.row_params = (0, 2) if shared_row(self.b_shape, shape_of(node)) else (2,)

    def row_terms(self, i, xs, ts, y, g, gt):
        """M: alpha sum_n x_n (x) gt_n + g_n (x) tx_n (M's layout (i, o)); b: beta sum_n gt_n."""
        if i == 0:
            return [] if gt is None else [RowTerm(None, rows_of(gt, True) * self.beta)]
        a = self.alpha
        out = [] if gt is None else [RowTerm(xs[1] * a if a != 1 else xs[1], rows_of(gt, True), True)]
        if ts[1] is not None:
            out.append(RowTerm(g * a if a != 1 else g, rows_of(ts[1], True), False))
        return out

    def tangent(self, xs, ts, y):
        b, x, M = xs
        tb, tx, tM = ts
        out = None
        if tx is not None:
            out = tx @ M
        if tM is not None:
            out = tadd(out, torch.matmul(x, tM))
        if out is not None and self.alpha != 1:
            out = out * self.alpha
        if tb is not None:
            tb = as_tangent(tb, y.shape) * self.beta
            out = tb.expand(tb.shape[0], *y.shape) if out is None else out + tb
        return out

    def adjoint(self, xs, y, g, need):
        b, x, M = xs
        a = self.alpha
        return [
            sum_to(g, self.b_shape) * self.beta if need[0] else None,
            (g @ M.T) * a if need[1] else None,
            (x.T @ g) * a if need[2] else None,
        ]

    def adjoint_tangent(self, xs, ts, y, g, gt, need):
        b, x, M = xs
        tb, tx, tM = ts
        a = self.alpha
        gb = gx = gM = None
        if need[0] and gt is not None:
            gb = sum_to(gt, self.b_shape, True) * self.beta
        if need[1]:
            gx = tadd(None if gt is None else gt @ M.T, None if tM is None else torch.matmul(g, tM.transpose(1, 2)))
            gx = gx if gx is None or a == 1 else gx * a
        if need[2]:
            gM = _xt_g(x, g, gt, tx)
            gM = gM if gM is None or a == 1 else gM * a
        return [gb, gx, gM]


@rule(aten.matmul.default, aten.mm.default, aten.bmm.default)
class MatMul(Op):
    """y = a @ b (batch axes broadcast; both at least 2-d): a bilinear map. y' = a' b + a b';
    g_a = g b^T, g_b = a^T g (summed over broadcast axes); g_a' = g' b^T + g b'^T,
    g_b' = a^T g' + a'^T g."""

    def __init__(self, node):
        super().__init__(node)
        self.inputs = [node.args[0], node.args[1]]
        self.a_shape, self.b_shape = shape_of(node.args[0]), shape_of(node.args[1])
        if len(self.a_shape) < 2 or len(self.b_shape) < 2:
            raise NotImplementedError("matmul of a vector (1-d operand)")

    def tangent(self, xs, ts, y):
        a, b = xs
        ta, tb = ts
        out = None
        if ta is not None:
            out = as_tangent(ta, y.shape) @ b
        if tb is not None:
            out = tadd(out, a @ as_tangent(tb, y.shape))
        return None if out is None else _full(out, y.shape)

    def adjoint(self, xs, y, g, need):
        a, b = xs
        return [
            sum_to(g @ b.transpose(-1, -2), self.a_shape) if need[0] else None,
            sum_to(a.transpose(-1, -2) @ g, self.b_shape) if need[1] else None,
        ]

    def adjoint_tangent(self, xs, ts, y, g, gt, need):
        a, b = xs
        ta, tb = ts
        ga = gb = None
        if need[0]:
            ga = tadd(
                None if gt is None else gt @ b.transpose(-1, -2),
                None if tb is None else g @ as_tangent(tb, y.shape).transpose(-1, -2),
            )
            ga = None if ga is None else sum_to(_full(ga, y.shape[:-1] + (a.shape[-1],)), self.a_shape, True)
        if need[1]:
            gb = tadd(
                None if gt is None else a.transpose(-1, -2) @ gt,
                None if ta is None else as_tangent(ta, y.shape).transpose(-1, -2) @ g,
            )
            gb = None if gb is None else sum_to(_full(gb, y.shape[:-2] + b.shape[-2:]), self.b_shape, True)
        return [ga, gb]


@rule(aten.baddbmm.default)
class Baddbmm(MatMul):
    """y = beta c + alpha a @ b (batched 3-d products; Bloom adds its ALiBi bias c to the attention
    scores so): the matrix product's rules times alpha, and c's linear term times beta."""

    def __init__(self, node):
        Op.__init__(self, node)  # not MatMul's: the operands come second and third
        c, a, b = node.args[:3]
        self.inputs = [a, b, c]
        self.a_shape, self.b_shape, self.c_shape = shape_of(a), shape_of(b), shape_of(c)
        self.beta, self.alpha = node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)

    def tangent(self, xs, ts, y):
        out = super().tangent(xs[:2], ts[:2], y)
        if out is not None and self.alpha != 1:
            out = out * self.alpha
        tc = ts[2]
        if tc is not None:
            tc = as_tangent(tc, y.shape) * self.beta
            out = tc.expand(tc.shape[0], *y.shape) if out is None else out + tc
        return out

    def adjoint(self, xs, y, g, need):
        ga, gb = super().adjoint(xs[:2], y, g * self.alpha, need[:2])
        return [ga, gb, sum_to(g, self.c_shape) * self.beta if need[2] else None]

    def adjoint_tangent(self, xs, ts, y, g, gt, need):
        a = self.alpha
        ga, gb = super().adjoint_tangent(xs[:2], ts[:2], y, g * a, None if gt is None else gt * a, need[:2])
        gc = sum_to(gt, self.c_shape, True) * self.beta if need[2] and gt is not None else None
        return [ga, gb, gc]


def _full(t: torch.Tensor, shape) -> torch.Tensor:
    t = as_tangent(t, shape)
    return t if tuple(t.shape[1:]) == tuple(shape) else t.expand(t.shape[0], *shape)


@rule(aten.embedding.default)
class Embedding(Op):
    """y = W[ids] (a lookup: linear in W). Rows at ``padding_idx`` get no adjoint, as in torch's
    backward, and so no Hessian entries (their tangents are dropped too, keeping H symmetric)."""

    def __init__(self, node):
        super().__init__(node)
        self.inputs = [node.args[0]]
        self.index_nodes = [node.args[1]]
        self.pad = node_arg(node, 2, "padding_idx", -1)
        self.w_shape = shape_of(node.args[0])

    def bind(self, index: list) -> None:
        """The token ids (evaluated once, before the sweeps)."""
        ids = index[0]
        self.ids = ids
        self.keep = None if self.pad is None or self.pad < 0 else (ids != self.pad)

    def _masked(self, t, batched):
        if self.keep is None:
            return t
        return t * self.keep.unsqueeze(-1).to(t.dtype)

    def tangent(self, xs, ts, y):
        (t,) = ts
        return None if t is None else self._masked(t[:, self.ids], True)

    def adjoint(self, xs, y, g, need):
        d = self.w_shape[-1]
        g = self._masked(g, False)
        return [g.new_zeros(self.w_shape).index_add_(0, self.ids.reshape(-1), g.reshape(-1, d))]

    def adjoint_tangent(self, xs, ts, y, g, gt, need):
        if gt is None:
            return [None]
        d, K = self.w_shape[-1], gt.shape[0]
        gt = self._masked(gt, True)
        out = gt.new_zeros((K, *self.w_shape))
        return [out.index_add_(1, self.ids.reshape(-1), gt.reshape(K, -1, d))]


@rule(aten.conv2d.default, aten.conv2d.padding, aten.conv1d.default, aten.conv1d.padding, aten.convolution.default)
class Conv(Op):
    """A 1-d or 2-d convolution (bilinear in input and weight, plus a bias): y' = conv(x', W) +
    conv(x, W') + b'; adjoints and their tangents through torch's convolution_backward, applied to
    the K tangents one after the other (it is linear in each argument; no second derivative of a
    kernel is taken)."""

    def __init__(self, node):
        super().__init__(node)
        args = list(node.args)
        if node.target is aten.convolution.default:
            x, W, b, stride, padding, dilation, transposed, out_pad, groups = args
            if transposed:
                raise NotImplementedError("transposed convolution")
        else:
            x, W = args[0], args[1]
            b = node_arg(node, 2, "bias")
            stride = node_arg(node, 3, "stride", [1])
            padding = node_arg(node, 4, "padding", [0])
            dilation = node_arg(node, 5, "dilation", [1])
            groups = node_arg(node, 6, "groups", 1)
        n = len(shape_of(x)) - 2  # spatial axes

        def each(v):
            return [*v] * (n // len(v))

        if padding == "valid":
            padding = [0]
        elif padding == "same":  # stride 1: d (k - 1) in all, the same on both sides when even
            total = [d * (k - 1) for d, k in zip(each(dilation), shape_of(W)[2:], strict=True)]
            if any(t % 2 for t in total):
                raise NotImplementedError("convolution padding='same' with an even kernel (padded on one side)")
            padding = [t // 2 for t in total]
        self.inputs = [v for v in (x, W, b) if v is not None]
        self.has_b = b is not None
        self.conf = (each(stride), each(padding), each(dilation), groups)
        self.x_shape, self.w_shape = shape_of(x), shape_of(W)
        self.spatial = tuple(range(2, 2 + n))

    def _conv(self, x, W):
        s, p, d, gr = self.conf
        return aten.convolution.default(x, W, None, s, p, d, False, [0] * len(s), gr)

    def _back(self, g, x, W, mask):
        s, p, d, gr = self.conf
        return aten.convolution_backward.default(g, x, W, None, s, p, d, False, [0] * len(s), gr, mask)

    def tangent(self, xs, ts, y):
        x, W = xs[0], xs[1]
        tx, tW = ts[0], ts[1]
        out = []
        if tx is not None:
            K = tx.shape[0]
            out.append(self._conv(tx.reshape(-1, *x.shape[1:]), W).reshape(K, *y.shape))
        if tW is not None:
            out.append(torch.stack([self._conv(x, w) for w in tW]))
        if self.has_b and ts[2] is not None:
            tb = ts[2].reshape(ts[2].shape[0], 1, -1, *(1 for _ in self.spatial))
            out.append(tb.expand(ts[2].shape[0], *y.shape))
        if not out:
            return None
        total = out[0]
        for t in out[1:]:
            total = total + t
        return total

    def adjoint(self, xs, y, g, need):
        x, W = xs[0], xs[1]
        gx, gW, _ = self._back(g, x, W, [need[0], need[1], False])
        return [gx, gW, g.sum((0, *self.spatial))] if self.has_b else [gx, gW]

    def adjoint_tangent(self, xs, ts, y, g, gt, need):
        x, W = xs[0], xs[1]
        tx, tW = ts[0], ts[1]
        K = next((t.shape[0] for t in (gt, tx, tW) if t is not None), None)
        if K is None:
            return [None] * len(self.inputs)
        gx = x.new_zeros((K, *self.x_shape)) if need[0] else None
        gW = x.new_zeros((K, *self.w_shape)) if need[1] else None
        for k in range(K):
            if gt is not None:
                a, b, _ = self._back(gt[k], x, W, [need[0], need[1], False])
                if need[0]:
                    gx[k] += a
                if need[1]:
                    gW[k] += b
            if tW is not None and need[0]:
                gx[k] += self._back(g, x, tW[k], [True, False, False])[0]
            if tx is not None and need[1]:
                gW[k] += self._back(g, tx[k], W, [False, True, False])[1]
        gb = None if not self.has_b or gt is None else gt.sum((1, *(a + 1 for a in self.spatial)))
        return [gx, gW, gb] if self.has_b else [gx, gW]
