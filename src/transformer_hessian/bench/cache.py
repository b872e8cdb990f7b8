"""The reference cache of ``bench hessian`` (``--reference-cache``): the reference row and
Hessian of a problem, keyed by everything that determines them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..util.files import log
from ..util.io import write_json
from ..util.sandbox import OK
from .methods import LABELS
from .settings import BenchSettings


def _reference_key(s: BenchSettings, label: str, width: int) -> str:
    """Cache file stem of the reference (label) of one problem: a hash of everything that
    determines its Hessian and timing conditions (shape, width, batch, seed, device, threads,
    torch and curvlinops versions)."""
    import hashlib

    import torch

    try:
        import curvlinops

        cv = getattr(curvlinops, "__version__", "?")
    except ImportError:  # pragma: no cover - curvlinops is a dependency
        cv = None
    key = {
        "label": label,
        "shape": s.shape,
        "width": width,
        "batch_size": s.batch_size,
        "seed": s.seed,
        "device": s.device,
        "threads": s.threads or torch.get_num_threads(),
        "torch": torch.__version__,
        "curvlinops": cv,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return f"{LABELS[label]}_{s.shape}_d{width}_b{s.batch_size}_{digest}"


def _cached_reference(s: BenchSettings, label: str, width: int, workdir: Path) -> dict | None:
    """The reference row of an earlier run from ``s.reference_cache`` (marked ``cached``, its
    Hessian copied into ``workdir``), or None when there is no cache or no entry."""
    if not s.reference_cache:
        return None
    stem = Path(s.reference_cache) / _reference_key(s, label, width)
    row_path, h_path = stem.with_suffix(".json"), stem.with_suffix(".npy")
    if not (row_path.is_file() and h_path.is_file()):
        return None
    with open(row_path) as fh:
        row = json.load(fh)
    local = workdir / h_path.name
    shutil.copyfile(h_path, local)
    row.update(_hessian_path=str(local), cached=True, cache_file=str(row_path))
    log.info("bench hessian: d=%d (%s) %s: reference from the cache %s", width, label, row["method"], row_path)
    return row


def _store_reference(s: BenchSettings, label: str, width: int, row: dict) -> None:
    """Save a finished reference row and its Hessian in ``s.reference_cache`` (if set)."""
    if not s.reference_cache or row["status"] != OK or not row.get("_hessian_path"):
        return
    from ..util.files import atomic_path

    stem = Path(s.reference_cache) / _reference_key(s, label, width)
    stem.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(stem.with_suffix(".npy")) as tmp:
        shutil.copyfile(row["_hessian_path"], tmp)
    write_json({k: v for k, v in row.items() if not k.startswith("_")}, stem.with_suffix(".json"), sealed=False)
