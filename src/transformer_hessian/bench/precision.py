"""``transformer-hessian bench precision``: a data set's Hessian-vector products of a model in
float32 and bfloat16 (each batch swept in the model's dtype; the sums over batches in the model's
dtype, float32 or float64: ``accumulate=``) against the same model in float64, as relative errors."""

from __future__ import annotations

import copy
import os
import time

import torch


def precision_table(
    vocab: int = 97,
    T: int = 32,
    d: int = 32,
    heads: int = 4,
    layers: int = 2,
    batches: int = 8,
    B: int = 4,
    seed: int = 0,
) -> dict:
    """Relative errors ``||Hv - H64 v|| / ||H64 v||`` of a nanoGPT-style decoder's data-set operator
    in each (dtype, accumulate) against float64, on one seeded vector."""
    from ..bench.lm_models import nano_gpt
    from ..engine.api import HessianOperator

    torch.manual_seed(seed)
    m64 = nano_gpt(vocab, T, d, heads, layers).to(torch.float64).eval()
    gen = torch.Generator().manual_seed(seed)
    data = [(x, x) for x in (torch.randint(0, vocab, (B, T), generator=gen) for _ in range(batches))]
    ref = HessianOperator(m64, data=data, loss="causal_lm")
    v = torch.randn(ref.shape[0], generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    hv = ref @ v
    rows = []
    for dt in (torch.float32, torch.bfloat16):
        model = copy.deepcopy(m64).to(dt)
        for acc in (None, torch.float32, torch.float64):
            t0 = time.perf_counter()
            op = HessianOperator(model, data=data, loss="causal_lm", accumulate=acc)
            r = op @ v
            rows.append({
                "dtype": str(dt).removeprefix("torch."),
                "accumulate": "model's" if acc is None else str(acc).removeprefix("torch."),
                "result_dtype": str(r.dtype).removeprefix("torch."),
                "rel_error": float((r.double() - hv).norm() / hv.norm()),
                "seconds": time.perf_counter() - t0,
            })  # fmt: skip
    return {
        "model": {"vocab": vocab, "T": T, "d": d, "heads": heads, "layers": layers, "P": ref.shape[0]},
        "data": {"batches": batches, "batch_size": B, "terms": ref.n_terms},
        "rows": rows,
        "torch": torch.__version__,
        "load": list(os.getloadavg()),
    }


def markdown(res: dict) -> str:
    """The table of :func:`precision_table`."""
    m = res["model"]
    lines = [
        f"Decoder d {m['d']}, {m['layers']} layers, vocabulary {m['vocab']}, P = {m['P']:,}; "
        f"{res['data']['batches']} batches of {res['data']['batch_size']} x {m['T']} tokens; torch {res['torch']}",
        "",
        "| model dtype | sums over batches in | result | relative error against float64 |",
        "|---|---|---|---|",
    ]
    for r in res["rows"]:
        lines.append(f"| {r['dtype']} | {r['accumulate']} | {r['result_dtype']} | {r['rel_error']:.2e} |")
    return "\n".join(lines) + "\n"


def cmd_bench_precision(a) -> None:
    """``bench precision``: the table into ``a.out_dir`` (precision_bench.{json,md}) and stdout."""
    from pathlib import Path

    from ..util.files import write_text
    from ..util.io import write_json

    res = precision_table()
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(res, out / "precision_bench.json", sealed=False)
    write_text(markdown(res), out / "precision_bench.md")
    print(markdown(res))
