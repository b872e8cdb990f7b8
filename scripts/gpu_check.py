"""One short check of every GPU path of the project: ``make gpu-check`` (docs/gpu.md).

    PYTHONPATH=src python scripts/gpu_check.py OUTDIR [--tiny] [--budget S] [--only a,b] [--mnist DIR]

Runs :data:`SECTIONS` in order on ``--device``, each timed and wrapped so that a failing section is
recorded with its error and the rest still run; the time budget is checked before every section and
inside the long loops, and what it cuts off is recorded as skipped. Writes ``OUTDIR/gpu_check.json``
and ``OUTDIR/gpu_check.md``. ``--tiny``: sizes that run on a CPU in seconds (tests/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import torch

from transformer_hessian import ALL_GROUPS, GROUPS, HessianOperator, exact_hessian
from transformer_hessian.bench.lm_models import nano_gpt
from transformer_hessian.bench.lm_peers import autograd_rows, batched_rows, flat_loss
from transformer_hessian.bench.models import CASES, bench_case, build, gemm_rate
from transformer_hessian.bench.problem import build_problem
from transformer_hessian.bench.scale import rel_err
from transformer_hessian.bench.train import bench_experiment, device_peak_tflops
from transformer_hessian.config.settings import load_settings
from transformer_hessian.core.hessian import hessian_all_groups, hessian_closed_form, hessian_curvlinops, loss_of_groups
from transformer_hessian.core.krylov import FlatModel
from transformer_hessian.core.model import ModelConfig, ViT
from transformer_hessian.core.spectral import batched_hvp, hutchinson_trace, lanczos_tridiagonal, ritz, top_eigenvalues
from transformer_hessian.data import load_dataset
from transformer_hessian.data.sources import MNIST_FILES
from transformer_hessian.engine.api import block_size, prepare
from transformer_hessian.engine.ops.losses import causal_lm
from transformer_hessian.engine.sweep import dense_hessian
from transformer_hessian.theory.layout import offsets_of
from transformer_hessian.util.device import synchronize
from transformer_hessian.util.env import git_commit, resolve_device

ROOT = Path(__file__).resolve().parents[1]
#: Folders searched for MNIST (IDX files, raw or .gz) when --mnist is not given.
MNIST_CANDIDATES = (ROOT / ".carry" / "mnist", ROOT / "results" / "data" / "mnist")
MNIST_NAMES = [name for pair in MNIST_FILES.values() for name in pair]

#: Each size as (full: the paper's shapes, a few hundred training steps; --tiny).
SIZES = {
    "train_steps": (200, 3),
    "train_warmup": (20, 1),
    "cifar_model": ({}, dict(width=16, depth=2, d_k=16, d_ff=32)),  # overrides of landscape_cifar100's model
    "cifar_batch": (None, 8),  # None: the config's
    "mnist_batch": (None, 16),
    "hessian_shape": ("paper", "default"),  # a key of bench.shapes.SHAPES
    "hessian_width": (16, 4),
    "hessian_batch": (128, 8),
    "ref_chunk": (128, 64),  # rows per reverse-over-reverse chunk
    "spec_model": (
        dict(image_size=32, channels=3, num_classes=100, patch_size=4, width=128, depth=8, d_k=128, d_ff=512),
        dict(image_size=8, channels=3, num_classes=10, patch_size=4, width=4, depth=2, d_k=4, d_ff=8),
    ),
    "spec_batch": (128, 6),
    "lanczos_steps": (40, 5),
    "n_eigenvalues": (5, 3),
    "n_probes": (30, 2),
    "hvp_chunk": (8, 8),
    "encoder": (
        dict(d_model=32, nhead=4, dim_feedforward=64, batch=8, tokens=16),
        dict(d_model=8, nhead=2, dim_feedforward=12, batch=3, tokens=5),
    ),
}


class BudgetExceeded(RuntimeError):
    """The time budget ran out inside a section."""


class Check:
    """The run: arguments, device, sizes and the time budget."""

    def __init__(self, args):
        self.args, self.dev, self.t0 = args, resolve_device(args.device), time.perf_counter()
        self.cuda, self.mnist = self.dev.type == "cuda", find_mnist(args.mnist)
        self.sizes = SimpleNamespace(**{k: tiny if args.tiny else full for k, (full, tiny) in SIZES.items()})
        for key in ("train_steps", "train_warmup"):
            if getattr(args, key) is not None:
                setattr(self.sizes, key, getattr(args, key))

    @functools.cached_property
    def config(self):
        """config/paper.yaml, validated and typed, read once."""
        return load_settings(str(ROOT / "config" / "paper.yaml"))

    def remaining(self) -> float:
        """Seconds of the budget left (negative once spent)."""
        return self.args.budget - (time.perf_counter() - self.t0)

    def check(self, what: str) -> None:
        """Raise BudgetExceeded naming ``what`` once the budget is spent."""
        if self.remaining() <= 0:
            raise BudgetExceeded(f"time budget of {self.args.budget:.0f} s spent during {what}")


def timed(dev: torch.device, fn):
    """(result, seconds) of ``fn()``, the device's queued kernels done before and after."""
    synchronize(dev)
    t0 = time.perf_counter()
    out = fn()
    synchronize(dev)
    return out, time.perf_counter() - t0


