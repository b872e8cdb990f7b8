"""Exact Hessians, Hessian blocks and Hessian-vector products of any torch model's loss.

``model`` is any ``nn.Module`` built from the operations of the rule table (docs/theory.md,
"Operations of any model"): Hugging Face GPT-2, Llama, BERT, ViT, nanoGPT-style models, torch's
encoder. ``inputs`` is a tensor, a tuple of positional inputs or a dict of keyword inputs
(``{"input_ids": ..., "attention_mask": ...}``); the model's output is a tensor, an object with
``.logits`` or a tuple whose first element is used. ``loss``: ``"mse"``, ``"cross_entropy"``
(``(B, C)`` logits, or through ``head=`` on the token mean), ``"causal_lm"`` (``targets`` the
``(B, T)`` token ids, Hugging Face's ``labels``) or a callable ``(output, targets) -> scalar``.
``params``: names or glob patterns (default every parameter of the model).
"""

from __future__ import annotations

import math

import torch

from ..util.device import synchronize
from ..util.resources import available_bytes, check_dense_memory
from .capture import capture
from .data import one_of
from .inputs import check_inputs, encoder_call, torch_encoder
from .sweep import Progress, Run, dense_hessian, hvp_sweep

#: bytes of tangents one block may hold (the block size K follows from the model's values), at most
#: a quarter of the memory available. Blocks this small keep a sweep's temporaries near the caches
#: (docs/timings.md, "Measurements that were code comments": block sizes)
DEFAULT_BLOCK_BYTES = 256 << 20
#: the same on a CUDA device, where a sweep pays per kernel launch rather than per cache miss, so
#: larger blocks are faster (docs/timings.md, "Measurements that were code comments": block sizes)
CUDA_BLOCK_BYTES = 16 << 30


def default_block_bytes(device) -> int:
    """Bytes of tangents per block on ``device``: :data:`CUDA_BLOCK_BYTES` on CUDA, else
    :data:`DEFAULT_BLOCK_BYTES` (both capped by the memory available, :func:`block_size`)."""
    return CUDA_BLOCK_BYTES if torch.device(device).type == "cuda" else DEFAULT_BLOCK_BYTES


