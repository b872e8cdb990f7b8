"""One short check of every GPU path of the project: ``make gpu-check``.

    PYTHONPATH=src python scripts/gpu_check.py OUTDIR [--tiny] [--budget S] [--only a,b] [--mnist DIR]

Runs, on ``--device`` (default ``auto``: CUDA when present), each of the sections below, timed
and wrapped so that one failing section is recorded with its error and the rest still run; a
global time budget (``--budget``, default 480 s) is checked before every section and inside the
long loops, and what it cuts off is recorded as skipped with the reason. Writes
``OUTDIR/gpu_check.json`` and ``OUTDIR/gpu_check.md``.

- ``train_*``: training throughput of the paper's MNIST model (``hessian_mnist`` of
  config/paper.yaml; real MNIST when a folder is given or ``.carry/mnist`` / ``results/data/mnist``
  holds it, else random tensors of its shape) and of the 8-block width-128 CIFAR-100 model
  (``landscape_cifar100``, random tensors of CIFAR-100's shape) with the paper's CIFAR recipe
  (bf16 autocast, crop+flip on the device, warm-up + cosine rate), ``torch.compile`` off and on.
  The timing is the project's own (:func:`transformer_hessian.bench.train.bench_experiment`:
  :func:`train.make_batch` + :func:`train.train_step` with the data held on the device): images/s,
  share of the time in data handling (batch indexing + augmentation), FLOPs per image
  (``torch.utils.flop_counter``), achieved TFLOP/s against the device's dense bf16 peak
  (:data:`bench.train.PEAK_TFLOPS`, keyed by device name; "unknown" for other devices).
- ``hessian5_*`` / ``hessian9_*``: the five- and nine-group closed-form Hessians
  (:func:`hessian.hessian_closed_form`, :func:`hessian_groups.hessian_all_groups`) at the paper's
  shape (28x28, patch 4, L = 49, d = 16, batch 128) in float64 on the device and on the CPU
  (relative Frobenius difference), against reverse-over-reverse autograd on the device
  (``torch.autograd.grad`` of the gradient with ``is_grads_batched``, which is what
  ``torch.autograd.functional.hessian(vectorize=True)`` does, in row chunks, inside
  ``sdpa_kernel(SDPBackend.MATH)``) and curvlinops when it is importable.
- ``spectrum_*``: Lanczos top eigenvalues and Hutchinson trace (:mod:`transformer_hessian.studies.spectrum.compute`)
  of the 8-block width-128 model's Hessian (seeded initialisation, one random batch), for block
  0's five groups and for the whole model, in float64 and float32, with the differences.
- ``exact_hessian_encoder``: ``transformer_hessian.exact_hessian`` on a
  ``torch.nn.TransformerEncoderLayer`` against reverse-over-reverse autograd, when it exists.
- ``exact_hessian_lm``: the graph engine (``exact_hessian`` and ``HessianOperator`` of any model) on
  a one-layer nanoGPT-style GPT with the causal LM loss, against autograd on the device.
- ``large_block``: the block of ``h.0.c_attn`` (49,536 entries, 19.6 GB) of a 4-layer d-128
  nanoGPT-style GPT, too large for a dense Hessian of the whole model; 4 rows against autograd.
- ``bench_models``: ``transformer-hessian bench models`` on the device (the bench's GPT-2-like and
  Llama-like models, every correct peer there), and the dense Hessian again in blocks of 1 and 4 GiB.

``--tiny``: sizes that run on a CPU in seconds (tests/test_gpu_check.py). The script needs torch
2.11 or newer and nothing that is not on the GPU machine except jsonschema (config validation;
see docs/gpu.md for the carried wheels); curvlinops is used when importable.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
PAPER_CONFIG = ROOT / "config" / "paper.yaml"
#: Folders searched for MNIST (IDX files, raw or .gz) when --mnist is not given.
MNIST_CANDIDATES = (ROOT / ".carry" / "mnist", ROOT / "results" / "data" / "mnist")
MNIST_NAMES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


class BudgetExceeded(RuntimeError):
    """The global time budget ran out inside a section."""


class Clock:
    """The global time budget: ``remaining()`` seconds, ``check(what)`` raises BudgetExceeded."""

    def __init__(self, budget_s: float):
        self.budget_s = float(budget_s)
        self.t0 = time.perf_counter()

    def elapsed(self) -> float:
        """Seconds since the start."""
        return time.perf_counter() - self.t0

    def remaining(self) -> float:
        """Seconds of budget left (negative once spent)."""
        return self.budget_s - self.elapsed()

    def check(self, what: str) -> None:
        """Raise BudgetExceeded naming ``what`` once the budget is spent."""
        if self.remaining() <= 0:
            raise BudgetExceeded(f"time budget of {self.budget_s:.0f} s spent during {what}")


def sync_device(dev: torch.device) -> None:
    """Wait for queued kernels on CUDA (the bench's own, imported where called: a package that fails
    to import fails the section, not the script)."""
    from transformer_hessian.bench.lm_peers import sync_device as sync

    sync(dev)


def timed(dev: torch.device, fn):
    """(result, seconds) of ``fn()``, synchronised on CUDA."""
    sync_device(dev)
    t0 = time.perf_counter()
    out = fn()
    sync_device(dev)
    return out, time.perf_counter() - t0


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b||_F / ||b||_F, both moved to the CPU in float64."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


# ------------------------------------------------------------------ sizes


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Sizes of one run: full (the paper's shapes, a few hundred training steps) or tiny."""

    train_steps: int
    train_warmup: int
    cifar_model: dict  # overrides of landscape_cifar100's model (empty: the paper's)
    cifar_batch: int | None  # None: the config's
    mnist_batch: int | None
    hessian_shape: str  # bench.shapes.SHAPES key
    hessian_width: int
    hessian_batch: int
    ref_chunk: int  # rows per reverse-over-reverse chunk
    spec_model: dict  # ModelConfig of the spectrum model
    spec_batch: int
    lanczos_steps: int
    n_eigenvalues: int
    n_probes: int
    hvp_chunk: int
    encoder: dict  # TransformerEncoderLayer sizes and batch


