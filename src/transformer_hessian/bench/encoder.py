"""``transformer-hessian bench encoder``: exact_hessian vs curvlinops vs reverse-over-reverse autograd.

Each method runs in its own spawned process (its peak resident memory, VmHWM after a reset,
is its own), on the same float64 problem (same seed), and writes its Hessian to a scratch file;
the parent reports median times, the speed-ups of exact_hessian and the relative Frobenius
error of every method against autograd (or curvlinops where autograd was not run).
"""

from __future__ import annotations

import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

from .encoder_problems import build_problem

log = logging.getLogger(__name__)

#: the three shapes timed (the paper's layer, a GPT-like layer, a stack of two); loss
#: "cross_entropy" goes through nn.Linear(d, 10) on the token mean
SHAPES = {
    "paper": dict(
        d=16,
        nhead=1,
        d_ff=64,
        bias=False,
        norm_first=False,
        act="relu",
        T=49,
        B=128,
        layers=1,
        loss="cross_entropy",
        causal=False,
    ),
    "gpt": dict(
        d=32, nhead=4, d_ff=128, bias=True, norm_first=True, act="gelu", T=32, B=16, layers=1, loss="mse", causal=True
    ),
    # a smoke-test shape (seconds): every option of the other three at toy sizes
    "tiny": dict(
        d=4,
        nhead=2,
        d_ff=6,
        bias=True,
        norm_first=True,
        act="gelu",
        T=3,
        B=2,
        layers=2,
        loss="cross_entropy",
        causal=True,
    ),
    "stack2": dict(
        d=16,
        nhead=2,
        d_ff=64,
        bias=True,
        norm_first=False,
        act="relu",
        T=16,
        B=16,
        layers=2,
        loss="cross_entropy",
        causal=False,
    ),
}
METHODS = ("exact", "curvlinops", "autograd")


class _Wrapped:
    """model (+ mean pool + head) as one callable module, attention forced to the MATH kernel."""

    @staticmethod
    def make(model, head, causal: bool, T: int):
        import torch
        from torch import nn
        from torch.nn.attention import SDPBackend, sdpa_kernel

        mask = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64) if causal else None
        key = "src_mask" if isinstance(model, nn.TransformerEncoderLayer) else "mask"

        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.model, self.head = model, head

            def forward(self, x):
                kw = {key: mask, "is_causal": True} if causal else {}
                with sdpa_kernel(SDPBackend.MATH):
                    out = self.model(x, **kw)
                return out if self.head is None else self.head(out.mean(1))

        return M()


def _hessian(method: str, shape: dict, seed: int):
    import torch
    import torch.nn.functional as F

    from ..encoder.api import exact_hessian

    model, head, x, t = build_problem(shape, seed)
    if method == "exact":
        return lambda: exact_hessian(model, x, t, loss=shape["loss"], head=head, is_causal=shape["causal"])
    # train mode (dropout is 0): in eval mode torch's fused fast path (no double backward) would
    # run inside curvlinops' torch.func transforms, whose parameters do not look like they need grad
    model.train()
    params = list(model.parameters())
    wrapped = _Wrapped.make(model, head, shape["causal"], shape["T"])
    if head is not None:
        head.requires_grad_(False)
    lossf = torch.nn.MSELoss() if shape["loss"] == "mse" else torch.nn.CrossEntropyLoss()
    P = sum(p.numel() for p in params)
    if method == "curvlinops":
        from curvlinops import HessianLinearOperator

        def run():
            op = HessianLinearOperator(wrapped, lossf, params, [(x, t)], check_deterministic=False)
            eye = torch.eye(P, dtype=x.dtype)
            return torch.cat([op @ eye[:, i : i + 256].contiguous() for i in range(0, P, 256)], dim=1)

        return run
    shapes = [p.shape for p in params]
    names = [n for n, _ in wrapped.model.named_parameters()]

    def f(flat):
        ps, o = {}, 0
        for n, s in zip(names, shapes, strict=True):
            k = s.numel()
            ps[f"model.{n}"] = flat[o : o + k].view(s)
            o += k
        out = torch.func.functional_call(wrapped, ps, (x,), strict=False)
        return F.mse_loss(out, t) if shape["loss"] == "mse" else F.cross_entropy(out, t)

    flat = torch.cat([p.detach().reshape(-1) for p in params])
    return lambda: torch.autograd.functional.hessian(f, flat)


