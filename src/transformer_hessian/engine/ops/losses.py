"""The losses by name, appended to the captured graph after the model's output (a loss given as a
callable is captured with the model and goes through the other rules instead).

Each is a function of the output and the targets (the reference the tests compare with) and a
rule: g_out = dL/dout and g_out' = (d^2 L / dout^2) out' (the loss is last, so g' of the loss
itself is zero)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..contract import Op, rule

#: targets at this id are not counted (Hugging Face's ``labels`` convention)
IGNORE_INDEX = -100


def mse_loss(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``F.mse_loss(output, targets)``: the mean of the squared differences."""
    return F.mse_loss(output, targets)


def logits_of(output):
    """A model's logits: the output itself, or its ``logits`` (a Hugging Face model's output)."""
    return output.logits if hasattr(output, "logits") else output


class NextTokenLogits(nn.Module):
    """``model``'s logits of the positions that predict a next token, flattened to ``(B (T-1), V)``:
    with ``nn.CrossEntropyLoss`` against ``ids[:, 1:]`` flattened, :func:`causal_lm` without ignored
    positions (the form in which curvlinops takes a language model). A model that returns an
    output with ``logits`` (Hugging Face's) is read through it."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """``(B (T-1), V)`` logits of the positions that have a next token."""
        logits = logits_of(self.model(ids))
        return logits[:, :-1].reshape(-1, logits.shape[-1])


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``F.cross_entropy`` of ``(B, C)`` logits against ``(B,)`` class indices (mean over B)."""
    return F.cross_entropy(logits, targets)


def causal_lm(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The next-token loss of ``(B, T, V)`` logits and ``(B, T)`` token ids, as Hugging Face's
    ``labels``: cross-entropy of ``logits[:, :-1]`` against ``targets[:, 1:]``, positions with
    ``-100`` not counted, the mean over the counted positions."""
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), targets[:, 1:].reshape(-1).long(), ignore_index=IGNORE_INDEX)


class _Loss(Op):
    """A loss node: input the output, the targets bound once (:meth:`bind`). Each loss here is a
    sum over rows (tokens, samples) of a function of the row: row-local."""

    row_local = True

    def __init__(self, node):
        super().__init__(node)
        self.inputs = [node.args[0]]
        self.index_nodes = [node.args[1]]

    def bind(self, index: list) -> None:
        """The targets' value."""
        self.targets = index[0]

    def forward(self, xs):
        return self.node.target(xs[0], self.targets)

    def grad(self, out):
        raise NotImplementedError

    def curvature(self, out, t):
        raise NotImplementedError

    def tangent(self, xs, ts, y):
        # the loss's own tangent is not needed (nothing reads it); it would be <grad, t>
        t = ts[0]
        return None if t is None else (t * self.grad(xs[0])).flatten(1).sum(1)

    def adjoint(self, xs, y, g, need):
        return [self.grad(xs[0]) * g]

    def adjoint_tangent(self, xs, ts, y, g, gt, need):
        t = ts[0]
        out = None if t is None else self.curvature(xs[0], t).mul_(g)
        if gt is not None:
            term = gt.reshape(-1, *([1] * xs[0].dim())) * self.grad(xs[0])
            out = term if out is None else out + term
        return [out]


@rule(mse_loss)
class MSELoss(_Loss):
    """L = mean((out - y)^2) over N entries: g = 2 (out - y) / N, H t = 2 t / N."""

    def grad(self, out):
        return (out - self.targets) * (2.0 / out.numel())

    def curvature(self, out, t):
        return t * (2.0 / out.numel())


@rule(cross_entropy)
class CrossEntropy(_Loss):
    """L = mean_b -log softmax(z_b)[y_b]: g = (p - e_y) / B, H t = (p t - p <p, t>) / B."""

    def grad(self, out):
        p = torch.softmax(out, -1)
        return (p - F.one_hot(self.targets.long(), out.shape[-1]).to(p.dtype)) / out.shape[0]

    def curvature(self, out, t):
        p = torch.softmax(out, -1)
        return (p * t - p * (p * t).sum(-1, keepdim=True)) / out.shape[0]


@rule(causal_lm)
class CausalLM(_Loss):
    """The next-token loss (:func:`causal_lm`): on the counted positions n (t < T - 1, target not
    -100) g = (p - e_{y}) / n_count, H t = (p t - p <p, t>) / n_count; zero elsewhere."""

    def bind(self, index: list) -> None:
        """The token ids; the shifted targets and the mask of counted positions."""
        ids = self.targets = index[0]
        self.next_ids = ids[:, 1:]
        self.counted = self.next_ids != IGNORE_INDEX
        self.count = int(self.counted.sum())

    def _p_and_w(self, out):
        """The probabilities, the weights of the counted positions and their product, computed
        once per value."""
        if getattr(self, "_pw_of", None) is not out:
            z = out[:, :-1]
            w = self.counted.unsqueeze(-1).to(z.dtype) / max(self.count, 1)
            p = torch.softmax(z, -1)
            self._pw_of, self._pw = out, (p, w, p * w)
        return self._pw

    def grad(self, out):
        if getattr(self, "_g_of", None) is out:
            return self._g
        p, w, _ = self._p_and_w(out)
        y = F.one_hot(self.next_ids.clamp(min=0).long(), out.shape[-1]).to(p.dtype)
        g = torch.zeros_like(out)
        g[:, :-1] = (p - y) * w
        self._g_of, self._g = out, g
        return g

    def curvature(self, out, t):
        p, _, pw = self._p_and_w(out)
        tz = t[:, :, :-1]
        h = t.new_empty(t.shape)
        h[:, :, -1] = 0.0
        # (p tz - p <p, tz>) w, written into h's counted positions
        hz = torch.mul(pw, tz, out=h[:, :, :-1])
        hz.addcmul_(pw, (p * tz).sum(-1, keepdim=True), value=-1)
        return h

    def forward(self, xs):
        if self.count == 0:
            raise ValueError("targets: loss='causal_lm' counts no position (every next token is -100)")
        return causal_lm(xs[0], self.targets)
