"""The language study's computation: a GPT-style decoder on byte tokens, its exact Hessian blocks,
D_k and Theorem 7 on sequences, Assumption 1, a scaling law and the error of curvature
approximations. Every Hessian is :func:`transformer_hessian.engine.api.exact_hessian` with the
causal LM loss (the same call a user makes); nothing here differentiates the model another way.

Blocks of the Hessian (:func:`hessian_groups`): the token embedding ``E`` (tied to the LM head),
and per layer ``l`` the weights ``W_Q``, ``W_K``, ``W_V`` (each split by head: head ``h`` is the
contiguous rows ``h d_h : (h+1) d_h`` of the flattened ``(d, d)`` weight), ``W_O``, ``W_1`` and
``W_2``. Biases, LayerNorm weights and position embeddings are outside the Hessian (the paper's
blocks are the weight matrices).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from ...util.files import log

if TYPE_CHECKING:
    from ...config.settings import Lm

__all__ = [
    "PAPER_GROUPS",
    "corpus_of",
    "gpt_config",
    "group_norms",
    "hessian_groups",
    "hessian_params",
    "hessian_stage",
    "layer_norms",
    "per_sequence_losses",
    "sequences_of",
]

#: The weight matrices of a layer, in the order of the Hessian's rows, and the paper's five groups.
LAYER_MATRICES = (("W_Q", "q"), ("W_K", "k"), ("W_V", "v"), ("W_O", "o"), ("W_1", "fc1"), ("W_2", "fc2"))
PAPER_GROUPS = ("W_Q", "W_K", "W_V", "W_1", "W_2")


# ----------------------------------------------------------------------------- data and model


def corpus_of(s: Lm, data_root: str | Path):
    """The corpus ``lm.corpus`` names: the embedded docstrings, ``lm.local`` or Tiny Shakespeare
    (downloaded into ``data_root/shakespeare``)."""
    from ...data import text

    if s.corpus == "embedded":
        return text.embedded_corpus()
    if s.corpus == "local":
        if not s.local:
            raise ValueError("lm.local: corpus 'local' needs a .txt file or a folder of them")
        return text.local_corpus(s.local)
    kwargs = {"url": s.url} if s.url else {}
    return text.download_shakespeare(Path(data_root) / "shakespeare", **kwargs)


def sequences_of(s: Lm, corpus) -> tuple[torch.Tensor, torch.Tensor]:
    """``(train, val)`` sequences of ``lm.context`` byte tokens: the corpus split once (the first
    ``1 - val_fraction`` for training), cut into non-overlapping windows in order."""
    from ...data import text

    train, val = text.split(text.encode(corpus), s.val_fraction)
    tr, va = text.windows(train, s.context), text.windows(val, s.context, s.val_sequences)
    if len(tr) < 2 or len(va) < 1:
        raise ValueError(
            f"lm: the corpus {corpus.name!r} ({len(corpus.data)} bytes) gives {len(tr)} training and {len(va)} "
            f"validation sequences of lm.context = {s.context} tokens; use a longer text or a shorter context"
        )
    return tr, va


def gpt_config(s: Lm, width: int | None = None, depth: int | None = None):
    """The decoder's configuration: ``lm``'s sizes, or the given width and depth (the scaling grid)."""
    from ...core.gpt import GPTConfig

    return GPTConfig(
        vocab=256, context=s.context, width=width or s.width, depth=depth or s.depth, heads=s.heads, mlp_ratio=4
    )


def per_sequence_losses(model, seqs: torch.Tensor, batch: int = 256) -> np.ndarray:
    """The causal LM loss of each sequence (mean over its ``T - 1`` predicted tokens), float64."""
    out = []
    with torch.no_grad():
        for i in range(0, len(seqs), batch):
            ids = seqs[i : i + batch]
            logits = model(ids)
            ce = F.cross_entropy(logits[:, :-1].transpose(1, 2).double(), ids[:, 1:], reduction="none")
            out.append(ce.mean(dim=1).cpu().numpy())
    return np.concatenate(out).astype(np.float64)


# ----------------------------------------------------------------------------- Hessian blocks


def hessian_params(depth: int) -> list[str]:
    """The parameters of the Hessian, in its row order: the token embedding, then each layer's
    weight matrices (:data:`LAYER_MATRICES`)."""
    names = ["tok.weight"]
    for i in range(depth):
        names += [f"blocks.{i}.{'attn' if m in 'qkvo' else 'mlp'}.{m}.weight" for _, m in LAYER_MATRICES]
    return names


def hessian_groups(cfg, split_heads: bool = True) -> list[tuple[str, int, int]]:
    """``(label, start, stop)`` of every block of the Hessian's rows: ``E``, then ``L<l> W_Q h<h>``
    (heads split for W_Q, W_K, W_V when ``split_heads``), ``L<l> W_O``, ``L<l> W_1``, ``L<l> W_2``."""
    d, dff, H = cfg.width, cfg.width * cfg.mlp_ratio, cfg.heads
    sizes = {"W_Q": d * d, "W_K": d * d, "W_V": d * d, "W_O": d * d, "W_1": d * dff, "W_2": dff * d}
    out, off = [("E", 0, cfg.vocab * d)], cfg.vocab * d
    for layer in range(cfg.depth):
        for g, _ in LAYER_MATRICES:
            n = sizes[g]
            if split_heads and g in ("W_Q", "W_K", "W_V") and H > 1:
                step = n // H
                out += [(f"L{layer} {g} h{h}", off + h * step, off + (h + 1) * step) for h in range(H)]
            else:
                out.append((f"L{layer} {g}", off, off + n))
            off += n
    return out


#: blocks with more rows and columns than this get their spectral norm from ARPACK (one singular
#: value, to rounding) instead of a full decomposition
DENSE_SPECTRAL_MAX = 256


def _spectral(blk: torch.Tensor, symmetric: bool) -> float:
    """``||blk||_2``: a full eigen/singular-value decomposition of small blocks, ARPACK's largest
    one (``scipy.sparse.linalg.eigsh`` / ``svds``, ``tol=0``: to rounding) of large ones."""
    if min(blk.shape) <= DENSE_SPECTRAL_MAX:
        if symmetric:
            return float(torch.linalg.eigvalsh(blk).abs().max())
        return float(torch.linalg.matrix_norm(blk, 2))
    from scipy.sparse.linalg import eigsh, svds

    a = blk.detach().cpu().numpy()
    v0 = np.ones(a.shape[1]) / math.sqrt(a.shape[1])
    if symmetric:
        return float(np.abs(eigsh(a, k=1, which="LM", tol=0, v0=v0, return_eigenvectors=False)).max())
    return float(
        svds(
            a,
            k=1,
            tol=0,
            v0=v0 if a.shape[1] <= a.shape[0] else np.ones(a.shape[0]) / math.sqrt(a.shape[0]),
            return_singular_vectors=False,
        ).max()
    )


def group_norms(H: torch.Tensor, groups: Sequence[tuple[str, int, int]]) -> dict[str, Any]:
    """Frobenius and RMS-entry norms of every pair of ``groups`` and the spectral norm of each
    diagonal block: ``{"labels", "fro", "rms"}`` (matrices as nested lists, rows = ``labels``) and
    ``"spectral_diagonal"`` (the paper's 25 blocks of each layer, with every spectral norm, are
    :func:`layer_norms`)."""
    n = len(groups)
    fro, rms = np.zeros((n, n)), np.zeros((n, n))
    for i, (_, a0, a1) in enumerate(groups):
        for j, (_, b0, b1) in enumerate(groups):
            if j < i:
                fro[i, j], rms[i, j] = fro[j, i], rms[j, i]
                continue
            blk = H[a0:a1, b0:b1]
            fro[i, j] = float(torch.linalg.matrix_norm(blk, "fro"))
            rms[i, j] = fro[i, j] / math.sqrt(blk.numel())
    spec = [_spectral(H[a0:a1, a0:a1], True) for _, a0, a1 in groups]
    return {"labels": [g[0] for g in groups], "fro": fro.tolist(), "rms": rms.tolist(), "spectral_diagonal": spec}


def layer_norms(H: torch.Tensor, cfg, layer: int) -> list[dict[str, Any]]:
    """The 25 blocks of the paper's groups (:data:`PAPER_GROUPS`) of ``layer``, whole matrices, in
    the format of :func:`transformer_hessian.core.hessian.block_norms` (``row``, ``col``, ``fro``,
    ``spectral``, ``max_abs``): what the Hessian study's claim rules read."""
    whole = {g: (a, b) for g, a, b in hessian_groups(cfg, split_heads=False)}
    out = []
    for r in PAPER_GROUPS:
        a0, a1 = whole[f"L{layer} {r}"]
        for c in PAPER_GROUPS:
            b0, b1 = whole[f"L{layer} {c}"]
            blk = H[a0:a1, b0:b1]
            out.append(
                {
                    "row": r,
                    "col": c,
                    "fro": float(torch.linalg.matrix_norm(blk, "fro")),
                    "spectral": _spectral(blk, r == c),
                    "max_abs": float(blk.abs().max()),
                }
            )
    return out


