"""``transformer-hessian bench encoder --growth``: how exact_hessian's time and memory grow.

A base shape and one-factor sweeps (d_model with d_ff = 4 d, nhead at fixed d, tokens T,
layers), batch fixed and small. Every case runs in its own spawned process (so its peak
resident memory, VmHWM after a reset, is its own): one untimed warm-up run under
``torch.utils.flop_counter.FlopCounterMode`` (the matrix-product flops torch executed), then
``repeats`` timed runs (the median is reported). Per factor, the fitted exponent (least squares
of log y on log factor) of the time, of the peak memory, of the counted flops and of the cost
model P^2 N (P parameters, N = B T tokens; the dense Hessian is P x P), and time / (P^2 N).
The machine's float64 gemm rate (an n x n x n matmul, median of a few, in a spawned process
with the cases' thread count) gives the fraction of the gemm peak each case reaches.

The cost model (docs/theory.md, section 21, "Cost"): the sweep carries P tangents through one
forward and backward pass, P x O(d^2 + d d_ff + T d) flops per token and layer, and each linear
layer's Hessian columns are a (P o, N) x (N, i) gemm, P x (its parameters) x N flops; summed,
about c P^2 N + c' P N T d L. Predicted exponents: d (d_ff = 4 d, P ~ 12 d^2 L): 4; nhead at fixed
d: 0 (P and the flops do not change); T: between 1 (P^2 N) and 2 (the attention term);
layers: 2 (P ~ L). Memory: the dense P x P result (8 P^2 bytes; at its end exact_hessian
symmetrises it, (H + H^T)/2, which holds a second P x P for a moment) plus the tangents of one
chunk of samples (about P x T x (d, d_ff, nhead T) per sample, bounded by exact_hessian's
chunk_bytes): exponents of 8 P^2 are d 4, nhead 0, T 0, layers 2, the tangents add T and nhead.
"""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
import time
from pathlib import Path

from ..util.sandbox import run_spawned

log = logging.getLogger(__name__)

#: the base shape: a small GPT-like layer (biases, pre-norm, GELU, causal, MSE); d_ff = FF_MULT * d
BASE = dict(d=16, nhead=2, bias=True, norm_first=True, act="gelu", T=8, B=2, layers=1, loss="mse", causal=True)
FF_MULT = 4
#: one-factor sweeps around BASE (the base value is in every sweep)
SWEEPS = {"d": [8, 16, 32], "nhead": [1, 2, 4], "T": [8, 16, 32, 64], "layers": [1, 2, 3]}
#: a seconds-long sweep for tests and smoke runs
QUICK_BASE = dict(BASE, d=4, nhead=2, T=3, B=1)
QUICK_SWEEPS = {"d": [4, 8], "nhead": [1, 2], "T": [3, 6], "layers": [1, 2]}
#: printed under the table
FLOP_NOTE = (
    "FlopCounterMode counts the matrix products torch executed (mm, bmm, addmm, baddbmm, "
    "convolution, attention kernels), not elementwise work (LayerNorm, softmax, GELU, "
    "additions, index maps), so achieved GFLOP/s and the fraction of the gemm peak are lower bounds "
    "on the work done."
)


def fit_exponent(xs, ys) -> float:
    """Slope of the least-squares line of log y on log x: y ~ c x^slope."""
    pts = [(float(x), float(y)) for x, y in zip(xs, ys, strict=True)]
    if any(not (x > 0 and y > 0) or not (math.isfinite(x) and math.isfinite(y)) for x, y in pts):
        raise ValueError(f"fit_exponent: every x and y must be positive and finite, got {pts}")
    if len({x for x, _ in pts}) < 2:
        raise ValueError(f"fit_exponent: needs at least two distinct x, got {[x for x, _ in pts]}")
    lx = [math.log(x) for x, _ in pts]
    ly = [math.log(y) for _, y in pts]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)


def case_shape(base: dict, factor: str | None = None, value: int | None = None) -> dict:
    """The full shape (with d_ff = FF_MULT d) of ``base`` with ``factor`` set to ``value``."""
    s = dict(base)
    if factor is not None:
        if factor not in s:
            raise KeyError(f"growth: unknown factor {factor!r}; known: {sorted(SWEEPS)}")
        s[factor] = value
    if s["d"] % s["nhead"]:
        raise ValueError(f"growth: nhead {s['nhead']} does not divide d {s['d']}")
    s["d_ff"] = FF_MULT * s["d"]
    return s


