"""The peers of ``transformer-hessian bench models`` (:mod:`.models`): rows of the Hessian and
Hessian-vector products of a language model's causal LM loss by reverse-over-reverse autograd (one
row at a time, or vmapped with ``is_grads_batched``), ``torch.func`` ``vmap(jvp(grad))`` and
curvlinops, each timed (waiting for a CUDA device before reading the clock). The vmapped
reverse-over-reverse rows also serve any loss of a flat vector (:func:`flat_loss`,
:func:`batched_rows`)."""

from __future__ import annotations

import math
import time
from contextlib import nullcontext

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..engine.ops.losses import NextTokenLogits, causal_lm, logits_of
from ..util.device import synchronize


def flat_loss(model, inputs: tuple, loss_of_output):
    """``(loss, w0)``: ``loss(w) = loss_of_output(model(*inputs))`` with the model's parameters
    taken from the flat vector ``w`` (``named_parameters`` order), and ``w0`` their current values."""
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    sizes = [math.prod(s) for s in shapes]
    w0 = torch.cat([p.detach().reshape(-1) for _, p in model.named_parameters()])

    def loss(w):
        ps = {n: t.view(s) for n, t, s in zip(names, torch.split(w, sizes), shapes, strict=True)}
        return loss_of_output(torch.func.functional_call(model, ps, inputs))

    return loss, w0


def _flat_loss(model, ids):
    return flat_loss(model, (ids,), lambda out: causal_lm(logits_of(out), ids))


def _unit_rows(rows: torch.Tensor, w0: torch.Tensor) -> torch.Tensor:
    """(len(rows), P) unit vectors e_r for the rows r, like ``w0``."""
    eye = torch.zeros(len(rows), w0.numel(), dtype=w0.dtype, device=w0.device)
    eye[torch.arange(len(rows)), rows] = 1.0
    return eye


def autograd_rows(model, ids, rows: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Rows of H by reverse-over-reverse autograd (math kernel), and the seconds they took."""
    loss, w0 = _flat_loss(model, ids)
    synchronize(w0)
    t0 = time.perf_counter()
    with sdpa_kernel(SDPBackend.MATH):
        w = w0.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(loss(w), w, create_graph=True)
        out = torch.stack([torch.autograd.grad(g[i], w, retain_graph=True)[0] for i in rows.tolist()])
    synchronize(out)
    return out, time.perf_counter() - t0


def batched_rows(loss, w0: torch.Tensor, rows: torch.Tensor, chunk: int = 64, before_chunk=None):
    """Rows of the Hessian of ``loss`` (a function of one flat vector) at ``w0`` by
    reverse-over-reverse autograd vmapped over unit vectors in chunks (``is_grads_batched``, what
    ``torch.autograd.functional.hessian(vectorize=True)`` does; math kernel), and the seconds they
    took. ``before_chunk()``, when given, runs before each chunk (e.g. a time budget's check)."""
    eye = _unit_rows(rows, w0)
    synchronize(w0)
    t0 = time.perf_counter()
    parts = []
    with sdpa_kernel(SDPBackend.MATH):
        w = w0.detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(loss(w), w, create_graph=True)
        for i in range(0, len(rows), chunk):
            if before_chunk is not None:
                before_chunk()
            parts.append(torch.autograd.grad(g, w, eye[i : i + chunk], retain_graph=True, is_grads_batched=True)[0])
    out = torch.cat(parts)
    synchronize(out)
    return out, time.perf_counter() - t0


def autograd_batched_rows(
    model, ids, rows: torch.Tensor, chunk: int = 64, before_chunk=None
) -> tuple[torch.Tensor, float]:
    """:func:`batched_rows` of the causal LM loss of ``model`` on ``ids``: rows of H and seconds."""
    return batched_rows(*_flat_loss(model, ids), rows, chunk, before_chunk)


def func_rows(model, ids, rows: torch.Tensor, chunk: int = 64) -> tuple[torch.Tensor, float]:
    """Rows of H by torch.func vmap(jvp(grad)) (math kernel), and the seconds they took."""
    loss, w0 = _flat_loss(model, ids)
    g = torch.func.grad(loss)
    eye = _unit_rows(rows, w0)
    synchronize(w0)
    t0 = time.perf_counter()
    with sdpa_kernel(SDPBackend.MATH):
        out = torch.cat(
            [
                torch.func.vmap(lambda v: torch.func.jvp(g, (w0,), (v,))[1])(eye[i : i + chunk])
                for i in range(0, len(rows), chunk)
            ]
        )
    synchronize(out)
    return out, time.perf_counter() - t0


def curvlinops_rows(model, ids, rows: torch.Tensor, chunk: int = 64) -> tuple[torch.Tensor, float]:
    """Rows of H by curvlinops' HessianLinearOperator on unit vectors (math kernel), and the seconds
    they took, the operator's construction included."""
    from curvlinops import HessianLinearOperator

    params = list(model.parameters())
    E = _unit_rows(rows, torch.cat([p.detach().reshape(-1) for p in params])).T
    data = [(ids, ids[:, 1:].reshape(-1))]
    synchronize(E)
    t0 = time.perf_counter()
    with sdpa_kernel(SDPBackend.MATH):
        op = HessianLinearOperator(
            NextTokenLogits(model), torch.nn.CrossEntropyLoss(), params, data, check_deterministic=False
        )
        out = torch.cat([op @ E[:, i : i + chunk] for i in range(0, len(rows), chunk)], dim=1).T
    synchronize(out)
    return out.detach(), time.perf_counter() - t0


def autograd_hvp_fn(model, ids, math_kernel: bool = True, batched: bool = False):
    """The forward and the gradient with ``create_graph=True`` (the math attention kernel unless
    ``math_kernel`` is False), then ``prod(V)``: H V for each column of V by double backward through
    the kept gradient graph, one column at a time or, with ``batched``, all at once vmapped over
    the columns (``is_grads_batched``)."""
    loss, w0 = _flat_loss(model, ids)

    def ctx():
        return sdpa_kernel(SDPBackend.MATH) if math_kernel else nullcontext()

    with ctx():
        w = w0.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(loss(w), w, create_graph=True)
    if batched:

        def prod(Vb):
            with ctx():
                return torch.autograd.grad(g, w, Vb.T.contiguous(), retain_graph=True, is_grads_batched=True)[0].T
    else:

        def prod(Vb):
            with ctx():
                return torch.stack([torch.autograd.grad(g @ v, w, retain_graph=True)[0] for v in Vb.T], 1)

    return prod


def autograd_hvp(model, ids, V: torch.Tensor, math_kernel: bool = True, batched: bool = False):
    """H v for each column of V by :func:`autograd_hvp_fn`; the products and the seconds per
    product (after one untimed warm-up, as for the engine)."""
    prod = autograd_hvp_fn(model, ids, math_kernel, batched)
    prod(V[:, :1] if not batched else V)  # warm-up, not timed
    synchronize(V)
    t0 = time.perf_counter()
    out = prod(V)
    synchronize(out)
    return out, (time.perf_counter() - t0) / V.shape[1]
