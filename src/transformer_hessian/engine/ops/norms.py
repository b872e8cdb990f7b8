"""Normalisations over the last axis: LayerNorm and RMSNorm (torch's ``nn.RMSNorm``; Hugging Face's
hand-written RMSNorm is captured as powers, means, rsqrt and products and goes through their rules).

Both are y = n(x) * gamma (+ beta), n the normalised input; gamma and beta are inputs like x, so
their Hessian rows are their adjoint tangents (docs/theory.md, "Operations of any model": norms)."""

from __future__ import annotations

import torch

from ..contract import Op, RowTerm, node_arg, rows_of, rule, shape_of

aten = torch.ops.aten


def _mean(t):
    return t.mean(-1, keepdim=True)


class _Norm(Op):
    """Shared bookkeeping: inputs (x, gamma, beta) present in the node, the normalised axis d."""

    row_local = True

    def _setup(self, node, x, normalized_shape, gamma, beta):
        if len(normalized_shape) != 1:
            raise NotImplementedError(f"normalisation over {len(normalized_shape)} axes (only the last)")
        self.inputs = [v for v in (x, gamma, beta) if v is not None]
        self.has_g, self.has_b = gamma is not None, beta is not None
        self.x_shape = shape_of(x)
        self.d = normalized_shape[0]
        self.row_params = tuple(range(1, len(self.inputs)))

    def row_terms(self, i, xs, ts, y, g, gt):
        """gamma: sum_n gt_n n_n + g_n n'_n; beta: sum_n gt_n (entry by entry)."""
        gt2 = None if gt is None else rows_of(gt, True)
        if i == 2 or not self.has_g:  # beta
            return [] if gt2 is None else [RowTerm(None, gt2)]
        out = [] if gt2 is None else [RowTerm(None, gt2 * self.n)]
        if ts[0] is not None:
            out.append(RowTerm(None, rows_of(g, False) * self._n_tangent(ts[0])[0]))
        return out

    def tangent(self, xs, ts, y):
        x, gam, _ = self._split(xs)
        tx, tg, tb = self._split(ts)
        out = None
        if tx is not None:
            nt, _ = self._n_tangent(tx)
            out = nt * gam if gam is not None else nt
        if tg is not None:
            term = self.n * tg.unsqueeze(1)
            out = term if out is None else out + term
        if tb is not None:
            term = tb.unsqueeze(1).expand(tb.shape[0], self.n.shape[0], self.d)
            out = term if out is None else out + term
        return None if out is None else out.reshape(out.shape[0], *self.x_shape)

    def _affine_tangents(self, g2, gt2, nt, gam, tg):
        """Of y = n gamma + beta: (g_gamma' = sum g' n + g n', g_beta' = sum g', g_n' = g' gamma +
        g gamma'), rows of K tangents, None where zero."""
        ggt = None
        if self.has_g and gt2 is not None:
            prod = gt2 * self.n
            ggt = (prod if nt is None else prod.addcmul_(g2, nt)).sum(1)
        elif self.has_g and nt is not None:
            ggt = (g2 * nt).sum(1)
        gbt = None if gt2 is None else gt2.sum(1)
        gnt = None if gt2 is None else (gt2 * gam if gam is not None else gt2)
        if tg is not None:
            term = g2 * tg.unsqueeze(1)
            gnt = term if gnt is None else gnt + term
        return ggt, gbt, gnt

    def _adjoint_parts(self, g, gam):
        """(g_n = g gamma, m = mean(g_n n)) as rows, computed once per adjoint (every sweep reads them)."""
        if getattr(self, "_parts_of", None) is not g:
            g2 = rows_of(g, False)
            gn = g2 * gam if gam is not None else g2
            self._parts_of, self._parts = g, (gn, _mean(gn * self.n))
        return self._parts

    def _split(self, seq):
        it = iter(seq)
        x = next(it)
        g = next(it) if self.has_g else None
        b = next(it) if self.has_b else None
        return x, g, b

    def _join(self, x, g, b):
        out = [x]
        if self.has_g:
            out.append(g)
        if self.has_b:
            out.append(b)
        return out


