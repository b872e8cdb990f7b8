"""Checkpoints with a checksum: written atomically, verified before they are trusted.

Every checkpoint ``X.pt`` gets a sidecar ``X.pt.sha256`` holding the SHA-256 of its bytes
(``<hex>  X.pt``, the format of ``sha256sum``). :func:`save_checkpoint` writes the checkpoint
to a temp file, hashes it, writes the sidecar atomically and only then renames the checkpoint
into place, so a checkpoint on disk always has the sidecar of its own bytes unless it was
damaged afterwards (truncated, overwritten) or the process died between the two renames (then
the old checkpoint and the new sidecar disagree: the checkpoint counts as damaged, which is
safe). :func:`load_checkpoint` checks the sidecar, then loads with ``weights_only=True`` (no
pickled code runs) and raises :class:`CheckpointError`, naming the file and what to do, for
anything it cannot trust.
"""

from __future__ import annotations

import logging
import os
import pickle
import time
import zipfile
from pathlib import Path

from ..errors import CheckpointError  # noqa: F401  (re-exported: the class lives in errors.py)
from ..util.files import atomic_path, sha256_file, write_text  # sha256_file: re-exported

log = logging.getLogger("transformer_hessian")

#: Keys every checkpoint written by :mod:`transformer_hessian.train` holds.
REQUIRED_KEYS = ("model_config", "model", "epoch")


def sidecar(path: str | Path) -> Path:
    """The checksum file of checkpoint ``path``: ``<path>.sha256``."""
    path = Path(path)
    return path.with_name(path.name + ".sha256")


def save_checkpoint(obj: dict, path: str | Path) -> str:
    """``torch.save(obj)`` to ``path`` atomically, with its SHA-256 sidecar; returns the digest."""
    import torch  # lazily: the Snakefile imports this module to check checkpoints, without torch

    path = Path(path)
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)
        digest = sha256_file(tmp)
        write_text(f"{digest}  {path.name}\n", sidecar(path))
    return digest


def verify_checkpoint(path: str | Path) -> str | None:
    """Why ``path`` cannot be trusted (a short reason), or ``None`` when its bytes verify.

    A checkpoint without a sidecar (written by an older version) is not rejected here; the
    load itself then decides.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "file is missing"
    except OSError as err:
        return f"cannot be read ({err.strerror})"
    if size == 0:
        return "file is empty (0 bytes)"
    side = sidecar(path)
    if not side.exists():
        return None
    try:
        expected = side.read_text().split()[0].lower()
    except (OSError, IndexError, UnicodeDecodeError):
        return f"checksum file {side.name} is unreadable"
    try:
        got = sha256_file(path)
    except OSError as err:
        return f"cannot be read ({err.strerror})"
    if got != expected:
        return f"sha256 mismatch: {side.name} says {expected[:12]}..., the file has {got[:12]}... ({size} bytes)"
    return None


def load_checkpoint(path: str | Path, map_location="cpu") -> dict:
    """Verify and load a checkpoint (``weights_only=True``); :class:`CheckpointError` if it cannot be trusted."""
    path = Path(path)
    hint = (
        "delete it (and its .sha256) and run the workflow again: training resumes from the newest "
        "valid epoch checkpoint"
    )
    reason = verify_checkpoint(path)
    if reason is not None:
        raise CheckpointError(f"checkpoint {path} is damaged: {reason}; {hint}")
    import torch

    try:
        ck = torch.load(path, map_location=map_location, weights_only=True)
    except (
        OSError,
        RuntimeError,
        EOFError,
        ValueError,
        KeyError,
        IndexError,
        pickle.UnpicklingError,
        zipfile.BadZipFile,
        AttributeError,
        TypeError,
    ) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise CheckpointError(
            f"checkpoint {path} cannot be loaded safely ({type(err).__name__}: {first[:200]}); {hint}"
        ) from None
    if not isinstance(ck, dict) or not all(k in ck for k in REQUIRED_KEYS):
        raise CheckpointError(f"checkpoint {path} is not a transformer-hessian checkpoint (missing keys); {hint}")
    return ck


def set_aside(path: str | Path) -> Path:
    """Rename a damaged checkpoint (and its sidecar) to ``<name>.damaged``; returns the new path.

    A damaged intermediate never blocks a run: once set aside it counts as missing, and the
    rule that writes it rebuilds it when it runs again.
    """
    path = Path(path)
    target = path.with_name(path.name + ".damaged")
    os.replace(path, target)
    side = sidecar(path)
    if side.exists():
        os.replace(side, target.with_name(target.name + ".sha256"))
    return target


def set_aside_damaged(paths, dry_run: bool = False, recheck_s: float = 1.0) -> list[Path]:
    """Rename each checkpoint in ``paths`` whose sidecar does not match to ``<name>.damaged``.

    Used when the workflow starts: a damaged ``init.pt`` / ``final.pt`` then counts as missing,
    so the train rule runs again and resumes from the newest valid epoch checkpoint. Only files
    with a sidecar are judged; a mismatch is re-checked after ``recheck_s`` seconds (a writer may
    be between its two renames). With ``dry_run`` nothing is renamed; the damaged files are
    returned (and logged) all the same.
    """
    damaged = []
    for p in map(Path, paths):
        if not p.exists() or not sidecar(p).exists() or verify_checkpoint(p) is None:
            continue
        time.sleep(recheck_s)
        reason = verify_checkpoint(p)
        if reason is None or not p.exists():
            continue
        damaged.append(p)
        if dry_run:
            log.warning(
                "%s is damaged (%s); a real run sets it aside and retrains from the newest valid epoch checkpoint",
                p,
                reason,
            )
            continue
        target = p.with_name(p.name + ".damaged")
        os.replace(p, target)
        log.warning(
            "%s is damaged (%s); moved it to %s so that training runs again (it resumes from the newest "
            "valid epoch checkpoint)",
            p,
            reason,
            target.name,
        )
    return damaged