def downsample_log(H: torch.Tensor, size: int = 400) -> np.ndarray:
    """log10 of the largest |H_ij| in each cell of a ``size`` x ``size`` grid (the map drawn;
    -inf where a cell is all zeros): a print-size map of a Hessian too large to draw entry by entry."""
    P = H.shape[0]
    edges = np.linspace(0, P, min(size, P) + 1).round().astype(int)
    A = H.abs()
    rows = torch.stack([A[edges[i] : edges[i + 1]].amax(dim=0) for i in range(len(edges) - 1)])
    cells = torch.stack([rows[:, edges[j] : edges[j + 1]].amax(dim=1) for j in range(len(edges) - 1)], dim=1)
    with np.errstate(divide="ignore"):
        return np.log10(cells.cpu().numpy())


def hessian_stage(model, batch: torch.Tensor, cfg) -> tuple[torch.Tensor, dict[str, Any]]:
    """The exact Hessian of the causal LM loss on ``batch`` w.r.t. :func:`hessian_params`, float64,
    and its numbers: loss, group norms (heads split), the paper's 25 blocks per layer, the spread
    of the nonzero entries, the symmetry and the wall time."""
    from ...engine.api import exact_hessian
    from ..block_claims import entry_spread

    m = model.double()
    t0 = time.perf_counter()
    H = exact_hessian(m, batch, batch, loss="causal_lm", params=hessian_params(cfg.depth), progress=False)
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        logits = m(batch)
        loss = float(F.cross_entropy(logits[:, :-1].reshape(-1, cfg.vocab), batch[:, 1:].reshape(-1)))
    sym = float(torch.linalg.matrix_norm(H - H.T) / torch.linalg.matrix_norm(H))
    out = {
        "P": int(H.shape[0]),
        "loss": loss,
        "seconds": seconds,
        "asymmetry": sym,
        "groups": group_norms(H, hessian_groups(cfg)),
        "layers": [layer_norms(H, cfg, layer) for layer in range(cfg.depth)],
        "spread": entry_spread(H.cpu().numpy()),
    }
    log.info("lm hessian: P = %d, %.1f s, loss %.4f", out["P"], seconds, loss)
    return H, out


