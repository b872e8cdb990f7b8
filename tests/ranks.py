"""A script as several gloo processes on 127.0.0.1, the way torchrun starts them (env://), each
ending within a time bound: the multi-process tests' launcher."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(script: Path, world: int, args: list[str], timeout: float = 240.0) -> None:
    """``script`` as ``world`` gloo processes on 127.0.0.1 (the env:// variables torchrun sets),
    each ending within ``timeout`` seconds."""
    port = _free_port()
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "GLOO_SOCKET_IFNAME": "lo",
            "OMP_NUM_THREADS": "1",
        }
        procs.append(subprocess.Popen([sys.executable, str(script), *args], env=env, stderr=subprocess.PIPE, text=True))
    errs = []
    try:
        for p in procs:
            _, err = p.communicate(timeout=timeout)
            errs.append(err)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, err in zip(procs, errs, strict=True):
        assert p.returncode == 0, err[-3000:]
