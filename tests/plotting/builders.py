"""Synthetic inputs shared by the plotting tests (test_plotting.py, test_figure_text.py): not a test
module. Each test module binds its own block layout (``OFFSETS``)."""

from __future__ import annotations

import numpy as np

from transformer_hessian import GROUPS


def random_hessian(seed: int, size: int, scale: float = 1.0, zeros: bool = True) -> np.ndarray:
    """A symmetric ``size`` x ``size`` matrix with entries over nine orders of magnitude; with ``zeros``,
    its first three rows and columns are exact zeros, as in rows of parameters that get no gradient."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((size, size)) * 10.0 ** rng.uniform(-9, 0, size=(size, size))
    h = scale * (a + a.T)
    if zeros:
        h[:3, :] = h[:, :3] = 0.0
    return h


def block_norms_doc(h: np.ndarray, offsets: np.ndarray, stage: str, seed: int) -> dict:
    """The block-norms document of ``h`` (blocks between ``offsets``) with random weight norms."""
    rng = np.random.default_rng(seed)
    blocks = []
    for i, row in enumerate(GROUPS):
        for j, col in enumerate(GROUPS):
            b = h[offsets[i] : offsets[i + 1], offsets[j] : offsets[j + 1]]
            blocks.append(
                {
                    "row": row,
                    "col": col,
                    "fro": float(np.linalg.norm(b)),
                    "spectral": float(np.linalg.norm(b, 2)),
                    "max_abs": float(np.abs(b).max()),
                }
            )
    weights = {g: {"spectral": float(rng.uniform(0.5, 3)), "fro": float(rng.uniform(2, 9))} for g in GROUPS}
    return {"stage": stage, "blocks": blocks, "weights": weights}