# ----------------------------------------------------------------------------- Figure 6, Theorem 7, Assumption 1


def per_sequence_gradients(model, seqs: torch.Tensor) -> np.ndarray:
    """``(n, P)`` gradients of each sequence's causal LM loss w.r.t. every parameter (one backward
    pass per sequence, float64 on the model's own dtype)."""
    from ...engine.ops.losses import causal_lm

    params = [p for p in model.parameters() if p.requires_grad]
    rows = []
    for ids in seqs:
        ids = ids[None]
        g = torch.autograd.grad(causal_lm(model(ids), ids), params)
        rows.append(torch.cat([t.reshape(-1) for t in g]).double().cpu().numpy())
    return np.stack(rows)


def landscape_analysis(model, train_seqs: torch.Tensor, s: Lm) -> dict[str, Any]:
    """Figure 6 and Theorem 7 on sequences (:func:`transformer_hessian.core.landscape.analyse_landscape` of the
    per-sequence losses at the trained weights, sequence by sequence and batch by batch) and
    Assumption 1 (:func:`transformer_hessian.core.assumption1.assumption1_analysis` on the first
    ``lm.gram_sequences`` sequences' gradients)."""
    from ...core.assumption1 import assumption1_analysis, gradient_norms
    from ...core.landscape import analyse_landscape
    from ...core.stats import log_grid
    from ...core.theorem7 import orderings

    t0 = time.perf_counter()
    losses = per_sequence_losses(model, train_seqs)
    curve = analyse_landscape(
        losses,
        n_orderings=s.n_orderings,
        seed=s.seed,
        k_min=s.k_min,
        n_bootstrap=s.n_bootstrap,
        granularity="batch" if len(losses) // s.batch_size >= 2 else "sample",  # the paper's: batch by batch
        batch_size=s.batch_size,
    )
    n_g = min(s.gram_sequences, len(train_seqs))
    G = per_sequence_gradients(model, train_seqs[:n_g])
    gram = G @ G.T
    perms = orderings(n_g, s.n_orderings, s.seed)
    norms = gradient_norms(gram, perms)
    k_grid = log_grid(2, n_g, 20)
    a1 = assumption1_analysis(norms, gram, k_grid, s.n_bootstrap, s.seed)
    log.info(
        "lm landscape: %d sequences, D_k slope %.3f [%.3f, %.3f]; Assumption 1 on %d sequences, %.1f s",
        len(losses),
        curve["slope"],
        *curve["slope_ci95"],
        n_g,
        time.perf_counter() - t0,
    )
    return {"curve": curve, "assumption1": a1, "gram_sequences": int(n_g)}
