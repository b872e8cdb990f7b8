"""Exact dense Hessians of losses of ``torch.nn.TransformerEncoderLayer`` / ``TransformerEncoder``.

:func:`exact_hessian` checks the model and inputs, then runs curvature propagation
(:mod:`.graph`) over chunks of samples with all selected parameters' tangents at once.
:func:`hessian_blocks` gives the same matrix as named blocks; :func:`split_heads` splits the
packed ``in_proj`` blocks into per-head W_Q, W_K, W_V blocks.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from ..util.resources import available_bytes, check_dense_memory
from . import paper_kind, pooled, sweeps
from .graph import graph_ranks
from .ops import Hess, Slot, symmetrize_

#: bytes of tangent working memory per chunk of samples in one sweep (the chunk size follows from it;
#: each worker has its own). The sweep is bound by memory traffic and by kernel launches, and small
#: blocks of tangents over larger chunks (more tokens per Hessian-column product) did best in the bench
#: (docs/timings.md, "Tangent blocks and chunk sizes of exact_hessian").
DEFAULT_CHUNK_BYTES = 256 << 20
#: tangents propagated together (rows of H per sweep). Smaller blocks repeat the values sweep (cheap), keep
#: the tangents near the cache, and a block whose first parameter sits late in the graph runs only that
#: part of it (graph.Tape.backward); see DEFAULT_CHUNK_BYTES for the measurements
DEFAULT_TANGENT_BLOCK = 64


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


def _spec(layers, kinds, final_norm, head, loss, inputs, slots: dict) -> SimpleNamespace:
    """What the graph (:mod:`.graph`) reads: the layers, their activations, the final norm, the
    head (and its values in the inputs' dtype), the loss and its normaliser (the full batch's)."""
    heads = None if head is None else tuple(None if q is None else slots[id(q)].value for q in (head.weight, head.bias))
    count = inputs.numel() if loss == "mse" else inputs.shape[0]
    return SimpleNamespace(
        layers=layers, kinds=kinds, final_norm=final_norm, head=head, loss=loss, count=count, head_values=heads
    )


def _check_memory(P: int, dtype: torch.dtype, device: torch.device) -> int:
    """Bytes of the dense (P, P) result; MemoryError (with the numbers) when they are not available."""
    return check_dense_memory(P, dtype, available_bytes(device), device, "exact_hessian")


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
    sweeps.check_workers(workers)
    layers, kinds, final_norm = _layers(model)
    d = layers[0].self_attn.embed_dim
    _check_data(inputs, targets, loss, head, d)
    names, named = _select(model, head, params)
    dtype, device = inputs.dtype, inputs.device
    B, T, _ = inputs.shape
    cols = sweeps.columns(names, named)
    P = sum(c.stop - c.start for c in cols.values())
    need = _check_memory(P, dtype, device)
    slots = {id(p): Slot(p.detach().to(device=device, dtype=dtype), cols.get(n)) for n, p in named.items()}
    spec = _spec(layers, kinds, final_norm, head, loss, inputs, slots)
    spec.mask = _additive_mask(mask, is_causal, T, dtype, device)
    spec.pooled_split = head is not None and pooled.applies(loss, fast_path, names, head.out_features, T)
    if fast_path and paper_kind.eligible(layers, kinds, final_norm, spec, names):
        prefix = "layers.0." if isinstance(model, nn.TransformerEncoder) else ""
        with torch.no_grad():
            local = [n[len(prefix) :] for n in names]
            return paper_kind.paper_kind_hessian(layers[0], inputs.detach(), targets.to(device), head, local)
    d_ff = max(m.linear1.out_features for m in layers)
    hess = Hess.zeros(P, dtype, device)
    keys = {n: id(named[n]) for n in names}
    with torch.no_grad():
        rank, factored = sweeps.graph_order(graph_ranks(spec, hess, slots, inputs[:1].detach()), slots, keys, fast_path)
        blocks = sweeps.tangent_blocks(sorted(names, key=lambda n: rank[n]), named, cols, tangent_block, factored)
        Pb = max(sum(pc[1].stop - pc[1].start for pc in b) for b in blocks) if blocks else 0
        per = sweeps.per_sample_bytes(Pb, T, d, d_ff, layers[0].self_attn.num_heads, len(layers), need // max(P * P, 1))
        chunk = max(1, min(B, chunk_bytes // max(per, 1)))
        W, threads = sweeps.workers_and_threads(workers, device, len(blocks))
        targets = targets.to(device)
        sweeps.run_blocks(
            blocks, W, threads, lambda pcs: sweeps.sweep(spec, hess, slots, keys, pcs, inputs, targets, chunk, factored)
        )
        done = SimpleNamespace(blocks=blocks, factored=factored, rank=rank, names=names, cols=cols, slots=slots)
        pooled.add_to_factored_rows(hess.H, spec, done, inputs, chunk_bytes)
        sweeps.fill_transposes(hess.H, blocks, rank, cols)
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
