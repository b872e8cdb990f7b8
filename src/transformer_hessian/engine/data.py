"""Curvature of a data set's mean loss, over any number of batches and processes.

The loss of a data set is the mean over all its loss terms (each counted next-token position of
``causal_lm``, each sample of ``cross_entropy``, each entry of ``mse``). A batch's loss is the mean
over its own ``n_b`` terms, so

    L = (1 / N) sum_b n_b L_b,   H = (1 / N) sum_b n_b H_b,   N = sum_b n_b,

exactly what one batch holding every term would give, whatever the batches' sizes and lengths.
Each batch is captured once per shape (batches of the same shapes share one graph,
:meth:`.capture.Captured.rebind`), evaluated (values and adjoints, :class:`.sweep.Run`) and swept;
its values are kept between products when every batch's fit the memory budget, else evaluated
again for each product, so that one batch's sweep is in memory at a time.

Under ``torch.distributed`` each process passes its own share of the batches; the weighted sums
``sum_b n_b H_b v`` (and gradients, dense Hessians) are all-reduced and divided by the global ``N``,
so every process holds the same result, equal to one process over the union of the shares.
"""

from __future__ import annotations

import math
import os
import sys
import time

import torch
from torch.utils import _pytree as pytree

from ..util.resources import available_bytes, format_bytes
from .capture import Captured, capture
from .inputs import check_inputs, user_leaves
from .ops.losses import IGNORE_INDEX
from .params import parameter_names, select
from .sweep import Run, dense_hessian, hvp_sweep

#: keep every batch's values between products when they take at most this share of the memory
#: available, split between the processes on one machine (else each product evaluates each batch again)
KEEP_SHARE = 0.25


def as_batch(item, i: int):
    """``(inputs, targets)`` of one item of ``data``: a pair (a tuple or list of two, as a
    ``DataLoader`` over a ``TensorDataset`` yields) or a dict of keyword inputs holding ``labels``
    (Hugging Face's convention; the other keys are the inputs)."""
    if isinstance(item, dict):
        if "labels" not in item:
            raise ValueError(f"data[{i}]: a dict batch needs 'labels' (the targets); keys {sorted(item)}")
        return {k: v for k, v in item.items() if k != "labels"}, item["labels"]
    if isinstance(item, (tuple, list)) and len(item) == 2:
        return item[0], item[1]
    kind = f"{type(item).__name__} of {len(item)}" if isinstance(item, (tuple, list)) else type(item).__name__
    raise TypeError(f"data[{i}]: expected an (inputs, targets) pair or a dict with 'labels', got a {kind}")


def one_of(inputs, targets, data, *data_options) -> None:
    """One batch (inputs and targets) or a data set (data=), never both; the data set's options
    (``process_group``, ``keep``, ``loss_terms``) only with a data set."""
    if data is not None and (inputs is not None or targets is not None):
        raise ValueError("inputs/targets and data=: pass one batch or a data set of batches, not both")
    if data is None and (inputs is None or targets is None):
        raise TypeError("inputs and targets are required (or data=, a data set of (inputs, targets) batches)")
    if data is None and any(o is not None for o in data_options):
        raise ValueError("process_group, keep, loss_terms, accumulate: only with data= (a data set of batches)")


def loss_terms(loss, inputs, targets, terms=None) -> int:
    """The number of loss terms the batch's mean loss averages over: for ``causal_lm`` the counted
    next-token positions (``targets[:, 1:]`` not ``-100``), for ``mse`` the entries of the targets,
    for ``cross_entropy`` and a callable loss the samples (the targets' first axis), unless
    ``terms(inputs, targets)`` says otherwise."""
    if terms is not None:
        n = terms(inputs, targets)
        if not isinstance(n, (int, float)) or n < 0 or int(n) != n:
            raise ValueError(f"loss_terms: expected a count >= 0, got {n!r}")
        return int(n)
    if not isinstance(targets, torch.Tensor):
        raise TypeError(f"targets: expected a tensor to count the loss terms of, got {type(targets).__name__}")
    if loss == "causal_lm":
        if targets.dim() != 2:
            raise ValueError(f"targets: causal_lm takes (B, T) token ids, got shape {tuple(targets.shape)}")
        return int((targets[:, 1:] != IGNORE_INDEX).sum())
    if loss == "mse":
        return int(targets.numel())
    return int(targets.shape[0]) if targets.dim() > 0 else 1


