"""``transformer-hessian bench scale``: the engine's Hessian-vector product of GPT-2 small against
its peers at 128 and 1024 tokens, and a data set's product on one and two processes: build, product
time and peak memory against their goals.

Part 1 (:mod:`.scale_methods`): Hugging Face's ``GPT2LMHeadModel(GPT2Config())`` (124M parameters,
random init), float32, eval mode, one batch of ``1 x T`` tokens; the engine, autograd's double
backward and curvlinops, each in its own process (a fork of a server that imported torch,
transformers and curvlinops once), one after the other: build seconds, product seconds (median of
``repeats`` after a warm-up), peak memory, and the products of the same seeded ``v`` against each
other (relative errors). A method that fails or times out is recorded with its error. Part 2: the
goals' ratios, computed here from the timings of part 1 (engine product / peer product, engine
build / engine product, engine peak / peer peak) and the fastest correct peer (its product
within ``tol`` of the engine's). Part 3 (:mod:`.scale_data`): the same data set of batches on one
process and on two gloo processes; their products compared and the ratio of their product times.

``--quick``: a tiny GPT-2 in float64 and short lengths, the same code path, in seconds.
Writes ``scale_bench.{json,md}`` with the load averages before and after, torch's version, the
threads, the date, the device's name and the commit."""

from __future__ import annotations

import datetime
import json
import logging
import os
import platform
import subprocess
import tempfile
from pathlib import Path

from .scale_methods import METHODS, SMALL, TINY

log = logging.getLogger(__name__)

#: the goals the bench checks (a ratio at most this)
GOAL_HVP, GOAL_BUILD, GOAL_DATA = 0.7, 1.0, 0.6
#: imported once by the fork server whose forks run the methods (a fresh process each)
PRELOAD = ("torch", "transformers.models.gpt2.modeling_gpt2", "curvlinops", "transformer_hessian.engine.api")
#: relative error under which a peer's product counts as agreeing with the engine's
TOL = {"float32": 1e-4, "float64": 1e-8}


def goal_peak(T: int) -> float:
    """The goal on engine peak / peer peak at ``T`` tokens: 0.9 up to 128 tokens, 0.7 above."""
    return 0.9 if T <= 128 else 0.7


def rel_err(a, b) -> float:
    """``|a - b| / |b|`` (float64)."""
    return float((a.double() - b.double()).norm() / b.double().norm())


def ratios(rec: dict, T: int, tol: float) -> dict:
    """The goals' ratios of one length from its methods' records ``rec[method]`` (None where a
    method failed) and the fastest peer whose product is within ``tol`` of the engine's."""
    e = rec["engine"]
    out: dict = {}
    if "error" in e:
        return {"fastest_correct_peer": None}
    out["engine_build_over_hvp"] = e["build_s"] / e["hvp_s"]
    out["goal_build"] = GOAL_BUILD
    out["goal_hvp"], out["goal_peak"] = GOAL_HVP, goal_peak(T)
    correct = {}
    for peer in METHODS[1:]:
        p = rec[peer]
        if "error" in p:
            continue
        out[f"engine_over_{peer}_hvp"] = e["hvp_s"] / p["hvp_s"]
        out[f"engine_over_{peer}_peak"] = e["peak_bytes"] / p["peak_bytes"]
        above_e, above_p = e["peak_bytes"] - e["base_bytes"], p["peak_bytes"] - p["base_bytes"]
        out[f"engine_over_{peer}_peak_above_base"] = above_e / above_p if above_p > 0 else None
        if p.get("rel_err", {}).get("engine", 1.0) <= tol:
            correct[peer] = p["hvp_s"]
    out["correct_peers"] = sorted(correct)
    out["fastest_correct_peer"] = min(correct, key=correct.get) if correct else None
    return out