def find_mnist(given: str | None) -> Path | None:
    """The folder given (it must hold the four MNIST IDX files, raw or .gz), else the first of
    :data:`MNIST_CANDIDATES` that holds them, else None (random tensors of MNIST's shape)."""

    def complete(folder: Path) -> bool:
        return all((folder / f).exists() or (folder / f"{f}.gz").exists() for f in MNIST_NAMES)

    if not given:
        return next(filter(complete, MNIST_CANDIDATES), None)
    folder = Path(given).expanduser().resolve()
    if not complete(folder):
        raise FileNotFoundError(f"--mnist {given}: the four MNIST IDX files (raw or .gz) are not all in {folder}")
    return folder


@functools.cache
def load_mnist(folder: Path) -> dict:
    """MNIST by ``data.load_dataset`` (its IDX reader and normalisation) from a temporary ``mnist/``
    folder of links to the files of ``folder``, so that their decompression is not written there."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "mnist").mkdir()
        for f in folder.iterdir():
            Path(tmp, "mnist", f.name).symlink_to(f)
        return load_dataset("mnist", tmp)


def sec_train(chk: Check, name: str, compile_: bool) -> dict:
    """Training throughput of experiment ``name`` with the paper's CIFAR-100 recipe (bf16 autocast,
    crop+flip, warm-up + cosine), timed by ``bench.train.bench_experiment``."""
    if compile_ and not chk.cuda and not chk.args.compile_on_cpu:
        reason = "torch.compile is timed on CUDA only (inductor on this CPU takes minutes to compile)"
        return {"skipped": f"{reason}; --compile-on-cpu runs it here"}
    if compile_:
        torch._dynamo.reset()
    spec, s = chk.config.experiments[name], chk.sizes
    recipe = chk.config.experiments["landscape_cifar100"].train
    same = {k: getattr(recipe, k) for k in ("amp", "augment", "crop_padding", "warmup_epochs", "schedule")}
    batch = (s.mnist_batch if name == "hessian_mnist" else s.cifar_batch) or spec.train.batch_size
    train = dataclasses.replace(spec.train, compile=compile_, batch_size=batch, **same)
    model = dataclasses.replace(spec.model, **s.cifar_model) if name == "landscape_cifar100" else spec.model
    spec = dataclasses.replace(spec, model=model, train=train)
    data, note = None, "synthetic (random tensors of the data set's shape)"
    if name == "hessian_mnist" and chk.mnist is not None:
        data, note = load_mnist(chk.mnist), f"real MNIST from {chk.mnist} (transformer_hessian.data.load_dataset)"
    t0 = time.perf_counter()
    row = bench_experiment(
        name,
        spec,
        device=chk.dev,
        steps=s.train_steps,
        warmup=s.train_warmup,
        synthetic=data is None,
        data_root=".",
        data=data,
    )
    row.update(data=note, wall_s_with_warmup_and_compile=time.perf_counter() - t0, model=spec.model.to_dict())
    row["peak_tflops"] = "unknown" if row["peak_tflops"] is None else row["peak_tflops"]
    return row


def _problem(chk: Check, dev):
    """Block 0's five- or nine-group Hessian problem: the bench's seeded single-block ViT and batch."""
    s = chk.sizes
    return build_problem(s.hessian_width, s.hessian_batch, seed=0, shape=s.hessian_shape, device=str(dev))


def _closed_form(nine: bool, model, x, y):
    """(H, method) of block 0's nine-group Hessian, or (H, None) of its five-group closed form."""
    return hessian_all_groups(model, 0, x, y) if nine else (hessian_closed_form(model, 0, x, y), None)


