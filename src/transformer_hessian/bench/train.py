"""Training throughput benchmark (``transformer-hessian bench train``).

For each experiment of a config, times ``steps`` training steps of the pipeline's own training
code (:func:`transformer_hessian.train.make_batch` and :func:`transformer_hessian.train.train_step`,
the two halves of :func:`transformer_hessian.train.train_epoch`) after ``warmup`` untimed ones:

- batching: indexing the on-device training tensors with the epoch's permutation (and the
  on-device augmentation where ``train.augment`` is set) -- the "data loading" of this pipeline,
  which holds the whole data set on the device;
- step: forward, cross-entropy, backward and the AdamW step (under ``train.amp`` / ``train.compile``).

On CUDA both phases end with ``torch.cuda.synchronize`` so each is timed completely.
Reported per experiment: images/s = images / (batching + step time), the share of the time spent
batching, model FLOPs per image (forward + backward, counted once with
``torch.utils.flop_counter.FlopCounterMode``; matrix products only, so a lower bound), the achieved
TFLOP/s, and on CUDA that as a fraction of the device's dense peak for the step's dtype
(:data:`PEAK_TFLOPS`, null for a device not in the table). ``synthetic`` runs use random tensors
of the data set's shape instead of the files (the table says so). Writes
``<out_dir>/train_bench.json`` and ``.md``.
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..util.device import synchronize
from ..util.files import log, write_text
from ..util.io import write_json

if TYPE_CHECKING:
    from ..config.settings import Experiment

#: (image side, channels, classes, training images) of each data set, for --synthetic runs.
DATASET_SHAPES = {
    "digits": (8, 1, 10, 1437),
    "mnist": (28, 1, 10, 60000),
    "cifar100": (32, 3, 100, 50000),
}

#: Dense (no sparsity) peak TFLOP/s by device-name substring: (bf16 tensor cores, fp32 non-tensor),
#: from the vendors' data sheets (SXM parts for H100/H200/A100).
PEAK_TFLOPS = {
    "H200": {"bf16": 989.0, "fp32": 67.0},
    "H100": {"bf16": 989.0, "fp32": 67.0},
    "A100": {"bf16": 312.0, "fp32": 19.5},
    "L40S": {"bf16": 362.0, "fp32": 91.6},
    "L4": {"bf16": 121.0, "fp32": 30.3},
    "A10": {"bf16": 125.0, "fp32": 31.2},
    "V100": {"bf16": None, "fp32": 15.7},
    "T4": {"bf16": None, "fp32": 8.1},
}


def device_peak_tflops(device: torch.device, amp: str | None) -> float | None:
    """The device's dense peak TFLOP/s for the step's dtype (bf16 under ``amp='bf16'``, else fp32),
    or None (CPU, or a GPU not in :data:`PEAK_TFLOPS`)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, peaks in PEAK_TFLOPS.items():
        if key in name:
            return peaks["bf16" if amp == "bf16" else "fp32"]
    return None


def flops_per_image(model, xb: torch.Tensor, yb: torch.Tensor, amp: str | None) -> float:
    """FLOPs of one forward + backward pass per image, counted by FlopCounterMode on one batch."""
    from torch.utils.flop_counter import FlopCounterMode

    from ..train import autocast_context

    model.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False) as counter:
        with autocast_context(xb.device, amp):
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / len(xb)


def _bench_data(spec: Experiment, data: dict | None, synthetic: bool, data_root: str, n_images: int) -> dict:
    """The data of :func:`bench_experiment`: ``data`` as given, else random tensors of the data
    set's shape (at most ``n_images``, seeded by ``train.seed``) when ``synthetic``, else the
    experiment's training data read from ``data_root``."""
    if data is not None:
        if synthetic:
            raise ValueError("bench_experiment: give either data or synthetic=True, not both")
        return data
    if synthetic:
        side, ch, classes, n_full = DATASET_SHAPES[spec.dataset]
        n = min(n_full, n_images)
        gen = torch.Generator().manual_seed(int(spec.train.seed))
        return {
            "train_x": torch.randn(n, ch, side, side, generator=gen),
            "train_y": torch.randint(0, classes, (n,), generator=gen),
            "image_size": side,
            "channels": ch,
            "num_classes": classes,
        }
    from ..train import load_experiment_data

    return load_experiment_data(spec, data_root)