FULL = Sizes(
    train_steps=200,
    train_warmup=20,
    cifar_model={},
    cifar_batch=None,
    mnist_batch=None,
    hessian_shape="paper",
    hessian_width=16,
    hessian_batch=128,
    ref_chunk=128,
    spec_model=dict(image_size=32, channels=3, num_classes=100, patch_size=4, width=128, depth=8, d_k=128, d_ff=512),
    spec_batch=128,
    lanczos_steps=40,
    n_eigenvalues=5,
    n_probes=30,
    hvp_chunk=8,
    encoder=dict(d_model=32, nhead=4, dim_feedforward=64, batch=8, tokens=16),
)

TINY = Sizes(
    train_steps=3,
    train_warmup=1,
    cifar_model=dict(width=16, depth=2, d_k=16, d_ff=32),
    cifar_batch=8,
    mnist_batch=16,
    hessian_shape="default",
    hessian_width=4,
    hessian_batch=8,
    ref_chunk=64,
    spec_model=dict(image_size=8, channels=3, num_classes=10, patch_size=4, width=4, depth=2, d_k=4, d_ff=8),
    spec_batch=6,
    lanczos_steps=5,
    n_eigenvalues=3,
    n_probes=2,
    hvp_chunk=8,
    encoder=dict(d_model=8, nhead=2, dim_feedforward=12, batch=3, tokens=5),
)


# ------------------------------------------------------------------ MNIST