def sec_closed_form(chk: Check, nine: bool) -> dict:
    """The five- or nine-group Hessian on the device (after a warm-up on CUDA) and on the CPU."""
    s = chk.sizes
    out = {} if nine else {"shape": s.hessian_shape, "width": s.hessian_width, "batch": s.hessian_batch}
    model, x, y = _problem(chk, chk.dev)
    if chk.cuda:
        _closed_form(nine, model, x, y)  # warm-up (kernels, caches)
    (H, method), out["device_s"] = timed(chk.dev, lambda: _closed_form(nine, model, x, y))
    cpu = _problem(chk, "cpu")
    (Hc, _), out["cpu_s"] = timed(torch.device("cpu"), lambda: _closed_form(nine, *cpu))
    out.update(P=int(H.shape[0]), cpu_vs_device_rel=rel_err(H.cpu(), Hc))
    return {"method": method, **out} if nine else {**out, "device_dtype": str(H.dtype)}


def sec_reference(chk: Check, nine: bool) -> dict:
    """The five- or nine-group Hessian against reverse-over-reverse autograd on the device."""
    model, x, y = _problem(chk, chk.dev)
    loss, w = loss_of_groups(model, 0, x, y, ALL_GROUPS if nine else GROUPS)
    check = partial(chk.check, "the reverse-over-reverse reference")
    R, sec = batched_rows(loss, w, torch.arange(len(w)), chk.sizes.ref_chunk, check)
    return {
        "P": len(w),
        "reference": "reverse-over-reverse autograd (autograd.grad of the gradient, is_grads_batched, "
        f"{chk.sizes.ref_chunk}-row chunks, sdpa MATH) on {chk.dev}",
        "reference_s": sec,
        "closed_form_vs_reference_rel": rel_err(_closed_form(nine, model, x, y)[0], R),
        "reference_asymmetry_rel": rel_err(R, R.T),
    }


def sec_curvlinops(chk: Check) -> dict:
    """The five-group closed form against curvlinops on the device (when importable)."""
    try:
        import curvlinops
    except ImportError as err:
        return {"skipped": f"curvlinops is not importable ({err}); carry its wheel (docs/gpu.md)"}
    if not chk.cuda and not chk.args.tiny:
        return {"skipped": "curvlinops at the paper shape takes about 2 minutes on a CPU: run on CUDA only"}
    model, x, y = _problem(chk, chk.dev)
    Hc, sec = timed(chk.dev, lambda: hessian_curvlinops(model, 0, x, y))
    return {
        "curvlinops_version": getattr(curvlinops, "__version__", "unknown"),
        "curvlinops_s": sec,
        "closed_form_vs_curvlinops_rel": rel_err(hessian_closed_form(model, 0, x, y), Hc),
    }


def _spectrum_of(chk: Check, whole: bool, dtype: torch.dtype) -> dict:
    """Lanczos top eigenvalues and Hutchinson trace, in ``dtype``, of the Hessian of the whole
    spectrum model or of block 0's five groups (seeded initialisation, one random batch)."""
    s, cfg = chk.sizes, ModelConfig(**chk.sizes.spec_model)
    torch.manual_seed(0)
    model = ViT(cfg).to(chk.dev, dtype).eval()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(s.spec_batch, cfg.channels, cfg.image_size, cfg.image_size, generator=gen).to(chk.dev, dtype)
    y = torch.randint(0, cfg.num_classes, (s.spec_batch,), generator=gen).to(chk.dev)
    if whole:
        fm = FlatModel.of(model)
        loss, w = (lambda p: fm.mean_loss(p, x, y)), fm.w0
    else:
        loss, w = loss_of_groups(model, 0, x, y)
    hvp = batched_hvp(loss, w, s.hvp_chunk)
    check = partial(chk.check, "the whole model's spectrum" if whole else "block 0's spectrum")

    def mv(V):
        check()
        return hvp(V)

    def lanczos():
        # one start for both dtypes (drawn in float64, then cast): their difference is one of precision
        v0 = torch.randn(1, len(w), generator=torch.Generator().manual_seed(271), dtype=torch.float64)
        runs = ritz(*lanczos_tridiagonal(mv, v0.to(w.device, w.dtype), s.lanczos_steps, seed=0))
        return top_eigenvalues(mv, w, s.n_eigenvalues, s.lanczos_steps, runs=runs)

    top, lanczos_s = timed(chk.dev, lanczos)
    tr, hutchinson_s = timed(chk.dev, lambda: hutchinson_trace(mv, w, s.n_probes, seed=0))
    return {
        "top": top["eigenvalues"],
        "top_residuals": top["residuals"],
        "trace": tr["mean"],
        "trace_stderr": tr["stderr"],
        "lanczos_s": lanczos_s,
        "hutchinson_s": hutchinson_s,
        "n_params": len(w),
    }