def process_group_of(process_group):
    """The group to all-reduce over: the one given, the default group when ``torch.distributed`` is
    initialised, None (one process) otherwise or when ``process_group`` is False."""
    if process_group is False:
        return None
    if process_group is not None:
        return process_group
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.group.WORLD
    return None


def all_reduce_(t: torch.Tensor, group) -> torch.Tensor:
    """Sum ``t`` over the processes of ``group`` in place (nothing without a group)."""
    if group is not None:
        import torch.distributed as dist

        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
    return t


def _key(leaves: list, spec) -> tuple:
    """What a captured graph depends on: the structure, each tensor's shape, dtype and device, and
    the value of every other leaf."""
    parts = []
    for x in leaves:
        if isinstance(x, torch.Tensor):
            parts.append(("t", tuple(x.shape), x.dtype, str(x.device)))
        else:
            parts.append(("v", repr(x)))
    return (repr(spec), tuple(parts))


def sweep_bytes(cap: Captured, K: int = 1) -> dict[str, int]:
    """Bytes one batch's sweep of ``K`` vectors needs, from the shapes the capture recorded: the
    values of every node (kept for the sweeps), the adjoints of the differentiated ones, and thrice
    (tangents, adjoint tangents, temporaries) the tangents of ``K`` vectors."""
    values = adjoints = 0
    steps = {s.node for s in cap.steps}
    for node in cap.graph.nodes:
        val = node.meta.get("val")
        if node.op != "call_function" or not isinstance(val, torch.Tensor):
            continue
        size = val.numel() * val.element_size()
        values += size
        if node in steps:
            adjoints += size
    return {"values": values, "adjoints": adjoints, "tangents": 3 * K * adjoints}


def check_sweep_memory(cap: Captured, inputs, what: str = "HessianOperator") -> int:
    """MemoryError before any work when one batch's sweep of one vector cannot fit the memory
    available on the parameters' device, naming the bytes and what would fit; returns the bytes."""
    need = sweep_bytes(cap)
    total = sum(need.values())
    avail = available_bytes(cap.device)
    if avail is None or total <= avail:
        return total
    tokens = ""
    first = next((x for x in pytree.tree_leaves(inputs) if isinstance(x, torch.Tensor) and x.dim() >= 2), None)
    if first is not None:
        T = first.shape[1]
        tokens = f"fewer tokens a batch (about {max(1, int(T * avail / total))} of {T} would fit; "
        tokens += f"or fewer than {first.shape[0]} sequences), "
    raise MemoryError(
        f"{what}: one batch's sweep needs about {format_bytes(total)} on {cap.device} (values "
        f"{format_bytes(need['values'])}, adjoints {format_bytes(need['adjoints'])}, tangents of one vector "
        f"{format_bytes(need['tangents'])}), {format_bytes(avail)} available: pass {tokens}or a parameter "
        "subset (params=, a later block needs fewer tangents)"
    )


