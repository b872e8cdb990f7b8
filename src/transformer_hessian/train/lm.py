"""Seeded, resumable training of the GPT (:mod:`transformer_hessian.core.gpt`) with AdamW on the
causal LM loss (the engine's :func:`~transformer_hessian.engine.ops.losses.causal_lm`, targets = the
input ids), for the language-model study.

Layout under ``out_dir`` (the ViT's, :mod:`.loop`)::

    checkpoints/init.pt          weights before the first step
    checkpoints/epoch_XXX.pt     model + optimiser state + history after each epoch (resume points)
    checkpoints/final.pt         weights after the last epoch
    metrics.json                 per-epoch train and validation loss, wall time; parameter count

Each checkpoint holds ``model_config`` (:meth:`GPTConfig.to_dict`), loads with ``weights_only=True``
and is verified by its sha256 sidecar (:mod:`.checkpoints`). The order of every epoch comes from a
generator seeded by (seed, epoch) (:func:`.recipe.epoch_permutation`) and the model has no dropout,
so a run stopped after an epoch and run again resumes from its newest epoch checkpoint to the
same final weights, bit for bit on the CPU, as a run that was never stopped.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import time
from pathlib import Path

import torch

from ..core.gpt import GPT, GPTConfig, count_parameters
from ..engine.ops.losses import causal_lm
from ..errors import CheckpointError, ConfigError, TrainingError
from ..util.env import resolve_device
from ..util.files import log
from ..util.io import save_metrics
from ..util.progress import Progress, format_seconds
from .checkpoints import load_checkpoint, save_checkpoint
from .loop import KILL_ENV, _resume_or_start
from .recipe import epoch_permutation
from .result import CHECKPOINT_DIR, FINAL, METRICS

__all__ = ["evaluate_lm", "load_lm", "train_lm"]

#: ``kind`` of the checkpoints and metrics this module writes.
KIND = "gpt"


def _check_sequences(what: str, seqs: torch.Tensor, config: GPTConfig) -> None:
    if not isinstance(seqs, torch.Tensor) or seqs.dim() != 2 or len(seqs) == 0:
        shape = tuple(seqs.shape) if isinstance(seqs, torch.Tensor) else type(seqs).__name__
        raise ValueError(f"{what}: token ids of shape (N, T) with N >= 1, got {shape}")
    if seqs.dtype != torch.long:
        raise ValueError(f"{what}: token ids as torch.long, got {seqs.dtype}")
    if not 2 <= seqs.shape[1] <= config.context:
        raise ValueError(
            f"{what}: sequences of 2 to {config.context} tokens (the model's context), got {seqs.shape[1]}"
        )
    lo, hi = int(seqs.min()), int(seqs.max())
    if lo < 0 or hi >= config.vocab:
        raise ValueError(f"{what}: token ids must lie in 0..{config.vocab - 1}, got {lo}..{hi}")


@torch.no_grad()
def evaluate_lm(model: GPT, seqs: torch.Tensor, batch_size: int = 64) -> float:
    """The causal LM loss of ``model`` on token ids ``seqs`` (N, T), the mean over every predicted
    position (the same as :func:`causal_lm` on all of them at once), in batches on the model's device."""
    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    total, count = 0.0, 0
    for i in range(0, len(seqs), batch_size):
        xb = seqs[i : i + batch_size].to(dev)
        n = xb.shape[0] * (xb.shape[1] - 1)
        total += float(causal_lm(model(xb), xb)) * n
        count += n
    model.train(was_training)
    return total / count


