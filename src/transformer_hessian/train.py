"""Seeded, resumable training of the ViT with AdamW and cross-entropy.

Layout under ``out_dir``::

    checkpoints/init.pt          weights before the first step
    checkpoints/epoch_XXX.pt     model + optimiser state + history after each epoch (resume points)
    checkpoints/final.pt         weights after the last epoch
    metrics.json                 per-epoch train/val loss and accuracy, wall times

Every checkpoint loads with ``torch.load(path, weights_only=True)``. Shuffling uses a generator
seeded by (seed, epoch), so a run resumed from an epoch checkpoint ends with exactly the same
weights as an uninterrupted one.
"""

from __future__ import annotations

import math
import os
import re
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from .config import ConfigError, config_hash
from .data import load_dataset
from .model import ModelConfig, ViT, count_parameters
from .utils import log, resolve_device, write_json

if TYPE_CHECKING:
    from .settings import Experiment, Train

#: Test hook: kill the process (SIGKILL) right after saving this epoch's checkpoint.
KILL_ENV = "TRANSFORMER_HESSIAN_KILL_AFTER_EPOCH"


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. a non-finite loss)."""


def model_config_for(spec: Experiment, data: dict) -> ModelConfig:
    """The ModelConfig of an experiment for the loaded data (image size, channels, classes)."""
    return ModelConfig(
        image_size=data["image_size"],
        channels=data["channels"],
        num_classes=data["num_classes"],
        **spec.model.to_dict(),
    )


def load_experiment_data(spec: Experiment, data_root: str | Path) -> dict:
    """The experiment's data set as tensors: train/val split from the config's seed."""
    t = spec.train
    return load_dataset(
        spec.dataset,
        data_root,
        val_fraction=t.val_fraction,
        seed=t.seed,
        max_train=t.max_train,
        max_val=t.max_val,
    )


def check_model_matches(model_config: dict, spec: Experiment, experiment: str, path: str | Path) -> None:
    """The model sizes travel twice (the JSON spec and the checkpoint): raise :class:`ConfigError`
    naming ``experiments.<experiment>.model.<key>`` when a key of ``spec.model`` differs from the
    checkpoint's ``model_config`` (e.g. the config's width was changed after training)."""
    for key, want in spec.model.to_dict().items():
        if key in model_config and model_config[key] != want:
            raise ConfigError(
                f"experiments.{experiment}.model.{key}: the config says {want!r} but the checkpoint {path} "
                f"was trained with {model_config[key]!r}; run the train rule again (or restore the config)"
            )


def load_model(
    path: str | Path,
    device: str | torch.device = "cpu",
    dtype=torch.float32,
    spec: Experiment | None = None,
    experiment: str = "<experiment>",
) -> ViT:
    """Rebuild a ViT from any checkpoint written by :func:`train` (verified first).

    Raises :class:`~transformer_hessian.checkpoints.CheckpointError` naming the file when the
    checkpoint is damaged, unreadable, holds pickled code, or does not match its model config.
    With ``spec`` (the experiment ``experiment`` the caller believes it holds), the checkpoint's
    model sizes must equal ``spec.model`` (:func:`check_model_matches`).
    """
    ckpt = load_checkpoint(path, map_location="cpu")
    if spec is not None:
        check_model_matches(ckpt["model_config"], spec, experiment, path)
    try:
        model = ViT(ModelConfig(**ckpt["model_config"]))
        model.load_state_dict(ckpt["model"])
    except (TypeError, ValueError, RuntimeError, KeyError) as err:
        raise CheckpointError(
            f"checkpoint {path} does not fit its own model config ({type(err).__name__}); "
            "delete it and run the workflow again"
        ) from None
    return model.to(device=device, dtype=dtype).eval()


@torch.no_grad()
def evaluate(model: ViT, x: torch.Tensor, y: torch.Tensor, batch_size: int = 512) -> tuple[float, float]:
    """Mean cross-entropy and accuracy over a whole split."""
    model.eval()
    total_loss, correct = 0.0, 0
    for i in range(0, len(x), batch_size):
        logits = model(x[i : i + batch_size])
        total_loss += F.cross_entropy(logits, y[i : i + batch_size], reduction="sum").item()
        correct += (logits.argmax(-1) == y[i : i + batch_size]).sum().item()
    return total_loss / len(x), correct / len(x)


def _epoch_checkpoints(ckdir: Path) -> list[tuple[int, Path]]:
    """``(epoch, path)`` of every epoch checkpoint in ``ckdir``, newest first."""
    found = []
    for p in ckdir.glob("epoch_*.pt"):
        m = re.fullmatch(r"epoch_(\d+)\.pt", p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found, reverse=True)


def _newest_valid_checkpoint(name: str, ckdir: Path, dev) -> tuple[int, Path, dict] | None:
    """The newest epoch checkpoint that verifies and loads; each one skipped is logged by name."""
    for epoch, path in _epoch_checkpoints(ckdir):
        try:
            return epoch, path, load_checkpoint(path, map_location=dev)
        except CheckpointError as err:
            log.warning("%s: skipping %s: %s", name, path.name, err)
    return None


def estimate_training_bytes(model_cfg: ModelConfig, batch_size: int) -> tuple[int, int]:
    """``(parameters, bytes)``: a lower estimate of what training allocates, without allocating.

    Parameters are counted on the ``meta`` device. Bytes = 16 per parameter (float32 weights,
    gradients and AdamW's two moments) + float32 activations kept for the backward pass, about
    ``batch * depth * (6 L d + 2 L d_ff + 2 L^2)`` numbers.
    """
    with torch.device("meta"):
        n = count_parameters(ViT(model_cfg))
    L, c = model_cfg.num_tokens, model_cfg
    acts = batch_size * c.depth * (6 * L * c.width + 2 * L * c.d_ff + 2 * L * L)
    return n, 16 * n + 4 * acts


def _check_training_memory(name: str, model_cfg: ModelConfig, batch_size: int, dev) -> None:
    from .resources import available_bytes, format_bytes

    n, need = estimate_training_bytes(model_cfg, batch_size)
    have = available_bytes(dev)
    if have is not None and need > have:
        raise ConfigError(
            f"experiments.{name}.model: training needs about {format_bytes(need)} ({n:,} parameters, batch "
            f"{batch_size}) but only {format_bytes(have)} is available on {dev}; lower "
            f"experiments.{name}.model.width / d_ff / d_k / depth or experiments.{name}.train.batch_size"
        )


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


def train_step(forward, opt: torch.optim.Optimizer, xb: torch.Tensor, yb: torch.Tensor, *, amp=None, lr=None):
    """One AdamW step on the batch's mean cross-entropy (``forward`` = the model or its compiled
    form; ``lr`` sets every group's rate first when given). Returns (loss, logits), loss float32."""
    if lr is not None:
        for group in opt.param_groups:
            group["lr"] = lr
    with autocast_context(xb.device, amp):
        logits = forward(xb)
        loss = F.cross_entropy(logits, yb)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss, logits


def train_epoch(
    model: ViT,
    opt: torch.optim.Optimizer,
    xtr: torch.Tensor,
    ytr: torch.Tensor,
    *,
    seed: int,
    epoch: int,
    batch_size: int,
    name: str = "",
    lr: float | None = None,
    on_step=None,
    max_steps: int | None = None,
    train_cfg: Train | None = None,
    forward=None,
) -> tuple[float, int]:
    """One epoch of mini-batch AdamW on cross-entropy, in the order :func:`epoch_permutation`.

    ``train_cfg`` (the experiment's ``train`` section) switches on its optional keys: ``amp``
    (bf16 autocast), ``augment`` (:func:`crop_flip`, drawn by :func:`epoch_augmentation`),
    ``warmup_epochs`` / ``schedule`` (:func:`lr_factor` of ``lr``); ``forward`` replaces the
    model's forward (``torch.compile``). Without them the epoch is the plain constant-rate one.

    Step s (0-based) uses the samples ``perm[s * batch_size : (s + 1) * batch_size]``. After each
    optimiser step, ``on_step(step, model, loss)`` is called (step counted from 1 within the
    epoch) when given; it must not change the model or the optimiser. ``max_steps`` stops the
    epoch early (replays). Returns (sum of batch losses x batch sizes, correct predictions).
    """
    model.train()
    dev = xtr.device
    n = len(xtr)
    steps = math.ceil(n / batch_size)
    perm = epoch_permutation(n, seed, epoch).to(dev)
    tc = train_cfg
    aug = epoch_augmentation(n, seed, epoch, tc, dev) if tc is not None else None
    amp = tc.amp if tc is not None else None
    forward = model if forward is None else forward
    run_loss, run_correct = 0.0, 0
    last = steps if max_steps is None else min(steps, max_steps)
    for step in tqdm(range(last), desc=f"epoch {epoch}", leave=False, disable=None):
        idx = perm[step * batch_size : (step + 1) * batch_size]
        xb, yb = make_batch(xtr, ytr, idx, aug)
        factor = lr_factor((epoch - 1) * steps + step, steps, tc) if tc is not None else None
        loss, logits = train_step(forward, opt, xb, yb, amp=amp, lr=None if factor is None else tc.lr * factor)
        if not torch.isfinite(loss):
            raise TrainingError(
                f"{name}: non-finite loss ({loss.item()}) at epoch {epoch}, step {step + 1} of {steps}; "
                f"lower train.lr (now {lr}) or check the data"
            )
        run_loss += loss.item() * len(idx)
        run_correct += (logits.argmax(-1) == yb).sum().item()
        if on_step is not None:
            on_step(step + 1, model, loss.item())
    return run_loss, run_correct


def make_optimizer(model: ViT, spec: Experiment) -> torch.optim.Optimizer:
    """AdamW with the experiment's ``train.lr`` and ``train.weight_decay``."""
    t = spec.train
    return torch.optim.AdamW(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)


def train(name: str, spec: Experiment, data_root: str | Path, out_dir: str | Path, device: str = "auto") -> dict:
    """Train experiment ``name`` (its config section ``spec``); resume if checkpoints exist."""
    out_dir = Path(out_dir)
    ckdir = out_dir / "checkpoints"
    ckdir.mkdir(parents=True, exist_ok=True)
    dev = resolve_device(device)
    t = spec.train
    seed = int(t.seed)

    data = load_experiment_data(spec, data_root)
    xtr, ytr = data["train_x"].to(dev), data["train_y"].to(dev)
    xva, yva = data["val_x"].to(dev), data["val_y"].to(dev)
    mcfg = model_config_for(spec, data)
    _check_training_memory(name, mcfg, int(t.batch_size), dev)

    torch.manual_seed(seed)
    model = ViT(mcfg).to(dev)
    opt = make_optimizer(model, spec)
    forward = torch.compile(model) if t.compile else model
    history: list[dict] = []
    start_epoch = 1
    # Resume only from checkpoints of the same settings (the epoch count may grow).
    spec_d, t_d = spec.to_dict(), t.to_dict()
    resume_key = config_hash(
        {k: v for k, v in spec_d.items() if k != "train"} | {"train": {k: v for k, v in t_d.items() if k != "epochs"}}
    )

    def checkpoint(epoch: int) -> dict:
        return {
            "model_config": mcfg.to_dict(),
            "model": model.state_dict(),
            "epoch": epoch,
            "optimizer": opt.state_dict(),
            "history": history,
            "experiment": name,
            "resume_key": resume_key,
        }

    latest = _newest_valid_checkpoint(name, ckdir, dev)
    ck = latest[2] if latest else None
    if ck is not None and ck.get("resume_key") == resume_key and latest[0] <= t.epochs:
        try:
            load_checkpoint(ckdir / "init.pt")
        except CheckpointError as err:
            # e.g. snakemake removed the outputs before a forced re-run, or init.pt was damaged:
            # the seeded initialisation is rebuilt exactly, before the resume point is loaded.
            if (ckdir / "init.pt").exists():
                log.warning("%s: rebuilding init.pt: %s", name, err)
            save_checkpoint(checkpoint(0), ckdir / "init.pt")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        history = list(ck["history"])
        start_epoch = latest[0] + 1
        log.info("%s: resuming from %s (epoch %d of %d)", name, latest[1], latest[0], t.epochs)
    else:
        if ck is not None:
            log.info("%s: settings changed since the last run; starting afresh", name)
        for old in [*ckdir.glob("*.pt"), *ckdir.glob("*.pt.sha256")]:
            old.unlink()
        save_checkpoint(checkpoint(0), ckdir / "init.pt")

    n, bs = len(xtr), t.batch_size
    epochs = tqdm(
        range(start_epoch, t.epochs + 1),
        desc=f"train {name}",
        unit="epoch",
        initial=start_epoch - 1,
        total=t.epochs,
        disable=None,
    )
    for epoch in epochs:
        t0 = time.perf_counter()
        run_loss, run_correct = train_epoch(
            model,
            opt,
            xtr,
            ytr,
            seed=seed,
            epoch=epoch,
            batch_size=bs,
            name=name,
            lr=t.lr,
            train_cfg=t,
            forward=forward,
        )
        val_loss, val_acc = evaluate(model, xva, yva)
        history.append(
            {
                "epoch": epoch,
                "train_loss": run_loss / n,
                "train_acc": run_correct / n,
                "val_loss": val_loss,
                "val_acc": val_acc,
                "seconds": time.perf_counter() - t0,
            }
        )
        epochs.set_postfix(loss=f"{run_loss / n:.3f}", val_acc=f"{val_acc:.3f}")
        log.info(
            "%s epoch %d: train_loss %.4f val_loss %.4f val_acc %.4f", name, epoch, run_loss / n, val_loss, val_acc
        )
        save_checkpoint(checkpoint(epoch), ckdir / f"epoch_{epoch:03d}.pt")
        if os.environ.get(KILL_ENV) == str(epoch):
            os.kill(os.getpid(), signal.SIGKILL)

    final_val = evaluate(model, xva, yva)
    final_train = evaluate(model, xtr, ytr)
    metrics = {
        "experiment": name,
        "dataset": spec.dataset,
        "device": str(dev),
        "model": mcfg.to_dict(),
        "n_parameters": count_parameters(model),
        "n_train": len(xtr),
        "n_val": len(xva),
        "epochs": t.epochs,
        "history": history,
        "final": {
            "train_loss": final_train[0],
            "train_acc": final_train[1],
            "val_loss": final_val[0],
            "val_acc": final_val[1],
        },
        "train_seconds": sum(h["seconds"] for h in history),
    }
    save_checkpoint(checkpoint(t.epochs), ckdir / "final.pt")
    write_json(metrics, out_dir / "metrics.json")
    return metrics


@torch.no_grad()
def per_sample_losses(model: ViT, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024):
    """Cross-entropy of every sample at the model's weights (numpy float64, one per sample)."""
    model.eval()
    device = next(model.parameters()).device
    out = []
    for i in range(0, len(x), batch_size):
        logits = model(x[i : i + batch_size].to(device))
        out.append(F.cross_entropy(logits, y[i : i + batch_size].to(device), reduction="none").double().cpu())
    return torch.cat(out).numpy()