def _read_idx(path: Path) -> np.ndarray:
    """An IDX file (raw or .gz) as a numpy array (big-endian header: magic, dims as int32)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    magic = int.from_bytes(raw[:4], "big")
    if magic >> 8 != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {magic:#x})")
    ndim = magic & 0xFF
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {data.size} bytes of data for dimensions {dims}")
    return data.reshape(dims)


def find_mnist(given: str | None) -> Path | None:
    """The MNIST folder: ``given`` (must hold the four IDX files, raw or .gz), else the first
    candidate that holds them, else None (synthetic data)."""

    def complete(folder: Path) -> bool:
        return all(
            (folder / f).exists() or (folder / f"{f}.gz").exists() for pair in MNIST_NAMES.values() for f in pair
        )

    if given:
        folder = Path(given).expanduser().resolve()
        if not complete(folder):
            raise FileNotFoundError(f"--mnist {given}: the four MNIST IDX files (raw or .gz) are not all in {folder}")
        return folder
    return next((c for c in MNIST_CANDIDATES if complete(c)), None)


def load_mnist(folder: Path) -> tuple[dict, str]:
    """MNIST as the project loads it (``data.load_dataset``: [0, 1] pixels normalised by the
    training images' mean and std). torchvision (which the project's reader uses) is not on the
    GPU machine; without it the IDX files are read here with numpy and normalised the same way."""
    try:
        import torchvision  # noqa: F401
    except ImportError:
        pass
    else:
        from transformer_hessian.data import load_dataset

        if folder.name == "mnist":
            return load_dataset("mnist", folder.parent), "transformer_hessian.data.load_dataset"
    out = {}
    for split, (images, labels) in MNIST_NAMES.items():
        pick = [folder / f if (folder / f).exists() else folder / f"{f}.gz" for f in (images, labels)]
        x, y = _read_idx(pick[0]), _read_idx(pick[1])
        if x.ndim != 3 or len(x) != len(y):
            raise ValueError(f"MNIST {split}: images {x.shape} and labels {y.shape} do not match")
        out[split] = (torch.from_numpy(x[:, None].astype(np.float32) / 255.0), torch.from_numpy(y.astype(np.int64)))
    tx, ty = out["train"]
    mean = tx.double().mean(dim=(0, 2, 3))
    std = tx.double().std(dim=(0, 2, 3), correction=0).clamp_min(1e-8)
    m32, s32 = mean.float().view(1, -1, 1, 1), std.float().view(1, -1, 1, 1)
    data = {
        "dataset": "mnist",
        "train_x": (tx - m32) / s32,
        "train_y": ty,
        "val_x": (out["test"][0] - m32) / s32,
        "val_y": out["test"][1],
        "num_classes": 10,
        "image_size": int(tx.shape[-1]),
        "channels": 1,
    }
    return data, "numpy IDX reader of scripts/gpu_check.py (torchvision not importable, or a folder not named mnist)"


# ------------------------------------------------------------------ sections


class Check:
    """The run: arguments, device, sizes, budget, shared state between sections."""

    def __init__(self, args):
        from transformer_hessian.util.env import resolve_device

        self.args = args
        self.dev = resolve_device(args.device)
        self.sizes = TINY if args.tiny else FULL
        if args.train_steps is not None:
            self.sizes = dataclasses.replace(self.sizes, train_steps=int(args.train_steps))
        if args.train_warmup is not None:
            self.sizes = dataclasses.replace(self.sizes, train_warmup=int(args.train_warmup))
        self.clock = Clock(args.budget)
        self.cache: dict = {}
        self._cfg = None

    @property
    def cuda(self) -> bool:
        """Whether the run is on a CUDA device."""
        return self.dev.type == "cuda"

    def config(self):
        """config/paper.yaml, validated and typed (settings.load_settings), read once."""
        if self._cfg is None:
            from transformer_hessian.config.settings import load_settings

            self._cfg = load_settings(str(PAPER_CONFIG))
        return self._cfg


def _experiment(chk: Check, name: str, compile_: bool):
    """The config's experiment ``name`` with the paper's CIFAR-100 recipe (bf16 autocast,
    crop+flip, warm-up + cosine) and ``compile`` as asked; tiny sizes with --tiny."""
    cfg = chk.config()
    spec = cfg.experiments[name]
    recipe = cfg.experiments["landscape_cifar100"].train
    t = dataclasses.replace(
        spec.train,
        amp=recipe.amp,
        augment=recipe.augment,
        crop_padding=recipe.crop_padding,
        warmup_epochs=recipe.warmup_epochs,
        schedule=recipe.schedule,
        compile=bool(compile_),
    )
    s = chk.sizes
    batch = s.mnist_batch if name == "hessian_mnist" else s.cifar_batch
    if batch is not None:
        t = dataclasses.replace(t, batch_size=batch)
    model = spec.model
    if name == "landscape_cifar100" and s.cifar_model:
        model = dataclasses.replace(model, **s.cifar_model)
    return dataclasses.replace(spec, model=model, train=t)


def _train(chk: Check, name: str, compile_: bool) -> dict:
    from transformer_hessian.bench.train import bench_experiment

    if compile_:
        torch._dynamo.reset()
    spec = _experiment(chk, name, compile_)
    data, note = None, "synthetic (random tensors of the data set's shape)"
    if name == "hessian_mnist":
        folder = chk.cache.get("mnist_folder")
        if folder is not None:
            if "mnist_data" not in chk.cache:
                chk.cache["mnist_data"] = load_mnist(folder)
            data, reader = chk.cache["mnist_data"]
            note = f"real MNIST from {folder} ({reader})"
    t0 = time.perf_counter()
    row = bench_experiment(
        name,
        spec,
        device=chk.dev,
        steps=chk.sizes.train_steps,
        warmup=chk.sizes.train_warmup,
        synthetic=data is None,
        data_root=".",
        data=data,
    )
    row["data"] = note
    row["wall_s_with_warmup_and_compile"] = time.perf_counter() - t0
    row["peak_tflops"] = row["peak_tflops"] if row["peak_tflops"] is not None else "unknown"
    row["model"] = spec.model.to_dict()
    return row


def _problem(chk: Check, dev):
    from transformer_hessian.bench.problem import build_problem

    s = chk.sizes
    return build_problem(s.hessian_width, s.hessian_batch, seed=0, shape=s.hessian_shape, device=str(dev))


def _reverse_over_reverse(chk: Check, f, w: torch.Tensor, what: str) -> torch.Tensor:
    """Dense Hessian of ``f`` at ``w`` by reverse-over-reverse autograd: the gradient with
    ``create_graph=True``, then ``torch.autograd.grad`` of it with ``is_grads_batched`` on chunks
    of rows of I (``torch.autograd.functional.hessian(vectorize=True)`` in chunks), MATH sdpa."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    w = w.detach().clone().requires_grad_(True)
    P, c = w.numel(), chk.sizes.ref_chunk
    with sdpa_kernel(SDPBackend.MATH):
        (g,) = torch.autograd.grad(f(w), w, create_graph=True)
        rows = []
        for i in range(0, P, c):
            chk.clock.check(what)
            E = torch.zeros(min(c, P - i), P, dtype=w.dtype, device=w.device)
            E[torch.arange(len(E)), torch.arange(i, i + len(E))] = 1.0
            (r,) = torch.autograd.grad(g, w, grad_outputs=E, is_grads_batched=True, retain_graph=True)
            rows.append(r.detach())
    return torch.cat(rows, dim=0)


def sec_hessian5(chk: Check) -> dict:
    """Five-group closed form on the device (after one warm-up) and on the CPU: times, agreement."""
    from transformer_hessian.core.hessian import hessian_closed_form

    out = {"shape": chk.sizes.hessian_shape, "width": chk.sizes.hessian_width, "batch": chk.sizes.hessian_batch}
    model, x, y = _problem(chk, chk.dev)
    if chk.cuda:
        hessian_closed_form(model, 0, x, y)  # warm-up (kernels, caches)
    H, out["device_s"] = timed(chk.dev, lambda: hessian_closed_form(model, 0, x, y))
    mc, xc, yc = _problem(chk, "cpu")
    Hc, out["cpu_s"] = timed(torch.device("cpu"), lambda: hessian_closed_form(mc, 0, xc, yc))
    out["P"] = int(H.shape[0])
    out["cpu_vs_device_rel"] = rel_diff(H, Hc)
    out["device_dtype"] = str(H.dtype)
    chk.cache["H5"] = H
    return out


