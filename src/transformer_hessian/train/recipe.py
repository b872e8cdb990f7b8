"""The training recipe: the seeded order of every epoch, the learning-rate schedule (warm-up,
constant or cosine), on-device augmentation (random crop with padding and horizontal flip),
mini-batch assembly, bf16 autocast and the AdamW optimiser. Each piece is a pure function of
(seed, epoch, step, config), so straight, resumed and replayed runs see the same batches."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from ..core.model import ViT
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..config.settings import Experiment, Train


def epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The training order of ``epoch`` (1-based): ``randperm(n)`` from a generator seeded by
    ``seed * 1_000_003 + epoch`` (CPU), the same in a straight, resumed or replayed run."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=gen)


#: ``train.augment`` choices: on-device augmentation of the image tensors (the CIFAR-100 recipe).
AUGMENTATIONS = ("crop_flip",)


def lr_factor(step: int, steps_per_epoch: int, t: Train) -> float | None:
    """Multiplier of ``train.lr`` at global step ``step`` (0-based, counted over all epochs), or
    None for the constant rate (``train.schedule: constant`` and ``train.warmup_epochs: 0``, the
    default: the optimiser's rate is then never touched). With W = warmup_epochs * steps_per_epoch
    and T = epochs * steps_per_epoch steps:

        step < W:  (step + 1) / W                                   (linear warm-up)
        else:      1 (constant)  or  0.5 (1 + cos(pi (step - W) / max(T - W, 1)))  (cosine)
    """
    schedule = t.schedule
    warm = int(round(float(t.warmup_epochs) * steps_per_epoch))
    if schedule == "constant" and warm == 0:
        return None
    if step < warm:
        return (step + 1) / warm
    if schedule == "constant":
        return 1.0
    total = int(t.epochs) * steps_per_epoch
    return 0.5 * (1.0 + math.cos(math.pi * min(step - warm, total - warm) / max(total - warm, 1)))


def epoch_augmentation(n: int, seed: int, epoch: int, t: Train, device) -> dict | None:
    """The random draws of ``train.augment`` for every sample of an epoch, made at once on the CPU
    from a generator seeded by (seed, epoch) and moved to ``device`` once (no per-batch copies):
    ``crop_flip``: shifts (n, 2) in [0, 2 pad] and flips (n,) bool; None without augmentation."""
    kind = t.augment
    if kind is None:
        return None
    if kind not in AUGMENTATIONS:
        raise ConfigError(f"train.augment: unknown augmentation {kind!r}; choose from {', '.join(AUGMENTATIONS)}")
    pad = int(t.crop_padding)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch + 2**40)
    shifts = torch.randint(0, 2 * pad + 1, (n, 2), generator=gen)
    flips = torch.rand(n, generator=gen) < 0.5
    return {"pad": pad, "shifts": shifts.to(device), "flips": flips.to(device)}


def crop_flip(x: torch.Tensor, shifts: torch.Tensor, flips: torch.Tensor, pad: int) -> torch.Tensor:
    """Random crop with zero padding and horizontal flip of a batch (B, C, H, W) on its device:
    out[b] = flip_b(pad(x[b], pad)[:, dy_b : dy_b + H, dx_b : dx_b + W]), (dy_b, dx_b) = shifts[b]."""
    B, C, H, W = x.shape
    xp = F.pad(x, (pad, pad, pad, pad))
    rows = shifts[:, 0:1] + torch.arange(H, device=x.device)  # (B, H)
    cols = shifts[:, 1:2] + torch.arange(W, device=x.device)  # (B, W)
    cols = torch.where(flips.unsqueeze(1), cols.flip(1), cols)
    b = torch.arange(B, device=x.device)[:, None, None]
    return xp.permute(0, 2, 3, 1)[b, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)


def make_batch(xtr: torch.Tensor, ytr: torch.Tensor, idx: torch.Tensor, aug: dict | None):
    """The mini-batch of the (on-device) training tensors at ``idx``, augmented when ``aug`` (from
    :func:`epoch_augmentation`) is given: (images, labels), all on the tensors' device."""
    xb, yb = xtr[idx], ytr[idx]
    if aug is not None:
        xb = crop_flip(xb, aug["shifts"][idx], aug["flips"][idx], aug["pad"])
    return xb, yb


def autocast_context(device, amp: str | None):
    """``torch.autocast`` to bfloat16 on ``device`` for ``amp == 'bf16'``; a no-op context for None."""
    import contextlib

    if amp is None:
        return contextlib.nullcontext()
    if amp != "bf16":
        raise ConfigError(f"train.amp: {amp!r} is not supported; use null or bf16")
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


def make_optimizer(model: ViT, spec: Experiment) -> torch.optim.Optimizer:
    """AdamW with the experiment's ``train.lr`` and ``train.weight_decay``."""
    t = spec.train
    return torch.optim.AdamW(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
