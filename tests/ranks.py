"""A script as several gloo processes on 127.0.0.1, the way torchrun starts them (env://), each
ending within a time bound: the multi-process tests' launcher (the package's own,
:func:`transformer_hessian.bench.scale_data.launch`, which ``bench scale`` uses too)."""

from __future__ import annotations

from pathlib import Path

from transformer_hessian.bench.scale_data import launch


def run_ranks(script: Path, world: int, args: list[str], timeout: float = 240.0) -> None:
    """``script`` as ``world`` gloo processes on 127.0.0.1 (the env:// variables torchrun sets, one
    OpenMP thread each), each ending within ``timeout`` seconds."""
    for rc, err in launch([str(script), *args], world, timeout):
        assert rc == 0, err[-3000:]