def _hessian_ref(chk: Check, key: str, nine: bool) -> dict:
    from transformer_hessian.core.hessian import ALL_GROUPS, hessian_all_groups, hessian_closed_form, loss_of_groups

    model, x, y = _problem(chk, chk.dev)
    H = chk.cache.get(key)
    if H is None:
        H = hessian_all_groups(model, 0, x, y)[0] if nine else hessian_closed_form(model, 0, x, y)
    f, w = loss_of_groups(model, 0, x, y, ALL_GROUPS) if nine else loss_of_groups(model, 0, x, y)
    R, sec = timed(chk.dev, lambda: _reverse_over_reverse(chk, f, w, "the reverse-over-reverse reference"))
    return {
        "P": int(w.numel()),
        "reference": "reverse-over-reverse autograd (autograd.grad of the gradient, is_grads_batched, "
        f"{chk.sizes.ref_chunk}-row chunks, sdpa MATH) on {chk.dev}",
        "reference_s": sec,
        "closed_form_vs_reference_rel": rel_diff(H, R),
        "reference_asymmetry_rel": rel_diff(R, R.T),
    }


def sec_hessian5_reference(chk: Check) -> dict:
    """The five-group closed form against reverse-over-reverse autograd on the device."""
    return _hessian_ref(chk, "H5", nine=False)


def sec_hessian5_curvlinops(chk: Check) -> dict:
    """The five-group closed form against curvlinops on the device (when importable)."""
    try:
        import curvlinops  # noqa: F401
    except ImportError as err:
        return {"skipped": f"curvlinops is not importable ({err}); carry its wheel (docs/gpu.md)"}
    if not chk.cuda and not chk.args.tiny:
        return {"skipped": "curvlinops at the paper shape takes about 2 minutes on a CPU: run on CUDA only"}
    from transformer_hessian.core.hessian import hessian_closed_form, hessian_curvlinops

    model, x, y = _problem(chk, chk.dev)
    H = chk.cache.get("H5")
    if H is None:
        H = hessian_closed_form(model, 0, x, y)
    Hc, sec = timed(chk.dev, lambda: hessian_curvlinops(model, 0, x, y))
    return {
        "curvlinops_version": getattr(curvlinops, "__version__", "unknown"),
        "curvlinops_s": sec,
        "closed_form_vs_curvlinops_rel": rel_diff(H, Hc),
    }


def sec_hessian9(chk: Check) -> dict:
    """Nine-group Hessian (closed form + LayerNorm HVP columns) on the device and the CPU."""
    from transformer_hessian.core.hessian import hessian_all_groups

    model, x, y = _problem(chk, chk.dev)
    if chk.cuda:
        hessian_all_groups(model, 0, x, y)  # warm-up
    (H, method), dev_s = timed(chk.dev, lambda: hessian_all_groups(model, 0, x, y))
    mc, xc, yc = _problem(chk, "cpu")
    (Hc, _), cpu_s = timed(torch.device("cpu"), lambda: hessian_all_groups(mc, 0, xc, yc))
    chk.cache["H9"] = H
    return {
        "method": method,
        "P": int(H.shape[0]),
        "device_s": dev_s,
        "cpu_s": cpu_s,
        "cpu_vs_device_rel": rel_diff(H, Hc),
    }


def sec_hessian9_reference(chk: Check) -> dict:
    """The nine-group Hessian against reverse-over-reverse autograd on the device."""
    return _hessian_ref(chk, "H9", nine=True)


def _spectrum_model(chk: Check, dtype):
    from transformer_hessian.core.model import ModelConfig, ViT

    cfg = ModelConfig(**chk.sizes.spec_model)
    torch.manual_seed(0)
    model = ViT(cfg).to(chk.dev, dtype).eval()
    gen = torch.Generator().manual_seed(1)
    side, ch = cfg.image_size, cfg.channels
    x = torch.randn(chk.sizes.spec_batch, ch, side, side, generator=gen).to(chk.dev, dtype)
    y = torch.randint(0, cfg.num_classes, (chk.sizes.spec_batch,), generator=gen).to(chk.dev)
    return model, x, y


def _spectrum(chk: Check, whole: bool) -> dict:
    from transformer_hessian.core.hessian import loss_of_groups
    from transformer_hessian.core.krylov import FlatModel
    from transformer_hessian.core.spectral import (
        batched_hvp,
        hutchinson_trace,
        lanczos_tridiagonal,
        ritz,
        top_eigenvalues,
    )

    s = chk.sizes
    what = "the whole model's spectrum" if whole else "block 0's spectrum"
    out: dict = {
        "model": s.spec_model,
        "batch": s.spec_batch,
        "weights": "seeded initialisation (torch.manual_seed(0)), one random batch",
        "lanczos_steps": s.lanczos_steps,
        "hutchinson_probes": s.n_probes,
    }
    per = {}
    for dtype in (torch.float64, torch.float32):
        model, x, y = _spectrum_model(chk, dtype)
        if whole:
            fm = FlatModel.of(model)
            f, w = (lambda p, fm=fm, x=x, y=y: fm.mean_loss(p, x, y)), fm.w0
        else:
            f, w = loss_of_groups(model, 0, x, y)
        mv0 = batched_hvp(f, w, s.hvp_chunk)

        def mv(V, mv0=mv0):
            chk.clock.check(what)
            return mv0(V)

        sync_device(chk.dev)
        t0 = time.perf_counter()
        # one start vector for both dtypes (drawn in float64, cast), so that the float64-float32
        # difference is one of precision, not of two Lanczos starts (spectrum._gaussian draws
        # different numbers per dtype)
        v0 = torch.randn(1, w.numel(), generator=torch.Generator().manual_seed(271), dtype=torch.float64)
        runs = ritz(*lanczos_tridiagonal(mv, v0.to(w.device, w.dtype), s.lanczos_steps, seed=0))
        top = top_eigenvalues(mv, w, s.n_eigenvalues, s.lanczos_steps, runs=runs)
        sync_device(chk.dev)
        t1 = time.perf_counter()
        tr = hutchinson_trace(mv, w, s.n_probes, seed=0)
        sync_device(chk.dev)
        t2 = time.perf_counter()
        name = str(dtype).replace("torch.", "")
        per[name] = {"top": top["eigenvalues"], "top_residuals": top["residuals"], "trace": tr["mean"]}
        per[name]["trace_stderr"] = tr["stderr"]
        per[name].update(lanczos_s=t1 - t0, hutchinson_s=t2 - t1, n_params=int(w.numel()))
    a, b = per["float64"], per["float32"]
    out["float64"], out["float32"] = a, b
    out["top_eigenvalue_rel_diff"] = abs(a["top"][0] - b["top"][0]) / max(abs(a["top"][0]), 1e-300)
    out["top_k_max_rel_diff"] = max(abs(p - q) / max(abs(p), 1e-300) for p, q in zip(a["top"], b["top"]))
    out["trace_rel_diff"] = abs(a["trace"] - b["trace"]) / max(abs(a["trace"]), 1e-300)
    out["n_params"] = a["n_params"]
    return out


