"""Memory estimates made before anything large is allocated.

A job that cannot fit should stop at once with a message naming the config key to change,
not after minutes with an allocator traceback (or be killed by the kernel).
"""

from __future__ import annotations

import os
from pathlib import Path

#: Environment variable that overrides the detected available memory (bytes); for tests and
#: for schedulers whose limit the process cannot see.
MEMORY_ENV = "TRANSFORMER_HESSIAN_MEMORY_BYTES"

#: Dense Hessian jobs hold the P x P float64 matrix about this many times over (the matrix, the
#: closed-form or reference copy it is compared with, and the temporaries of the block norms).
HESSIAN_COPIES = 3


def hessian_group_size(width: int, d_k: int, d_ff: int) -> int:
    """P = |W_Q| + |W_K| + |W_V| + |W_1| + |W_2| = d (2 d_k + d + 2 d_ff) for one block."""
    return width * (2 * d_k + width + 2 * d_ff)


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
