"""Benchmark of dense exact Hessian extraction (``transformer-hessian bench hessian``).

Times the dense five-group Hessian ([W_Q, W_K, W_V, W_1, W_2] of block 0) of the default
single-block ViT (8x8 one-channel images, patch 2 -> L = 16 tokens, 10 classes, width d,
d_k = d, d_ff = 4 d) on one batch of random float64 inputs and labels, by

- (a) ``curvlinops``: ``HessianLinearOperator @ I`` (the reference),
- (b) ``torch_func_hessian``: ``torch.func.hessian`` of the loss w.r.t. the flat group vector,
- (c) ``closed_form``: ``transformer_hessian.theory.model_loss_hessian``,
- (d) ``pipeline``: ``hessian.compute_hessian(..., method="auto")`` (records what auto resolved to),
- (e) ``vmap``: chunked vmapped Hessian-vector products (``hessian.hessian_vmap``).

Every (method, width) runs in its own subprocess (``python -m transformer_hessian.bench.hessian``), so
its peak resident memory is its own: the child measures its RSS after imports and set-up
(the baseline), resets the kernel's high-water mark, runs one excluded warm-up and
``repeats`` timed runs, and reports the peak. A memory cap is enforced in the child, armed
only after the imports (CUDA builds of torch reserve large virtual ranges at import):
``RLIMIT_AS`` = current address space + cap, so an allocation beyond it fails at once, plus a
watchdog thread on the resident set (baseline + cap) as a second line. Either way the row is
recorded as ``out of memory``; a child running past ``timeout`` seconds is killed and recorded
as ``timeout``. Each result is compared with (a) (``max|H - H_a| / max|H_a|``, float64) from
the Hessians the children save to a scratch folder, read back memory-mapped in row chunks.

curvlinops 3 applies the operator to all columns it is given in one vmapped call, so an
unchunked ``op @ I`` needs as much memory as (b) (out of memory at d = 16 under an 8 GiB cap);
``hessian_curvlinops`` now feeds I in column chunks. Should (a) still not finish (out of memory,
timeout), (a') -- the same operator applied to 256-column blocks of I, implemented here --
runs next and is the reference of that width (each row names its ``reference``). Results go to ``<out_dir>/hessian_bench.json``
and ``.md`` (rewritten atomically after every row); the command then exits non-zero
(``BenchError``) if any method disagreed with the reference beyond 1e-10 or failed with an
error. Out of memory and timeout are results, not failures.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..utils import log, write_json, write_text
from .methods import CHUNK_COLUMNS, DESCRIPTIONS, FALLBACK, LABELS, METHODS, TOLERANCE
from .sandbox import (
    _MIB,
    _WATCHDOG_EXIT,
    ERROR,
    OK,
    OOM,
    TIMEOUT,
    _is_oom,
    _MemoryCap,
    _proc_status,
    _reset_peak_rss,
    _rss_bytes,
    _tail,
)
from .shapes import SHAPES
from .tables import fmt, markdown_table


class BenchError(ValueError):
    """A method disagreed with (a) or failed; raised after the results are written."""


@dataclass
class BenchSettings:
    """Settings of one ``bench hessian`` run (the command's options plus test hooks)."""

    widths: list[int] = field(default_factory=lambda: [8, 16, 32])
    batch_size: int = 64
    repeats: int = 3
    memory_cap_gib: float = 8.0
    timeout: float = 600.0
    out_dir: str = "results/bench"
    seed: int = 0
    threads: int | None = None
    tolerance: float = TOLERANCE
    #: labels to run (subset of a-e, run in a-e order); None = all
    methods: list[str] | None = None
    #: per-label memory cap in MiB above the baseline, overriding memory_cap_gib (test hook)
    cap_overrides_mib: dict[str, float] = field(default_factory=dict)
    #: problem shape: "default" (8x8 images, patch 2, L = 16) or "paper" (28x28, patch 4, L = 49)
    shape: str = "default"
    #: torch device of the model, data and Hessian ("cpu", "cuda", "cuda:1", ...)
    device: str = "cpu"
    #: timed runs of the reference (a)/(a') (None: ``repeats``) and whether it gets a warm-up
    reference_repeats: int | None = None
    reference_warmup: bool = True
    #: folder caching the reference Hessian and its row per problem (None: no cache)
    reference_cache: str | None = None

    def labels(self) -> list[str]:
        """The method labels to run, in a-e order; ValueError names unknown ones."""
        chosen = list(LABELS) if self.methods is None else list(self.methods)
        unknown = [m for m in chosen if m not in LABELS]
        if unknown:
            raise ValueError(f"bench hessian: unknown method label(s) {unknown}; choose from {list(LABELS)}")
        return [label for label, _, _ in METHODS if label in chosen]

    def cap_bytes(self, label: str) -> int:
        """Memory cap of method ``label`` above its baseline, in bytes."""
        if label in self.cap_overrides_mib:
            return int(self.cap_overrides_mib[label] * _MIB)
        return int(self.memory_cap_gib * 2**30)


def n_group_params(width: int) -> int:
    """P of the five groups for d = width, d_k = d, d_ff = 4 d."""
    d, d_k, d_ff = width, width, 4 * width
    return 2 * d * d_k + d * d + 2 * d * d_ff


def build_problem(width: int, batch_size: int, seed: int, shape: str = "default", device: str = "cpu"):
    """The single-block ViT of ``SHAPES[shape]`` (float64, seeded init) and a seeded random
    float64 batch, drawn on the CPU (the same numbers on every device) and moved to ``device``."""
    import torch

    from ..model import ModelConfig, ViT

    sh = SHAPES[shape]
    cfg = ModelConfig(**sh, width=width, depth=1, d_k=width, d_ff=4 * width)
    torch.manual_seed(seed)
    model = ViT(cfg).to(torch.float64)
    gen = torch.Generator().manual_seed(seed + 1)
    side = sh["image_size"]
    images = torch.randn(batch_size, sh["channels"], side, side, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, cfg.num_classes, (batch_size,), generator=gen)
    dev = torch.device(device)
    return model.to(dev), images.to(dev), labels.to(dev)


def _synchronize(device: str) -> None:
    """Wait for queued kernels on a CUDA device (no-op elsewhere), so wall times are complete."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def hessian_curvlinops_chunked(model, block: int, images, labels, chunk: int = CHUNK_COLUMNS):
    """``HessianLinearOperator @ I`` applied to blocks of ``chunk`` columns of I at a time."""
    from ..hessian import hessian_curvlinops

    return hessian_curvlinops(model, block, images, labels, chunk_size=chunk)


def _method_fn(method: str, model, images, labels):
    """(callable returning dense H, extra info). Imports everything the method needs now,
    so that the imports count towards the baseline, not the method."""
    import torch

    from .. import hessian as hs

    if method == "curvlinops":
        import curvlinops  # noqa: F401

        return (lambda: hs.hessian_curvlinops(model, 0, images, labels)), {}
    if method == "curvlinops_chunked":
        import curvlinops  # noqa: F401

        return (lambda: hessian_curvlinops_chunked(model, 0, images, labels)), {"chunk_columns": CHUNK_COLUMNS}
    if method == "torch_func_hessian":
        import torch.func

        f, w = hs.loss_of_groups(model, 0, images, labels)
        hess = torch.func.hessian(f)
        return (lambda: hess(w)), {}
    if method == "closed_form":
        from ..theory import model_loss_hessian  # noqa: F401  (ImportError -> row "error")

        return (lambda: hs.hessian_closed_form(model, 0, images, labels)), {}
    if method == "pipeline":
        resolved = hs.resolve_method("auto", model)
        if resolved == "closed_form":
            from ..theory import model_loss_hessian  # noqa: F401,F811
        elif resolved == "curvlinops":
            import curvlinops  # noqa: F401
        return (lambda: hs.compute_hessian(model, 0, images, labels, method="auto")[0]), {"resolved_method": resolved}
    if method == "vmap":
        return (lambda: hs.hessian_vmap(model, 0, images, labels)), {}
    raise ValueError(f"unknown method {method!r}")


def run_worker(spec: dict) -> dict:
    """Body of one child: set up, measure baseline, run under the cap, write spec['result']."""
    result_path = spec["result"]
    res = {
        "method": spec["method"],
        "width": spec["width"],
        "status": ERROR,
        "stage": "setup",
        "warmup_s": None,
        "times_s": [],
        "message": None,
        "pid": os.getpid(),
    }

    def save():
        write_json(res, result_path)

    save()
    import torch

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    res["threads"] = torch.get_num_threads()
    try:
        device = spec.get("device", "cpu")
        model, images, labels = build_problem(
            spec["width"], spec["batch_size"], spec["seed"], spec.get("shape", "default"), device
        )
        fn, extra = _method_fn(spec["method"], model, images, labels)
        res.update(extra)
    except Exception as err:  # e.g. the closed form not importable
        res["message"] = f"set-up failed: {type(err).__name__}: {err}"
        save()
        return res
    from ..hessian import group_layout

    res["n_params"] = int(group_layout(model, 0)[2][-1])
    gc.collect()
    baseline = _rss_bytes()
    res["baseline_rss_mib"] = baseline / _MIB
    res["peak_source"] = "VmHWM" if _reset_peak_rss() else "ru_maxrss"
    res["memory_cap_mib"] = spec["cap_bytes"] / _MIB
    on_cuda = torch.device(device).type == "cuda"
    if on_cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    res["stage"] = "running"
    save()

    def fire(rss: int) -> None:  # runs in the watchdog thread, then the process exits
        snapshot = dict(res, times_s=list(res["times_s"]), memory_mechanisms=list(res.get("memory_mechanisms", [])))
        snapshot.update(
            status=OOM,
            stage="killed by RSS watchdog",
            oom_by="rss_watchdog",
            peak_rss_mib=rss / _MIB,
            peak_above_baseline_mib=max(rss - baseline, 0) / _MIB,
            message=f"RSS {rss / _MIB:.0f} MiB exceeded baseline + cap "
            f"({(baseline + spec['cap_bytes']) / _MIB:.0f} MiB)",
        )
        write_json(snapshot, result_path)

    cap = _MemoryCap(spec["cap_bytes"], baseline, fire)
    res["memory_mechanisms"] = cap.mechanisms  # filled in by arm()
    H = None
    try:
        cap.arm()
        try:
            warm = 1 if spec.get("warmup", True) else 0
            for i in range(warm + spec["repeats"]):
                H = None
                t0 = time.perf_counter()
                H = fn()
                _synchronize(device)
                dt = time.perf_counter() - t0
                if i < warm:
                    res["warmup_s"] = dt
                else:
                    res["times_s"].append(dt)
                save()  # progress survives a timeout kill
        finally:
            cap.disarm()
        res["status"] = OK
    except BaseException as err:  # noqa: BLE001 - every failure becomes a row, never a crash
        H = None
        res["status"] = OOM if _is_oom(err) else ERROR
        res["message"] = f"{type(err).__name__}: {str(err)[:500]}"
        if res["status"] == OOM:
            res["oom_by"] = "rlimit_as" if "rlimit_as" in cap.mechanisms else "allocation failure"
        del err
        gc.collect()
    st = _proc_status()
    peak = (
        st.get("VmHWM") if res["peak_source"] == "VmHWM" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    )
    res["peak_rss_mib"] = peak / _MIB
    res["peak_above_baseline_mib"] = max(peak - baseline, 0) / _MIB
    if on_cuda:
        res["peak_device_mib"] = torch.cuda.max_memory_allocated(device) / _MIB
    res["stage"] = "done"
    if res["status"] == OK:
        H = H.detach().to("cpu")
        if H.dtype != torch.float64:
            res["status"], res["message"] = ERROR, f"Hessian dtype is {H.dtype}, not float64"
        else:
            np.save(spec["hessian_out"], H.numpy())
            res["shape"] = list(H.shape)
    save()
    return res


def _worker_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m transformer_hessian.bench.hessian")
    p.add_argument("--worker", required=True, help="JSON spec file of one (method, width) run")
    a = p.parse_args(argv)
    with open(a.worker) as fh:
        spec = json.load(fh)
    run_worker(spec)
    return 0


def run_case(label: str, width: int, s: BenchSettings, workdir: Path) -> dict:
    """Run one (method, width) in a fresh subprocess under the cap and timeout; never raises."""
    method = LABELS[label]
    tag = f"{method}_d{width}"
    is_ref = label in ("a", FALLBACK[0])
    repeats = s.reference_repeats if is_ref and s.reference_repeats is not None else s.repeats
    spec = {
        "method": method,
        "width": width,
        "batch_size": s.batch_size,
        "repeats": repeats,
        "warmup": s.reference_warmup if is_ref else True,
        "shape": s.shape,
        "device": s.device,
        "seed": s.seed,
        "threads": s.threads,
        "cap_bytes": s.cap_bytes(label),
        "result": str(workdir / f"{tag}.json"),
        "hessian_out": str(workdir / f"{tag}.npy"),
    }
    spec_path = workdir / f"{tag}.spec.json"
    write_json(spec, spec_path)
    log_path = workdir / f"{tag}.log"
    cmd = [sys.executable, "-m", "transformer_hessian.bench.hessian", "--worker", str(spec_path)]
    t0 = time.perf_counter()
    timed_out = False
    with open(log_path, "w") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=s.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        except BaseException:  # e.g. Ctrl-C: do not leave the child running
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    wall = time.perf_counter() - t0
    try:
        with open(spec["result"]) as fh:
            res = json.load(fh)
    except (OSError, json.JSONDecodeError):
        res = {"status": ERROR, "times_s": [], "warmup_s": None, "stage": "not started"}
    row = {
        "width": width,
        "label": label,
        "method": method,
        "description": DESCRIPTIONS[method],
        "n_params": n_group_params(width),
        "batch_size": s.batch_size,
        "repeats": repeats,
        "warmup": spec["warmup"],
        "status": res.get("status", ERROR),
        "median_s": None,
        "warmup_s": res.get("warmup_s"),
        "times_s": res.get("times_s", []),
        "baseline_rss_mib": res.get("baseline_rss_mib"),
        "peak_rss_mib": res.get("peak_rss_mib"),
        "peak_above_baseline_mib": res.get("peak_above_baseline_mib"),
        "memory_cap_mib": s.cap_bytes(label) / _MIB,
        "memory_mechanisms": res.get("memory_mechanisms"),
        "peak_source": res.get("peak_source"),
        "peak_device_mib": res.get("peak_device_mib"),
        "threads": res.get("threads"),
        "rel_error_vs_a": None,
        "max_abs_error_vs_a": None,
        "agrees_with_a": None,
        "ratio_to_a": None,
        "subprocess_wall_s": wall,
        "returncode": rc,
        "oom_by": res.get("oom_by"),
        "message": res.get("message"),
    }
    if "resolved_method" in res:
        row["resolved_method"] = res["resolved_method"]
    if "n_params" in res and res["n_params"] != row["n_params"]:
        row["status"], row["message"] = ERROR, f"child reports P={res['n_params']}, expected {row['n_params']}"
    if timed_out:
        row["status"] = TIMEOUT
        row["message"] = (
            f"killed after {s.timeout:g} s (stage: {res.get('stage')}; {len(row['times_s'])} timed runs done)"
        )
    elif row["status"] == OOM:
        pass
    elif rc == _WATCHDOG_EXIT:
        row["status"] = OOM
    elif rc != 0 or res.get("stage") != "done":
        # a child that died without reporting: SIGKILL with no timeout is the kernel's OOM killer
        row["status"] = OOM if rc == -signal.SIGKILL else ERROR
        if row["status"] == OOM:
            row["oom_by"] = "SIGKILL (kernel OOM killer?)"
        row["message"] = (row["message"] or "") + f" [exit code {rc}, stage {res.get('stage')}] " + _tail(log_path)
    if row["status"] == OK:
        if len(row["times_s"]) != repeats:
            row["status"], row["message"] = ERROR, f"{len(row['times_s'])} timed runs, expected {repeats}"
        else:
            row["median_s"] = statistics.median(row["times_s"])
    row["_hessian_path"] = spec["hessian_out"] if row["status"] == OK else None
    return row


def relative_error(path_h: str, path_ref: str, chunk_rows: int = 512) -> tuple[float, float]:
    """(max|H - H_ref| / max|H_ref|, max|H - H_ref|) of two saved (P, P) arrays, row chunks."""
    H = np.load(path_h, mmap_mode="r")
    R = np.load(path_ref, mmap_mode="r")
    if H.shape != R.shape:
        raise ValueError(f"shape {H.shape} differs from the reference's {R.shape}")
    err, scale = 0.0, 0.0
    for i in range(0, R.shape[0], chunk_rows):
        r = np.asarray(R[i : i + chunk_rows])
        h = np.asarray(H[i : i + chunk_rows])
        diff = np.abs(h - r)
        if not np.all(np.isfinite(diff)):
            return math.inf, math.inf
        err = max(err, float(diff.max()))
        scale = max(scale, float(np.abs(r).max()))
    return (err / scale if scale > 0 else err), err


def _environment(threads, device: str = "cpu") -> dict:
    import torch

    from ..utils import device_description, git_commit, package_versions

    return {
        "packages": package_versions(),
        "git_commit": git_commit(),
        "device": device_description(torch.device(device)),
        "cpu_count": os.cpu_count(),
        "threads": threads or torch.get_num_threads(),
    }


def _finalise_rows(rows: list[dict], ref: dict | None, tol: float) -> None:
    """Relative errors and speed-ups against the width's reference row (in place)."""
    for r in rows:
        if ref is None or ref["status"] != OK or r["status"] != OK:
            continue
        r["reference"] = ref["label"]
        if r is ref:
            r["rel_error_vs_a"], r["max_abs_error_vs_a"] = 0.0, 0.0
        else:
            try:
                r["rel_error_vs_a"], r["max_abs_error_vs_a"] = relative_error(r["_hessian_path"], ref["_hessian_path"])
            except (ValueError, OSError) as err:
                r["status"], r["message"] = ERROR, f"comparison with ({ref['label']}) failed: {err}"
                continue
        if not math.isfinite(r["rel_error_vs_a"]):  # JSON has no inf / nan
            r["rel_error_vs_a"] = r["max_abs_error_vs_a"] = None
            r["agrees_with_a"], r["message"] = False, "non-finite entries in H or in the reference"
            continue
        r["agrees_with_a"] = bool(r["rel_error_vs_a"] <= tol)
        r["ratio_to_a"] = ref["median_s"] / r["median_s"] if r["median_s"] else None


def _reference_key(s: BenchSettings, label: str, width: int) -> str:
    """Cache file stem of the reference (label) of one problem: a hash of everything that
    determines its Hessian and timing conditions (shape, width, batch, seed, device, threads,
    torch and curvlinops versions)."""
    import hashlib

    import torch

    try:
        import curvlinops

        cv = getattr(curvlinops, "__version__", "?")
    except ImportError:  # pragma: no cover - curvlinops is a dependency
        cv = None
    key = {
        "label": label,
        "shape": s.shape,
        "width": width,
        "batch_size": s.batch_size,
        "seed": s.seed,
        "device": s.device,
        "threads": s.threads or torch.get_num_threads(),
        "torch": torch.__version__,
        "curvlinops": cv,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return f"{LABELS[label]}_{s.shape}_d{width}_b{s.batch_size}_{digest}"


def _cached_reference(s: BenchSettings, label: str, width: int, workdir: Path) -> dict | None:
    """The reference row of an earlier run from ``s.reference_cache`` (marked ``cached``, its
    Hessian copied into ``workdir``), or None when there is no cache or no entry."""
    if not s.reference_cache:
        return None
    stem = Path(s.reference_cache) / _reference_key(s, label, width)
    row_path, h_path = stem.with_suffix(".json"), stem.with_suffix(".npy")
    if not (row_path.is_file() and h_path.is_file()):
        return None
    with open(row_path) as fh:
        row = json.load(fh)
    local = workdir / h_path.name
    shutil.copyfile(h_path, local)
    row.update(_hessian_path=str(local), cached=True, cache_file=str(row_path))
    log.info("bench hessian: d=%d (%s) %s: reference from the cache %s", width, label, row["method"], row_path)
    return row


def _store_reference(s: BenchSettings, label: str, width: int, row: dict) -> None:
    """Save a finished reference row and its Hessian in ``s.reference_cache`` (if set)."""
    if not s.reference_cache or row["status"] != OK or not row.get("_hessian_path"):
        return
    from ..utils import atomic_path

    stem = Path(s.reference_cache) / _reference_key(s, label, width)
    stem.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(stem.with_suffix(".npy")) as tmp:
        shutil.copyfile(row["_hessian_path"], tmp)
    write_json({k: v for k, v in row.items() if not k.startswith("_")}, stem.with_suffix(".json"))


def benchmark(s: BenchSettings) -> dict:
    """Run every (width, method); write ``hessian_bench.json`` / ``.md``; return the result.

    The reference of a width is (a); where (a) does not finish (out of memory, timeout) and
    (a) was requested, (a') -- the same operator applied to blocks of columns -- runs right
    after it and takes its place. ``rel_error_vs_a`` / ``ratio_to_a`` are relative to the
    row's ``reference``.
    """
    out = Path(s.out_dir)
    labels = s.labels()
    result = {
        "benchmark": "dense Hessian extraction",
        "settings": asdict(s),
        "tolerance": s.tolerance,
        "environment": _environment(s.threads, s.device),
        "complete": False,
        "rows": [],
    }

    def write() -> None:
        public = [{k: v for k, v in r.items() if not k.startswith("_")} for r in result["rows"]]
        snapshot = {**result, "rows": public}
        write_json(snapshot, out / "hessian_bench.json")
        write_text(markdown_table(snapshot), out / "hessian_bench.md")

    def run(label: str, width: int, ref: dict | None, workdir: Path) -> dict:
        is_ref = label in ("a", FALLBACK[0])
        row = _cached_reference(s, label, width, workdir) if is_ref else None
        if row is None:
            log.info("bench hessian: d=%d (%s) %s ...", width, label, LABELS[label])
            row = run_case(label, width, s, workdir)
            if is_ref:
                _store_reference(s, label, width, row)
        _finalise_rows([row], row if is_ref else ref, s.tolerance)
        log.info(
            "bench hessian: d=%d (%s) %s: %s, median %s s, peak RSS %s MiB, rel. error %s%s",
            width,
            label,
            row["method"],
            row["status"],
            fmt(row["median_s"], ".4g"),
            fmt(row["peak_rss_mib"], ".0f"),
            fmt(row["rel_error_vs_a"], ".1e"),
            f" ({' '.join(str(row['message']).split())[:200]})" if row["status"] != OK and row["message"] else "",
        )
        result["rows"].append(row)
        write()
        return row

    workdir = Path(tempfile.mkdtemp(prefix="hessian_bench_"))
    try:
        for width in s.widths:
            ref = None
            for label in labels:
                row = run(label, width, ref, workdir)
                if label == "a":
                    ref = row
                    if row["status"] != OK:
                        log.info("bench hessian: d=%d: (a) did not finish; running (a') as the reference", width)
                        ref = run(FALLBACK[0], width, None, workdir)
                if row is not ref and row.get("_hessian_path"):
                    Path(row["_hessian_path"]).unlink(missing_ok=True)
            if ref is not None and ref.get("_hessian_path"):
                Path(ref["_hessian_path"]).unlink(missing_ok=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = result["rows"]
    result["disagreements"] = [
        f"d={r['width']} ({r['label']}) {r['method']}: {fmt(r['rel_error_vs_a'], '.3e', 'non-finite')} "
        f"vs ({r['reference']})"
        for r in rows
        if r["agrees_with_a"] is False
    ]
    result["errors"] = [
        f"d={r['width']} ({r['label']}) {r['method']}: {r['message']}" for r in rows if r["status"] == ERROR
    ]
    result["passed"] = not result["disagreements"] and not result["errors"]
    result["complete"] = True
    write()
    for r in rows:
        r.pop("_hessian_path", None)
    return result


#: ``--paper-shape`` defaults: the paper's Hessian problem (MNIST shape, d = 16, batch 128),
#: curvlinops (a) once without warm-up (about 200 s on 2 cores) against the closed form (c).
PAPER_DEFAULTS = {
    "widths": [16],
    "batch_size": 128,
    "methods": ["a", "c"],
    "reference_repeats": 1,
    "reference_warmup": False,
    "timeout": 3600.0,
    "memory_cap_gib": 16.0,
    "tolerance": 1e-12,
}


def settings_from_args(a) -> BenchSettings:
    """BenchSettings from the parsed ``bench hessian`` options (None: the default, or with
    ``--paper-shape`` the value in PAPER_DEFAULTS)."""
    paper = bool(getattr(a, "paper_shape", False))
    base = BenchSettings()
    defaults = {
        "widths": base.widths,
        "batch_size": base.batch_size,
        "methods": None,
        "reference_repeats": None,
        "reference_warmup": True,
        "timeout": base.timeout,
        "memory_cap_gib": base.memory_cap_gib,
        "tolerance": base.tolerance,
    }
    if paper:
        defaults.update(PAPER_DEFAULTS)

    def pick(name: str):
        v = getattr(a, name, None)
        return defaults[name] if v is None else v

    return BenchSettings(
        widths=list(pick("widths")),
        batch_size=pick("batch_size"),
        repeats=a.repeats,
        memory_cap_gib=pick("memory_cap_gib"),
        timeout=pick("timeout"),
        out_dir=a.out_dir,
        threads=getattr(a, "threads", None),
        methods=pick("methods"),
        shape="paper" if paper else "default",
        device=_resolve_device(getattr(a, "device", None) or "cpu"),
        reference_repeats=pick("reference_repeats"),
        reference_warmup=defaults["reference_warmup"],
        reference_cache=getattr(a, "reference_cache", None),
        tolerance=defaults["tolerance"],
    )


def _resolve_device(name: str) -> str:
    """``auto`` -> "cuda" when available, else "cpu"; other names unchanged."""
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_bench(a) -> dict:
    """``transformer-hessian bench hessian``: run, write, print; BenchError if a method failed."""
    s = settings_from_args(a)
    if s.repeats < 1 or s.batch_size < 1 or not s.widths or min(s.widths) < 1:
        raise ValueError("bench hessian: --repeats, --batch-size and --widths must be positive")
    result = benchmark(s)
    print(markdown_table(result), end="", flush=True)
    out = Path(s.out_dir)
    log.info("bench hessian: wrote %s and %s", out / "hessian_bench.json", out / "hessian_bench.md")
    problems = result["disagreements"] + result["errors"]
    if problems:
        raise BenchError(
            f"{len(result['disagreements'])} method(s) disagree with (a) beyond {s.tolerance:.0e} and "
            f"{len(result['errors'])} failed: " + "; ".join(p[:300] for p in problems)
        )
    return result


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