class DataRuns:
    """The batches of a data set (this process's share) as runs of captured graphs, with their
    loss-term counts and the all-reduce over the processes: what :class:`.api.HessianOperator`,
    :func:`.api.exact_hessian` and :func:`.api.hvp` use with ``data=``."""

    def __init__(
        self,
        model,
        data,
        *,
        loss="mse",
        params=None,
        head=None,
        process_group=None,
        keep=None,
        loss_terms=None,
        accumulate=None,
        precision="float64",
        custom_functions="refuse",
    ):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
        if data is None or isinstance(data, (torch.Tensor, str, bytes)):
            raise TypeError(f"data: expected a re-iterable of (inputs, targets) batches, got {type(data).__name__}")
        try:
            it = iter(data)
        except TypeError:
            raise TypeError(
                f"data: expected a re-iterable of (inputs, targets) batches, got {type(data).__name__}"
            ) from None
        if it is data:
            raise TypeError("data: an iterator can be read only once; pass a list of batches or a DataLoader")
        self.model, self.data, self.loss, self.head = model, data, loss, head
        self.terms_fn = loss_terms
        self.options = {"precision": precision, "custom_functions": custom_functions}
        named = parameter_names(model, head)
        self.names = select(named, params, [n for n, _ in model.named_parameters()])
        self.shapes = {n: tuple(named[n].shape) for n in self.names}
        p0 = named[self.names[0]]
        self.dtype, self.device = p0.dtype, p0.device
        #: the sums over batches and processes (and the results) are in this dtype: the model's, or
        #: float32 / float64 for a lower-precision model (each batch's sweep stays in the model's)
        self.acc_dtype = self.dtype if accumulate is None else accumulate
        if not (isinstance(self.acc_dtype, torch.dtype) and self.acc_dtype.is_floating_point):
            raise TypeError(f"accumulate: a floating torch dtype (torch.float32, torch.float64), got {accumulate!r}")
        self.P = sum(math.prod(s) for s in self.shapes.values())
        self.group = process_group_of(process_group)
        self.captures: dict[tuple, Captured] = {}
        self.counts = list(self._counts())
        local = torch.tensor([float(sum(self.counts)), float(len(self.counts))], dtype=torch.float64)
        if self.group is not None:
            local = all_reduce_(local.to(self._comm_device()), self.group).cpu()
        self.N, self.n_batches = int(local[0]), int(local[1])
        if self.N == 0:
            raise ValueError("data: no loss terms in any batch (empty data, or every target ignored)")
        self.runs: list[Run | None] | None = None
        first = next((i for i, n in enumerate(self.counts) if n > 0), None)
        run0 = None if first is None else self._run(first, self._batch_at(first))
        self.keep = self._decide_keep(keep, run0)
        if self.keep:
            self.runs = [None] * len(self.counts)
            if first is not None:
                self.runs[first] = run0
            for i, (inputs, targets) in enumerate(self._batches()):
                if self.counts[i] > 0 and self.runs[i] is None:
                    self.runs[i] = self._run(i, (inputs, targets))

    # ------------------------------------------------------------------ batches

    def _comm_device(self) -> torch.device:
        """Where collectives run: the parameters' CUDA device under NCCL, else the CPU."""
        import torch.distributed as dist

        backend = dist.get_backend(self.group)
        return self.device if backend == "nccl" else torch.device("cpu")

    def _batches(self):
        for i, item in enumerate(self.data):
            yield as_batch(item, i)

    def _batch_at(self, index: int):
        for i, b in enumerate(self._batches()):
            if i == index:
                return b
        raise IndexError(index)

    def _counts(self):
        for inputs, targets in self._batches():
            yield loss_terms(self.loss, inputs, targets, self.terms_fn)

    def _run(self, i: int, batch) -> Run:
        """The batch's run: its graph captured once per shape (else the shared graph rebound to it)."""
        inputs, targets = batch
        try:
            check_inputs(inputs)
        except ValueError as err:
            raise ValueError(f"data[{i}]: {err}") from None
        leaves, spec = pytree.tree_flatten(((inputs, targets), {}))
        key = _key(leaves, spec)
        cap = self.captures.get(key)
        if cap is None:
            cap = self.captures[key] = capture(
                self.model, inputs, targets, loss=self.loss, head=self.head, params=self.names, **self.options
            )
            check_sweep_memory(cap, inputs)
        else:
            cap = cap.rebind(user_leaves(self.model, inputs, targets), targets)
        try:
            return Run(cap)
        except ValueError as err:
            raise ValueError(f"data[{i}]: {err}") from None

    def _decide_keep(self, keep, run0: Run | None) -> bool:
        if keep is not None:
            return bool(keep)
        if run0 is None:
            return True
        per = _run_bytes(run0)
        avail = available_bytes(self.device)
        # the processes torchrun started on this machine share its memory (and a device each)
        local = 1 if self.device.type == "cuda" else max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        budget = KEEP_SHARE * avail / local if avail is not None else 1 << 30
        return per * len(self.counts) <= budget

    def each(self):
        """``(n_b, run)`` of every batch of this process with loss terms, one run in memory at a time
        unless the runs are kept; the counts are checked against the first pass."""
        if self.keep:
            for n, run in zip(self.counts, self.runs, strict=True):
                if n > 0:
                    yield n, run
            return
        seen = 0
        for i, (inputs, targets) in enumerate(self._batches()):
            seen += 1
            n = loss_terms(self.loss, inputs, targets, self.terms_fn)
            if i >= len(self.counts) or n != self.counts[i]:
                raise ValueError(
                    f"data[{i}]: the batches changed between passes ({n} loss terms now, "
                    f"{self.counts[i] if i < len(self.counts) else 'no batch'} before); "
                    "pass batches that are the same on every pass, or keep=True"
                )
            if n > 0:
                run = self._run(i, (inputs, targets))
                yield n, run
                del run
        if seen != len(self.counts):
            raise ValueError(f"data: {seen} batches now, {len(self.counts)} before")

    # ------------------------------------------------------------------ results

    def _add(self, acc: torch.Tensor | None, term: torch.Tensor, n: int) -> torch.Tensor:
        """acc + n term, in the accumulation dtype."""
        term = term.to(self.acc_dtype)
        return term.mul_(n) if acc is None else acc.add_(term, alpha=n)

    def _finish(self, acc: torch.Tensor | None, shape: tuple) -> torch.Tensor:
        if acc is None:
            acc = torch.zeros(shape, dtype=self.acc_dtype, device=self.device)
        if self.group is not None:
            dev = self._comm_device()
            acc = all_reduce_(acc.contiguous().to(dev), self.group).to(self.device)
        return acc.div_(self.N)

    def hvp(self, V: torch.Tensor) -> torch.Tensor:
        """H V of the data set's mean loss (V (P,) or (P, K))."""
        acc = None
        for n, run in self.each():
            acc = self._add(acc, hvp_sweep(run, V), n)
        return self._finish(acc, tuple(V.shape))

    def gradient(self) -> torch.Tensor:
        """The data set's mean loss's gradient w.r.t. the selected parameters."""
        acc = None
        for n, run in self.each():
            acc = self._add(acc, run.gradient(), n)
        return self._finish(acc, (self.P,))

    def mean_loss(self) -> float:
        """The data set's mean loss."""
        acc = None
        for n, run in self.each():
            term = run.loss.detach().to(torch.float64).reshape(1) * n
            acc = term if acc is None else acc + term
        if acc is None:
            acc = torch.zeros(1, dtype=torch.float64)
        if self.group is not None:
            acc = all_reduce_(acc.to(self._comm_device()), self.group)
        return float(acc.sum()) / self.N

    def dense(self, K_of, progress: bool = True) -> torch.Tensor:
        """The (P, P) Hessian of the data set's mean loss, summed batch by batch (``K_of(run)``: the
        block size of a run's dense sweep)."""
        from .sweep import Progress

        acc = None
        t0, last = time.perf_counter(), time.perf_counter()
        total = len(self.counts)
        for b, (n, run) in enumerate(self.each()):
            acc = self._add(acc, dense_hessian(run, K_of(run), Progress() if progress and self._speaks() else None), n)
            now = time.perf_counter()
            if progress and self._speaks() and now - last > 10 and b + 1 < total:
                last = now
                rest = (now - t0) / (b + 1) * (total - b - 1)
                print(f"exact_hessian: batch {b + 1}/{total}, about {rest:.0f} s left", file=sys.stderr, flush=True)
        return self._finish(acc, (self.P, self.P))

    def _speaks(self) -> bool:
        """Only rank 0 prints."""
        if self.group is None:
            return True
        import torch.distributed as dist

        return dist.get_rank() == 0


def _run_bytes(run: Run) -> int:
    """Bytes a kept run holds: its values and adjoints."""
    seen, total = {id(v) for v in run.cap.leaves.values()}, 0
    for v in (*run.env.values(), *run.adj.values()):
        if isinstance(v, torch.Tensor) and id(v) not in seen:
            seen.add(id(v))
            total += v.numel() * v.element_size()
    return total


__all__ = [
    "DataRuns",
    "one_of",
    "all_reduce_",
    "as_batch",
    "check_sweep_memory",
    "loss_terms",
    "process_group_of",
    "sweep_bytes",
]
