"""Spectra of a data set's exact Hessian, resumable: top-k eigenvalues (and eigenvectors) and the
SLQ density from one batched Lanczos run, Hutchinson's trace, and per parameter glob the block's
spectral norm and trace. Every product is :class:`..engine.api.HessianOperator` over this
process's share of the batches (all-reduced under ``torch.distributed``); the random vectors are
seeded, so every process draws the same ones and the numbers equal one process's to rounding.

State is saved to ``<out>/curvature.state.pt`` every few products (by rank 0; atomically) and a
run started again with the same settings continues from it to the same numbers."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_map

from ..core.spectral import best_run, hutchinson_trace, lanczos_runs, slq_density, top_eigenvalues
from ..util.files import torch_save

STATE = "curvature.state.pt"
#: runs whose top Ritz values agree to this are taken as tied (the first is reported), so that one
#: process and many, whose products differ in the last bits, report the same run
TIE_RTOL = 1e-9


@dataclass(frozen=True)
class Settings:
    """What the run computes (its fingerprint: a saved state with other settings is not resumed)."""

    top_k: int = 5
    lanczos_steps: int = 20
    #: Lanczos runs (start vectors) in the batched run behind the top eigenvalues and the SLQ density
    slq_probes: int = 4
    probes: int = 32
    blocks: tuple[str, ...] = ()
    block_steps: int = 12
    block_probes: int = 8
    eigenvectors: bool = False
    seed: int = 0
    #: products between two saves of the state (0: never)
    checkpoint_every: int = 5
    params: tuple[str, ...] | None = None
    loss: str = "causal_lm"
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        for key in ("top_k", "lanczos_steps", "slq_probes", "block_steps"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: at least 1, got {getattr(self, key)}")
        for key in ("probes", "block_probes"):
            if getattr(self, key) < 2:
                raise ValueError(f"{key}: Hutchinson needs at least 2 probes, got {getattr(self, key)}")
        if self.checkpoint_every < 0:
            raise ValueError(f"checkpoint_every: >= 0, got {self.checkpoint_every}")


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class _Progress:
    """Products done of the planned total, a line on rank 0 every ``every`` seconds with the time left."""

    def __init__(self, total: int, every: float = 5.0, stream=None):
        self.total, self.done, self.every = total, 0, every
        self.t0 = self.last = time.perf_counter()
        self.new = 0  # products this process computed (the time per product is theirs)
        self.stream = stream or sys.stderr
        self.speak = _rank() == 0

    def step(self, stage: str, i: int, n: int) -> None:
        self.done += 1
        self.new += 1
        now = time.perf_counter()
        if not self.speak or now - self.last < self.every:
            return
        self.last = now
        per = (now - self.t0) / self.new
        left = per * max(self.total - self.done, 0)
        print(
            f"curvature: {stage} {i}/{n} (product {self.done} of {self.total}), {per:.2f} s a product, "
            f"about {left:.0f} s left",
            file=self.stream,
            flush=True,
        )


class Checkpoint:
    """The run's saved state: ``stages[name]`` holds a finished stage's result or an unfinished
    one's Lanczos / Hutchinson state; written by rank 0 every ``every`` products."""

    def __init__(self, out_dir: Path, fingerprint: dict, every: int):
        self.path = Path(out_dir) / STATE
        self.fingerprint, self.every = fingerprint, every
        self.stages: dict[str, dict] = {}
        self.pending = 0
        self.resumed = False
        if self.path.exists():
            saved = torch.load(self.path, map_location="cpu", weights_only=False)
            if saved.get("fingerprint") == fingerprint:
                self.stages, self.resumed = saved["stages"], True
            elif _rank() == 0:
                print(
                    f"curvature: {self.path} holds another run's state (other settings); starting anew", file=sys.stderr
                )

    def state(self, stage: str):
        """An unfinished stage's saved state (None: none)."""
        entry = self.stages.get(stage)
        return None if entry is None else entry.get("state")

    def result(self, stage: str):
        """A finished stage's result (None: not finished)."""
        entry = self.stages.get(stage)
        return None if entry is None else entry.get("result")

    def update(self, stage: str, state) -> None:
        """A stage's state after one more product; written every ``every`` updates."""
        self.stages[stage] = {"state": state}  # copied to the CPU when written
        self.pending += 1
        if self.every and self.pending >= self.every:
            self.write()

    def finish(self, stage: str, result) -> None:
        """A stage done: its result replaces its state, written at once."""
        self.stages[stage] = {"result": result}
        self.write()

    def write(self) -> None:
        """Save the state (rank 0, atomically; nothing when ``every`` is 0)."""
        self.pending = 0
        if _rank() == 0 and self.every:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            torch_save({"fingerprint": self.fingerprint, "stages": _cpu(self.stages)}, self.path)


def _cpu(obj):
    """``obj``'s tensors copied to the CPU (dicts, lists, tuples kept)."""
    return tree_map(lambda x: x.detach().to("cpu", copy=True) if isinstance(x, torch.Tensor) else x, obj)


def _on(obj, device):
    """``obj``'s tensors on ``device``."""
    return tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, obj)


