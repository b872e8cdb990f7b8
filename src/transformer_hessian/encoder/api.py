"""Exact dense Hessians of losses of ``torch.nn.TransformerEncoderLayer`` / ``TransformerEncoder``.

:func:`exact_hessian` checks the model and inputs, then runs curvature propagation
(:mod:`.graph`) over chunks of samples with all selected parameters' tangents at once.
:func:`hessian_blocks` gives the same matrix as named blocks; :func:`split_heads` splits the
packed ``in_proj`` blocks into per-head W_Q, W_K, W_V blocks.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import torch
from torch import nn

from . import paper_kind
from .graph import chunk_hessian, graph_ranks
from .ops import Hess, Slot, symmetrize_

#: bytes of tangent working memory per chunk of samples in one sweep (the chunk size follows from it;
#: each worker has its own). The sweep is bound by memory traffic and by kernel launches, and small
#: blocks of tangents over larger chunks (more tokens per Hessian-column product) did best:
#: bench encoder's shapes at B 16, two single-threaded workers, OMP_WAIT_POLICY=PASSIVE (the CLI's),
#: one session (2026-12-02, load 1-2): GPT-like layer 256 tangents x 64 MiB 18.9 s, 64 x 256 MiB
#: 16.2 s, 32 x 256 MiB 17.0 s, 64 x 128 MiB 19.1 s; 2-layer stack 4.6 / 3.7 / - / 4.0 s
DEFAULT_CHUNK_BYTES = 256 << 20
#: tangents propagated together (rows of H per sweep). Smaller blocks repeat the values sweep (cheap), keep
#: the tangents near the cache, and a block whose first parameter sits late in the graph runs only that
#: part of it (graph.Tape.backward); see DEFAULT_CHUNK_BYTES for the measurements
DEFAULT_TANGENT_BLOCK = 64
#: a factored block (one unit tangent per row of a Linear weight, ops.Hess) holds at most this many
#: times ``tangent_block`` rows of H: its sums over rows are products as large as its rows times the
#: columns, which bounds their temporaries to this many times a dense block's
FACTORED_ROWS = 32


def tangent_blocks(names: list[str], named: dict, cols: dict, limit: int, factored=frozenset()) -> list[list[tuple]]:
    """Split the selected parameters, taken in the order of ``names``, by whole rows (first index)
    into blocks of at most ``limit`` tangents (a row longer than that is a block of its own): per
    block its pieces (name, local tangent range, a0, a1, rows of H), a piece being rows a0..a1 of
    one parameter. A parameter in ``factored`` (a Linear weight swept with one unit tangent per
    row, :class:`.ops.Hess`) gets blocks of its own of at most ``FACTORED_ROWS * limit`` rows of H."""
    blocks, cur, n = [], [], 0
    for name in names:
        p = named[name]
        rs, R, a = _row_size(p), (p.shape[0] if p.dim() else 1), 0
        if name in factored:
            blocks += [cur] if cur else []
            cur, n, step = [], 0, max(1, FACTORED_ROWS * limit // rs)
            for a in range(0, R, step):
                b, start = min(R, a + step), cols[name].start
                blocks.append([(name, slice(0, b - a), a, b, slice(start + a * rs, start + b * rs))])
            continue
        while a < R:
            room = (limit - n) // rs
            if room <= 0 and cur:
                blocks.append(cur)
                cur, n = [], 0
                continue
            take = min(R - a, max(room, 1))
            start = cols[name].start + a * rs
            cur.append((name, slice(n, n + take * rs), a, a + take, slice(start, start + take * rs)))
            n += take * rs
            a += take
    if cur:
        blocks.append(cur)
    return blocks


def _row_size(p: torch.Tensor) -> int:
    return p[0].numel() if p.dim() else 1


def _available_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 1 << 62


def _activation_kind(layer: nn.TransformerEncoderLayer, where: str) -> str:
    act = layer.activation
    if isinstance(act, nn.GELU) and act.approximate != "none":
        raise ValueError(f"{where}.activation: GELU(approximate={act.approximate!r}) is not supported (only 'none')")
    kind = {1: "relu", 2: "gelu"}.get(getattr(layer, "activation_relu_or_gelu", 0))
    if kind is None:
        raise ValueError(f"{where}.activation: {act!r} is not supported (only relu and gelu, exact erf)")
    return kind


def _check_layer(layer, where: str, training: bool) -> str:
    if not isinstance(layer, nn.TransformerEncoderLayer):
        raise TypeError(f"{where}: expected nn.TransformerEncoderLayer, got {type(layer).__name__}")
    mha = layer.self_attn
    if not mha.batch_first:
        raise ValueError(f"{where}: batch_first=False is not supported (build the layer with batch_first=True)")
    if mha.bias_k is not None or mha.add_zero_attn or not mha._qkv_same_embed_dim:
        raise ValueError(f"{where}.self_attn: add_bias_kv, add_zero_attn and kdim/vdim != d_model are not supported")
    if training:
        rates = [layer.dropout.p, layer.dropout1.p, layer.dropout2.p, mha.dropout]
        if any(r > 0 for r in rates):
            raise ValueError(f"{where}: dropout {max(rates)} > 0 in training mode; call model.eval() or use dropout=0")
    for nm in ("norm1", "norm2"):
        if not isinstance(getattr(layer, nm), nn.LayerNorm):
            raise TypeError(f"{where}.{nm}: only nn.LayerNorm is supported")
    return _activation_kind(layer, where)


def _layers(model) -> tuple[list, list, nn.LayerNorm | None]:
    if isinstance(model, nn.TransformerEncoderLayer):
        return [model], [_check_layer(model, "model", model.training)], None
    if isinstance(model, nn.TransformerEncoder):
        layers = list(model.layers)
        kinds = [_check_layer(m, f"model.layers.{i}", m.training) for i, m in enumerate(layers)]
        norm = model.norm
        if norm is not None and not isinstance(norm, nn.LayerNorm):
            raise TypeError(f"model.norm: only nn.LayerNorm is supported, got {type(norm).__name__}")
        return layers, kinds, norm
    raise TypeError(f"model: expected nn.TransformerEncoderLayer or nn.TransformerEncoder, got {type(model).__name__}")


def _causal(T: int, dtype, device) -> torch.Tensor:
    return torch.full((T, T), float("-inf"), dtype=dtype, device=device).triu(1)


def _additive_mask(mask, is_causal: bool, T: int, dtype, device) -> torch.Tensor | None:
    """torch's ``src_mask`` as an additive float (T, T) mask (bool: True = not allowed)."""
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.shape != (T, T):
            shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise ValueError(f"mask: expected a ({T}, {T}) tensor (T = inputs.shape[1]), got {shape}")
        if mask.dtype == torch.bool:
            add = torch.zeros(T, T, dtype=dtype, device=device).masked_fill(mask.to(device), float("-inf"))
        elif mask.is_floating_point():
            add = mask.to(device=device, dtype=dtype)
        else:
            raise ValueError(f"mask: dtype {mask.dtype} is not supported (bool or floating point)")
        if torch.isinf(add).all(-1).any():
            raise ValueError("mask: a row masks every key (its softmax is undefined)")
        if is_causal and not torch.equal(torch.isinf(add), torch.isinf(_causal(T, dtype, device))):
            raise ValueError("is_causal=True with a mask that is not causal (torch would ignore the mask)")
        return add
    return _causal(T, dtype, device) if is_causal else None


