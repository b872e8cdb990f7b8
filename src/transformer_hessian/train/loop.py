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
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..config.validate import config_hash
from ..core.model import ViT, count_parameters
from ..errors import TrainingError  # noqa: F401  (re-exported: the class lives in errors.py)
from ..util.env import resolve_device
from ..util.files import log
from ..util.io import save_metrics
from ..util.progress import Progress
from .checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from .loading import evaluate, load_experiment_data, model_config_for
from .memory import check_training_memory
from .recipe import autocast_context, epoch_augmentation, epoch_permutation, lr_factor, make_batch, make_optimizer
from .result import CHECKPOINT_DIR, FINAL, INIT, METRICS
from .resume import newest_valid_checkpoint

if TYPE_CHECKING:
    from ..config.settings import Experiment, Train

#: Test hook: kill the process (SIGKILL) right after saving this epoch's checkpoint.
KILL_ENV = "TRANSFORMER_HESSIAN_KILL_AFTER_EPOCH"


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


def _resume_key(spec: Experiment) -> str:
    """The hash of the settings a checkpoint may be resumed under: all of ``spec`` but the epoch count."""
    spec_d, t_d = spec.to_dict(), spec.train.to_dict()
    return config_hash(
        {k: v for k, v in spec_d.items() if k != "train"} | {"train": {k: v for k, v in t_d.items() if k != "epochs"}}
    )


def _resume_or_start(
    name: str, ckdir: Path, dev, model: ViT, opt, epochs: int, resume_key: str, checkpoint
) -> tuple[list[dict], int]:
    """``(history, first epoch to run)``: resumed from the newest valid epoch checkpoint saved under
    ``resume_key`` (``init.pt`` rebuilt if it is missing or damaged), else afresh (every old
    checkpoint removed, ``init.pt`` written). ``checkpoint(epoch, history)`` is the dict to save."""
    latest = newest_valid_checkpoint(name, ckdir, dev)
    ck = latest[2] if latest else None
    if ck is not None and ck.get("resume_key") == resume_key and latest[0] <= epochs:
        try:
            load_checkpoint(ckdir / INIT)
        except CheckpointError as err:
            # e.g. snakemake removed the outputs before a forced re-run, or init.pt was damaged:
            # the seeded initialisation is rebuilt exactly, before the resume point is loaded.
            if (ckdir / INIT).exists():
                log.warning("%s: rebuilding init.pt: %s", name, err)
            save_checkpoint(checkpoint(0, []), ckdir / INIT)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        log.info("%s: resuming from %s (epoch %d of %d)", name, latest[1], latest[0], epochs)
        return list(ck["history"]), latest[0] + 1
    if ck is not None:
        log.info("%s: settings changed since the last run; starting afresh", name)
    for old in [*ckdir.glob("*.pt"), *ckdir.glob("*.pt.sha256")]:
        old.unlink()
    save_checkpoint(checkpoint(0, []), ckdir / INIT)
    return [], 1


def recipe_epoch(model: ViT, opt: torch.optim.Optimizer, xtr, ytr, t: Train, epoch: int, name: str, **options):
    """Epoch ``epoch`` of the experiment's recipe ``t`` (its seed, batch size, learning rate, schedule,
    augmentation and autocast): :func:`train_epoch` with ``options`` (``on_step``, ``max_steps``,
    ``forward``). The ``train`` rule and the dynamics replay both train through it."""
    return train_epoch(
        model,
        opt,
        xtr,
        ytr,
        seed=int(t.seed),
        epoch=epoch,
        batch_size=int(t.batch_size),
        name=name,
        lr=t.lr,
        train_cfg=t,
        **options,
    )


def _run_epochs(name, model, opt, forward, data, t: Train, start_epoch: int, history: list[dict], checkpoint, ckdir):
    """Train epochs ``start_epoch..t.epochs`` on ``data`` = (xtr, ytr, xva, yva): each appends its
    row to ``history``, is logged and saved as ``epoch_XXX.pt`` (then :data:`KILL_ENV` may kill)."""
    xtr, ytr, xva, yva = data
    n, bs = len(xtr), t.batch_size
    epochs = tqdm(
        range(start_epoch, t.epochs + 1),
        desc=f"train {name}",
        unit="epoch",
        initial=start_epoch - 1,
        total=t.epochs,
        disable=None,
    )
    steps_per_epoch = math.ceil(n / bs)
    with Progress(f"train {name}", total=(t.epochs - start_epoch + 1) * steps_per_epoch, unit="optimiser step") as prog:
        for epoch in epochs:
            t0 = time.perf_counter()
            run_loss, run_correct = recipe_epoch(
                model, opt, xtr, ytr, t, epoch, name, forward=forward, on_step=lambda *_: prog.advance()
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
            save_checkpoint(checkpoint(epoch, history), ckdir / f"epoch_{epoch:03d}.pt")
            if os.environ.get(KILL_ENV) == str(epoch):
                os.kill(os.getpid(), signal.SIGKILL)


def train(name: str, spec: Experiment, data_root: str | Path, out_dir: str | Path, device: str = "auto") -> dict:
    """Train experiment ``name`` (its config section ``spec``); resume if checkpoints exist."""
    out_dir = Path(out_dir)
    ckdir = out_dir / CHECKPOINT_DIR
    ckdir.mkdir(parents=True, exist_ok=True)
    dev = resolve_device(device)
    t = spec.train
    seed = int(t.seed)

    data = load_experiment_data(spec, data_root)
    xtr, ytr = data["train_x"].to(dev), data["train_y"].to(dev)
    xva, yva = data["val_x"].to(dev), data["val_y"].to(dev)
    mcfg = model_config_for(spec, data)
    check_training_memory(name, mcfg, int(t.batch_size), dev)

    torch.manual_seed(seed)
    model = ViT(mcfg).to(dev)
    opt = make_optimizer(model, spec)
    forward = torch.compile(model) if t.compile else model
    # Resume only from checkpoints of the same settings (the epoch count may grow).
    resume_key = _resume_key(spec)

    def checkpoint(epoch: int, history: list[dict]) -> dict:
        return {
            "model_config": mcfg.to_dict(),
            "model": model.state_dict(),
            "epoch": epoch,
            "optimizer": opt.state_dict(),
            "history": history,
            "experiment": name,
            "resume_key": resume_key,
        }

    history, start_epoch = _resume_or_start(name, ckdir, dev, model, opt, t.epochs, resume_key, checkpoint)
    _run_epochs(name, model, opt, forward, (xtr, ytr, xva, yva), t, start_epoch, history, checkpoint, ckdir)

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
    save_checkpoint(checkpoint(t.epochs, history), ckdir / FINAL)
    save_metrics(out_dir / METRICS, metrics)  # with its digest: an edited metrics.json is refused
    return metrics