def _key(shape: dict) -> tuple:
    return tuple(sorted(shape.items()))


def _case_child(shape: dict, seed: int, repeats: int, queue) -> None:
    import gc

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from ..encoder.api import exact_hessian
    from ..util.sandbox import proc_status, reset_peak_rss
    from .encoder_problems import build_problem

    try:
        model, head, x, t = build_problem(shape, seed)

        def run(**kw):
            return exact_hessian(model, x, t, loss=shape["loss"], head=head, is_causal=shape["causal"], **kw)

        counter = FlopCounterMode(display=False)
        t0 = time.perf_counter()
        with counter:  # a dispatch mode is per thread: the counted run sweeps in this one
            H = run(workers=1)
        counted_s = time.perf_counter() - t0
        P = H.shape[0]
        del H
        gc.collect()
        base = proc_status().get("VmRSS", 0)
        reset = reset_peak_rss()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            H = run()
            times.append(time.perf_counter() - t0)
            del H
        peak = proc_status().get("VmHWM", 0)
        queue.put(
            {
                "P": P,
                "times_s": times,
                "flop_counted_run_s": counted_s,
                "flops": int(counter.get_total_flops()),
                "flops_by_op": {str(k): int(v) for k, v in counter.get_flop_counts().get("Global", {}).items()},
                "peak_above_baseline_mib": (peak - base) / 2**20,
                "peak_reset": reset,
                "threads": torch.get_num_threads(),
            }
        )
    except Exception as err:  # noqa: BLE001 - reported in the table, the other cases still run
        queue.put({"error": f"{type(err).__name__}: {err}"})


def _gemm_child(n: int, repeats: int, queue) -> None:
    import torch

    try:
        torch.manual_seed(0)
        a = torch.randn(n, n, dtype=torch.float64)
        b = torch.randn(n, n, dtype=torch.float64)
        a @ b  # warm-up
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t0)
        queue.put({"n": n, "times_s": times, "threads": torch.get_num_threads()})
    except Exception as err:  # noqa: BLE001
        queue.put({"error": f"{type(err).__name__}: {err}"})


def gemm_peak(n: int = 2048, repeats: int = 5, timeout: float = 600.0, spawn: bool = True) -> dict:
    """float64 n x n x n matmul rate in a spawned process: median and best GFLOP/s."""
    res = run_spawned(_gemm_child, (n, repeats), timeout, spawn)
    if "error" not in res:
        flops = 2 * n**3
        res["gflops_median"] = flops / statistics.median(res["times_s"]) / 1e9
        res["gflops_best"] = flops / min(res["times_s"]) / 1e9
    return res


def fits(rows: list[dict], sweeps: dict) -> dict:
    """Per factor: the fitted exponents of time, memory, counted flops and the models P^2 N, 8 P^2."""
    out = {}
    for factor, values in sweeps.items():
        pts = [r for r in rows if factor in r["sweeps"] and "error" not in r]
        pts.sort(key=lambda r: r[factor])
        f = {"values": [r[factor] for r in pts], "P": [r["P"] for r in pts]}
        xs = [r[factor] for r in pts]
        if len(set(xs)) < 2:
            f["error"] = f"fewer than two finished cases of {values}"
            out[factor] = f
            continue
        series = {
            "time": [r["median_s"] for r in pts],
            "memory": [max(r["peak_above_baseline_mib"], 1e-3) for r in pts],
            "flops": [r["flops"] for r in pts],
            "model_P2N": [r["P"] ** 2 * r["N"] for r in pts],
            "model_8P2": [8 * r["P"] ** 2 for r in pts],
        }
        for name, ys in series.items():
            f[f"exp_{name}"] = fit_exponent(xs, ys)
        out[factor] = f
    return out


