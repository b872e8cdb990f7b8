"""Checkpoint discovery for resuming: the epoch checkpoints of a run's ``checkpoints/`` folder,
newest first, and the newest one that verifies and loads (damaged ones are skipped by name)."""

from __future__ import annotations

import re
from pathlib import Path

from ..util.files import log
from .checkpoints import CheckpointError, load_checkpoint


def _epoch_checkpoints(ckdir: Path) -> list[tuple[int, Path]]:
    """``(epoch, path)`` of every epoch checkpoint in ``ckdir``, newest first."""
    found = []
    for p in ckdir.glob("epoch_*.pt"):
        m = re.fullmatch(r"epoch_(\d+)\.pt", p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found, reverse=True)


def newest_valid_checkpoint(name: str, ckdir: Path, dev) -> tuple[int, Path, dict] | None:
    """The newest epoch checkpoint that verifies and loads; each one skipped is logged by name."""
    for epoch, path in _epoch_checkpoints(ckdir):
        try:
            return epoch, path, load_checkpoint(path, map_location=dev)
        except CheckpointError as err:
            log.warning("%s: skipping %s: %s", name, path.name, err)
    return None