def _lanczos(op, stage: str, B: int, steps: int, seed: int, ck: Checkpoint, prog: _Progress) -> dict:
    """One batched Lanczos run on ``op`` (``B`` seeded starts), resumable: ``theta``, ``S``,
    ``residuals`` of the Ritz pairs and the basis ``Q``."""
    done = ck.result(stage)
    if done is not None:
        prog.done += done["steps"]
        return _on(done, op.device)
    P = op.shape[0]
    m = max(1, min(steps, P))
    resume = _on(ck.state(stage), op.device)
    if resume is not None:
        prog.done += resume["j"]
    last = {}

    def save(state):
        last.update(state)
        prog.step(stage, state["j"], m)
        ck.update(stage, state)

    theta, S, res = lanczos_runs(op, None, B, steps, seed, resume=resume, save=save)
    out = {"theta": theta, "S": S, "res": res, "Q": last.get("Q", resume["Q"] if resume else None), "steps": m}
    ck.finish(stage, out)
    return out


def _trace(op, stage: str, n: int, seed: int, chunk: int, ck: Checkpoint, prog: _Progress) -> dict:
    done = ck.result(stage)
    if done is not None:
        prog.done += math.ceil(n / chunk)
        return done
    resume = ck.state(stage)
    if resume is not None:
        prog.done += math.ceil(resume["done"] / chunk)

    def save(state):
        prog.step(stage, state["done"], n)
        ck.update(stage, state)

    out = hutchinson_trace(op, None, n, seed, chunk=chunk, resume=resume, save=save)
    ck.finish(stage, out)
    return out


def planned_products(s: Settings, P: int, block_sizes: list[int]) -> int:
    """Products (of up to ``slq_probes`` vectors each) the run makes."""
    chunk = s.slq_probes
    n = min(s.lanczos_steps, P) + math.ceil(s.probes / chunk)
    for Pb in block_sizes:
        n += min(s.block_steps, Pb) + math.ceil(s.block_probes / chunk)
    return n


def curvature(model, share, settings: Settings, out_dir, *, process_group=None, keep=None) -> dict[str, Any]:
    """The run's results (see the module docstring) as a JSON-ready dict, with the eigenvectors
    under ``"_vectors"`` ((k, P) tensor, when asked) and the parameter names under ``"_names"``."""
    from ..engine.api import HessianOperator
    from ..engine.params import parameter_names, select

    s = settings
    t0 = time.perf_counter()
    opts = {"loss": s.loss, "process_group": process_group, "keep": keep}
    op = HessianOperator(model, data=share, params=list(s.params) if s.params else None, **opts)
    named = parameter_names(model, None)
    block_names = {g: select(named, g) for g in s.blocks}
    block_sizes = [sum(named[n].numel() for n in names) for names in block_names.values()]
    P = op.shape[0]
    fingerprint = {**asdict(s), "P": P, "n_terms": op.n_terms, "checkpoint_every": None}
    ck = Checkpoint(Path(out_dir), fingerprint, s.checkpoint_every)
    prog = _Progress(planned_products(s, P, block_sizes))
    if ck.resumed and prog.speak:
        print(f"curvature: resuming from {ck.path}", file=sys.stderr, flush=True)
    runs = _lanczos(op, "lanczos", s.slq_probes, s.lanczos_steps, s.seed, ck, prog)
    triple = (runs["theta"], runs["S"], runs["res"])
    top = top_eigenvalues(None, None, s.top_k, s.lanczos_steps, runs=triple, tie_rtol=TIE_RTOL)
    slq = slq_density(None, None, s.slq_probes, s.lanczos_steps, runs=triple)
    trace = _trace(op, "trace", s.probes, s.seed, s.slq_probes, ck, prog)
    result: dict[str, Any] = {
        **top,
        "trace": trace,
        "slq": {"nodes": slq["nodes"].tolist(), "weights": slq["weights"].tolist()},
        "P": P,
        "n_terms": op.n_terms,
        "batches": op.data.n_batches,
        "loss": op.loss(),
        "gradient_norm": float(op.gradient().norm()),
        "dtype": str(op.dtype).removeprefix("torch."),
        "device": str(op.device),
        "params": list(op.names) if s.params else "all",
    }
    if s.eigenvectors:
        best = best_run(runs["theta"], TIE_RTOL)
        order = torch.argsort(runs["theta"][best], descending=True)[: s.top_k]
        vec = torch.einsum("jp,jk->kp", runs["Q"][:, best, :], runs["S"][best][:, order])
        result["_vectors"] = vec / vec.norm(dim=1, keepdim=True)
        result["_names"] = list(op.names)
        result["_shapes"] = {n: tuple(named[n].shape) for n in op.names}
    del op
    blocks = {}
    for g, names in block_names.items():
        opb = HessianOperator(model, data=share, params=names, **opts)
        b = _lanczos(opb, f"block:{g}:lanczos", 1, s.block_steps, s.seed, ck, prog)
        tr = _trace(opb, f"block:{g}:trace", s.block_probes, s.seed, s.slq_probes, ck, prog)
        top_b, bottom_b = float(b["theta"][0, -1]), float(b["theta"][0, 0])
        blocks[g] = {
            "P": opb.shape[0],
            "params": names,
            "top": top_b,
            "bottom": bottom_b,
            "spectral_norm": max(abs(top_b), abs(bottom_b)),
            "trace": tr,
        }
        del opb
    result["blocks"] = blocks
    result["products"] = prog.done
    result["products_this_run"] = prog.new
    result["seconds"] = time.perf_counter() - t0
    result["resumed"] = ck.resumed
    return result
