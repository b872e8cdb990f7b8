"""Weights, norms and Hessian blocks during the first training steps (paper, Appendix A.1).

"We log the matrices entries, norms, and Hessians during the first 1000 training steps"
(arXiv 2510.16927, App. A.1, Figures 7-11). The ``dynamics`` rule does this without touching
the ``train`` rule: it replays training from the saved initial checkpoint with the same loop
(:func:`transformer_hessian.train.train_epoch`), the same AdamW settings and the same data
order, so step s of the replay is step s of the real run (bit-identical on the same device;
whenever the replay crosses the end of an epoch it compares its weights with the saved epoch
checkpoint and reports the result).

At every snapshot step s in {0, every, 2 every, ..., steps} it records, for block
``hessian.block`` (the nine groups ``hessian_groups.ALL_GROUPS``):

* the entries of W_Q, W_K, W_V, W_1, W_2, gamma1, beta1, gamma2, beta2;
* their spectral and Frobenius norms;
* the dense float64 Hessian H(s) of the loss on the fixed Hessian batch (``hessian.fixed_batch``,
  the batch of Figures 3-5) w.r.t. all nine groups, reduced to the Frobenius, spectral and
  max-|entry| norms of every block H_ij(s); the diagonal blocks H_gg (and the 4d x 4d
  LayerNorm block) are kept whole at ``heatmaps`` evenly spread snapshot steps.
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ... import GROUPS
from ...core.hessian import (
    ALL_GROUPS,
    fixed_batch,
    group_layout,
    hessian_all_groups,
    symmetric_block_norms,
    weight_norms_all,
)
from ...core.model import ModelConfig, ViT
from ...train import load_experiment_data, make_optimizer
from ...train.checkpoints import CheckpointError, load_checkpoint, set_aside
from ...train.loop import recipe_epoch
from ...util.env import resolve_device
from ...util.files import log
from ...util.progress import Progress

if TYPE_CHECKING:
    from ...config.settings import Dynamics, Experiment, Hessian


def snapshot_steps(steps: int, every: int) -> list[int]:
    """0, every, 2 every, ... up to ``steps``, with ``steps`` itself always included."""
    out = list(range(0, steps + 1, every))
    if out[-1] != steps:
        out.append(steps)
    return out


def heatmap_indices(n_snapshots: int, heatmaps: int) -> list[int]:
    """``heatmaps`` snapshot indices spread evenly from the first to the last (unique)."""
    k = min(heatmaps, n_snapshots)
    return sorted({int(round(v)) for v in np.linspace(0, n_snapshots - 1, k)})


def replay(
    spec: Experiment,
    data_root,
    init_checkpoint,
    steps: int,
    on_snapshot,
    every: int = 1,
    device: str = "cpu",
    checkpoint_dir=None,
) -> dict:
    """Replay the first ``steps`` optimiser steps of the ``train`` rule from ``init_checkpoint``.

    Calls ``on_snapshot(step, model, batch_loss)`` at step 0 (``batch_loss`` None) and after
    every step listed by :func:`snapshot_steps`. ``steps`` is capped at the run's total
    (epochs x ceil(n_train / batch_size)). When ``checkpoint_dir`` holds ``epoch_XXX.pt`` for an
    epoch the replay completes, the weights are compared exactly with it. Returns
    ``{"steps", "steps_per_epoch", "capped", "epoch_checks": [{"epoch", "identical"}]}``.
    """
    dev = resolve_device(device)
    t = spec.train
    bs = int(t.batch_size)
    data = load_experiment_data(spec, data_root)
    xtr, ytr = data["train_x"].to(dev), data["train_y"].to(dev)
    ck = load_checkpoint(init_checkpoint, map_location=dev)  # verified against its sidecar
    if ck.get("epoch", 0) != 0:
        raise ValueError(f"{init_checkpoint}: not an initial checkpoint (epoch {ck.get('epoch')})")
    model = ViT(ModelConfig(**ck["model_config"])).to(dev)
    model.load_state_dict(ck["model"])
    opt = make_optimizer(model, spec)
    opt.load_state_dict(ck["optimizer"])
    per_epoch = math.ceil(len(xtr) / bs)
    total = per_epoch * int(t.epochs)
    capped = steps > total
    steps = min(steps, total)
    wanted = set(snapshot_steps(steps, every)) if steps > 0 else {0}
    on_snapshot(0, model, None)
    checks = []
    epoch, done = 0, 0
    while done < steps:
        epoch += 1
        base = done

        def on_step(s, m, loss, base=base):
            if base + s in wanted and base + s > 0:
                on_snapshot(base + s, m, loss)

        # the same seed, batch size, schedule, augmentation and autocast as the train rule
        recipe_epoch(model, opt, xtr, ytr, t, epoch, "replay", on_step=on_step, max_steps=steps - base)
        done = min(base + per_epoch, steps)
        if done == base + per_epoch and checkpoint_dir is not None:
            path = Path(checkpoint_dir) / f"epoch_{epoch:03d}.pt"
            if path.exists():
                try:
                    saved = load_checkpoint(path, map_location=dev)["model"]
                except CheckpointError as err:
                    # An intermediate only compared here: set it aside (the train rule rebuilds
                    # epoch checkpoints when it runs again) and go on without the comparison.
                    aside = set_aside(path)
                    log.warning("dynamics: %s; moved it to %s and skipped the comparison", err, aside.name)
                    checks.append({"epoch": epoch, "identical": None, "set_aside": aside.name})
                    continue
                same = all(torch.equal(saved[k], v) for k, v in model.state_dict().items())
                checks.append({"epoch": epoch, "identical": bool(same)})
                if not same:
                    log.warning("dynamics: replayed weights after epoch %d differ from %s", epoch, path)
    return {"steps": steps, "steps_per_epoch": per_epoch, "capped": capped, "epoch_checks": checks}


def record_dynamics(
    spec: Experiment,
    data_root,
    init_checkpoint,
    hessian_cfg: Hessian,
    dyn_cfg: Dynamics,
    device: str = "cpu",
    checkpoint_dir=None,
) -> tuple[dict, dict, np.ndarray]:
    """Replay training and record weights, norms and Hessian blocks at the snapshot steps.

    Returns (arrays for the npz, summary for the JSON, the step-0 Hessian's W_Q..W_2 part for
    :func:`check_against_saved`). Arrays: ``steps`` (n,), ``weights_<g>``
    (n, *shape of g) float32, ``weight_norms`` (n, 2, 9) [spectral, Frobenius],
    ``hessian_norms`` (n, 3, 9, 9) [Frobenius, spectral, max|entry|] of every block H_ij,
    ``heat_steps`` (k,), ``hdiag_<g>`` (k, p_g, p_g) float32 diagonal blocks, ``hdiag_LN``
    (k, 4d, 4d) the LayerNorm-LayerNorm block, ``batch_loss``, ``hessian_loss`` (n,).
    """
    dev = resolve_device(device)
    block = int(hessian_cfg.block)
    data = load_experiment_data(spec, data_root)
    images, labels = fixed_batch(data["train_x"], data["train_y"], hessian_cfg.batch_size, hessian_cfg.seed)
    images, labels = images.to(device=dev, dtype=torch.float64), labels.to(dev)
    steps_cfg, every = int(dyn_cfg.steps), int(dyn_cfg.every)
    rec = {
        "steps": [],
        "batch_loss": [],
        "hessian_loss": [],
        "weight_norms": [],
        "hessian_norms": [],
        "weights": {g: [] for g in ALL_GROUPS},
        "hdiag": {g: [] for g in (*GROUPS, "LN")},
        "heat_steps": [],
    }
    meta = {"method": None, "hessian_seconds": 0.0}
    plan = {}

    def on_snapshot(step, model, batch_loss):
        if "heat" not in plan:  # steps may be capped by the run length: plan on the first call
            n_total = math.ceil(len(data["train_x"]) / spec.train.batch_size) * spec.train.epochs
            snaps = snapshot_steps(min(steps_cfg, n_total), every) if min(steps_cfg, n_total) > 0 else [0]
            plan["heat"] = {snaps[i] for i in heatmap_indices(len(snaps), int(dyn_cfg.heatmaps))}
        _record_snapshot(rec, meta, step, model, batch_loss, block, images, labels, step in plan["heat"])
        prog.advance(note=f"training step {step}")

    t0 = time.perf_counter()
    n_steps = min(steps_cfg, math.ceil(len(data["train_x"]) / spec.train.batch_size) * spec.train.epochs)
    n_snaps = len(snapshot_steps(n_steps, every)) if n_steps > 0 else 1
    with Progress("dynamics", total=n_snaps, unit="Hessian snapshot") as prog:
        info = replay(
            spec,
            data_root,
            init_checkpoint,
            steps_cfg,
            on_snapshot,
            every=every,
            device=device,
            checkpoint_dir=checkpoint_dir,
        )
    seconds = time.perf_counter() - t0
    arrays = _arrays(rec)
    summary = _summary(
        rec, arrays, meta, info, steps_cfg=steps_cfg, every=every, seconds=seconds, batch_size=len(images), block=block
    )
    return arrays, summary, rec.get("H0_matrix_part")


def check_against_saved(H0_matrix_part: np.ndarray, saved: dict) -> dict:
    """Relative difference between the step-0 matrix-group Hessian of the replay and the one the
    ``hessian`` rule saved for the init checkpoint: max |H0 - H_saved| / max |H_saved|."""
    Hs = np.asarray(saved["H"])
    if Hs.shape != H0_matrix_part.shape:
        raise ValueError(f"saved init Hessian has shape {Hs.shape}, the replay's {H0_matrix_part.shape}")
    scale = float(np.abs(Hs).max())
    err = float(np.abs(H0_matrix_part - Hs).max())
    return {"max_abs_error": err, "rel_error": err / scale if scale > 0 else err}


def _record_snapshot(
    rec: dict, meta: dict, step: int, model, batch_loss, block: int, images, labels, heat: bool
) -> None:
    """Append one snapshot of :func:`record_dynamics` to ``rec``: the float64 copy's nine-group
    Hessian on the fixed batch, its block norms, the weights and their norms, the losses; with
    ``heat`` also the diagonal blocks for the heat maps."""
    m64 = copy.deepcopy(model).to(torch.float64).eval()
    blk = m64.blocks[block]
    t0 = time.perf_counter()
    H, method = hessian_all_groups(m64, block, images, labels)
    meta["hessian_seconds"] += time.perf_counter() - t0
    meta["method"] = method
    names, _, off = group_layout(m64, block, ALL_GROUPS)
    with torch.no_grad():
        hloss = float(torch.nn.functional.cross_entropy(m64(images), labels))
    rec["steps"].append(step)
    rec["batch_loss"].append(np.nan if batch_loss is None else float(batch_loss))
    rec["hessian_loss"].append(hloss)
    for g in ALL_GROUPS:
        rec["weights"][g].append(getattr(blk, g).detach().cpu().numpy().astype(np.float32))
    rec["weight_norms"].append(weight_norms_all(m64, block))
    Hc = H.cpu()
    rec["hessian_norms"].append(symmetric_block_norms(Hc, off, names))
    if heat:
        rec["heat_steps"].append(step)
        for i, g in enumerate(GROUPS):
            rec["hdiag"][g].append(Hc[off[i] : off[i + 1], off[i] : off[i + 1]].numpy().astype(np.float32))
        p5 = off[len(GROUPS)]
        rec["hdiag"]["LN"].append(Hc[p5:, p5:].numpy().astype(np.float32))
    if step == 0:
        rec["H0_matrix_part"] = Hc[: off[len(GROUPS)], : off[len(GROUPS)]].numpy()
    log.info("dynamics: step %d, loss on the Hessian batch %.4f", step, hloss)


def _arrays(rec: dict) -> dict:
    """The npz arrays of :func:`record_dynamics` from the snapshots ``rec``."""
    arrays = {
        "steps": np.asarray(rec["steps"], dtype=np.int64),
        "batch_loss": np.asarray(rec["batch_loss"]),
        "hessian_loss": np.asarray(rec["hessian_loss"]),
        "weight_norms": np.stack(rec["weight_norms"]),
        "hessian_norms": np.stack(rec["hessian_norms"]),
        "heat_steps": np.asarray(rec["heat_steps"], dtype=np.int64),
        "names": np.asarray(ALL_GROUPS),
    }
    for g in ALL_GROUPS:
        arrays[f"weights_{g}"] = np.stack(rec["weights"][g])
    for g, mats in rec["hdiag"].items():
        arrays[f"hdiag_{g}"] = np.stack(mats)
    return arrays


def _summary(
    rec: dict,
    arrays: dict,
    meta: dict,
    info: dict,
    *,
    steps_cfg: int,
    every: int,
    seconds: float,
    batch_size: int,
    block: int,
) -> dict:
    """The JSON summary of :func:`record_dynamics`."""
    return {
        "groups": list(ALL_GROUPS),
        "steps": rec["steps"],
        "heat_steps": rec["heat_steps"],
        "requested_steps": steps_cfg,
        "every": every,
        "replayed_steps": info["steps"],
        "steps_per_epoch": info["steps_per_epoch"],
        "capped": info["capped"],
        "epoch_checks": info["epoch_checks"],
        "hessian_method": meta["method"],
        "hessian_seconds": meta["hessian_seconds"],
        "seconds": seconds,
        "batch_size": int(batch_size),
        "block": block,
        "batch_loss": [None if np.isnan(v) else v for v in rec["batch_loss"]],
        "hessian_loss": rec["hessian_loss"],
        "weight_norms": {
            g: {"spectral": arrays["weight_norms"][:, 0, k].tolist(), "fro": arrays["weight_norms"][:, 1, k].tolist()}
            for k, g in enumerate(ALL_GROUPS)
        },
        "hessian_norm_fields": ["fro", "spectral", "max_abs"],
    }