def _named(model, head) -> dict[str, nn.Parameter]:
    named = dict(model.named_parameters())
    if head is not None:
        named.update({f"head.{n}": p for n, p in head.named_parameters()})
    return named


def _select(model, head, params) -> tuple[list[str], dict]:
    named = _named(model, head)
    if params is None:
        names = list(dict(model.named_parameters()))
    else:
        names = list(params)
        unknown = [n for n in names if n not in named]
        if unknown:
            raise KeyError(f"params: unknown names {unknown}; known: {list(named)}")
        if len(set(names)) != len(names):
            raise ValueError(f"params: repeated names in {names}")
    return names, named


def _check_data(inputs, targets, loss, head, d: int) -> None:
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 3 or inputs.shape[-1] != d:
        shape = tuple(inputs.shape) if isinstance(inputs, torch.Tensor) else type(inputs).__name__
        raise ValueError(f"inputs: expected (B, T, d_model={d}), got {shape}")
    if not inputs.is_floating_point():
        raise ValueError(f"inputs: floating point expected, got {inputs.dtype}")
    if loss == "mse":
        if head is not None:
            raise ValueError("head: only used with loss='cross_entropy'")
        if targets.shape != inputs.shape:
            raise ValueError(
                f"targets: loss='mse' needs the output's shape {tuple(inputs.shape)}, got {tuple(targets.shape)}"
            )
    elif loss == "cross_entropy":
        if not isinstance(head, nn.Linear) or head.in_features != d:
            raise ValueError(f"head: loss='cross_entropy' needs an nn.Linear({d}, C), got {head!r}")
        if targets.shape != inputs.shape[:1] or targets.is_floating_point():
            raise ValueError(
                f"targets: loss='cross_entropy' needs ({inputs.shape[0]},) class indices, got "
                f"{tuple(targets.shape)} {targets.dtype}"
            )
    else:
        raise ValueError(f"loss: {loss!r} is not supported ('mse' or 'cross_entropy')")