def sec_spectrum(chk: Check, whole: bool) -> dict:
    """Lanczos and Hutchinson in float64 and float32 and their differences (whole model or block 0)."""
    s = chk.sizes
    a, b = _spectrum_of(chk, whole, torch.float64), _spectrum_of(chk, whole, torch.float32)

    def rel(p, q):
        return abs(p - q) / max(abs(p), 1e-300)

    return {
        "model": s.spec_model,
        "batch": s.spec_batch,
        "weights": "seeded initialisation (torch.manual_seed(0)), one random batch",
        "lanczos_steps": s.lanczos_steps,
        "hutchinson_probes": s.n_probes,
        "float64": a,
        "float32": b,
        "top_eigenvalue_rel_diff": rel(a["top"][0], b["top"][0]),
        "top_k_max_rel_diff": max(map(rel, a["top"], b["top"])),
        "trace_rel_diff": rel(a["trace"], b["trace"]),
        "n_params": a["n_params"],
    }


def _against_autograd(chk: Check, model, inputs, targets, loss: str, loss_of_output) -> tuple[dict, torch.Tensor]:
    """exact_hessian of ``model`` (after a warm-up on CUDA) and every row of autograd's
    reverse-over-reverse Hessian of ``loss_of_output(model(inputs))``: times, P, their error; and H."""
    exact = partial(exact_hessian, model, inputs, targets, loss=loss, progress=False)
    if chk.cuda:
        exact()
    out = {}
    H, out["exact_hessian_s"] = timed(chk.dev, exact)
    f, w = flat_loss(model, (inputs,), loss_of_output)
    check = partial(chk.check, f"the reference of {type(model).__name__}")
    R, out["reference_s"] = batched_rows(f, w, torch.arange(len(w)), chk.sizes.ref_chunk, check)
    return {**out, "P": len(w), "exact_vs_reference_rel": rel_err(H, R)}, R


def sec_exact_hessian_encoder(chk: Check) -> dict:
    """exact_hessian of a TransformerEncoderLayer (MSE loss) against reverse-over-reverse autograd."""
    e = chk.sizes.encoder
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(e["d_model"], e["nhead"], e["dim_feedforward"], 0.0, batch_first=True)
    gen, shape = torch.Generator().manual_seed(1), (e["batch"], e["tokens"], e["d_model"])
    X, T = (torch.randn(shape, generator=gen, dtype=torch.float64).to(chk.dev) for _ in range(2))
    mse = partial(torch.nn.functional.mse_loss, target=T)
    return {"layer": e, **_against_autograd(chk, layer.to(chk.dev, torch.float64).eval(), X, T, "mse", mse)[0]}