def run_growth(
    *,
    base: dict | None = None,
    sweeps: dict | None = None,
    repeats: int = 3,
    timeout: float = 3600.0,
    out_dir: str = "results/bench",
    seed: int = 0,
    gemm_n: int = 2048,
    gemm_repeats: int = 5,
    spawn: bool = True,
) -> dict:
    """Run the growth sweep; write encoder_growth.{json,md} to ``out_dir``; the result dict.

    ``spawn=False`` runs every case in this process (tests: no spawn start-up, no timeout)."""
    from ..util.env import run_environment

    base = dict(BASE if base is None else base)
    sweeps = dict(SWEEPS if sweeps is None else sweeps)
    env = run_environment()
    load_start = list(os.getloadavg())
    log.info("bench encoder --growth: load average at start %s", load_start)
    gemm = gemm_peak(gemm_n, gemm_repeats, timeout, spawn)
    log.info("bench encoder --growth: float64 gemm %s", {k: v for k, v in gemm.items() if k != "times_s"})
    cases: dict[tuple, dict] = {}
    for factor, values in sweeps.items():
        for v in values:
            s = case_shape(base, factor, v)
            cases.setdefault(_key(s), {"shape": s, "sweeps": []})["sweeps"].append(factor)
    rows = []
    for i, c in enumerate(cases.values()):
        s = c["shape"]
        log.info("bench encoder --growth: case %d/%d %s ...", i + 1, len(cases), s)
        res = run_spawned(_case_child, (s, seed, repeats), timeout, spawn)
        row = {**s, "sweeps": c["sweeps"], "N": s["B"] * s["T"], **res}
        if "error" not in res:
            row["median_s"] = statistics.median(res["times_s"])
            row["ns_per_P2_token"] = row["median_s"] / (row["P"] ** 2 * row["N"]) * 1e9
            row["gflops_per_s"] = row["flops"] / row["median_s"] / 1e9
        log.info("bench encoder --growth: %s", {k: v for k, v in row.items() if k not in ("times_s", "flops_by_op")})
        rows.append(row)
    gemm_end = gemm_peak(gemm_n, gemm_repeats, timeout, spawn)
    # the peak: the larger of the medians before and after the cases (the less loaded moment)
    peak = max((g["gflops_median"] for g in (gemm, gemm_end) if "gflops_median" in g), default=None)
    for row in rows:
        if peak is not None and "gflops_per_s" in row:
            row["frac_of_gemm_peak"] = row["gflops_per_s"] / peak
    load_end = list(os.getloadavg())
    done = [r for r in rows if "error" not in r]
    largest = max(done, key=lambda r: (r["P"] ** 2 * r["N"], r["median_s"])) if done else None
    result = {
        "base": base,
        "ff_mult": FF_MULT,
        "sweeps": sweeps,
        "repeats": repeats,
        "spawned": spawn,
        "rows": rows,
        "fits": fits(rows, sweeps),
        "gemm_start": gemm,
        "gemm_end": gemm_end,
        "gemm_peak_gflops": peak,
        "largest": None if largest is None else {k: largest[k] for k in ("d", "nhead", "T", "B", "layers", "P")},
        "load_average_start": load_start,
        "load_average_end": load_end,
        "flop_note": FLOP_NOTE,
        "environment": env,
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "encoder_growth.json").write_text(json.dumps(result, indent=1))
    (out / "encoder_growth.md").write_text(growth_markdown(result))
    return result