def bench_experiment(
    name: str,
    spec: Experiment,
    *,
    device: torch.device,
    steps: int,
    warmup: int,
    synthetic: bool,
    data_root: str,
    data: dict | None = None,
) -> dict:
    """Time ``warmup`` + ``steps`` training steps of one experiment; one result row (see module doc).
    ``data``: an already loaded data set (``load_dataset``'s dict) used instead of reading it
    (scripts/gpu_check.py, where torchvision is missing); ``synthetic`` must then be False."""
    from ..core.model import ViT, count_parameters
    from ..train import epoch_augmentation, lr_factor, make_batch, make_optimizer, model_config_for, train_step

    t = spec.train
    bs = int(t.batch_size)
    seed = int(t.seed)
    data = _bench_data(spec, data, synthetic, data_root, bs * (steps + warmup))
    xtr, ytr = data["train_x"].to(device), data["train_y"].to(device)
    mcfg = model_config_for(spec, data)
    torch.manual_seed(seed)
    model = ViT(mcfg).to(device)
    opt = make_optimizer(model, spec)
    amp = t.amp
    fwd = torch.compile(model) if t.compile else model
    n = len(xtr)
    steps_per_epoch = math.ceil(n / bs)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).to(device)
    aug = epoch_augmentation(n, seed, 1, t, device)
    flops = flops_per_image(model, xtr[:bs], ytr[:bs], amp)
    t_batch, t_step, images = [], [], 0
    model.train()
    for s in range(warmup + steps):
        j = s % steps_per_epoch
        synchronize(device)
        t0 = time.perf_counter()
        idx = perm[j * bs : (j + 1) * bs]
        xb, yb = make_batch(xtr, ytr, idx, aug)
        synchronize(device)
        t1 = time.perf_counter()
        factor = lr_factor(s, steps_per_epoch, t)
        train_step(fwd, opt, xb, yb, amp=amp, lr=None if factor is None else t.lr * factor)
        synchronize(device)
        t2 = time.perf_counter()
        if s >= warmup:
            t_batch.append(t1 - t0)
            t_step.append(t2 - t1)
            images += len(idx)
    total = sum(t_batch) + sum(t_step)
    ips = images / total
    peak = device_peak_tflops(device, amp)
    achieved = flops * ips / 1e12
    return {
        "experiment": name,
        "dataset": spec.dataset,
        "data": "synthetic (random tensors of the data set's shape)" if synthetic else "real",
        "n_parameters": count_parameters(model),
        "image_shape": [data["channels"], data["image_size"], data["image_size"]],
        "batch_size": bs,
        "steps": steps,
        "warmup_steps": warmup,
        "amp": amp,
        "compile": bool(t.compile),
        "augment": t.augment,
        "images_per_s": ips,
        "data_loading_share": sum(t_batch) / total,
        "median_batch_ms": 1e3 * statistics.median(t_batch),
        "median_step_ms": 1e3 * statistics.median(t_step),
        "flops_per_image": flops,
        "achieved_tflops": achieved,
        "peak_tflops": peak,
        "fraction_of_peak": None if peak is None else achieved / peak,
    }


def markdown(result: dict) -> str:
    """The rows as a Markdown table."""
    lines = [
        "# Training throughput benchmark",
        "",
        f"Config(s) {result['config']}; device {result['device']}; {result['steps']} timed training steps after "
        f"{result['warmup']} untimed ones per experiment. Data loading = indexing the on-device tensors "
        "(+ on-device augmentation); FLOPs per image = forward + backward matrix products "
        "(torch FlopCounterMode). Peak: dense vendor peak for the step's dtype, CUDA only. "
        f"Commit {result.get('git_commit', 'unknown')}, load average at the end "
        f"{', '.join(f'{x:.2f}' for x in result.get('load_average', []))}.",
        "",
        "| config | experiment | data | params | batch | amp | compile | augment | images/s | data-loading share "
        "| GFLOP/image | TFLOP/s | of peak |",
        "|:--|:--|:--|---:|---:|:--|:--|:--|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        frac = "-" if r["fraction_of_peak"] is None else f"{100 * r['fraction_of_peak']:.1f}%"
        lines.append(
            f"| {r.get('config', '-')} | {r['experiment']} ({r['dataset']}) | {'synthetic' if r['data'].startswith('synthetic') else 'real'} "
            f"| {r['n_parameters']:,} | {r['batch_size']} | {r['amp'] or '-'} | {r['compile']} | {r['augment'] or '-'} "
            f"| {r['images_per_s']:.0f} | {r['data_loading_share']:.3f} | {r['flops_per_image'] / 1e9:.4f} "
            f"| {r['achieved_tflops']:.4f} | {frac} |"
        )
    return "\n".join(lines) + "\n"


def run_train_bench(a) -> dict:
    """``transformer-hessian bench train``: run every (chosen) experiment, write JSON and Markdown."""
    from ..config.settings import load_settings
    from ..util.env import resolve_device, run_environment

    if a.steps < 1 or a.warmup < 0:
        raise ValueError("bench train: --steps must be >= 1 and --warmup >= 0")
    paths = [a.config] if isinstance(a.config, (str, Path)) else list(a.config)
    configs = [(str(p), load_settings(p)) for p in paths]
    dev = resolve_device(a.device or configs[0][1].device)
    jobs = []
    for path, cfg in configs:
        names = a.experiments or list(cfg.experiments)
        if a.experiments:
            names = [n for n in names if n in cfg.experiments]
        jobs += [(path, cfg, n) for n in names]
    missing = [n for n in (a.experiments or []) if not any(n == j[2] for j in jobs)]
    if missing:
        raise ValueError(f"bench train: unknown experiment(s) {missing} in {', '.join(paths)}")
    rows = []
    for path, cfg, name in jobs:
        log.info("bench train: %s (%s) ...", name, path)
        row = bench_experiment(
            name,
            cfg.experiments[name],
            device=dev,
            steps=a.steps,
            warmup=a.warmup,
            synthetic=a.synthetic,
            data_root=cfg.data.root,
        )
        row["config"] = path
        log.info(
            "bench train: %s: %.0f images/s, data loading %.1f%%",
            name,
            row["images_per_s"],
            100 * row["data_loading_share"],
        )
        rows.append(row)
    result = {
        "benchmark": "training throughput",
        "config": ", ".join(paths),
        "steps": a.steps,
        "warmup": a.warmup,
        "synthetic": bool(a.synthetic),
        # provenance, as in bench hessian (device, threads, packages, commit, load average now)
        **run_environment(device=str(dev)),
        "rows": rows,
    }
    out = Path(a.out_dir)
    write_json(result, out / "train_bench.json", sealed=False)
    write_text(markdown(result), out / "train_bench.md")
    print(markdown(result), end="", flush=True)
    return result