def prepare(
    model, inputs, targets, *, loss="mse", params=None, head=None, precision="float64", custom_functions="refuse"
) -> Run:
    """Capture the model and run its values and adjoints once: what :func:`hessian`, :func:`hvp`
    and :class:`HessianOperator` sweep."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    check_inputs(inputs)
    if isinstance(targets, torch.Tensor) and targets.is_floating_point() and not torch.isfinite(targets).all():
        raise ValueError("targets: has non-finite entries (nan or inf)")
    from .data import check_sweep_memory

    cap = capture(
        model, inputs, targets, loss=loss, head=head, params=params, precision=precision,
        custom_functions=custom_functions,
    )  # fmt: skip
    check_sweep_memory(cap, inputs)
    return Run(cap)


def _check_memory(P: int, dtype: torch.dtype, device: torch.device) -> None:
    hint = " (select a block with params=, or use HessianOperator)"
    check_dense_memory(P, dtype, available_bytes(device), device, "exact_hessian", hint)


def block_size(run: Run, block_bytes: int | None = None) -> int:
    """Entries per sweep: the tangent memory of one entry, thrice (adjoint tangents, temporaries),
    into ``block_bytes`` (None: :func:`default_block_bytes` of the run's device)."""
    if block_bytes is None:
        block_bytes = default_block_bytes(run.cap.device)
    per = 3 * max(run.tangent_bytes(), 1)
    P = sum(math.prod(s) for s in run.cap.shapes.values())
    avail = available_bytes(run.cap.device)
    if avail is not None:
        block_bytes = min(block_bytes, max(per, (avail - 8 * P * P) // 4))
    return max(1, min(P, block_bytes // per))


def hessian(
    model, inputs, targets, *, loss="mse", params=None, head=None, block_bytes: int | None = None, progress=True,
    precision="float64", custom_functions="refuse",
) -> torch.Tensor:  # fmt: skip
    """Dense (P, P) Hessian of the loss w.r.t. the selected parameters (rows and columns in the
    order of ``params``, each flattened), in the parameters' dtype and on their device."""
    run = prepare(
        model, inputs, targets, loss=loss, params=params, head=head, precision=precision,
        custom_functions=custom_functions,
    )  # fmt: skip
    P = sum(math.prod(s) for s in run.cap.shapes.values())
    _check_memory(P, run.cap.dtype, run.cap.device)
    return dense_hessian(run, block_size(run, block_bytes), Progress() if progress else None)


def hessian_blocks_of(H: torch.Tensor, names: list[str], shapes: dict) -> dict[tuple[str, str], torch.Tensor]:
    """A dense Hessian as named blocks ``(name_i, name_j) -> (numel_i, numel_j)`` views."""
    off, sl = 0, {}
    for n in names:
        size = math.prod(shapes[n])
        sl[n] = slice(off, off + size)
        off += size
    return {(a, b): H[sl[a], sl[b]] for a in names for b in names}


class HessianOperator:
    """H as a linear operator: ``op @ v`` for a vector (P,) or a matrix (P, K), with ``shape``,
    ``dtype`` and ``device``; :meth:`to_scipy` for ``scipy.sparse.linalg``. Captures once; each
    product is one sweep of exact second-order rules (the fused attention kernels run in the
    model's own forward; no double backward is taken). On CUDA the sweep of each shape of ``v`` is
    replayed from a CUDA graph from its third product on (``cuda_graphs=False``: always eager).

    ``data=`` (instead of ``inputs`` and ``targets``): a re-iterable of ``(inputs, targets)``
    batches (a list, a ``DataLoader``; a dict batch with ``labels`` is split as Hugging Face's):
    ``op @ v`` is then the Hessian of the data set's mean loss times ``v``, the mean over every loss
    term of every batch (:mod:`.data`), one batch swept at a time. Under ``torch.distributed`` (or
    with ``process_group``; False: none) each process passes its own share and every product and
    gradient is all-reduced, weighted by the processes' loss-term counts. ``keep``: keep every
    batch's values between products (None: when they fit a quarter of the memory available);
    ``loss_terms(inputs, targets)``: a batch's count of loss terms, for a callable loss that is not
    a mean over the targets' first axis. ``accumulate`` (torch.float32 / torch.float64): the sums
    over batches and processes, and the results, in that dtype for a bfloat16 or float32 model
    (each batch's sweep runs in the model's dtype)."""

    #: at most this many shapes of ``v`` get a CUDA graph each (each keeps its own memory)
    MAX_GRAPHS = 4

    def __init__(
        self,
        model,
        inputs=None,
        targets=None,
        *,
        data=None,
        loss="mse",
        params=None,
        head=None,
        cuda_graphs: bool = True,
        process_group=None,
        keep=None,
        loss_terms=None,
        accumulate=None,
        precision="float64",
        custom_functions="refuse",
    ):
        one_of(inputs, targets, data)
        opts = {"precision": precision, "custom_functions": custom_functions}
        self.data = None
        if data is not None:
            # a data set (this process's share): H of the mean loss over all its terms, all-reduced
            from .data import DataRuns

            self.data = DataRuns(
                model, data, loss=loss, params=params, head=head, process_group=process_group, keep=keep,
                loss_terms=loss_terms, accumulate=accumulate, **opts,
            )  # fmt: skip
            self.run = None
            self.names = list(self.data.names)
            self.shape = (self.data.P, self.data.P)
            self.dtype, self.device = self.data.dtype, self.data.device
            self.cuda_graphs, self.graphs, self._seen = False, {}, {}
            return
        one_of(inputs, targets, None, process_group, keep, loss_terms, accumulate)
        self.run = prepare(model, inputs, targets, loss=loss, params=params, head=head, **opts)
        cap = self.run.cap
        self.names = list(cap.names)
        P = sum(math.prod(s) for s in cap.shapes.values())
        self.shape = (P, P)
        self.dtype, self.device = cap.dtype, cap.device
        #: on CUDA, each shape of ``v`` is swept twice eagerly, then captured in a CUDA graph and
        #: replayed: a small model's sweep is hundreds of short kernels, whose launches cost more
        #: than their work. ``graphs[shape]`` is the graph or, where capture failed, why.
        self.cuda_graphs = bool(cuda_graphs) and self.device.type == "cuda"
        self.graphs: dict[tuple, object] = {}
        self._seen: dict[tuple, int] = {}

    def __matmul__(self, v: torch.Tensor) -> torch.Tensor:
        if not isinstance(v, torch.Tensor) or v.dim() not in (1, 2) or v.shape[0] != self.shape[0]:
            shape = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
            raise ValueError(f"HessianOperator @ v: expected ({self.shape[0]},) or ({self.shape[0]}, K), got {shape}")
        v = v.to(device=self.device, dtype=self.dtype)
        if self.data is not None:
            return self.data.hvp(v)
        if self.cuda_graphs:
            return self._graphed(v)
        return hvp_sweep(self.run, v)

    def _graphed(self, v: torch.Tensor) -> torch.Tensor:
        """H v by a CUDA graph of the sweep for v's shape: captured at the third product of a
        shape (after two eager ones, which fill the rules' caches), replayed after that; eager
        where capture failed or :data:`MAX_GRAPHS` shapes have graphs."""
        key = tuple(v.shape)
        entry = self.graphs.get(key)
        if entry is None:
            self._seen[key] = self._seen.get(key, 0) + 1
            if self._seen[key] < 3 or len(self.graphs) >= self.MAX_GRAPHS:
                return hvp_sweep(self.run, v)
            entry = self.graphs[key] = self._capture(v)
        if isinstance(entry, str):
            return hvp_sweep(self.run, v)
        graph, static_in, static_out = entry
        static_in.copy_(v)
        graph.replay()
        return static_out.clone()

    def graph_status(self) -> dict | str:
        """Per shape of ``v`` that has a CUDA graph, "replayed" or why capture failed; "off" where
        the operator keeps every product eager (not on CUDA, or ``cuda_graphs=False``)."""
        if not self.cuda_graphs:
            return "off"
        return {str(k): (g if isinstance(g, str) else "replayed") for k, g in self.graphs.items()}

    def _capture(self, v: torch.Tensor):
        """(graph, input buffer, output buffer) of one sweep, or why it could not be captured."""
        static_in = v.clone()
        graph = torch.cuda.CUDAGraph()
        try:
            synchronize(self.device)
            with torch.cuda.graph(graph):
                static_out = hvp_sweep(self.run, static_in)
        except Exception as err:  # noqa: BLE001 (e.g. a rule that reads a value on the host): eager
            synchronize(self.device)
            return f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        return graph, static_in, static_out

    def matvec(self, v: torch.Tensor) -> torch.Tensor:
        """H v."""
        return self @ v

    def gradient(self) -> torch.Tensor:
        """The loss's gradient w.r.t. the selected parameters (a by-product of the capture); with
        ``data=`` the data set's mean loss's."""
        return self.run.gradient() if self.data is None else self.data.gradient()

    def loss(self) -> float:
        """The loss at the parameters (with ``data=`` the data set's mean loss)."""
        return float(self.run.loss) if self.data is None else self.data.mean_loss()

    @property
    def n_terms(self) -> int | None:
        """With ``data=``: the loss terms of the whole data set (every process's share)."""
        return None if self.data is None else self.data.N

    @property
    def metadata(self) -> dict:
        """How the Hessian was computed: ``precision`` ("float64": a float64 model's float32 casts
        computed in float64; "model": as written), ``dtype``, and ``custom_functions``, the custom
        autograd.Functions whose forward was differentiated (their backward ignored)."""
        caps = [self.run.cap] if self.data is None else list(self.data.captures.values())
        fns = sorted({f for c in caps for f in c.custom})
        return {"precision": caps[0].precision, "dtype": str(self.dtype), "custom_functions": fns}

    def to_scipy(self):
        """A ``scipy.sparse.linalg.LinearOperator`` of H on numpy float64 vectors."""
        import numpy as np
        from scipy.sparse.linalg import LinearOperator

        def mv(x):
            t = torch.as_tensor(np.asarray(x), dtype=self.dtype, device=self.device)
            return (self @ (t.reshape(-1) if t.dim() == 2 and t.shape[1] == 1 else t)).cpu().numpy()

        return LinearOperator(self.shape, matvec=mv, matmat=mv, rmatvec=mv, dtype=np.float64)


def hvp(
    model,
    inputs=None,
    targets=None,
    v: torch.Tensor | None = None,
    *,
    data=None,
    loss="mse",
    params=None,
    head=None,
    **data_options,
) -> torch.Tensor:
    """H v (v: (P,) or (P, K)) in one sweep (with ``data=``, one sweep a batch); for many products
    build a :class:`HessianOperator` once."""
    if v is None:
        raise TypeError("hvp: v (the vector or (P, K) matrix) is required")
    return HessianOperator(model, inputs, targets, data=data, loss=loss, params=params, head=head, **data_options) @ v


def exact_hessian(
    model,
    inputs=None,
    targets=None,
    *,
    data=None,
    loss="mse",
    params=None,
    head=None,
    mask=None,
    is_causal=False,
    src_key_padding_mask=None,
    engine: str = "auto",
    progress: bool = True,
    process_group=None,
    keep=None,
    loss_terms=None,
    precision="float64",
    custom_functions="refuse",
    **encoder_options,
) -> torch.Tensor:
    """Dense (P, P) Hessian of the loss of any torch model w.r.t. ``params``, exact (float64 to
    rounding): the second-order chain rule carried through every captured operation.

    ``model``, ``inputs``, ``loss``, ``params``, ``head``: see the module docstring. Torch's
    encoder modules (``nn.TransformerEncoderLayer`` / ``nn.TransformerEncoder`` on a ``(B, T, d)``
    tensor) take ``mask`` (torch's ``src_mask``, (T, T)), ``is_causal`` and
    ``src_key_padding_mask`` ((B, T), True = padding); they go through the encoder engine with its
    factored sweeps and the paper block's closed form (``engine="encoder"``, options
    ``chunk_bytes``, ``tangent_block``, ``fast_path``, ``workers``), except with a key-padding mask,
    which the graph engine takes (``engine="graph"``, what every other model uses). Rows and
    columns in the order of ``params`` (each flattened), in the parameters' dtype and device.
    ``data=``, ``process_group``, ``keep``, ``loss_terms``: a data set's mean loss, as
    :class:`HessianOperator` (dense Hessians summed batch by batch and over the processes).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    one_of(inputs, targets, data, *(() if data is not None else (process_group, keep, loss_terms)))
    if data is not None:
        if encoder_options or mask is not None or is_causal or src_key_padding_mask is not None or engine == "encoder":
            raise ValueError("data=: the graph engine's options only (no encoder options or masks)")
        return _data_hessian(
            model, data, loss, params, head, progress, process_group, keep, loss_terms,
            precision=precision, custom_functions=custom_functions,
        )  # fmt: skip
    encoder = torch_encoder(model)
    use_encoder = _use_encoder(model, encoder, inputs, engine, mask, is_causal, src_key_padding_mask)
    if encoder_options and not use_encoder:
        raise TypeError(f"{sorted(encoder_options)}: options of the encoder engine, not used by the graph engine")
    from .params import parameter_names, select

    names = select(parameter_names(model, head), params, [n for n, _ in model.named_parameters()])
    check_inputs(inputs)
    if use_encoder:
        from ..encoder.api import exact_hessian as encoder_hessian

        return encoder_hessian(
            model, inputs, targets, loss=loss, head=head, params=names, mask=mask, is_causal=is_causal,
            **encoder_options,
        )  # fmt: skip
    if encoder and isinstance(inputs, torch.Tensor):
        inputs = encoder_call(model, inputs, mask, is_causal, src_key_padding_mask)
    return hessian(
        model, inputs, targets, loss=loss, params=names, head=head, progress=progress, precision=precision,
        custom_functions=custom_functions,
    )  # fmt: skip


def _use_encoder(model, encoder: bool, inputs, engine, mask, is_causal, src_key_padding_mask) -> bool:
    """Whether :func:`exact_hessian` takes the encoder engine (the arguments checked)."""
    if engine not in ("auto", "graph", "encoder"):
        raise ValueError(f"engine: 'auto', 'graph' or 'encoder', got {engine!r}")
    if not encoder and (mask is not None or is_causal or src_key_padding_mask is not None):
        raise ValueError(
            "mask, is_causal, src_key_padding_mask: only for torch encoder modules; pass the model's own mask "
            "in inputs (e.g. {'input_ids': ..., 'attention_mask': ...})"
        )
    if engine == "encoder" and not encoder:
        raise ValueError(f"engine='encoder': model is {type(model).__name__}, not a torch encoder module")
    if engine == "encoder" and src_key_padding_mask is not None:
        raise ValueError("engine='encoder' does not take src_key_padding_mask (use engine='graph' or 'auto')")
    return encoder and isinstance(inputs, torch.Tensor) and src_key_padding_mask is None and engine != "graph"


def _data_hessian(model, data, loss, params, head, progress, process_group, keep, loss_terms, **opts) -> torch.Tensor:
    """:func:`exact_hessian` of a data set's mean loss (:class:`.data.DataRuns`)."""
    from .data import DataRuns

    runs = DataRuns(
        model,
        data,
        loss=loss,
        params=params,
        head=head,
        process_group=process_group,
        keep=keep,
        loss_terms=loss_terms,
        **opts,
    )
    _check_memory(runs.P, runs.dtype, runs.device)
    return runs.dense(block_size, progress)


def hessian_blocks(model, inputs=None, targets=None, **kwargs) -> dict[tuple[str, str], torch.Tensor]:
    """:func:`exact_hessian` as named blocks: ``(name_i, name_j) -> (numel_i, numel_j)`` views
    (``data=`` for a data set's, as there)."""
    from .params import parameter_names, select

    named = parameter_names(model, kwargs.get("head"))
    names = select(named, kwargs.get("params"), [n for n, _ in model.named_parameters()])
    H = exact_hessian(model, inputs, targets, **{**kwargs, "params": names})
    return hessian_blocks_of(H, names, {n: tuple(named[n].shape) for n in names})
