"""Exact Hessians, Hessian blocks and Hessian-vector products of any torch model's loss.

``model`` is any ``nn.Module`` built from the operations of the rule table (docs/theory.md,
"Operations of any model"): Hugging Face GPT-2, Llama, BERT, ViT, nanoGPT-style models, torch's
encoder. ``inputs`` is a tensor, a tuple of positional inputs or a dict of keyword inputs
(``{"input_ids": ..., "attention_mask": ...}``); the model's output is a tensor, an object with
``.logits`` or a tuple whose first element is used. ``loss``: ``"mse"``, ``"cross_entropy"``
(``(B, C)`` logits, or through ``head=`` on the token mean), ``"causal_lm"`` (``targets`` the
``(B, T)`` token ids, Hugging Face's ``labels``) or a callable ``(output, targets) -> scalar``.
``params``: names or glob patterns (default every parameter of the model).
"""

from __future__ import annotations

import math

import torch

from ..util.resources import available_bytes
from .capture import capture
from .sweep import Progress, Run, dense_hessian, hvp_sweep

#: bytes of tangents one block may hold (the block size K follows from the model's values)
DEFAULT_BLOCK_BYTES = 1 << 30


def _check_inputs(inputs) -> None:
    leaves = list(inputs.values()) if isinstance(inputs, dict) else list(inputs) if isinstance(inputs, (tuple, list)) else [inputs]
    for i, x in enumerate(leaves):
        if not isinstance(x, torch.Tensor):
            continue
        where = f"inputs[{list(inputs)[i]!r}]" if isinstance(inputs, dict) else ("inputs" if len(leaves) == 1 else f"inputs[{i}]")
        if x.device.type == "meta":
            raise ValueError(f"{where}: on the meta device (it has no values)")
        if x.numel() == 0 or (x.dim() > 0 and x.shape[0] == 0):
            raise ValueError(f"{where}: empty (shape {tuple(x.shape)}); the loss of no samples is undefined")
        if x.dim() > 1 and x.shape[1] == 0:
            raise ValueError(f"{where}: no tokens (shape {tuple(x.shape)})")
        if x.is_floating_point() and not torch.isfinite(x).all():
            raise ValueError(f"{where}: has non-finite entries (nan or inf)")


def prepare(model, inputs, targets, *, loss="mse", params=None, head=None) -> Run:
    """Capture the model and run its values and adjoints once: what :func:`hessian`, :func:`hvp`
    and :class:`HessianOperator` sweep."""
    _check_inputs(inputs)
    if isinstance(targets, torch.Tensor) and targets.is_floating_point() and not torch.isfinite(targets).all():
        raise ValueError("targets: has non-finite entries (nan or inf)")
    return Run(capture(model, inputs, targets, loss=loss, head=head, params=params))


def _check_memory(P: int, dtype: torch.dtype, device: torch.device) -> None:
    need = P * P * torch.finfo(dtype).bits // 8
    avail = available_bytes(device)
    if avail is not None and need > avail:
        raise MemoryError(
            f"exact_hessian: the dense Hessian over P = {P} parameters needs {need / 2**30:.2f} GiB of {dtype}; "
            f"{avail / 2**30:.2f} GiB are available on {device} (select a block with params=, or use HessianOperator)"
        )


def block_size(run: Run, block_bytes: int) -> int:
    """Entries per sweep: the tangent memory of one entry, thrice (adjoint tangents, temporaries),
    into ``block_bytes``."""
    per = 3 * max(run.tangent_bytes(), 1)
    P = sum(math.prod(s) for s in run.cap.shapes.values())
    return max(1, min(P, block_bytes // per))


def hessian(model, inputs, targets, *, loss="mse", params=None, head=None, block_bytes: int = DEFAULT_BLOCK_BYTES, progress=True) -> torch.Tensor:
    """Dense (P, P) Hessian of the loss w.r.t. the selected parameters (rows and columns in the
    order of ``params``, each flattened), in the parameters' dtype and on their device."""
    run = prepare(model, inputs, targets, loss=loss, params=params, head=head)
    P = sum(math.prod(s) for s in run.cap.shapes.values())
    _check_memory(P, run.cap.dtype, run.cap.device)
    return dense_hessian(run, block_size(run, block_bytes), Progress() if progress else None)


def hessian_blocks_of(H: torch.Tensor, names: list[str], shapes: dict) -> dict[tuple[str, str], torch.Tensor]:
    """A dense Hessian as named blocks ``(name_i, name_j) -> (numel_i, numel_j)`` views."""
    off, sl = 0, {}
    for n in names:
        size = math.prod(shapes[n])
        sl[n] = slice(off, off + size)
        off += size
    return {(a, b): H[sl[a], sl[b]] for a in names for b in names}


class HessianOperator:
    """H as a linear operator: ``op @ v`` for a vector (P,) or a matrix (P, K), with ``shape``,
    ``dtype`` and ``device``; :meth:`to_scipy` for ``scipy.sparse.linalg``. Captures once; each
    product is one sweep of exact second-order rules (the fused attention kernels run in the
    model's own forward; no double backward is taken)."""

    def __init__(self, model, inputs, targets, *, loss="mse", params=None, head=None):
        self.run = prepare(model, inputs, targets, loss=loss, params=params, head=head)
        cap = self.run.cap
        self.names = list(cap.names)
        P = sum(math.prod(s) for s in cap.shapes.values())
        self.shape = (P, P)
        self.dtype, self.device = cap.dtype, cap.device

    def __matmul__(self, v: torch.Tensor) -> torch.Tensor:
        if not isinstance(v, torch.Tensor) or v.dim() not in (1, 2) or v.shape[0] != self.shape[0]:
            shape = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
            raise ValueError(f"HessianOperator @ v: expected ({self.shape[0]},) or ({self.shape[0]}, K), got {shape}")
        return hvp_sweep(self.run, v.to(device=self.device, dtype=self.dtype))

    def matvec(self, v: torch.Tensor) -> torch.Tensor:
        """H v."""
        return self @ v

    def gradient(self) -> torch.Tensor:
        """The loss's gradient w.r.t. the selected parameters (a by-product of the capture)."""
        return self.run.gradient()

    def to_scipy(self):
        """A ``scipy.sparse.linalg.LinearOperator`` of H on numpy float64 vectors."""
        import numpy as np
        from scipy.sparse.linalg import LinearOperator

        def mv(x):
            t = torch.as_tensor(np.asarray(x), dtype=self.dtype, device=self.device)
            return (self @ (t.reshape(-1) if t.dim() == 2 and t.shape[1] == 1 else t)).cpu().numpy()

        return LinearOperator(self.shape, matvec=mv, matmat=mv, rmatvec=mv, dtype=np.float64)


def hvp(model, inputs, targets, v: torch.Tensor, *, loss="mse", params=None, head=None) -> torch.Tensor:
    """H v (v: (P,) or (P, K)) in one sweep; for many products build a :class:`HessianOperator` once."""
    return HessianOperator(model, inputs, targets, loss=loss, params=params, head=head) @ v