def _f(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


#: the cost model's predicted exponents, per factor (module docstring)
PREDICTED_TIME = {"d": "4 (P ~ d^2)", "nhead": "0", "T": "1 to 2", "layers": "2"}


def growth_markdown(result: dict) -> str:
    """The cases table, the exponents table and the gemm-peak lines as markdown."""
    b = result["base"]
    lines = [
        "# exact_hessian: growth with d, heads, tokens and layers",
        "",
        f"Base: d {b['d']}, nhead {b['nhead']}, d_ff {result['ff_mult']} d, T {b['T']}, batch {b['B']}, "
        f"layers {b['layers']}, bias {b['bias']}, norm_first {b['norm_first']}, {b['act']}, "
        f"causal {b['causal']}, loss {b['loss']}; float64, all parameters; median of {result['repeats']} "
        "timed runs after one warm-up (the flop-counted run), each case in its own process.",
        f"Load average (1, 5, 15 min) at start {_load(result['load_average_start'])}, "
        f"at end {_load(result['load_average_end'])}.",
        "",
        "| d | nhead | T | layers | P | N = B T | median s | peak MiB | peak / 8 P^2 | ns / (P^2 N) | "
        "GFLOP | GFLOP/s | of gemm peak |",
        "|" + "---|" * 13,
    ]
    for r in result["rows"]:
        if "error" in r:
            lines.append(
                f"| {r['d']} | {r['nhead']} | {r['T']} | {r['layers']} | {r.get('P', '-')} | {r['N']} | "
                f"error: {r['error']} |" + " |" * 6
            )
            continue
        lines.append(
            f"| {r['d']} | {r['nhead']} | {r['T']} | {r['layers']} | {r['P']} | {r['N']} | {r['median_s']:.3f} | "
            f"{r['peak_above_baseline_mib']:.0f} | {r['peak_above_baseline_mib'] * 2**20 / (8 * r['P'] ** 2):.2f} | "
            f"{r['ns_per_P2_token']:.2f} | "
            f"{r['flops'] / 1e9:.3f} | {r['gflops_per_s']:.3f} | {_f(r.get('frac_of_gemm_peak'), '.1%')} |"
        )
    lines += [
        "",
        "Fitted exponents (least squares of log y on log factor, one-factor sweeps around the base):",
        "",
        "| factor | values | P | time | memory | counted flops | model P^2 N | model 8 P^2 | theory (time) |",
        "|" + "---|" * 9,
    ]
    for factor, f in result["fits"].items():
        vals = ", ".join(map(str, f["values"]))
        ps = ", ".join(map(str, f["P"]))
        if "error" in f:
            lines.append(f"| {factor} | {vals} | {ps} | {f['error']} |" + " |" * 5)
            continue
        lines.append(
            f"| {factor} | {vals} | {ps} | {f['exp_time']:.2f} | {f['exp_memory']:.2f} | {f['exp_flops']:.2f} | "
            f"{f['exp_model_P2N']:.2f} | {f['exp_model_8P2']:.2f} | {PREDICTED_TIME.get(factor, '-')} |"
        )
    g0, g1 = result["gemm_start"], result["gemm_end"]
    lines += [
        "",
        "Cost model: time ~ c P^2 N + c' P N T d L (docs/theory.md, section 21, 'Cost'); memory: the P x P "
        "result (8 P^2 bytes, a second one while it is symmetrised) plus one chunk's tangents (grow with T).",
    ]
    if "error" in g0:
        lines.append(f"float64 gemm peak: not measured ({g0['error']}).")
    else:
        lines.append(
            f"float64 gemm ({g0['n']}^3 matmul, {g0['threads']} threads): median {g0['gflops_median']:.2f} GFLOP/s, "
            f"best {g0['gflops_best']:.2f} at start; "
            + (f"median {g1['gflops_median']:.2f} at end." if "error" not in g1 else f"at end: {g1['error']}.")
            + (
                f" Fractions use the larger median, {result['gemm_peak_gflops']:.2f} GFLOP/s."
                if result.get("gemm_peak_gflops")
                else ""
            )
        )
    lg = result.get("largest")
    if lg is not None:
        r = next(r for r in result["rows"] if "error" not in r and all(r[k] == lg[k] for k in lg))
        lines.append(
            f"Largest case (d {r['d']}, nhead {r['nhead']}, T {r['T']}, layers {r['layers']}, P {r['P']}): "
            f"{r['flops'] / 1e9:.2f} GFLOP counted in {r['median_s']:.2f} s = {r['gflops_per_s']:.3f} GFLOP/s, "
            f"{_f(r.get('frac_of_gemm_peak'), '.1%')} of the measured gemm peak."
        )
    lines += ["", result["flop_note"], ""]
    return "\n".join(lines)


def _load(v) -> str:
    return ", ".join(f"{x:.2f}" for x in v)


def cmd_growth(a) -> None:
    """CLI entry: ``transformer-hessian bench encoder --growth [--quick] [--factors ...]``."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    base = dict(QUICK_BASE if a.quick else BASE)
    sweeps = dict(QUICK_SWEEPS if a.quick else SWEEPS)
    if a.factors:
        unknown = sorted(set(a.factors) - set(sweeps))
        if unknown:
            raise SystemExit(f"bench encoder --growth: unknown --factors {unknown}; known: {sorted(sweeps)}")
        sweeps = {k: v for k, v in sweeps.items() if k in a.factors}
    if a.batch_size is not None:
        base["B"] = a.batch_size
    result = run_growth(base=base, sweeps=sweeps, repeats=a.repeats, timeout=a.timeout, out_dir=a.out_dir)
    print(growth_markdown(result))
