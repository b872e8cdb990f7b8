"""The methods of ``transformer-hessian bench scale`` (:mod:`.scale`), each run in its own
process (:func:`..util.sandbox.run_spawned`) so that its peak memory is its own: the engine's :class:`HessianOperator`, autograd's
double backward (reverse-over-reverse, math attention kernel) and curvlinops'
``HessianLinearOperator``, on Hugging Face's GPT-2 (random init, no download) and one batch of
``1 x T`` tokens.

Each child times the build (the engine: constructing the operator; autograd: the forward and the
gradient with ``create_graph=True``; curvlinops: constructing the operator), one untimed product,
then ``repeats`` timed products of the same seeded random ``v``; it records its peak memory (the
process's resident high-water mark on the CPU, ``torch.cuda.max_memory_allocated`` on CUDA) and
saves its product to a file, so that the parent compares the methods' products."""

from __future__ import annotations

import time
from contextlib import nullcontext

#: GPT-2 small (Hugging Face's ``GPT2Config()``: 124M parameters)
SMALL: dict = {}
#: the ``--quick`` model: the same code path at toy sizes
TINY = dict(vocab_size=97, n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0)

METHODS = ("engine", "autograd", "curvlinops")


def dtype_of(name: str):
    """``torch.float32`` / ``torch.float64`` from its name."""
    import torch

    return {"float32": torch.float32, "float64": torch.float64}[name]


def build_gpt2(spec: dict):
    """GPT-2 of ``spec["config"]`` (GPT2Config keyword arguments), seeded, in ``spec["dtype"]``,
    eval mode, on ``spec["device"]``."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(spec["seed"])
    model = GPT2LMHeadModel(GPT2Config(**spec["config"]))
    return model.to(dtype=dtype_of(spec["dtype"]), device=spec["device"]).eval()


def token_batch(spec: dict, T: int, B: int = 1, index: int = 0):
    """``(B, T)`` seeded random token ids (``index``: which batch of a data set)."""
    import torch

    vocab = spec["config"].get("vocab_size", 50257)
    gen = torch.Generator().manual_seed(spec["seed"] + 1 + index)
    return torch.randint(0, vocab, (B, T), generator=gen).to(spec["device"])


def probe_vector(spec: dict, P: int):
    """The seeded random ``v`` (P,) every method multiplies (drawn in float64, then cast)."""
    import torch

    v = torch.randn(P, dtype=torch.float64, generator=torch.Generator().manual_seed(spec["seed"] + 2))
    return v.to(dtype=dtype_of(spec["dtype"]), device=spec["device"])


class Peak:
    """Peak memory from now on: the process's resident high-water mark (VmHWM, reset where the
    kernel lets us) on the CPU; the CUDA allocator's peak on CUDA. Bytes."""

    def __init__(self, device: str):
        import torch

        from ..util.device import synchronize
        from ..util.sandbox import proc_status, reset_peak_rss

        self.cuda = torch.device(device).type == "cuda"
        if self.cuda:
            synchronize(device)
            self.base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            self.reset = True
        else:
            self.base = proc_status().get("VmRSS", 0)
            self.reset = reset_peak_rss()

    def peak(self) -> int:
        """The peak so far (bytes)."""
        import torch

        from ..util.sandbox import proc_status

        if self.cuda:
            return int(torch.cuda.max_memory_allocated())
        return proc_status().get("VmHWM", 0)


def _engine(model, ids, v):
    from ..engine.api import HessianOperator

    op = HessianOperator(model, ids, ids, loss="causal_lm")
    names = [n for n, _ in model.named_parameters()]
    if op.names != names:
        raise RuntimeError("the engine's parameter order differs from named_parameters()")
    return lambda: op @ v


def _autograd(model, ids, v):
    from .lm_peers import autograd_hvp_fn

    prod = autograd_hvp_fn(model, ids, math_kernel=True)
    V = v.reshape(-1, 1)
    return lambda: prod(V)[:, 0]


def _curvlinops(model, ids, v, math_kernel: bool):
    import torch
    from curvlinops import HessianLinearOperator
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ..engine.ops.losses import NextTokenLogits

    def ctx():
        return sdpa_kernel(SDPBackend.MATH) if math_kernel else nullcontext()

    data = [(ids, ids[:, 1:].reshape(-1))]
    with ctx():
        op = HessianLinearOperator(
            NextTokenLogits(model),
            torch.nn.CrossEntropyLoss(),
            list(model.parameters()),
            data,
            check_deterministic=False,
        )

    def prod():
        with ctx():
            return op @ v

    return prod


def _curvlinops_fused(model, ids, v) -> str:
    """Whether curvlinops runs with the model's own (fused) attention kernel: "ran" or why not."""
    try:
        _curvlinops(model, ids, v, math_kernel=False)()
        return "ran"
    except (RuntimeError, NotImplementedError) as err:
        return f"fails: {str(err).splitlines()[0][:200]}"


_BUILDERS = {
    "engine": _engine,
    "autograd": _autograd,
    "curvlinops": lambda model, ids, v: _curvlinops(model, ids, v, math_kernel=True),
}


def measure(method: str, spec: dict, T: int, path: str) -> dict:
    """One method at ``T`` tokens in this process: build and product seconds, peak memory, the
    product saved to ``path``."""
    import statistics

    import torch

    from ..util.device import synchronize

    torch.set_num_threads(spec["threads"])
    model, ids = build_gpt2(spec), token_batch(spec, T)
    P = sum(p.numel() for p in model.parameters())
    v = probe_vector(spec, P)
    out: dict = {"P": P}
    if method == "curvlinops":
        out["fused_kernel"] = _curvlinops_fused(model, ids, v)
    peak = Peak(spec["device"])
    synchronize(v)
    t0 = time.perf_counter()
    prod = _BUILDERS[method](model, ids, v)
    synchronize(v)
    out["build_s"] = time.perf_counter() - t0
    hv = prod()  # warm-up, not timed
    times = []
    for _ in range(spec["repeats"]):
        synchronize(v)
        t0 = time.perf_counter()
        hv = prod()
        synchronize(hv)
        times.append(time.perf_counter() - t0)
    out.update(hvp_times_s=times, hvp_s=statistics.median(times), peak_bytes=peak.peak(), base_bytes=peak.base)
    out["peak_reset"] = peak.reset
    torch.save(hv.detach().to("cpu", torch.float64), path)
    return out


def child(method: str, spec: dict, T: int, path: str, queue) -> None:
    """:func:`measure` in a spawned process; its record, or its error, into ``queue``."""
    try:
        queue.put(measure(method, spec, T, path))
    except Exception as err:  # noqa: BLE001 - recorded in the table, the other methods still run
        queue.put({"error": f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"})
