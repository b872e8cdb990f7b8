"""The curvature command's test factory: a tiny float64 decoder and batches of two lengths."""

from __future__ import annotations

import torch

from transformer_hessian.bench.lm_models import nano_gpt


def build(seed: int = 0, n: int = 6, T: int = 6):
    """(model, batches): ``n`` batches of 2 sequences, every third one token shorter."""
    torch.manual_seed(seed)
    model = nano_gpt(7, T, 6, 2, 1).to(torch.float64).eval()
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for i in range(n):
        ids = torch.randint(0, 7, (2, T if i % 3 else T - 1), generator=gen)
        batches.append((ids, ids))
    return model, batches