def _resume_key(config: GPTConfig, train_seqs, val_seqs, batch_size, lr, weight_decay, seed) -> str:
    """The hash of everything a checkpoint may be resumed under: the settings but the epoch count,
    and the token ids themselves."""
    h = hashlib.sha256()
    settings = {
        "model": config.to_dict(),
        "batch_size": int(batch_size),
        "lr": float(lr),
        "weight_decay": float(weight_decay),
        "seed": int(seed),
    }
    h.update(json.dumps(settings, sort_keys=True).encode())
    for seqs in (train_seqs, val_seqs):
        h.update(str(tuple(seqs.shape)).encode())
        h.update(seqs.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _epoch(model, opt, xtr, *, seed, epoch, epochs, batch_size, name, log_every, on_step) -> float:
    """One epoch of mini-batch AdamW in the order of :func:`epoch_permutation`; the mean of the batch
    losses weighted by batch size."""
    model.train()
    n = len(xtr)
    steps = math.ceil(n / batch_size)
    perm = epoch_permutation(n, seed, epoch).to(xtr.device)
    run_loss = 0.0
    for step in range(steps):
        xb = xtr[perm[step * batch_size : (step + 1) * batch_size]]
        loss = causal_lm(model(xb), xb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = loss.item()
        if not math.isfinite(value):
            raise TrainingError(
                f"{name}: non-finite loss ({value}) at epoch {epoch}, step {step + 1} of {steps}; lower the "
                "learning rate or check the data"
            )
        run_loss += value * len(xb)
        on_step()
        if log_every and (step + 1) % log_every == 0 and step + 1 < steps:
            log.info("%s epoch %d/%d step %d/%d: loss %.4f", name, epoch, epochs, step + 1, steps, value)
    return run_loss / n


def _run_epochs(name, model, opt, xtr, xva, history: list[dict], start: int, hyper: dict, checkpoint, ckdir) -> None:
    """Epochs ``start..hyper["epochs"]``: each trains (:func:`_epoch`), appends its row to ``history``,
    logs its line (losses, time, time left) and is saved as ``epoch_XXX.pt`` (then :data:`KILL_ENV` may kill)."""
    epochs, batch_size = hyper["epochs"], hyper["batch_size"]
    steps = math.ceil(len(xtr) / batch_size)
    with Progress(f"train {name}", total=(epochs - start + 1) * steps, unit="optimiser step") as prog:
        t_start = time.perf_counter()
        for epoch in range(start, epochs + 1):
            t0 = time.perf_counter()
            train_loss = _epoch(
                model, opt, xtr, seed=hyper["seed"], epoch=epoch, epochs=epochs, batch_size=batch_size, name=name,
                log_every=hyper["log_every"], on_step=prog.advance,
            )  # fmt: skip
            val_loss = evaluate_lm(model, xva, batch_size)
            seconds = time.perf_counter() - t0
            history.append({"epoch": epoch, "train_loss": train_loss, "val_loss": val_loss, "seconds": seconds})
            left = (time.perf_counter() - t_start) / (epoch - start + 1) * (epochs - epoch)
            log.info(
                "%s epoch %d/%d: train loss %.4f, val loss %.4f, %s, about %s left",
                name, epoch, epochs, train_loss, val_loss, format_seconds(seconds), format_seconds(left),
            )  # fmt: skip
            save_checkpoint(checkpoint(epoch), ckdir / f"epoch_{epoch:03d}.pt")
            if os.environ.get(KILL_ENV) == str(epoch):
                os.kill(os.getpid(), signal.SIGKILL)


def train_lm(
    config: GPTConfig,
    train_seqs: torch.Tensor,
    val_seqs: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    seed: int,
    out_dir: str | Path,
    device: str = "cpu",
    log_every: int = 100,
    name: str = "lm",
) -> dict:
    """Train a :class:`GPT` of ``config`` on token ids ``train_seqs`` (N, T) with AdamW (``lr``,
    ``weight_decay`` on every parameter) on the causal LM loss, ``epochs`` epochs of mini-batches of
    ``batch_size`` sequences; validation loss on ``val_seqs`` after each epoch. The model is built
    after ``torch.manual_seed(seed)``; the epoch order is seeded by (seed, epoch). Resumes from the
    newest valid epoch checkpoint under ``out_dir`` written with the same settings and data (the
    epoch count may grow); otherwise starts afresh. ``device``: ``cpu``, ``cuda[:N]`` or ``auto``.
    Progress goes to the log: a line per epoch (losses, time, time left), one every ``log_every``
    optimiser steps (0: none) and the timed lines of :class:`~transformer_hessian.util.progress.Progress`.

    Returns the metrics written to ``out_dir/metrics.json`` (keys ``experiment`` = ``name``,
    ``kind``, ``device``, ``model``, ``n_parameters``, ``n_train``, ``n_val``, ``context``,
    ``train_tokens``, ``epochs``, ``batch_size``, ``lr``, ``weight_decay``, ``seed``, ``history``
    (per epoch: ``epoch``, ``train_loss``, ``val_loss``, ``seconds``), ``final`` (``train_loss``,
    ``val_loss`` of the final weights) and ``train_seconds``).
    """
    if int(epochs) < 1 or int(batch_size) < 1:
        raise ConfigError(f"{name}: epochs and batch_size must be positive, got {epochs} and {batch_size}")
    _check_sequences("train_seqs", train_seqs, config)
    _check_sequences("val_seqs", val_seqs, config)
    epochs, batch_size, seed = int(epochs), int(batch_size), int(seed)
    out_dir = Path(out_dir)
    ckdir = out_dir / CHECKPOINT_DIR
    ckdir.mkdir(parents=True, exist_ok=True)
    dev = resolve_device(device)
    xtr, xva = train_seqs.to(dev), val_seqs.to(dev)

    torch.manual_seed(seed)
    model = GPT(config).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    resume_key = _resume_key(config, train_seqs, val_seqs, batch_size, lr, weight_decay, seed)

    def checkpoint(epoch: int, history: list[dict]) -> dict:
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch, "history": history}
        return {"kind": KIND, "model_config": config.to_dict(), **state, "experiment": name, "resume_key": resume_key}

    history, start = _resume_or_start(name, ckdir, dev, model, opt, epochs, resume_key, checkpoint)
    hyper = {"epochs": epochs, "batch_size": batch_size, "seed": seed, "log_every": log_every}
    _run_epochs(name, model, opt, xtr, xva, history, start, hyper, lambda e: checkpoint(e, history), ckdir)
    metrics = {
        "experiment": name,
        "kind": KIND,
        "device": str(dev),
        "model": config.to_dict(),
        "n_parameters": count_parameters(model),
        "n_train": len(xtr),
        "n_val": len(xva),
        "context": int(xtr.shape[1]),
        "train_tokens": int(xtr.numel()),
        "epochs": epochs,
        "batch_size": batch_size,
        "lr": float(lr),
        "weight_decay": float(weight_decay),
        "seed": seed,
        "history": history,
        "final": {"train_loss": evaluate_lm(model, xtr, batch_size), "val_loss": evaluate_lm(model, xva, batch_size)},
        "train_seconds": sum(h["seconds"] for h in history),
    }
    save_checkpoint(checkpoint(epochs, history), ckdir / FINAL)
    save_metrics(out_dir / METRICS, metrics)  # with its digest: an edited metrics.json is refused
    return metrics


def load_lm(path: str | Path, device: str | torch.device = "cpu") -> GPT:
    """The :class:`GPT` of a checkpoint written by :func:`train_lm` (verified, ``weights_only``), on
    ``device``, in eval mode; :class:`CheckpointError` for a damaged file or a checkpoint of another model."""
    ck = load_checkpoint(path, map_location=device)
    if ck.get("kind") != KIND:
        raise CheckpointError(f"checkpoint {path} is not a GPT checkpoint of train_lm (kind {ck.get('kind')!r})")
    try:
        config = GPTConfig.from_dict(dict(ck["model_config"]))
    except ConfigError as err:
        raise CheckpointError(f"checkpoint {path}: its model_config is not a GPT config: {err}") from None
    model = GPT(config)
    model.load_state_dict(ck["model"])
    return model.to(device).eval()
