"""The child process of ``bench hessian``: one (method, width) run under the memory cap
(``python -m transformer_hessian.bench.worker --worker SPEC.json``). It measures its RSS after
imports and set-up (the baseline), resets the kernel's high-water mark, runs one excluded
warm-up and the timed runs (wall and process CPU time each), and writes its result JSON after
every step (progress survives a kill) and the Hessian as ``.npy``."""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import time

import numpy as np

from ..util.device import synchronize
from ..util.io import write_json
from ..util.sandbox import ERROR, MIB, OK, OOM, MemoryCap, is_oom, proc_status, reset_peak_rss, rss_bytes
from .problem import _method_fn, build_problem


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
        write_json(res, result_path, sealed=False)

    save()
    import torch

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    res["threads"] = torch.get_num_threads()
    problem = _set_up(spec, res)
    if problem is None:
        save()
        return res
    model, fn = problem
    device = spec.get("device", "cpu")
    from ..core.hessian import group_layout

    res["n_params"] = int(group_layout(model, 0)[2][-1])
    gc.collect()
    baseline = rss_bytes()
    res["baseline_rss_mib"] = baseline / MIB
    res["peak_source"] = "VmHWM" if reset_peak_rss() else "ru_maxrss"
    res["memory_cap_mib"] = spec["cap_bytes"] / MIB
    on_cuda = torch.device(device).type == "cuda"
    if on_cuda:
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    res["stage"] = "running"
    save()
    H = _run_under_cap(spec, res, fn, baseline, save)
    st = proc_status()
    peak = (
        st.get("VmHWM") if res["peak_source"] == "VmHWM" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    )
    res["peak_rss_mib"] = peak / MIB
    res["peak_above_baseline_mib"] = max(peak - baseline, 0) / MIB
    if on_cuda:
        res["peak_device_mib"] = torch.cuda.max_memory_allocated(device) / MIB
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


def _set_up(spec: dict, res: dict):
    """``(model, fn)``: the problem of ``spec`` and its timed method (``res`` takes the method's
    extra keys); None with ``res["message"]`` when the set-up fails."""
    try:
        device = spec.get("device", "cpu")
        model, images, labels = build_problem(
            spec["width"], spec["batch_size"], spec["seed"], spec.get("shape", "default"), device
        )
        fn, extra = _method_fn(spec["method"], model, images, labels)
        res.update(extra)
    except Exception as err:  # e.g. the closed form not importable
        res["message"] = f"set-up failed: {type(err).__name__}: {err}"
        return None
    return model, fn


def _run_under_cap(spec: dict, res: dict, fn, baseline: int, save):
    """The warm-up and timed runs of ``fn`` under the memory cap (``baseline`` + ``spec["cap_bytes"]``),
    each recorded in ``res`` and saved; the last Hessian, or None when a run failed (``res`` says why:
    out of memory or an error). The RSS watchdog writes its own report before the process exits."""
    device = spec.get("device", "cpu")

    def fire(rss: int) -> None:  # runs in the watchdog thread, then the process exits
        snapshot = dict(res, times_s=list(res["times_s"]), memory_mechanisms=list(res.get("memory_mechanisms", [])))
        snapshot.update(
            status=OOM,
            stage="killed by RSS watchdog",
            oom_by="rss_watchdog",
            peak_rss_mib=rss / MIB,
            peak_above_baseline_mib=max(rss - baseline, 0) / MIB,
            message=f"RSS {rss / MIB:.0f} MiB exceeded baseline + cap ({(baseline + spec['cap_bytes']) / MIB:.0f} MiB)",
        )
        write_json(snapshot, spec["result"], sealed=False)

    cap = MemoryCap(spec["cap_bytes"], baseline, fire)
    res["memory_mechanisms"] = cap.mechanisms  # filled in by arm()
    H = None
    try:
        cap.arm()
        try:
            warm = 1 if spec.get("warmup", True) else 0
            for i in range(warm + spec["repeats"]):
                H = None
                t0, c0 = time.perf_counter(), time.process_time()
                H = fn()
                synchronize(device)
                dt, dc = time.perf_counter() - t0, time.process_time() - c0
                if i < warm:
                    res["warmup_s"] = dt
                else:
                    res["times_s"].append(dt)
                    res.setdefault("cpu_times_s", []).append(dc)
                save()  # progress survives a timeout kill
        finally:
            cap.disarm()
        res["status"] = OK
    except BaseException as err:  # noqa: BLE001 - every failure becomes a row, never a crash
        H = None
        oom = is_oom(err)
        near_cap = not oom and cap.at_limit()  # a failed allocation seen as another error
        res["status"] = OOM if oom or near_cap else ERROR
        res["message"] = f"{type(err).__name__}: {str(err)[:500]}"
        if near_cap:
            res["oom_by"] = "rlimit_as"
            res["message"] += " (raised with the address space at the cap)"
        elif res["status"] == OOM:
            res["oom_by"] = "rlimit_as" if "rlimit_as" in cap.mechanisms else "allocation failure"
        del err
        gc.collect()
    return H


def _worker_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m transformer_hessian.bench.worker")
    p.add_argument("--worker", required=True, help="JSON spec file of one (method, width) run")
    a = p.parse_args(argv)
    with open(a.worker) as fh:
        spec = json.load(fh)
    run_worker(spec)
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
