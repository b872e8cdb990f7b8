"""Memory estimates made before anything large is allocated.

A job that cannot fit should stop at once with a message naming the config key to change,
not after minutes with an allocator traceback (or be killed by the kernel).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: Environment variable that overrides the detected available memory (bytes); for tests and
#: for schedulers whose limit the process cannot see.
MEMORY_ENV = "TRANSFORMER_HESSIAN_MEMORY_BYTES"

#: Dense Hessian jobs hold the P x P float64 matrix about this many times over (the matrix, the
#: closed-form or reference copy it is compared with, and the temporaries of the block norms).
HESSIAN_COPIES = 3


def parameter_count(model: Mapping, part: str = "model", image: tuple[int, int, int] | None = None) -> int:
    """Parameters of the post-norm ViT of model config ``model`` (keys width, d_k, d_ff, depth, patch_size,
    ffn_bias), in closed form without building it: the one place the count is typed (a built module's count is
    ``core.model.count_parameters``; :func:`encoder_parameter_count` is the torch encoder's).

    ``part`` is ``"weights"`` (one block's five groups W_Q, W_K, W_V, W_1, W_2: d (2 d_k + d + 2 d_ff), the P
    of a dense block Hessian), ``"groups"`` (the nine groups: + 4 d for the two LayerNorms' gamma, beta),
    ``"block"`` (+ the FFN biases d_ff + d when ``ffn_bias``) or ``"model"`` (depth blocks + patch embedding
    C p^2 d + d + positions L d + head d K + K, for ``image = (side, channels, classes)``, L = (side / p)^2).
    """
    d = model["width"]
    n = d * (2 * model["d_k"] + d + 2 * model["d_ff"])
    if part == "weights":
        return n
    n += 4 * d
    if part == "groups":
        return n
    n += (model["d_ff"] + d) if model.get("ffn_bias") else 0
    if part == "block":
        return n
    if part != "model" or image is None:
        raise ValueError(f"parameter_count: part {part!r} (weights, groups, block, model with image)")
    side, channels, classes = image
    p = model["patch_size"]
    return model["depth"] * n + channels * p * p * d + d + (side // p) ** 2 * d + d * classes + classes


def encoder_parameter_count(d_model: int, d_ff: int, num_layers: int, bias: bool) -> int:
    """Parameters of ``num_layers`` ``nn.TransformerEncoderLayer`` s (the architecture study's encoders) (no final norm): in_proj 3 d^2, out_proj
    d^2, linear1 d d_ff, linear2 d_ff d, two LayerNorm weights 2 d; with ``bias`` also 3 d + d +
    d_ff + d and the LayerNorm biases 2 d (torch's ``bias=False`` drops all of them)."""
    per = 4 * d_model * d_model + 2 * d_model * d_ff + 2 * d_model
    if bias:
        per += 3 * d_model + d_model + d_ff + d_model + 2 * d_model
    return num_layers * per


def hessian_group_size(width: int, d_k: int, d_ff: int) -> int:
    """P = |W_Q| + |W_K| + |W_V| + |W_1| + |W_2| = d (2 d_k + d + 2 d_ff) for one block (:func:`parameter_count`)."""
    return parameter_count({"width": width, "d_k": d_k, "d_ff": d_ff}, "weights")


def dense_hessian_bytes(width: int, d_k: int, d_ff: int) -> int:
    """Working memory of a dense float64 block Hessian job: ``HESSIAN_COPIES * P^2 * 8`` bytes."""
    p = hessian_group_size(width, d_k, d_ff)
    return HESSIAN_COPIES * p * p * 8


def format_bytes(n: float) -> str:
    """``n`` bytes in the largest binary unit that keeps the number >= 1 (e.g. ``3.2 GiB``)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover


def _cgroup_limit() -> int | None:
    for f in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(f).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:
            return int(text)
    return None


def available_bytes(device=None) -> int | None:
    """Memory a new allocation can use on ``device`` (free GPU memory, or available RAM capped by
    the cgroup limit); ``None`` when unknown. :data:`MEMORY_ENV` overrides it."""
    if os.environ.get(MEMORY_ENV, "").isdigit():
        return int(os.environ[MEMORY_ENV])
    if device is not None and getattr(device, "type", str(device).split(":")[0]) == "cuda":
        import torch

        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except (RuntimeError, AssertionError):
            return None
    try:
        import psutil

        have = int(psutil.virtual_memory().available)
    except (ImportError, OSError):
        try:
            have = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    limit = _cgroup_limit()
    return min(have, limit) if limit else have


def check_dense_memory(P: int, dtype, avail: int | None, device, what: str, hint: str = "") -> int:
    """Bytes of a dense (P, P) matrix of ``dtype``; MemoryError naming ``what``, the numbers and
    ``hint`` when more than ``avail`` (:func:`available_bytes` of ``device``; None: unknown)."""
    import torch

    need = P * P * torch.finfo(dtype).bits // 8
    if avail is not None and need > avail:
        raise MemoryError(
            f"{what}: the dense Hessian over P = {P} parameters needs {need} bytes ({need / 2**30:.2f} GiB) "
            f"of {dtype}; {avail} bytes are available on {device}{hint}"
        )
    return need
