"""``transformer-hessian bench models``: the engine's dense Hessian and Hessian-vector products of
language models against every correct peer, in one run.

Peers (float64, one process, the same model and batch):

- reverse-over-reverse autograd (``torch.autograd.grad`` of the gradient, the math attention
  kernel, the model as it is): rows of H one at a time;
- ``torch.func`` ``vmap(jvp(grad))`` in blocks of rows, on a copy with LayerNorm written by hand
  (``native_layer_norm``'s saved statistics carry zero tangents in torch 2.14.1, which makes it
  wrong on nn.LayerNorm);
- curvlinops' ``HessianLinearOperator`` applied to unit vectors (math kernel): on the model as it
  is, and for the GPT on the copy with LayerNorm written by hand (curvlinops 3.0.1 goes through
  ``vmap(jvp(vjp))``, the same path);
- for Hessian-vector products: autograd's double backward through a kept gradient graph.

A peer counts as correct when its rows are within 1e-8 of the engine's (relative Frobenius); the
speed-up is against the fastest correct one.

A dense Hessian of ~30k parameters takes a peer an hour, so each peer is timed on ``--rows`` rows
(its cost per row does not depend on which row) and its whole-matrix time is that times P / rows;
the rows it computed are checked against the engine's. The engine's own time is the whole matrix.
The gemm rate of the machine (float64, 2048^2) and the engine's share of it: the products' flops
of the whole dense Hessian (torch's flop counter on an untimed run) over its time.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import torch

from ..engine.api import block_size, prepare
from ..engine.factored import factored_weights
from ..engine.sweep import Progress, blocks, dense_hessian
from ..util.device import synchronize
from .lm_models import TinyLlama, nano_gpt
from .lm_peers import autograd_batched_rows, autograd_hvp, autograd_rows, curvlinops_rows, func_rows

log = logging.getLogger(__name__)

#: the cases timed: (model builder, batch, sequence length, vocabulary)
CASES = {
    "gpt2-like": dict(kind="gpt", vocab=64, T=32, d=32, h=4, layers=2, B=8),
    "llama-like": dict(kind="llama", vocab=64, T=32, d=32, h=4, kv=2, d_ff=64, layers=1, B=8),
    "tiny": dict(kind="gpt", vocab=11, T=6, d=8, h=2, layers=1, B=2),
    "tiny-llama": dict(kind="llama", vocab=11, T=6, d=8, h=2, kv=1, d_ff=12, layers=1, B=2),
}


def build(case: dict, hand_norm: bool = False, seed: int = 0):
    """(model in float64 eval mode, token ids) of a case."""
    torch.manual_seed(seed)
    if case["kind"] == "gpt":
        model = nano_gpt(case["vocab"], case["T"], case["d"], case["h"], case["layers"], hand_norm=hand_norm)
    else:
        model = TinyLlama(case["vocab"], case["T"], case["d"], case["h"], case["kv"], case["d_ff"], case["layers"])
    ids = torch.randint(0, case["vocab"], (case["B"], case["T"]), generator=torch.Generator().manual_seed(seed + 1))
    return model.to(torch.float64).eval(), ids


def gemm_rate(n: int = 2048, repeats: int = 3, device: str | torch.device = "cpu") -> float:
    """The device's float64 matrix-product rate (GFLOP/s), best of ``repeats`` (after a warm-up)."""
    a = torch.randn(n, n, dtype=torch.float64, device=device)
    a @ a
    best = math.inf
    for _ in range(repeats):
        synchronize(a)
        t0 = time.perf_counter()
        b = a @ a
        synchronize(b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


def engine_flops(run, K: int) -> float:
    """Floating-point operations of the products (matrix products, convolutions) of the engine's
    whole dense Hessian, from torch's flop counter on an untimed run of it."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        H = dense_hessian(run, K)
    del H
    return float(fc.get_total_flops())


def hvp_timings(model, ids, V: torch.Tensor) -> dict:
    """Seconds per Hessian-vector product and the products, for the engine's operator and
    autograd's double backward: one vector at a time, and a block of vectors in one product (as
    the project's Lanczos with several starts, Hutchinson and SLQ call the operator; autograd's
    fastest form of that is vmapped). Run first in a case, before the dense Hessians: a fresh
    process, as where a user reaches for products instead of a dense H."""
    from ..engine.api import HessianOperator

    hvps = V.shape[1]
    out, prods, failures = {}, {}, {}
    op = HessianOperator(model, ids, ids, loss="causal_lm")
    for _ in range(3):  # warm-up, not timed (as for autograd); on CUDA the third captures the graphs
        op @ V[:, 0], op @ V
    synchronize(V)
    t0 = time.perf_counter()
    prods["engine_hvp"] = torch.stack([op @ V[:, j] for j in range(hvps)], 1)
    synchronize(V)
    out["engine_hvp_s"] = (time.perf_counter() - t0) / hvps
    prods["autograd_hvp"], out["autograd_hvp_s"] = autograd_hvp(model, ids, V)
    t0 = time.perf_counter()
    prods["engine_hvp_block"] = op @ V
    synchronize(V)
    out["engine_hvp_block_s"] = (time.perf_counter() - t0) / hvps
    try:
        prods["autograd_hvp_batched"], out["autograd_hvp_batched_s"] = autograd_hvp(model, ids, V, batched=True)
    except RuntimeError as err:
        failures["autograd_hvp_batched"] = str(err).splitlines()[0][:200]
    out["engine_cuda_graphs"] = op.graph_status()
    return {"times": out, "products": prods, "failures": failures}


def _hvp_results(out: dict, hvp: dict, HV_ref: torch.Tensor) -> None:
    """The products' times (timed first, :func:`hvp_timings`), their errors against the dense H V
    and the speed-ups (one vector; a block against autograd's fastest correct form) into ``out``."""
    out.update(hvp["times"])
    out["peer_failures"].update(hvp["failures"])
    for key, prod in hvp["products"].items():
        out[f"{key}_err"] = float((prod - HV_ref).norm() / HV_ref.norm())
    out["hvp_speedup"] = out["autograd_hvp_s"] / out["engine_hvp_s"]
    best_block = min(
        [out["autograd_hvp_s"]]
        + ([out["autograd_hvp_batched_s"]] if out.get("autograd_hvp_batched_err", 1) < 1e-8 else [])
    )
    out["autograd_hvp_block_best_s"] = best_block
    out["hvp_block_speedup"] = best_block / out["engine_hvp_block_s"]


def _first_write_s(P: int, dev: torch.device) -> float:
    """Seconds to allocate and first write a dense P x P float64 matrix on ``dev``."""
    synchronize(torch.zeros(1, device=dev))
    t0 = time.perf_counter()
    synchronize(torch.zeros(P, P, dtype=torch.float64, device=dev))
    return time.perf_counter() - t0


def _engine_dense(model, ids, block_bytes: int):
    """(H, run, K, seconds) of the engine's dense Hessian, the capture (``prepare``) included."""
    t0 = time.perf_counter()
    run = prepare(model, ids, ids, loss="causal_lm")
    K = block_size(run, block_bytes or None)
    H = dense_hessian(run, K, Progress())
    synchronize(H)
    return H, run, K, time.perf_counter() - t0


def bench_case(
    name: str, rows: int, hvps: int, device: str | torch.device = "cpu", block_bytes: int = 0, peer_chunk: int = 64
) -> dict:
    """One case on ``device``: the engine's dense H (blocks of ``block_bytes`` of tangents, the
    library's default for the device when 0) and HVP against the peers (the vmapped ones
    ``peer_chunk`` rows at a time)."""
    case, dev = CASES[name], torch.device(device)
    model, ids = build(case)
    model, ids = model.to(dev), ids.to(dev)
    P = sum(p.numel() for p in model.parameters())
    log.info("%s: P = %d, dense H %.2f GiB, on %s", name, P, P * P * 8 / 2**30, dev)
    V = torch.randn(P, hvps, dtype=torch.float64, generator=torch.Generator().manual_seed(3)).to(dev)
    hvp = hvp_timings(model, ids, V)
    out_alloc = _first_write_s(P, dev)
    warm = dev.type == "cuda"  # on a GPU every method runs once untimed first (kernels, allocator)
    if warm:
        _engine_dense(model, ids, block_bytes)
    H, run, K, t_engine = _engine_dense(model, ids, block_bytes)
    fws = [fw.name for fw in factored_weights(run, K)]
    n_blocks = len(blocks(run, K, set(fws)))
    flops = engine_flops(run, K)
    sample = torch.linspace(0, P - 1, min(rows, P)).round().long()
    out = {
        "case": name,
        "device": str(dev),
        "P": P,
        "config": case,
        "engine_s": t_engine,
        "block": K,
        "blocks": n_blocks,
        "factored": fws,  # weights whose rows came from factored sweeps, not the blocks
        "rows_timed": len(sample),
        "warm_up": warm,
        # the engine's time includes allocating and first writing its P x P output; the peers'
        # whole-matrix times are their rows' times scaled up, which leave it out
        "output_alloc_s": out_alloc,
    }
    if warm:
        autograd_rows(model, ids, sample[:4])
    R, t = autograd_rows(model, ids, sample)
    out["autograd_s"] = t * P / len(sample)
    out["autograd_err"] = float((H[sample] - R).norm() / R.norm())
    row_peers = [("autograd_batched", autograd_batched_rows, model), ("func", func_rows, model)]
    row_peers += [("curvlinops", curvlinops_rows, model)]
    if case["kind"] == "gpt":
        hand = build(case, hand_norm=True)[0].to(dev)
        hand.load_state_dict(model.state_dict())
        row_peers += [("func_hand_ln", func_rows, hand), ("curvlinops_hand_ln", curvlinops_rows, hand)]
    out["peer_failures"] = {}
    for key, rows_of, m in row_peers:
        try:
            if warm:
                rows_of(m, ids, sample[:peer_chunk], chunk=peer_chunk)
            R2, t2 = rows_of(m, ids, sample, chunk=peer_chunk)
        except (RuntimeError, NotImplementedError, ImportError) as err:  # e.g. no forward AD through a backward
            out["peer_failures"][key] = str(err).splitlines()[0][:200]
            log.info("%s: peer %s fails: %s", name, key, out["peer_failures"][key])
            continue
        out[f"{key}_s"] = t2 * P / len(sample)
        out[f"{key}_err"] = float((H[sample] - R2).norm() / R2.norm())
        log.info("%s: peer %s, %.1f s for the whole matrix (from %d rows), error %.1e", name, key,
                 out[f"{key}_s"], len(sample), out[f"{key}_err"])  # fmt: skip
    peers = {
        k[:-2]: v for k, v in out.items() if k.endswith("_s") and k != "engine_s" and out.get(k[:-2] + "_err", 1) < 1e-8
    }
    if peers:
        best = min(peers, key=peers.get)
        out["fastest_correct_peer"], out["speedup"] = best, peers[best] / t_engine
    else:  # every peer disagrees with the engine (or failed): a result to look at, not a speed-up
        out["fastest_correct_peer"], out["speedup"] = None, None
        log.warning("%s: no peer agrees with the engine within 1e-8", name)
    out["engine_gflops"] = flops / t_engine / 1e9
    _hvp_results(out, hvp, H @ V)
    try:
        autograd_hvp(model, ids, V[:, :1], math_kernel=False)
        out["autograd_hvp_fused_kernel"] = "ran"
    except RuntimeError as err:
        out["autograd_hvp_fused_kernel"] = f"fails: {str(err).splitlines()[0][:160]}"
    del H
    return out


def cmd_bench_models(a) -> None:
    """Run the cases and write models_bench.{json,md}."""
    torch.set_num_threads(max(1, torch.get_num_threads()))
    rate = gemm_rate(device=a.device)
    results = [bench_case(c, a.rows, a.hvps, a.device, a.block_mib << 20, a.peer_chunk) for c in a.cases]
    for r in results:
        r["gemm_gflops"] = rate
        r["gemm_share"] = r["engine_gflops"] / rate
    outdir = Path(a.out_dir)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "models_bench.json").write_text(json.dumps(results, indent=1))
    lines = [
        "| case | P | engine s (P x P output alloc s) | fastest correct peer | its s (from rows) | speed-up | HVP engine ms | HVP autograd ms | HVP speed-up | HVP block engine ms | HVP block autograd ms (fastest) | block speed-up | err vs autograd | gemm share |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        peer = r["fastest_correct_peer"]
        peer_s, speedup = ("-", "none agrees") if peer is None else (f"{r[peer + '_s']:.1f}", f"{r['speedup']:.1f}x")
        lines.append(
            f"| {r['case']} | {r['P']} | {r['engine_s']:.1f} ({r['output_alloc_s']:.1f}) | {peer} | "
            f"{peer_s} | {speedup} | {1e3 * r['engine_hvp_s']:.2f} | "
            f"{1e3 * r['autograd_hvp_s']:.2f} | {r['hvp_speedup']:.2f}x | {1e3 * r['engine_hvp_block_s']:.2f} | "
            f"{1e3 * r['autograd_hvp_block_best_s']:.2f} | {r['hvp_block_speedup']:.2f}x | {r['autograd_err']:.1e} | {r['gemm_share']:.2f} |"
        )
    lines += [
        "",
        "| case | peer | whole matrix s (from rows) | error against the engine's rows | correct |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        for key in [k[:-2] for k in r if k.endswith("_s") and f"{k[:-2]}_err" in r and "hvp" not in k]:
            ok = "yes" if r[f"{key}_err"] < 1e-8 else "no"
            lines.append(f"| {r['case']} | {key} | {r[key + '_s']:.1f} | {r[key + '_err']:.1e} | {ok} |")
        for key, why in r.get("peer_failures", {}).items():
            lines.append(f"| {r['case']} | {key} | - | fails: {why} | no |")
    (outdir / "models_bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    for r in results:
        errs = {k: f"{v:.1e}" for k, v in r.items() if k.endswith("_err")}
        print(
            f"{r['case']}: errors against the engine's rows {errs}; autograd HVP with the fused kernel: {r['autograd_hvp_fused_kernel']}"
        )