def sec_exact_hessian_lm(chk: Check) -> dict:
    """exact_hessian and HessianOperator (the graph engine) of a one-layer nanoGPT-style GPT with the
    causal LM loss, against reverse-over-reverse autograd on the device."""
    e = chk.sizes.encoder
    V, T, d, h = 16, e["tokens"], e["d_model"], e["nhead"]
    torch.manual_seed(0)
    model = nano_gpt(V, T, d, h, 1).to(chk.dev, torch.float64).eval()
    ids = torch.randint(0, V, (e["batch"], T), generator=torch.Generator().manual_seed(1)).to(chk.dev)
    out = {"model": {"vocab": V, "T": T, "d": d, "heads": h, "layers": 1, "batch": e["batch"]}}
    res, R = _against_autograd(chk, model, ids, ids, "causal_lm", lambda logits: causal_lm(logits, ids))
    op, P = HessianOperator(model, ids, ids, loss="causal_lm"), res["P"]
    v = torch.randn(P, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(chk.dev)
    Hv, out["hvp_s"] = timed(chk.dev, lambda: op @ v)
    Hv2 = op @ v  # the third product of this shape is captured in a CUDA graph (on CUDA), then replayed
    Hv3, out["hvp_graphed_s"] = timed(chk.dev, lambda: op @ v)
    out.update(res, hvp_vs_dense_rel=rel_err(Hv, R @ v))
    out["hvp_graphed_vs_dense_rel"] = max(rel_err(Hv2, R @ v), rel_err(Hv3, R @ v))
    return {**out, "cuda_graphs": op.graph_status()}


def sec_bench_models(chk: Check) -> dict:
    """``transformer-hessian bench models`` on the device (the bench's GPT-2-like and Llama-like
    models, tiny ones with --tiny), and the engine's dense Hessian again in blocks of 1 and 4 GiB."""
    names = ("tiny", "tiny-llama") if chk.args.tiny else ("gpt2-like", "llama-like")
    rows, hvps = (12, 2) if chk.args.tiny else (256, 8)
    out = {"gemm_gflops": gemm_rate(512 if chk.args.tiny else 4096, device=chk.dev), "cases": {}}
    for name in names:
        chk.check(f"bench_models {name}")
        r = bench_case(name, rows, hvps, chk.dev, peer_chunk=rows if chk.cuda else 64)  # a GPU: one call per peer
        c = {k: v for k, v in r.items() if k not in ("case", "device", "config", "factored", "rows_timed", "warm_up")}
        c["gemm_share"] = r["engine_gflops"] / out["gemm_gflops"]
        if chk.cuda or chk.args.tiny:  # fewer, larger sweeps: a GPU has the memory and pays per kernel launch
            model, ids = (t.to(chk.dev) for t in build(CASES[name]))
            for mib in (1024, 4096):  # the default on CUDA is 16 GiB (engine.api.CUDA_BLOCK_BYTES)
                chk.check(f"bench_models {name} blocks of {mib} MiB")
                run = prepare(model, ids, ids, loss="causal_lm")
                K = block_size(run, mib << 20)
                _, sec = timed(chk.dev, lambda run=run, K=K: dense_hessian(run, K))
                c[f"engine_s_blocks_{mib}MiB"] = {"K": K, "seconds": sec}
        out["cases"][name] = c
    return out


def sec_large_block(chk: Check) -> dict:
    """The exact block of ``blocks.0.attn.qkv`` (49,536 entries, 19.6 GB) of a 4-layer d-128 nanoGPT-style
    GPT, too large for a dense Hessian of the model; 4 of its rows against autograd's (math kernel)."""
    vocab, T, d, h, layers, B = (16, 6, 8, 2, 2, 2) if chk.args.tiny else (1024, 64, 128, 4, 4, 8)
    torch.manual_seed(0)
    model = nano_gpt(vocab, T, d, h, layers).to(chk.dev, torch.float64).eval()
    ids = torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(1)).to(chk.dev)
    named = dict(model.named_parameters())
    start = dict(zip(named, offsets_of([p.shape for p in named.values()]).tolist()))
    sel = ["blocks.0.attn.qkv.weight", "blocks.0.attn.qkv.bias"]
    cols = torch.cat([torch.arange(start[n], start[n] + named[n].numel()) for n in sel])
    out = {"model": {"vocab": vocab, "T": T, "d": d, "heads": h, "layers": layers, "batch": B}}
    out.update(P_model=sum(p.numel() for p in named.values()), P_block=len(cols), block_gb=8 * len(cols) ** 2 / 1e9)
    block = partial(exact_hessian, model, ids, ids, loss="causal_lm", params=sel, progress=False)
    H, out["exact_block_s"] = timed(chk.dev, block)
    pick = torch.linspace(0, len(cols) - 1, 4).round().long()
    R, out["autograd_4_rows_s"] = autograd_rows(model, ids, cols[pick])
    return {**out, "rows_vs_autograd_rel": rel_err(H[pick], R[:, cols.to(R.device)])}