def _child(method: str, shape: dict, seed: int, repeats: int, path: str, queue) -> None:
    import torch

    from ..util.sandbox import proc_status, reset_peak_rss

    try:
        run = _hessian(method, shape, seed)
        base = proc_status().get("VmRSS", 0)
        reset_peak_rss()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            H = run()
            times.append(time.perf_counter() - t0)
        peak = proc_status().get("VmHWM", 0)
        torch.save(H, path)
        queue.put({"times_s": times, "peak_above_baseline_mib": (peak - base) / 2**20, "P": H.shape[0]})
    except Exception as err:  # noqa: BLE001 - reported in the table, the other methods still run
        queue.put({"error": f"{type(err).__name__}: {err}"})


def run_method(method: str, shape: dict, seed: int, repeats: int, path: str, timeout: float) -> dict:
    """One method on one shape in a spawned process; its row (times, peak memory or error)."""
    from ..util.sandbox import run_spawned

    return run_spawned(_child, (method, shape, seed, repeats, path), timeout)


def bench_encoder(
    shapes: list[str],
    methods: list[str],
    *,
    batch_size: int | None,
    repeats: int,
    timeout: float,
    out_dir: str,
    seed: int = 0,
) -> list[dict]:
    """Run the benchmark; write encoder_bench.{json,md} to ``out_dir``; the rows."""
    import torch

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in shapes:
            shape = dict(SHAPES[name])
            if batch_size is not None:
                shape["B"] = batch_size
            res, H = {}, {}
            for m in methods:
                log.info("bench encoder: %s %s ...", name, m)
                path = str(Path(tmp) / f"{name}_{m}.pt")
                res[m] = run_method(m, shape, seed, repeats if m == "exact" else 1, path, timeout)
                if "error" not in res[m]:
                    H[m] = torch.load(path)
                    res[m]["median_s"] = statistics.median(res[m]["times_s"])
                log.info("bench encoder: %s %s: %s", name, m, {k: v for k, v in res[m].items() if k != "times_s"})
            ref = "autograd" if "autograd" in H else ("curvlinops" if "curvlinops" in H else None)
            for m in methods:
                r = res[m]
                if ref and m in H:
                    r["rel_err_vs_" + ref] = float((H[m] - H[ref]).norm() / H[ref].norm())
                if m != "exact" and "median_s" in r and "median_s" in res.get("exact", {}):
                    r["speedup_of_exact"] = r["median_s"] / res["exact"]["median_s"]
                rows.append({"shape": name, **shape, "method": m, **r})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "encoder_bench.json").write_text(json.dumps({"rows": rows, "threads": torch.get_num_threads()}, indent=1))
    (out / "encoder_bench.md").write_text(_markdown(rows))
    return rows


def _markdown(rows: list[dict]) -> str:
    def f(v, spec):
        return "-" if v is None else format(v, spec)

    lines = ["| shape | B | P | method | median s | peak MiB | exact's speed-up | rel. error |", "|" + "---|" * 8]
    for r in rows:
        err = next((v for k, v in r.items() if k.startswith("rel_err")), None)
        lines.append(
            f"| {r['shape']} | {r['B']} | {r.get('P', '-')} | {r['method']} | {f(r.get('median_s'), '.3f')} | "
            f"{f(r.get('peak_above_baseline_mib'), '.0f')} | {f(r.get('speedup_of_exact'), '.1f')} | "
            f"{f(err, '.1e')} {r.get('error', '')} |"
        )
    return "\n".join(lines) + "\n"


def cmd_bench_encoder(a) -> None:
    """CLI entry: ``transformer-hessian bench encoder``."""
    if getattr(a, "growth", False):
        from .growth import cmd_growth

        cmd_growth(a)
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows = bench_encoder(
        a.shapes, a.methods, batch_size=a.batch_size, repeats=a.repeats, timeout=a.timeout, out_dir=a.out_dir
    )
    print(_markdown(rows))