def part_methods(spec: dict, T: int, tmp: Path, timeout: float) -> dict:
    """Part 1 at ``T`` tokens: each method in its own process, one after the other; the relative
    errors of each product against every other (the products read once every method has ended,
    so that this process holds none of them while a method runs)."""
    import torch

    from ..util.sandbox import run_spawned
    from .scale_methods import child

    rec = {}
    for m in METHODS:
        log.info("bench scale: %d tokens, %s ...", T, m)
        rec[m] = run_spawned(child, (m, spec, T, str(tmp / f"{m}_{T}.pt")), timeout, preload=PRELOAD)
        if "error" not in rec[m]:
            log.info("bench scale: %d tokens, %s: build %.2f s, product %.3f s, peak %.0f MiB", T, m,
                     rec[m]["build_s"], rec[m]["hvp_s"], rec[m]["peak_bytes"] / 2**20)  # fmt: skip
        else:
            log.info("bench scale: %d tokens, %s fails: %s", T, m, rec[m]["error"])
    prods = {m: torch.load(tmp / f"{m}_{T}.pt") for m in METHODS if "error" not in rec[m]}
    for m, pm in prods.items():
        rec[m]["rel_err"] = {o: rel_err(pm, po) for o, po in prods.items() if o != m}
    return rec


def part_data(spec: dict, tmp: Path, timeout: float) -> dict:
    """Part 3: the data set's product on one process and on two."""
    import torch

    from .scale_data import run_data

    out = {"config": spec["data"]}
    for world in (1, 2):
        log.info("bench scale: data set on %d process(es) ...", world)
        out[f"world{world}"] = run_data(spec, world, tmp / f"data{world}", timeout)
        log.info("bench scale: data set on %d process(es): %s", world,
                 {k: v for k, v in out[f"world{world}"].items() if k in ("hvp_s", "build_s", "error")})  # fmt: skip
    one, two = out["world1"], out["world2"]
    if "error" not in one and "error" not in two:
        out["rel_err_two_vs_one"] = rel_err(torch.load(two["product_file"]), torch.load(one["product_file"]))
        out["two_over_one_hvp"] = two["hvp_s"] / one["hvp_s"]
        out["goal_two_over_one"] = GOAL_DATA
    for rec in (one, two):
        rec.pop("product_file", None)
    return out


def _device_name(device: str) -> str:
    import torch

    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(torch.device(device))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _commit() -> str:
    try:
        here = Path(__file__).resolve().parent
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def bench_scale(
    tokens: list[int], *, quick: bool, dtype: str, repeats: int, timeout: float, device: str, data: dict, parts: list
) -> dict:
    """Run the parts asked (``methods``, ``data``); the record written to scale_bench.json."""
    import torch

    spec = dict(
        config=TINY if quick else SMALL, dtype=dtype, seed=0, repeats=repeats, device=device,
        threads=torch.get_num_threads(), data=data, timeout=timeout,
    )  # fmt: skip
    res: dict = {
        "model": "tiny GPT-2 " + json.dumps(TINY) if quick else "GPT-2 small (GPT2Config(), 124M)",
        "quick": quick,
        "dtype": dtype,
        "repeats": repeats,
        "torch": torch.__version__,
        "threads": spec["threads"],
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "device": device,
        "device_name": _device_name(device),
        "commit": _commit(),
        "load_before": list(os.getloadavg()),
        "tol": TOL[dtype],
    }
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        if "methods" in parts:
            res["lengths"] = {}
            for T in tokens:
                rec = part_methods(spec, T, tmp, timeout)
                res["lengths"][str(T)] = {"methods": rec, "ratios": ratios(rec, T, TOL[dtype])}
        if "data" in parts:
            res["data"] = part_data(spec, tmp, timeout)
    res["load_after"] = list(os.getloadavg())
    return res


def cmd_bench_scale(a) -> None:
    """CLI entry: ``transformer-hessian bench scale``; writes scale_bench.{json,md} to ``--out-dir``."""
    from .scale_report import markdown

    quick = a.quick
    tokens = a.tokens or ([8, 16] if quick else [128, 1024])
    dtype = a.dtype or ("float64" if quick else "float32")
    data = dict(batches=a.data_batches, B=1, T=a.data_tokens or (16 if quick else 128))
    res = bench_scale(
        tokens, quick=quick, dtype=dtype, repeats=a.repeats, timeout=a.timeout, device=a.device, data=data,
        parts=a.parts,
    )  # fmt: skip
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scale_bench.json").write_text(json.dumps(res, indent=1))
    md = markdown(res)
    (out / "scale_bench.md").write_text(md)
    print(md)
