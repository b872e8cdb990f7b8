"""The parent side of one ``bench hessian`` case: launch the worker subprocess under the
timeout, read its result back and turn it into a table row (status, timings, memory)."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ..util.io import write_json
from ..util.sandbox import ERROR, MIB, OK, OOM, TIMEOUT, WATCHDOG_EXIT, log_tail
from .methods import DESCRIPTIONS, FALLBACK, LABELS
from .settings import BenchSettings, n_group_params


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
    write_json(spec, spec_path, sealed=False)
    log_path = workdir / f"{tag}.log"
    rc, timed_out, wall = _launch(spec_path, log_path, s.timeout)
    try:
        with open(spec["result"]) as fh:
            res = json.load(fh)
    except (OSError, json.JSONDecodeError):
        res = {"status": ERROR, "times_s": [], "warmup_s": None, "stage": "not started"}
    row = _row(label, width, s, spec, res, wall, rc)
    _judge(row, res, rc, timed_out, s.timeout, log_path)
    row["_hessian_path"] = spec["hessian_out"] if row["status"] == OK else None
    return row


def _launch(spec_path: Path, log_path: Path, timeout: float) -> tuple[int, bool, float]:
    """Run the worker on ``spec_path`` in its own session, output to ``log_path``; killed (its whole
    group) after ``timeout`` seconds or when the parent is interrupted. ``(returncode, timed out, wall s)``."""
    cmd = [sys.executable, "-m", "transformer_hessian.bench.worker", "--worker", str(spec_path)]
    t0 = time.perf_counter()
    timed_out = False
    with open(log_path, "w") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        except BaseException:  # e.g. Ctrl-C: do not leave the child running
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    return rc, timed_out, time.perf_counter() - t0


def _row(label: str, width: int, s: BenchSettings, spec: dict, res: dict, wall: float, rc: int) -> dict:
    """The table row of one case from the worker's result ``res`` (before :func:`_judge`)."""
    method = spec["method"]
    return {
        "width": width,
        "label": label,
        "method": method,
        "description": DESCRIPTIONS[method],
        "n_params": n_group_params(width),
        "batch_size": s.batch_size,
        "repeats": spec["repeats"],
        "warmup": spec["warmup"],
        "status": res.get("status", ERROR),
        "median_s": None,
        "warmup_s": res.get("warmup_s"),
        "times_s": res.get("times_s", []),
        # process CPU time (all threads of the child) of each timed run: less sensitive than
        # the wall time to other load on a shared machine
        "cpu_times_s": res.get("cpu_times_s", []),
        "median_cpu_s": statistics.median(res["cpu_times_s"]) if res.get("cpu_times_s") else None,
        "baseline_rss_mib": res.get("baseline_rss_mib"),
        "peak_rss_mib": res.get("peak_rss_mib"),
        "peak_above_baseline_mib": res.get("peak_above_baseline_mib"),
        "memory_cap_mib": s.cap_bytes(label) / MIB,
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


def _judge(row: dict, res: dict, rc: int, timed_out: bool, timeout: float, log_path: Path) -> None:
    """Set ``row``'s status (and message, ``oom_by``, ``median_s``) from the child's report, its exit
    code and the timeout: a child that died without reporting is an OOM (SIGKILL) or an error."""
    repeats = row["repeats"]
    if "resolved_method" in res:
        row["resolved_method"] = res["resolved_method"]
    if "n_params" in res and res["n_params"] != row["n_params"]:
        row["status"], row["message"] = ERROR, f"child reports P={res['n_params']}, expected {row['n_params']}"
    if timed_out:
        row["status"] = TIMEOUT
        row["message"] = (
            f"killed after {timeout:g} s (stage: {res.get('stage')}; {len(row['times_s'])} timed runs done)"
        )
    elif row["status"] == OOM:
        pass
    elif rc == WATCHDOG_EXIT:
        # the watchdog exits with this code even when its own report could not be written (the
        # child is over its cap, so the write itself may fail to allocate): the code says who
        row["status"], row["oom_by"] = OOM, "rss_watchdog"
    elif rc != 0 or res.get("stage") != "done":
        # a child that died without reporting: SIGKILL with no timeout is the kernel's OOM killer
        row["status"] = OOM if rc == -signal.SIGKILL else ERROR
        if row["status"] == OOM:
            row["oom_by"] = "SIGKILL (kernel OOM killer?)"
        row["message"] = (row["message"] or "") + f" [exit code {rc}, stage {res.get('stage')}] " + log_tail(log_path)
    if row["status"] == OK:
        if len(row["times_s"]) != repeats:
            row["status"], row["message"] = ERROR, f"{len(row['times_s'])} timed runs, expected {repeats}"
        else:
            row["median_s"] = statistics.median(row["times_s"])
