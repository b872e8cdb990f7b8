"""Waiting for a device: CUDA kernels run asynchronously, so a timer or a memory reading needs
them done first."""

from __future__ import annotations

import torch


def synchronize(where: torch.Tensor | torch.device | str | None = None) -> None:
    """Wait for the queued kernels of a CUDA device: the one named (``"cuda:0"``, a
    ``torch.device``) or holding the tensor ``where``; None: the current CUDA device when CUDA is
    available. A no-op on every other device."""
    if isinstance(where, torch.Tensor):
        dev = where.device
    elif where is None:
        if not torch.cuda.is_available():
            return
        dev = torch.device("cuda")
    else:
        dev = torch.device(where)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