def sec_spectrum_block(chk: Check) -> dict:
    """Lanczos and Hutchinson on block 0's five groups, float64 and float32."""
    return _spectrum(chk, whole=False)


def sec_spectrum_whole(chk: Check) -> dict:
    """Lanczos and Hutchinson on the whole model, float64 and float32."""
    return _spectrum(chk, whole=True)


def sec_exact_hessian_encoder(chk: Check) -> dict:
    """exact_hessian on a TransformerEncoderLayer against autograd."""
    try:
        import transformer_hessian.exact_hessian as mod
    except ImportError as err:
        try:
            from transformer_hessian import exact_hessian as mod
        except ImportError:
            return {"skipped": f"not available: transformer_hessian.exact_hessian is not importable ({err})"}
    fn = getattr(mod, "exact_hessian", mod)
    if not callable(fn):
        return {"skipped": "not available: transformer_hessian.exact_hessian has no callable exact_hessian"}
    from torch.func import functional_call

    e = chk.sizes.encoder
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        e["d_model"], e["nhead"], e["dim_feedforward"], dropout=0.0, batch_first=True
    ).to(chk.dev, torch.float64)
    layer.eval()
    gen = torch.Generator().manual_seed(1)
    X = torch.randn(e["batch"], e["tokens"], e["d_model"], generator=gen, dtype=torch.float64).to(chk.dev)
    T = torch.randn(e["batch"], e["tokens"], e["d_model"], generator=gen, dtype=torch.float64).to(chk.dev)
    if chk.cuda:
        fn(layer, X, T, loss="mse")  # warm-up
    H, sec = timed(chk.dev, lambda: fn(layer, X, T, loss="mse"))
    named = list(layer.named_parameters())
    shapes, sizes = [p.shape for _, p in named], [p.numel() for _, p in named]

    def f(flat):
        params = {n: p.reshape(s) for (n, _), p, s in zip(named, torch.split(flat, sizes), shapes)}
        return torch.nn.functional.mse_loss(functional_call(layer, params, (X,)), T)

    w = torch.cat([p.detach().reshape(-1) for _, p in named])
    R, ref_s = timed(chk.dev, lambda: _reverse_over_reverse(chk, f, w, "the encoder reference"))
    return {
        "layer": e,
        "P": int(w.numel()),
        "exact_hessian_s": sec,
        "reference_s": ref_s,
        "exact_vs_reference_rel": rel_diff(H, R),
    }