@rule(aten.layer_norm.default)
class LayerNorm(_Norm):
    """n = (x - mean x) / sigma, sigma = sqrt(var x + eps) (biased variance); y = n gamma + beta.
    n' = (x' - mean x' - n s') / sigma with s' = mean(n x'); g_n = g gamma,
    g_x = (g_n - mean g_n - n mean(g_n n)) / sigma; the second-order terms in
    :meth:`adjoint_tangent` (the same as the torch-encoder engine's, docs/theory.md)."""

    def __init__(self, node):
        super().__init__(node)
        self._setup(node, node.args[0], node.args[1], node_arg(node, 2, "weight"), node_arg(node, 3, "bias"))
        self.eps = node_arg(node, 4, "eps", 1e-5)

    def _stats(self, x):
        x2 = rows_of(x, False)
        xc = x2 - _mean(x2)
        sigma = (_mean(xc * xc) + self.eps).sqrt()
        return xc / sigma, sigma

    def forward(self, xs):
        x, gam, bet = self._split(xs)
        self.n, self.sigma = self._stats(x)
        y = self.n * gam if gam is not None else self.n
        if bet is not None:
            y = y + bet
        return y.reshape(x.shape)

    def _n_tangent(self, tx):
        t = rows_of(tx, True)
        st = _mean(self.n * t)
        return (t - _mean(t)).addcmul_(self.n, st, value=-1).div_(self.sigma), st

    def _gx_rows(self, gn, m):
        """g_x as rows (computed once per adjoint, read by every sweep)."""
        if getattr(self, "_gx_of", None) is not gn:
            self._gx_of, self._gx = gn, (gn - _mean(gn) - self.n * m) / self.sigma
        return self._gx

    def adjoint(self, xs, y, g, need):
        x, gam, _ = self._split(xs)
        g2 = rows_of(g, False)
        n, sigma = self.n, self.sigma
        gn = g2 * gam if gam is not None else g2
        gx = (gn - _mean(gn) - n * _mean(gn * n)) / sigma
        return self._join(gx.reshape(self.x_shape), (g2 * n).sum(0), g2.sum(0))

    def adjoint_tangent(self, xs, ts, y, g, gt, need):
        x, gam, _ = self._split(xs)
        tx, tg, _ = self._split(ts)
        n, sigma = self.n, self.sigma
        g2 = rows_of(g, False)
        gt2 = None if gt is None else rows_of(gt, True)
        nt = st = None
        if tx is not None:
            nt, st = self._n_tangent(tx)
        ggt, gbt, gnt = self._affine_tangents(g2, gt2, nt, gam, tg)
        gn, m = self._adjoint_parts(g, gam)
        gxt = None
        if gnt is not None:
            prod = gnt * n  # mean(g_n' n) + mean(g_n n') in one mean
            if nt is not None:
                prod.addcmul_(gn, nt)
            gxt = (gnt - _mean(gnt)).addcmul_(n, _mean(prod), value=-1)
            if nt is not None:
                gxt.addcmul_(nt, m, value=-1)
        elif nt is not None:
            gxt = nt * (-m)
            gxt.addcmul_(n, _mean(gn * nt), value=-1)
        if gxt is not None:
            gxt = gxt.div_(sigma)
        if st is not None:
            gxt = gxt.addcmul_(self._gx_rows(gn, m), st / sigma, value=-1)
        gxt = None if gxt is None else gxt.reshape(gxt.shape[0], *self.x_shape)
        return self._join(gxt, ggt, gbt)


@rule(aten.rms_norm.default)
class RMSNorm(_Norm):
    """n = x r, r = (mean x^2 + eps)^(-1/2); y = n gamma. With a = mean(n x'): n' = r (x' - n a),
    r' = -r^2 a; g_n = g gamma, m = mean(g_n n), g_x = r (g_n - n m);
    g_x' = r' (g_n - n m) + r (g_n' - n' m - n m'), m' = mean(g_n' n + g_n n')."""

    def __init__(self, node):
        super().__init__(node)
        gamma = node_arg(node, 2, "weight")
        eps = node_arg(node, 3, "eps")
        self._setup(node, node.args[0], node.args[1], gamma, None)
        self.eps = eps if eps is not None else torch.finfo(node.meta["val"].dtype).eps

    def forward(self, xs):
        x, gam, _ = self._split(xs)
        x2 = rows_of(x, False)
        self.r = torch.rsqrt(_mean(x2 * x2) + self.eps)
        self.n = x2 * self.r
        y = self.n * gam if gam is not None else self.n
        return y.reshape(x.shape)

    def _n_tangent(self, tx):
        t = rows_of(tx, True)
        a = _mean(self.n * t)
        return t.addcmul(self.n, a, value=-1).mul_(self.r), a

    def adjoint(self, xs, y, g, need):
        x, gam, _ = self._split(xs)
        g2 = rows_of(g, False)
        n, r = self.n, self.r
        gn = g2 * gam if gam is not None else g2
        gx = r * (gn - n * _mean(gn * n))
        return self._join(gx.reshape(self.x_shape), (g2 * n).sum(0), None)

    def _c(self, gn, m):
        """g_x / r = g_n - n m, computed once per adjoint."""
        if getattr(self, "_c_of", None) is not gn:
            self._c_of, self._c_val = gn, gn - self.n * m
        return self._c_val

    def adjoint_tangent(self, xs, ts, y, g, gt, need):
        """g_x' = r (g_n' - m n' - n (mean(g_n' n) + mean(g_n n')) - r a (g_n - n m)) (the class
        docstring's terms gathered: one pass per term over the K tangents)."""
        x, gam, _ = self._split(xs)
        tx, tg, _ = self._split(ts)
        n, r = self.n, self.r
        g2 = rows_of(g, False)
        gt2 = None if gt is None else rows_of(gt, True)
        nt = a = None
        if tx is not None:
            nt, a = self._n_tangent(tx)
        ggt, _, gnt = self._affine_tangents(g2, gt2, nt, gam, tg)
        gn, m = self._adjoint_parts(g, gam)
        gxt = None
        if need[0] and (gnt is not None or nt is not None):
            if gnt is None:
                mm = _mean(gn * nt)
                gxt = nt * (-m)
            else:
                prod = gnt * n
                if nt is not None:
                    prod.addcmul_(gn, nt)
                mm = _mean(prod)
                gxt = gnt.clone() if gnt is gt2 else gnt
                if nt is not None:
                    gxt.addcmul_(nt, m, value=-1)
            gxt.addcmul_(n, mm, value=-1)
            if a is not None:
                gxt.addcmul_(self._c(gn, m), r * a, value=-1)
            gxt = gxt.mul_(r).reshape(gxt.shape[0], *self.x_shape)
        return self._join(gxt, ggt, None)
