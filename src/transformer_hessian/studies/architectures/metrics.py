"""The study's measures of a dense Hessian (numpy only): the blocks of the paper's kind of a torch
encoder (W_Q, W_K, W_V split out of the packed in_proj, all heads together per kind, W_O, W_1,
W_2, per layer), their norms, the heterogeneity of the blocks (spread of the norms and the
Jensen-Shannon distance between the eigenvalue distributions of the diagonal blocks, JS0) and the
share of the Hessian outside the layer-diagonal blocks."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

import numpy as np

__all__ = [
    "KINDS",
    "block_index",
    "block_norms",
    "diagonal_eigenvalues",
    "js_distance",
    "js0",
    "leaders",
    "layer_offdiag_share",
    "spectral_densities",
    "spread_decades",
]

#: The block kinds of one layer, in table order (W_O: torch's out_proj, which the paper's block has too).
KINDS = ("W_Q", "W_K", "W_V", "W_O", "W_1", "W_2")
#: Which rows of which parameter make each kind (in_proj_weight stacks W_q, W_k, W_v by rows).
_SOURCE = {
    "W_Q": ("self_attn.in_proj_weight", 0),
    "W_K": ("self_attn.in_proj_weight", 1),
    "W_V": ("self_attn.in_proj_weight", 2),
    "W_O": ("self_attn.out_proj.weight", None),
    "W_1": ("linear1.weight", None),
    "W_2": ("linear2.weight", None),
}


def _layer_of(name: str) -> int:
    """Layer index of a parameter name of an encoder layer (0) or stack (``layers.<l>.``)."""
    return int(name.split(".")[1]) if name.startswith("layers.") else 0


def block_index(shapes: Sequence[tuple[str, tuple[int, ...]]]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """From ``(name, shape)`` of every Hessian parameter in H's order: ``{"L<l>.<kind>": indices
    of H}`` for the six matrix kinds of each layer, and the layer of every row of H (LayerNorm
    weights and biases belong to their layer but to no block)."""
    offsets, off = {}, 0
    layer_of_row = []
    for name, shape in shapes:
        n = int(np.prod(shape)) if shape else 1
        offsets[name] = (off, tuple(shape))
        layer_of_row += [_layer_of(name)] * n
        off += n
    blocks = {}
    layers = sorted({_layer_of(n) for n, _ in shapes})
    for layer in layers:
        prefix = f"layers.{layer}." if any(n.startswith("layers.") for n, _ in shapes) else ""
        for kind in KINDS:
            pname, part = _SOURCE[kind]
            start, shape = offsets[prefix + pname]
            size = int(np.prod(shape))
            if part is None:
                idx = np.arange(start, start + size)
            else:
                rows, cols = shape[0] // 3, shape[1]
                idx = np.arange(start + part * rows * cols, start + (part + 1) * rows * cols)
            blocks[f"L{layer}.{kind}"] = idx
    return blocks, np.asarray(layer_of_row, dtype=np.int64)


def block_norms(H: np.ndarray, blocks: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """Every block pair (row, col) of ``blocks``: Frobenius norm, spectral norm, RMS entry
    ``||H_ij||_F / sqrt(n_i n_j)`` and max |entry|."""
    out = []
    for a, ia in blocks.items():
        for b, ib in blocks.items():
            sub = H[np.ix_(ia, ib)]
            fro = float(np.linalg.norm(sub))
            out.append(
                {
                    "row": a,
                    "col": b,
                    "fro": fro,
                    "spectral": float(np.linalg.norm(sub, 2)),
                    "rms": fro / math.sqrt(sub.size),
                    "max_abs": float(np.abs(sub).max()),
                }
            )
    return out


#: significant digits at which two block norms count as tied when ranking (a Hessian's rounding is 1e-16
#: relative; a tie is then broken by block order, not by the last bits of a computation)
TIE_DIGITS = 12


def leaders(norms: Sequence[Mapping[str, Any]], field: str, diagonal: bool = False) -> list[tuple[str, str, float]]:
    """Block pairs sorted by ``field``, largest first (only H_ii with ``diagonal``). H is symmetric,
    so H_ji is H_ij transposed with the same norms: each unordered pair is listed once, as
    (row, col) with row first in the order of ``norms``. Values equal to :data:`TIE_DIGITS`
    significant digits keep that order."""
    order = list(dict.fromkeys(r["row"] for r in norms))
    rank = {b: i for i, b in enumerate(order)}
    rows = [r for r in norms if (r["row"] == r["col"] if diagonal else rank[r["row"]] <= rank[r["col"]])]
    key = sorted(range(len(rows)), key=lambda i: (-float(f"{rows[i][field]:.{TIE_DIGITS}g}"), i))
    return [(rows[i]["row"], rows[i]["col"], float(rows[i][field])) for i in key]


def spread_decades(values: Sequence[float]) -> float:
    """log10(max / min) of the positive ``values`` (nan if fewer than two are positive)."""
    pos = [v for v in values if v > 0]
    return math.log10(max(pos) / min(pos)) if len(pos) >= 2 else math.nan


def diagonal_eigenvalues(H: np.ndarray, blocks: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The eigenvalues (ascending) of each diagonal block H_ii."""
    return {name: np.linalg.eigvalsh(H[np.ix_(i, i)]) for name, i in blocks.items()}