def sec_exact_hessian_lm(chk: Check) -> dict:
    """exact_hessian and HessianOperator of any model (the graph engine) on a nanoGPT-style GPT
    with the causal LM loss, on the device, against reverse-over-reverse autograd there."""
    from torch.func import functional_call

    from transformer_hessian import HessianOperator, exact_hessian
    from transformer_hessian.bench.lm_models import NanoGPT

    e = chk.sizes.encoder
    torch.manual_seed(0)
    V, T, d, h = 16, e["tokens"], e["d_model"], e["nhead"]
    model = NanoGPT(V, T, d, h, 1).to(chk.dev, torch.float64).eval()
    ids = torch.randint(0, V, (e["batch"], T), generator=torch.Generator().manual_seed(1)).to(chk.dev)
    H, sec = timed(chk.dev, lambda: exact_hessian(model, ids, ids, loss="causal_lm", progress=False))
    named = list(model.named_parameters())
    shapes, sizes = [p.shape for _, p in named], [p.numel() for _, p in named]

    def f(flat):
        params = {n: p.reshape(s) for (n, _), p, s in zip(named, torch.split(flat, sizes), shapes)}
        logits = functional_call(model, params, (ids,))
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))

    w = torch.cat([p.detach().reshape(-1) for _, p in named])
    R, ref_s = timed(chk.dev, lambda: _reverse_over_reverse(chk, f, w, "the language-model reference"))
    op = HessianOperator(model, ids, ids, loss="causal_lm")
    v = torch.randn(w.numel(), generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(chk.dev)
    Hv, hvp_s = timed(chk.dev, lambda: op @ v)
    Hv2 = op @ v  # the third product of this shape is captured in a CUDA graph (on CUDA); then replayed
    Hv3, replay_s = timed(chk.dev, lambda: op @ v)
    return {
        "model": {"vocab": V, "T": T, "d": d, "heads": h, "layers": 1, "batch": e["batch"]},
        "P": int(w.numel()),
        "exact_hessian_s": sec,
        "reference_s": ref_s,
        "exact_vs_reference_rel": rel_diff(H, R),
        "hvp_s": hvp_s,
        "hvp_vs_dense_rel": rel_diff(Hv, R @ v),
        "hvp_graphed_s": replay_s,
        "hvp_graphed_vs_dense_rel": max(rel_diff(Hv2, R @ v), rel_diff(Hv3, R @ v)),
        "cuda_graphs": op.graph_status(),
    }


def sec_bench_models(chk: Check) -> dict:
    """``transformer-hessian bench models`` on the device: the engine's dense Hessian and its
    Hessian-vector products of the bench's GPT-2-like and Llama-like models against every correct
    peer there (tiny models with --tiny); on CUDA the dense Hessian again with larger blocks."""
    from transformer_hessian.bench.models import CASES, bench_case, build, gemm_rate
    from transformer_hessian.engine.api import block_size, prepare
    from transformer_hessian.engine.sweep import dense_hessian

    names = ("tiny", "tiny-llama") if chk.args.tiny else ("gpt2-like", "llama-like")
    rows, hvps = (12, 2) if chk.args.tiny else (256, 8)
    out = {"gemm_gflops": gemm_rate(512 if chk.args.tiny else 4096, device=chk.dev), "cases": {}}
    keep = ("P", "block", "blocks", "engine_s", "output_alloc_s", "fastest_correct_peer", "speedup", "autograd_s",
            "autograd_err", "peer_failures", "engine_gflops", "engine_hvp_s", "autograd_hvp_s", "hvp_speedup",
            "engine_hvp_block_s", "autograd_hvp_block_best_s", "hvp_block_speedup", "autograd_hvp_fused_kernel",
            "engine_cuda_graphs")  # fmt: skip
    for name in names:
        chk.clock.check(f"bench_models {name}")
        r = bench_case(name, rows, hvps, chk.dev, peer_chunk=rows if chk.cuda else 64)  # a GPU: one call per peer
        c = {k: r[k] for k in keep if k in r}
        c.update({k: v for k, v in r.items() if k.endswith("_err") or (k.endswith("_s") and k not in c)})
        c["gemm_share"] = r["engine_gflops"] / out["gemm_gflops"]
        if chk.cuda or chk.args.tiny:  # fewer, larger sweeps: a GPU has the memory and pays per kernel launch
            model, ids = (t.to(chk.dev) for t in build(CASES[name]))
            for mib in (1024, 4096):  # the default on CUDA is 16 GiB (engine.api.CUDA_BLOCK_BYTES)
                chk.clock.check(f"bench_models {name} blocks of {mib} MiB")
                run = prepare(model, ids, ids, loss="causal_lm")
                K = block_size(run, mib << 20)
                _, sec = timed(chk.dev, lambda run=run, K=K: dense_hessian(run, K))
                c[f"engine_s_blocks_{mib}MiB"] = {"K": K, "seconds": sec}
        out["cases"][name] = c
    return out


def sec_large_block(chk: Check) -> dict:
    """A block of the exact Hessian that a dense Hessian of the whole model could not give: the
    fused attention input projection (``h.0.c_attn``, 49,536 entries, a 19.6 GB block) of a 4-layer
    d-128 nanoGPT-style GPT (vocabulary 1024, T 64, batch 8); 4 of its rows against autograd's rows
    of the whole model (math kernel). Tiny sizes with --tiny."""
    from transformer_hessian import exact_hessian
    from transformer_hessian.bench.lm_models import NanoGPT
    from transformer_hessian.bench.lm_peers import autograd_rows

    vocab, T, d, h, layers, B = (16, 6, 8, 2, 2, 2) if chk.args.tiny else (1024, 64, 128, 4, 4, 8)
    torch.manual_seed(0)
    model = NanoGPT(vocab, T, d, h, layers).to(chk.dev, torch.float64).eval()
    ids = torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(1)).to(chk.dev)
    names = [n for n, _ in model.named_parameters()]
    offsets = dict(zip(names, np.cumsum([0] + [p.numel() for _, p in model.named_parameters()])[:-1].tolist()))
    sel = ["h.0.c_attn.weight", "h.0.c_attn.bias"]
    cols = torch.cat([torch.arange(offsets[n], offsets[n] + model.get_parameter(n).numel()) for n in sel])
    H, sec = timed(chk.dev, lambda: exact_hessian(model, ids, ids, loss="causal_lm", params=sel, progress=False))
    pick = torch.linspace(0, len(cols) - 1, 4).round().long()
    R, ref_s = autograd_rows(model, ids, cols[pick])
    return {
        "model": {"vocab": vocab, "T": T, "d": d, "heads": h, "layers": layers, "batch": B},
        "P_model": int(sum(p.numel() for p in model.parameters())),
        "P_block": int(len(cols)),
        "block_gb": 8 * len(cols) ** 2 / 1e9,
        "exact_block_s": sec,
        "autograd_4_rows_s": ref_s,
        "rows_vs_autograd_rel": rel_diff(H[pick], R[:, cols.to(R.device)]),
    }


