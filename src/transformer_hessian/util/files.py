"""Files: atomic writes, JSON and text, sha256 digests, npz and torch saves (no digest sidecar: that is :mod:`.io`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from .tempfiles import host_tag, remove_stale_temp_files

log = logging.getLogger("transformer_hessian")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | Path, suffix: str | None = None):
    """Yield a temporary path in the same folder; rename it onto ``path`` on success only.

    The file gets the usual permissions (0666 less the umask; mkstemp would leave 0600). The
    temp file's name carries this host and process id (``.<name>.<host>.<pid>.<random><suffix>``),
    so the next write of the same target removes what a killed run left behind
    (:func:`remove_stale_temp_files`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(path.parent, path.name)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.{host_tag()}.{os.getpid()}.", suffix=suffix or path.suffix, dir=path.parent
    )
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _json_default(obj):
    import numpy as np

    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    torch = sys.modules.get("torch")  # a tensor can only exist once torch is imported
    if torch is not None and isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dump_json(obj, fh) -> None:
    """The package's one JSON encoding (:func:`.io.write_json` writes it): indented
    by 2, NaN/inf refused (not valid JSON), numpy/torch values as numbers and lists, a newline at the end."""
    json.dump(obj, fh, indent=2, default=_json_default, allow_nan=False)
    fh.write("\n")


def read_json(path: str | Path):
    """Parse a JSON file (UTF-8); ``io.load_json`` adds the digest check and messages for result files."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """SHA-256 hex digest of the bytes of ``path``."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def write_text(text: str, path: str | Path) -> None:
    """Write ``text`` atomically."""
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)


def torch_save(obj, path: str | Path) -> None:
    """``torch.save`` to a temporary file, then rename into place."""
    import torch

    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def save_npz(path: str | Path, **arrays) -> None:
    """Write ``arrays`` to a compressed ``.npz`` file atomically."""
    import numpy as np

    with atomic_path(path, suffix=".npz") as tmp:
        np.savez_compressed(tmp, **arrays)