def spectral_densities(
    eigenvalues: Mapping[str, np.ndarray], points: int, sigma: float
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Each block's eigenvalue distribution as a Gaussian-smoothed density on one common grid:
    the grid spans all blocks' eigenvalues padded by 3 widths; the width is ``sigma`` times that
    span of eigenvalues (a zero span counts as 1). Densities sum to 1 over the grid."""
    allv = np.concatenate([np.asarray(v, dtype=np.float64) for v in eigenvalues.values()])
    lo, hi = float(allv.min()), float(allv.max())
    width = sigma * ((hi - lo) or 1.0)
    grid = np.linspace(lo - 3 * width, hi + 3 * width, points)
    dens = {}
    for name, v in eigenvalues.items():
        z = (grid[:, None] - np.asarray(v)[None, :]) / width
        p = np.exp(-0.5 * z * z).sum(axis=1)
        p = p / p.sum()
        dens[name] = np.where(p < 1e-300, 0.0, p)  # no subnormals (their halves underflow to 0)
    return grid, dens


def js_distance(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon distance sqrt(JSD) with log base 2 (in [0, 1]) of two discrete distributions
    (normalised here): JSD = (KL(p || m) + KL(q || m)) / 2, m = (p + q) / 2."""
    p = np.asarray(p, dtype=np.float64) / np.sum(p)
    q = np.asarray(q, dtype=np.float64) / np.sum(q)
    m = 0.5 * (p + q)

    def kl(a):
        nz = (a > 0) & (m > 0)  # m >= a / 2 > 0 unless a / 2 underflows (a subnormal)
        return float(np.sum(a[nz] * np.log2(a[nz] / m[nz])))

    return math.sqrt(max(0.5 * (kl(p) + kl(q)), 0.0))


def js0(densities: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """JS0 of Zhang et al. (2024): the mean Jensen-Shannon distance over all unordered pairs of the
    diagonal blocks' spectral densities; with the pairwise values and the most distant pair."""
    pairs = {(a, b): js_distance(densities[a], densities[b]) for a, b in combinations(densities, 2)}
    if not pairs:
        return {"js0": math.nan, "pairs": [], "max_pair": None}
    top = max(pairs, key=pairs.get)
    return {
        "js0": float(np.mean(list(pairs.values()))),
        "pairs": [{"a": a, "b": b, "js": v} for (a, b), v in pairs.items()],
        "max_pair": {"a": top[0], "b": top[1], "js": pairs[top]},
    }


def layer_offdiag_share(H: np.ndarray, layer_of_row: np.ndarray) -> dict[str, float]:
    """What a layer-block-diagonal approximation of ``H`` drops: ``energy`` = the share of
    ||H||_F^2 in the blocks between different layers, ``fro_ratio`` = ||H - blockdiag(H)||_F /
    ||H||_F = sqrt(energy). Zero for a single layer."""
    same = layer_of_row[:, None] == layer_of_row[None, :]
    total = float(np.sum(H * H))
    off = float(np.sum(np.where(same, 0.0, H) ** 2))
    energy = off / total if total > 0 else 0.0
    return {"energy": energy, "fro_ratio": math.sqrt(energy)}