def sec_train(name: str, compile_: bool):
    """The section that times training of experiment ``name`` (compiled or not)."""

    def run(chk: Check) -> dict:
        if compile_ and not chk.cuda and not chk.args.compile_on_cpu:
            return {
                "skipped": "torch.compile is timed on CUDA only (inductor on this CPU takes minutes to compile); "
                "--compile-on-cpu runs it here"
            }
        return _train(chk, name, compile_)

    return run


SECTIONS = {
    "train_mnist_eager": sec_train("hessian_mnist", False),
    "train_mnist_compiled": sec_train("hessian_mnist", True),
    "train_cifar100_eager": sec_train("landscape_cifar100", False),
    "train_cifar100_compiled": sec_train("landscape_cifar100", True),
    "hessian5_closed_form": sec_hessian5,
    "hessian5_reference": sec_hessian5_reference,
    "hessian5_curvlinops": sec_hessian5_curvlinops,
    "hessian9_closed_form": sec_hessian9,
    "hessian9_reference": sec_hessian9_reference,
    "spectrum_block": sec_spectrum_block,
    "spectrum_whole": sec_spectrum_whole,
    "exact_hessian_encoder": sec_exact_hessian_encoder,
    "exact_hessian_lm": sec_exact_hessian_lm,
    "bench_models": sec_bench_models,
    "large_block": sec_large_block,
}


# ------------------------------------------------------------------ report


def environment(chk: Check) -> dict:
    """Versions, device, its bf16 peak (or "unknown") and the commit."""
    from transformer_hessian.bench.train import PEAK_TFLOPS
    from transformer_hessian.util.env import git_commit

    name = torch.cuda.get_device_name(chk.dev) if chk.cuda else platform.processor() or "cpu"
    commit = git_commit()
    stamp = ROOT / ".carry" / "COMMIT"
    # the device's copy of the tree may have no .git, or (seen on 2026-12-04) the .git of the
    # session's first commit under a newer tree: the commit that gpu_carry.py stamped comes first
    if stamp.exists() and not commit.startswith(stamp.read_text().strip()):
        commit = f"{stamp.read_text().strip()} (.carry/COMMIT, from scripts/gpu_carry.py; git there: {commit})"
    peak = next((p["bf16"] for k, p in PEAK_TFLOPS.items() if chk.cuda and k in name), None)
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "device": str(chk.dev),
        "device_name": name,
        "bf16_peak_tflops": peak if peak is not None else "unknown",
        "git_commit": commit,
        "cpu_count": __import__("os").cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }


def summary(name: str, r: dict) -> str:
    """One line of the section's key numbers for the Markdown table."""
    if name.startswith("train_"):
        frac = r.get("fraction_of_peak")
        return (
            f"{r['images_per_s']:.0f} img/s; {r['achieved_tflops']:.3g} TFLOP/s"
            + (f" ({100 * frac:.2f}% of {r['peak_tflops']:.0f})" if frac is not None else " (peak unknown)")
            + f"; data {100 * r['data_loading_share']:.1f}%; {r['data'].split(' (')[0]}"
        )
    if name in ("hessian5_closed_form", "hessian9_closed_form"):
        return f"P={r['P']}; device {r['device_s']:.3g} s, CPU {r['cpu_s']:.3g} s; CPU vs device {r['cpu_vs_device_rel']:.1e}"
    if name.endswith("_reference"):
        return f"P={r['P']}; autograd {r['reference_s']:.3g} s; closed form vs autograd {r['closed_form_vs_reference_rel']:.1e}"
    if name == "hessian5_curvlinops":
        return (
            f"curvlinops {r['curvlinops_s']:.3g} s; closed form vs curvlinops {r['closed_form_vs_curvlinops_rel']:.1e}"
        )
    if name.startswith("spectrum_"):
        a, b = r["float64"], r["float32"]
        return (
            f"P={r['n_params']}; lambda_max {a['top'][0]:.6g} (f64) / {b['top'][0]:.6g} (f32), rel diff "
            f"{r['top_eigenvalue_rel_diff']:.1e}; trace {a['trace']:.6g} / {b['trace']:.6g}, rel diff "
            f"{r['trace_rel_diff']:.1e}; f64 {a['lanczos_s'] + a['hutchinson_s']:.3g} s, "
            f"f32 {b['lanczos_s'] + b['hutchinson_s']:.3g} s"
        )
    if name in ("exact_hessian_encoder", "exact_hessian_lm"):
        extra = f"; HVP {r['hvp_s']:.3g} s, rel {r['hvp_vs_dense_rel']:.1e}" if "hvp_s" in r else ""
        if "hvp_graphed_s" in r:
            extra += f"; again {r['hvp_graphed_s']:.3g} s, rel {r['hvp_graphed_vs_dense_rel']:.1e} (graphs: {r['cuda_graphs']})"
        return (
            f"P={r['P']}; exact {r['exact_hessian_s']:.3g} s, autograd {r['reference_s']:.3g} s; "
            f"rel {r['exact_vs_reference_rel']:.1e}{extra}"
        )
    if name == "large_block":
        return (
            f"block {r['P_block']} of P={r['P_model']} ({r['block_gb']:.1f} GB) in {r['exact_block_s']:.3g} s; "
            f"4 rows vs autograd {r['rows_vs_autograd_rel']:.1e} (autograd {r['autograd_4_rows_s']:.3g} s)"
        )
    if name == "bench_models":
        parts = []
        for case, c in r["cases"].items():
            peer = c.get("fastest_correct_peer")
            vs = f"{c['speedup']:.1f}x vs {peer}" if peer else "no peer agrees"
            larger = ", ".join(
                f"K {v['K']} {v['seconds']:.3g} s" for k, v in c.items() if k.startswith("engine_s_blocks")
            )
            parts.append(
                f"{case} P={c['P']}: dense {c['engine_s']:.3g} s (K {c['block']}{'; ' + larger if larger else ''}), "
                f"{vs}, err vs autograd {c['autograd_err']:.1e}; HVP {c['hvp_speedup']:.2f}x, "
                f"block of {8 if 'tiny' not in case else 2} {c['hvp_block_speedup']:.2f}x"
            )
        return f"gemm {r['gemm_gflops']:.0f} GFLOP/s; " + "; ".join(parts)
    return ""