SECTIONS = {
    "train_mnist_eager": partial(sec_train, name="hessian_mnist", compile_=False),
    "train_mnist_compiled": partial(sec_train, name="hessian_mnist", compile_=True),
    "train_cifar100_eager": partial(sec_train, name="landscape_cifar100", compile_=False),
    "train_cifar100_compiled": partial(sec_train, name="landscape_cifar100", compile_=True),
    "hessian5_closed_form": partial(sec_closed_form, nine=False),
    "hessian5_reference": partial(sec_reference, nine=False),
    "hessian5_curvlinops": sec_curvlinops,
    "hessian9_closed_form": partial(sec_closed_form, nine=True),
    "hessian9_reference": partial(sec_reference, nine=True),
    "spectrum_block": partial(sec_spectrum, whole=False),
    "spectrum_whole": partial(sec_spectrum, whole=True),
    "exact_hessian_encoder": sec_exact_hessian_encoder,
    "exact_hessian_lm": sec_exact_hessian_lm,
    "bench_models": sec_bench_models,
    "large_block": sec_large_block,
}


def environment(chk: Check) -> dict:
    """Versions, device, its bf16 peak (or "unknown") and the commit."""
    commit, stamp = git_commit(), ROOT / ".carry" / "COMMIT"
    # the device's copy of the tree may have no .git, or the .git of an older commit under a newer
    # tree: the commit that scripts/gpu_carry.py stamped comes first
    if stamp.exists() and not commit.startswith(stamp.read_text().strip()):
        commit = f"{stamp.read_text().strip()} (.carry/COMMIT, from scripts/gpu_carry.py; git there: {commit})"
    peak = device_peak_tflops(chk.dev, "bf16")
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "device": str(chk.dev),
        "device_name": torch.cuda.get_device_name(chk.dev) if chk.cuda else platform.processor() or "cpu",
        "bf16_peak_tflops": "unknown" if peak is None else peak,
        "git_commit": commit,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }


#: The Markdown row of the sections whose name ends so: a format of the result (``str.format_map``).
EXACT_ROW = "P={P}; exact {exact_hessian_s:.3g} s, autograd {reference_s:.3g} s; rel {exact_vs_reference_rel:.1e}"
ROWS = {
    "_closed_form": "P={P}; device {device_s:.3g} s, CPU {cpu_s:.3g} s; CPU vs device {cpu_vs_device_rel:.1e}",
    "_reference": "P={P}; autograd {reference_s:.3g} s; closed form vs autograd {closed_form_vs_reference_rel:.1e}",
    "_curvlinops": "curvlinops {curvlinops_s:.3g} s; closed form vs curvlinops {closed_form_vs_curvlinops_rel:.1e}",
    "_encoder": EXACT_ROW,
    "_lm": EXACT_ROW + "; HVP {hvp_s:.3g} s, rel {hvp_vs_dense_rel:.1e}; "
    "again {hvp_graphed_s:.3g} s, rel {hvp_graphed_vs_dense_rel:.1e} (graphs: {cuda_graphs})",
    "large_block": "block {P_block} of P={P_model} ({block_gb:.1f} GB) in {exact_block_s:.3g} s; "
    "4 rows vs autograd {rows_vs_autograd_rel:.1e} (autograd {autograd_4_rows_s:.3g} s)",
}


def summary(name: str, r: dict) -> str:
    """One line of the section's key numbers for the Markdown table."""
    if row := next((f for end, f in ROWS.items() if name.endswith(end)), None):
        return row.format_map(r)
    if name.startswith("train_"):
        frac = r["fraction_of_peak"]
        peak = " (peak unknown)" if frac is None else f" ({100 * frac:.2f}% of {r['peak_tflops']:.0f})"
        data = f"data {100 * r['data_loading_share']:.1f}%; {r['data'].split(' (')[0]}"
        return f"{r['images_per_s']:.0f} img/s; {r['achieved_tflops']:.3g} TFLOP/s{peak}; {data}"
    if name.startswith("spectrum_"):
        a, b = r["float64"], r["float32"]
        top = f"lambda_max {a['top'][0]:.6g} (f64) / {b['top'][0]:.6g} (f32)"
        trace = f"trace {a['trace']:.6g} / {b['trace']:.6g}, rel diff {r['trace_rel_diff']:.1e}"
        secs = f"f64 {a['lanczos_s'] + a['hutchinson_s']:.3g} s, f32 {b['lanczos_s'] + b['hutchinson_s']:.3g} s"
        return f"P={r['n_params']}; {top}, rel diff {r['top_eigenvalue_rel_diff']:.1e}; {trace}; {secs}"
    parts = []  # bench_models
    for case, c in r["cases"].items():
        vs = f"{c['speedup']:.1f}x vs {c['fastest_correct_peer']}" if c["fastest_correct_peer"] else "no peer agrees"
        larger = ", ".join(f"K {v['K']} {v['seconds']:.3g} s" for k, v in c.items() if k.startswith("engine_s_blocks"))
        hvp = f"HVP {c['hvp_speedup']:.2f}x, block of {2 if 'tiny' in case else 8} {c['hvp_block_speedup']:.2f}x"
        dense = f"dense {c['engine_s']:.3g} s (K {c['block']}{'; ' + larger if larger else ''})"
        parts.append(f"{case} P={c['P']}: {dense}, {vs}, err vs autograd {c['autograd_err']:.1e}; {hvp}")
    return f"gemm {r['gemm_gflops']:.0f} GFLOP/s; " + "; ".join(parts)


