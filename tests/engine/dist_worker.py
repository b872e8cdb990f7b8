"""One process of the two-process test (tests/engine/test_data.py): the same data set as one
process, this rank's share of its batches (``batches[rank::world]``, as a ``DistributedSampler``
deals them), every result all-reduced. Run with the env:// variables torchrun sets; rank 0 writes
the results to the path given, rank 1 to that path + ``.rank1``."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import torch

from transformer_hessian import HessianOperator, exact_hessian
from transformer_hessian.bench.lm_models import nano_gpt
from transformer_hessian.core.krylov import lanczos
from transformer_hessian.core.spectral import hutchinson_trace, slq_density, top_eigenvalues

DT = torch.float64


def problem():
    """A tiny decoder and seven batches of three sizes and lengths, a share of targets ignored."""
    torch.manual_seed(13)
    model = nano_gpt(7, 6, 6, 2, 1).to(DT).eval()
    gen = torch.Generator().manual_seed(13)
    batches = []
    for B, T in [(2, 5), (2, 5), (1, 4), (2, 5), (1, 4), (3, 6), (2, 5)]:
        ids = torch.randint(0, 7, (B, T), generator=gen)
        t = ids.clone()
        t[torch.rand(B, T, generator=gen) < 0.2] = -100
        batches.append((ids, t))
    return model, batches


def compute(rank: int, world: int) -> dict:
    """Product, gradient, dense Hessian, top eigenvalues and trace of this rank's operator."""
    model, batches = problem()
    share = batches[rank::world]
    op = HessianOperator(model, data=share, loss="causal_lm")
    P = op.shape[0]
    V = torch.randn(P, 2, generator=torch.Generator().manual_seed(1), dtype=DT)
    H = exact_hessian(model, data=share, loss="causal_lm", progress=False)
    return {
        "ranks": world,
        "n_terms": op.n_terms,
        "hv": (op @ V).tolist(),
        "grad": op.gradient().tolist(),
        "H": H.tolist(),
        "top": top_eigenvalues(op, None, k=3, steps=30, seed=0),
        "trace": hutchinson_trace(op, None, n_probes=8, seed=0),
        "lanczos": float(lanczos(op, torch.ones(1, P, dtype=DT), 30, which="LA")[0][0]),
        "slq": slq_density(op, None, n_probes=2, steps=10)["nodes"].tolist(),
    }


def main() -> None:
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.distributed.init_process_group("gloo", timeout=timedelta(seconds=120))
    try:
        res = compute(rank, world)
    finally:
        torch.distributed.destroy_process_group()
    path = sys.argv[1] + ("" if rank == 0 else f".rank{rank}")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main()