def _per_sample_bytes(P: int, T: int, d: int, d_ff: int, nhead: int, n_layers: int, itemsize: int) -> int:
    """Tangent memory of one sample (P tangents), kept for the backward sweep, with a margin."""
    per_layer = T * (14 * d + 3 * d_ff) + 4 * nhead * T * T
    return 2 * P * itemsize * (per_layer * n_layers + 4 * T * d)


def _check_memory(P: int, dtype: torch.dtype, device: torch.device) -> int:
    """Bytes of the dense (P, P) result; MemoryError (with the numbers) when they are not available."""
    need = P * P * torch.finfo(dtype).bits // 8
    avail = _available_bytes(device)
    if need > avail:
        raise MemoryError(
            f"exact_hessian: the dense Hessian over P = {P} parameters needs {need} bytes "
            f"({need / 2**30:.2f} GiB) of {dtype}; {avail} bytes are available on {device}"
        )
    return need


def _sweep(spec, hess: Hess, slots: dict, keys: dict, pieces: list, inputs, targets, chunk: int, factored) -> None:
    """One block of tangents (``pieces``, :func:`tangent_blocks`) through the batch, chunk by chunk
    (factored when its parameter is in ``factored``).

    The block's seeds live on its own copies of the slots and its rows on its own view of H, so
    blocks (disjoint rows of H) can be swept at the same time."""
    local = {k: Slot(s.value, s.cols) for k, s in slots.items()}
    for name, tangents, a0, a1, _ in pieces:
        local[keys[name]].seed = (tangents, a0, a1)
    view = hess.rows([(tangents, rows) for _, tangents, _, _, rows in pieces], pieces[0][0] in factored)
    with torch.no_grad():  # grad mode is per thread
        for b0 in range(0, inputs.shape[0], chunk):
            chunk_hessian(spec, view, local, inputs[b0 : b0 + chunk].detach(), targets[b0 : b0 + chunk])


def _columns(names: list[str], named: dict) -> dict[str, slice]:
    """name -> its columns of H (the flattened parameters one after the other, in ``names`` order)."""
    cols, off = {}, 0
    for n in names:
        cols[n] = slice(off, off + named[n].numel())
        off = cols[n].stop
    return cols


def _check_workers(workers) -> None:
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"exact_hessian: workers must be a positive int or None, got {workers!r}")


