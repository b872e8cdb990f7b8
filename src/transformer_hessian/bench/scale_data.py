"""The data-set part of ``transformer-hessian bench scale`` (:mod:`.scale`): the engine's
:class:`HessianOperator` over a data set of batches (its mean loss) on one process and on
``world`` gloo processes bound to 127.0.0.1 (the env:// variables torchrun sets), one torch thread
each; each process passes its own share ``batches[rank::world]`` and every product is all-reduced.

Every run, one process too, is a fresh ``python -m transformer_hessian.bench.scale_data`` (the same
code path); each rank writes its timings to ``OUT/rankR.json`` and rank 0 its product to
``OUT/hv.pt``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, world: int, port: int, threads: int = 1) -> dict:
    """The environment of one of ``world`` local gloo processes (what torchrun sets), ``threads``
    torch threads."""
    return {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": str(threads),
    }


def launch(argv: list[str], world: int, timeout: float, threads: int = 1) -> list[tuple[int | None, str]]:
    """``python argv`` as ``world`` local gloo processes; each one's (exit status, stderr), the
    status None for one killed after ``timeout`` seconds."""
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, *argv], env=rank_env(r, world, port, threads), stderr=subprocess.PIPE, text=True
        )
        for r in range(world)
    ]
    out = []
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            try:
                _, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
                out.append((p.returncode, err))
            except subprocess.TimeoutExpired:
                p.kill()
                out.append((None, f"timeout after {timeout:.0f} s"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return out


def run_data(spec: dict, world: int, out_dir: Path, timeout: float) -> dict:
    """The data set's product on ``world`` processes: rank 0's record (build and product seconds,
    peak memory; the slowest rank's product seconds) and the product's file, or the error."""
    import statistics

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "spec.json").write_text(json.dumps(spec))
    results = launch(["-m", __name__, str(out_dir)], world, timeout, threads=1)
    failed = [(r, rc, err) for r, (rc, err) in enumerate(results) if rc != 0]
    if failed:
        r, rc, err = failed[0]
        return {"world": world, "error": f"rank {r} exit {rc}: {err.strip()[-600:]}"}
    ranks = [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(world)]
    rec = {k: v for k, v in ranks[0].items() if k != "rank"}
    slowest = [max(rk["hvp_times_s"][i] for rk in ranks) for i in range(len(ranks[0]["hvp_times_s"]))]
    rec.update(hvp_slowest_rank_s=statistics.median(slowest), peak_bytes_per_rank=[rk["peak_bytes"] for rk in ranks])
    rec["product_file"] = str(out_dir / "hv.pt")
    return rec


def _batches(spec: dict) -> list:
    from .scale_methods import token_batch

    d = spec["data"]
    return [(ids, ids) for ids in (token_batch(spec, d["T"], d["B"], index=i) for i in range(d["batches"]))]


def rank_main(out_dir: Path) -> None:
    """One rank: its share of the data set, a build, one untimed product, ``repeats`` timed ones
    (each after a barrier); its record to ``rankR.json``, rank 0's product to ``hv.pt``."""
    import statistics

    import torch

    from ..engine.api import HessianOperator
    from ..util.device import synchronize
    from .scale_methods import Peak, build_gpt2, probe_vector

    spec = json.loads((out_dir / "spec.json").read_text())
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    torch.set_num_threads(1)
    dist = torch.distributed
    if world > 1:
        from datetime import timedelta

        dist.init_process_group("gloo", timeout=timedelta(seconds=spec["timeout"]))

    def barrier():
        if world > 1:
            dist.barrier()

    try:
        model = build_gpt2(spec)
        share = _batches(spec)[rank::world]
        peak = Peak(spec["device"])
        barrier()
        t0 = time.perf_counter()
        op = HessianOperator(model, data=share, loss="causal_lm")
        build = time.perf_counter() - t0
        v = probe_vector(spec, op.shape[0])
        hv = op @ v  # warm-up, not timed
        times = []
        for _ in range(spec["repeats"]):
            barrier()
            t0 = time.perf_counter()
            hv = op @ v
            synchronize(hv)
            times.append(time.perf_counter() - t0)
        rec = {
            "rank": rank,
            "world": world,
            "batches_here": len(share),
            "kept_values": bool(op.data.keep),  # each batch's values kept between products (else evaluated again)
            "threads": torch.get_num_threads(),
            "build_s": build,
            "hvp_times_s": times,
            "hvp_s": statistics.median(times),
            "peak_bytes": peak.peak(),
            "base_bytes": peak.base,
        }
        (out_dir / f"rank{rank}.json").write_text(json.dumps(rec))
        if rank == 0:
            torch.save(hv.detach().to("cpu", torch.float64), out_dir / "hv.pt")
    finally:
        if world > 1:
            dist.destroy_process_group()


if __name__ == "__main__":
    rank_main(Path(sys.argv[1]))