def markdown(result: dict) -> str:
    """The Markdown table: one row per section."""
    env = result["environment"]
    lines = [
        "# GPU check (scripts/gpu_check.py)",
        "",
        f"{'Tiny sizes' if result['tiny'] else 'Full sizes'}; device {env['device']} ({env['device_name']}); "
        f"torch {env['torch']} (CUDA {env['cuda']}); python {env['python']}; commit {env['git_commit']}; "
        f"bf16 peak {env['bf16_peak_tflops']} TFLOP/s; budget {result['budget_s']:.0f} s, "
        f"used {result['elapsed_s']:.1f} s.",
        "",
        "| section | status | seconds | result |",
        "|:--|:--|--:|:--|",
    ]
    for name, s in result["sections"].items():
        if s["status"] == "ok":
            try:
                text = summary(name, s["result"])
            except (KeyError, TypeError, ValueError) as err:
                text = f"(summary failed: {err!r})"
        else:
            text = s.get("reason") or s.get("error", "")
        text = text.replace("|", "/").replace("\n", " ")
        lines.append(f"| {name} | {s['status']} | {s['seconds']:.2f} | {text} |")
    return "\n".join(lines) + "\n"


def run(args) -> dict:
    """Run the sections in order under the budget; write the JSON and the Markdown table."""
    chk = Check(args)
    names = list(SECTIONS)
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in SECTIONS]
        if unknown:
            raise SystemExit(f"--only: unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
        names = wanted
    try:
        chk.cache["mnist_folder"] = find_mnist(args.mnist)
    except FileNotFoundError as err:
        raise SystemExit(str(err)) from None
    result = {
        "script": "scripts/gpu_check.py",
        "argv": sys.argv[1:],
        "tiny": bool(args.tiny),
        "budget_s": float(args.budget),
        "environment": environment(chk),
        "sizes": dataclasses.asdict(chk.sizes),
        "sections": {},
    }
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        t0 = time.perf_counter()
        entry: dict
        if chk.clock.remaining() <= 0:
            entry = {"status": "skipped", "reason": f"time budget of {args.budget:.0f} s spent before this section"}
        else:
            print(f"[gpu_check] {name} ... ({chk.clock.remaining():.0f} s of budget left)", file=sys.stderr, flush=True)
            try:
                r = SECTIONS[name](chk)
                if "skipped" in r:
                    entry = {"status": "skipped", "reason": r["skipped"]}
                else:
                    entry = {"status": "ok", "result": r}
            except BudgetExceeded as err:
                entry = {"status": "skipped", "reason": str(err)}
            except Exception as err:  # noqa: BLE001 (a failing section is recorded; the rest run)
                entry = {
                    "status": "error",
                    "error": f"{type(err).__name__}: {err}",
                    "traceback": traceback.format_exc(limit=8),
                }
            finally:
                if chk.cuda:
                    torch.cuda.empty_cache()
        entry["seconds"] = time.perf_counter() - t0
        if chk.cuda:
            entry["max_memory_gib"] = torch.cuda.max_memory_allocated(chk.dev) / 2**30
            torch.cuda.reset_peak_memory_stats(chk.dev)
        result["sections"][name] = entry
        print(f"[gpu_check] {name}: {entry['status']} in {entry['seconds']:.1f} s", file=sys.stderr, flush=True)
        # after each section, so that a run killed at its time limit still leaves what it had done
        out.joinpath("gpu_check.partial.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    out.joinpath("gpu_check.partial.json").unlink()
    result["elapsed_s"] = chk.clock.elapsed()
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    md = markdown(result)
    (out / "gpu_check.md").write_text(md)
    print(md, end="", flush=True)
    return result


def parse_args(argv=None):
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("outdir", help="folder for gpu_check.json and gpu_check.md")
    p.add_argument("--tiny", action="store_true", help="tiny sizes (a CPU run in seconds; the test)")
    p.add_argument("--budget", type=float, default=480.0, help="global time budget in seconds (default 480)")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda[:N]")
    p.add_argument("--mnist", default=None, help="folder with the four MNIST IDX files (raw or .gz)")
    p.add_argument("--only", default=None, help=f"comma-separated sections to run: {', '.join(SECTIONS)}")
    p.add_argument("--train-steps", type=int, default=None, help="timed training steps per row (default 200)")
    p.add_argument("--train-warmup", type=int, default=None, help="untimed training steps first (default 20)")
    p.add_argument("--compile-on-cpu", action="store_true", help="also time the torch.compile rows on a CPU")
    a = p.parse_args(argv)
    if a.budget <= 0:
        p.error("--budget must be positive")
    return a


if __name__ == "__main__":
    run(parse_args())