def _workers(workers: int | None, device: torch.device, n_blocks: int) -> tuple[int, int]:
    """(blocks swept at the same time, intra-op threads of each; 0 = leave the caller's).

    Default: on a CPU one sweep per torch thread, each single-threaded (the sweep's kernels are
    small: two single-threaded sweeps beat one two-threaded sweep, docs/theory.md section 21); on
    other devices one sweep."""
    # read on the caller's thread before any worker sets its own: torch's thread count is set lazily,
    # and a thread that never asked for it would take a worker's setting
    threads = torch.get_num_threads()
    if workers is None:
        workers = threads if device.type == "cpu" else 1
    workers = max(1, min(workers, n_blocks))
    return workers, (max(1, threads // workers) if workers > 1 else 0)


def _run_blocks(blocks: list, workers: int, threads: int, sweep) -> None:
    """``sweep(pieces)`` for every block: in order on one worker, else on ``workers`` threads with
    ``threads`` intra-op threads each (set once per worker thread)."""
    if workers == 1:
        for pieces in blocks:
            sweep(pieces)
        return
    pool = ThreadPoolExecutor(workers, "exact_hessian", initializer=torch.set_num_threads, initargs=(threads,))
    try:
        for job in [pool.submit(sweep, pieces) for pieces in blocks]:
            job.result()
    finally:  # an error (or Ctrl-C) drops the blocks not yet started
        pool.shutdown(wait=True, cancel_futures=True)


def _fill_transposes(H: torch.Tensor, blocks: list, rank: dict, cols: dict) -> None:
    """H[block, p] = H[p, block]^T for every parameter p before a block's first graph position:
    the columns its sweep did not reach (the earlier sweep that holds p computed them as rows)."""
    for pieces in blocks:
        first = min(rank[name] for name, *_ in pieces)
        for n, r in rank.items():
            if r < first:
                for *_, rows in pieces:
                    H[rows, cols[n]] = H[cols[n], rows].T


def exact_hessian(
    model,
    inputs,
    targets,
    *,
    loss="mse",
    head=None,
    params=None,
    mask=None,
    is_causal=False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    tangent_block: int = DEFAULT_TANGENT_BLOCK,
    fast_path: bool = True,
    workers: int | None = None,
) -> torch.Tensor:
    """Dense (P, P) Hessian of the loss of a torch Transformer encoder w.r.t. ``params``.

    ``model``: ``nn.TransformerEncoderLayer`` or ``nn.TransformerEncoder`` (batch_first, dropout 0
    or eval; relu or exact gelu; pre- or post-norm; any nhead, bias, layer_norm_eps, depth).
    ``inputs`` (B, T, d_model); ``mask`` torch's ``src_mask`` ((T, T), float additive or bool
    with True = masked); ``is_causal`` the causal mask. ``loss="mse"``: ``F.mse_loss(out,
    targets)``; ``loss="cross_entropy"``: ``F.cross_entropy(head(out.mean(1)), targets)``.
    ``params``: names from ``model.named_parameters()`` (default all, in that order) and
    ``head.weight`` / ``head.bias``. Rows and columns in the order of ``torch.cat`` of the
    flattened parameters; dtype and device of ``inputs``. Exact (no autograd): the second-order
    chain rule carried through every operation (docs/theory.md, "Curvature propagation").
    ``chunk_bytes`` bounds the tangent memory of one chunk of samples in one sweep; ``tangent_block``
    is the number of tangents (rows of H) carried through one sweep; ``workers`` sweeps run at the
    same time (default: on a CPU one per torch thread, each single-threaded; elsewhere one), each
    with its own chunk, and the result does not depend on their number. A layer of the paper's kind (one
    post-norm ReLU layer, one head, no biases outside the LayerNorms, no mask, cross-entropy
    through a head, only the layer's parameters asked for) goes through the factored closed form
    of the paper's block (:mod:`.paper_kind`), and the Linear weights after the last row-mixing
    operation (attention, the token mean) are swept with one unit tangent per row of the weight
    (:class:`.ops.Hess`), unless ``fast_path=False``.
    """
    _check_workers(workers)
    layers, kinds, final_norm = _layers(model)
    d = layers[0].self_attn.embed_dim
    _check_data(inputs, targets, loss, head, d)
    names, named = _select(model, head, params)
    dtype, device = inputs.dtype, inputs.device
    B, T, _ = inputs.shape
    cols = _columns(names, named)
    P = sum(c.stop - c.start for c in cols.values())
    need = _check_memory(P, dtype, device)
    slots = {id(p): Slot(p.detach().to(device=device, dtype=dtype), cols.get(n)) for n, p in named.items()}
    spec = SimpleNamespace(
        layers=layers,
        kinds=kinds,
        final_norm=final_norm,
        head=head,
        loss=loss,
        mask=_additive_mask(mask, is_causal, T, dtype, device),
        count=inputs.numel() if loss == "mse" else B,
    )
    if fast_path and paper_kind.eligible(layers, kinds, final_norm, spec, names):
        prefix = "layers.0." if isinstance(model, nn.TransformerEncoder) else ""
        with torch.no_grad():
            local = [n[len(prefix) :] for n in names]
            return paper_kind.paper_kind_hessian(layers[0], inputs.detach(), targets.to(device), head, local)
    d_ff = max(m.linear1.out_features for m in layers)
    hess = Hess.zeros(P, dtype, device)
    keys = {n: id(named[n]) for n in names}
    with torch.no_grad():
        # The sweeps take the parameters in the order of the graph: a sweep whose tangents start at
        # graph position r runs forward from r and back to r only (graph.Tape.backward), and the
        # columns of the parameters before r are the transposed rows of the earlier sweeps.
        ranks, row_local = graph_ranks(spec, hess, slots, inputs[:1].detach())
        rank = {n: ranks[id(slots[keys[n]])] for n in names}
        factored = {n for n in names if id(slots[keys[n]]) in row_local} if fast_path else set()
        blocks = tangent_blocks(sorted(names, key=lambda n: rank[n]), named, cols, tangent_block, factored)
        Pb = max(sum(pc[1].stop - pc[1].start for pc in b) for b in blocks) if blocks else 0
        per = _per_sample_bytes(Pb, T, d, d_ff, layers[0].self_attn.num_heads, len(layers), need // max(P * P, 1))
        chunk = max(1, min(B, chunk_bytes // max(per, 1)))
        W, threads = _workers(workers, device, len(blocks))
        targets = targets.to(device)
        _run_blocks(
            blocks, W, threads, lambda pcs: _sweep(spec, hess, slots, keys, pcs, inputs, targets, chunk, factored)
        )
        _fill_transposes(hess.H, blocks, rank, cols)
    return symmetrize_(hess.H)


def hessian_blocks(model, inputs, targets, **kwargs) -> dict[tuple[str, str], torch.Tensor]:
    """:func:`exact_hessian` as named blocks: ``(name_i, name_j) -> (numel_i, numel_j)`` views."""
    names, named = _select(model, kwargs.get("head"), kwargs.get("params"))
    H = exact_hessian(model, inputs, targets, **kwargs)
    off, sl = 0, {}
    for n in names:
        sl[n] = slice(off, off + named[n].numel())
        off += named[n].numel()
    return {(a, b): H[sl[a], sl[b]] for a in names for b in names}


def _head_parts(name: str, numel: int, nhead: int) -> list[tuple[str, slice]]:
    """(new name, flat range) of each head's Q, K, V part of a packed in_proj parameter."""
    d = numel // 3 if name.endswith("in_proj_bias") else int(round((numel / 3) ** 0.5))
    per_row = 1 if name.endswith("in_proj_bias") else d
    dh = d // nhead
    out = []
    for w, kind in enumerate("QKV"):
        for h in range(nhead):
            r0 = w * d + h * dh
            out.append((f"{name}.{kind}{h}", slice(r0 * per_row, (r0 + dh) * per_row)))
    return out


def split_heads(blocks: dict[tuple[str, str], torch.Tensor], nhead: int) -> dict[tuple[str, str], torch.Tensor]:
    """Split every packed ``*.in_proj_weight`` / ``*.in_proj_bias`` block into per-head Q, K, V blocks.

    The new names are ``<name>.Q0``, ..., ``<name>.V{nhead-1}``; the part of head h of kind Q is
    rows ``h d_h : (h+1) d_h`` of torch's ``W_q`` (d_model x d_model, y = x W_q^T), entries in
    row-major order, i.e. ``vec_r(W_Q^T)`` of the paper's W_Q = W_q^T restricted to that head.
    """

    def parts(name: str, n: int):
        if name.endswith("in_proj_weight") or name.endswith("in_proj_bias"):
            return _head_parts(name, n, nhead)
        return [(name, slice(0, n))]

    out = {}
    for (a, b), t in blocks.items():
        for na, sa in parts(a, t.shape[0]):
            for nb, sb in parts(b, t.shape[1]):
                out[(na, nb)] = t[sa, sb]
    return out