def markdown(result: dict) -> str:
    """The Markdown table: one row per section."""
    env, sizes = result["environment"], "Tiny sizes" if result["tiny"] else "Full sizes"
    lines = [
        "# GPU check (scripts/gpu_check.py)",
        "",
        f"{sizes}; device {env['device']} ({env['device_name']}); torch {env['torch']} (CUDA {env['cuda']}); "
        f"python {env['python']}; commit {env['git_commit']}; bf16 peak {env['bf16_peak_tflops']} TFLOP/s; "
        f"budget {result['budget_s']:.0f} s, used {result['elapsed_s']:.1f} s.",
        "",
        "| section | status | seconds | result |",
        "|:--|:--|--:|:--|",
    ]
    for name, s in result["sections"].items():
        text = s.get("reason") or s.get("error", "")
        if s["status"] == "ok":
            try:
                text = summary(name, s["result"])
            except (KeyError, TypeError, ValueError) as err:
                text = f"(summary failed: {err!r})"
        text = text.replace("|", "/").replace("\n", " ")
        lines.append(f"| {name} | {s['status']} | {s['seconds']:.2f} | {text} |")
    return "\n".join(lines) + "\n"


def run_section(chk: Check, name: str) -> dict:
    """The section's JSON entry: ok with its result, skipped with the reason, or its error."""
    if chk.remaining() <= 0:
        return {"status": "skipped", "reason": f"time budget of {chk.args.budget:.0f} s spent before this section"}
    print(f"[gpu_check] {name} ... ({chk.remaining():.0f} s of budget left)", file=sys.stderr, flush=True)
    try:
        r = SECTIONS[name](chk)
        return {"status": "skipped", "reason": r["skipped"]} if "skipped" in r else {"status": "ok", "result": r}
    except BudgetExceeded as err:
        return {"status": "skipped", "reason": str(err)}
    except Exception as err:  # noqa: BLE001 (a failing section is recorded; the rest run)
        return {"status": "error", "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc(limit=8)}
    finally:
        if chk.cuda:
            torch.cuda.empty_cache()


def run(args) -> dict:
    """Run the sections in order under the budget; write the JSON and the Markdown table."""
    names = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else list(SECTIONS)
    if unknown := [n for n in names if n not in SECTIONS]:
        raise SystemExit(f"--only: unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
    try:
        chk = Check(args)
    except FileNotFoundError as err:
        raise SystemExit(str(err)) from None
    result = {"script": "scripts/gpu_check.py", "argv": sys.argv[1:], "tiny": args.tiny, "budget_s": args.budget}
    result.update(environment=environment(chk), sizes=vars(chk.sizes), sections={})
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        t0 = time.perf_counter()
        entry = result["sections"][name] = run_section(chk, name)
        entry["seconds"] = time.perf_counter() - t0
        if chk.cuda:
            entry["max_memory_gib"] = torch.cuda.max_memory_allocated(chk.dev) / 2**30
            torch.cuda.reset_peak_memory_stats(chk.dev)
        print(f"[gpu_check] {name}: {entry['status']} in {entry['seconds']:.1f} s", file=sys.stderr, flush=True)
        # the JSON so far, so that a run killed at its time limit still leaves what it had done
        (out / "gpu_check.partial.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (out / "gpu_check.partial.json").unlink()
    result["elapsed_s"] = args.budget - chk.remaining()
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
