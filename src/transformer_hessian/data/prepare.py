"""Preparation of verified raw files into the layout that is read: MNIST's ``.gz`` files are
decompressed next to themselves, CIFAR-100's archive is checked member by member and extracted.
No network. Each extraction goes to a temporary folder (``.extract-<host>-<pid>-*``) inside the
data folder and its product is renamed into place, so a killed run leaves nothing half-written
(its temporary folder is removed by the next run: :func:`remove_stale_extract_dirs`).
"""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path

from . import sources
from .sources import MNIST_FILES, DataError

__all__ = ["prepare", "remove_stale_extract_dirs"]

log = logging.getLogger("transformer_hessian.data")


def prepare(name: str, folder: Path) -> None:
    """Decompress / extract the raw files in ``folder`` into the layout that is read, atomically."""
    if name == "mnist":
        for images, labels in MNIST_FILES.values():
            for target in (images, labels):
                archive = folder / f"{target}.gz"
                if not (folder / target).exists() and archive.exists():
                    _extract_atomic(name, archive, folder, target)
    elif name == "cifar100":
        archive = folder / sources.cifar100().filename
        if not (folder / sources.cifar100_dir()).exists() and archive.exists():
            _check_tar_members(name, archive)
            _extract_atomic(name, archive, folder, sources.cifar100_dir())


def _check_tar_members(name: str, archive: Path) -> None:
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
    except (tarfile.TarError, OSError, EOFError) as err:
        raise DataError(
            f"data set {name!r}: {archive} is not a readable tar archive ({err}); delete it and download again"
        ) from err
    for m in members:
        parts = Path(m.name).parts
        unsafe = not parts or parts[0] != sources.cifar100_dir() or ".." in parts or m.name.startswith("/")
        if unsafe or not (m.isfile() or m.isdir()):
            raise DataError(
                f"data set {name!r}: {archive} holds an unexpected member {m.name!r}; "
                f"expected only files under {sources.cifar100_dir()}/. Delete it and download again."
            )


def _extract_prefix() -> str:
    from ..util.tempfiles import host_tag

    return f".extract-{host_tag()}-{os.getpid()}-"


def remove_stale_extract_dirs(folder: Path) -> None:
    """Remove ``.extract-<host>-<pid>-*`` folders of dead processes on this host (killed extractions)."""
    from ..util.tempfiles import host_tag, pid_alive

    prefix = f".extract-{host_tag()}-"
    for d in folder.glob(".extract-*"):
        rest = d.name[len(prefix) :] if d.name.startswith(prefix) else ""
        pid = rest.split("-", 1)[0]
        if d.is_dir() and pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)
            log.info("removed %s, left by an interrupted extraction", d)


def _extract(archive: Path, into: Path) -> None:
    """A gzipped file decompressed into ``into`` under its name without ``.gz``, or a tar archive
    (members checked by :func:`_check_tar_members`) extracted there; Python's own gzip and tarfile."""
    if archive.name.endswith(".gz") and not archive.name.endswith(".tar.gz"):
        with gzip.open(archive) as src, open(into / archive.name[: -len(".gz")], "wb") as dest:
            shutil.copyfileobj(src, dest)
        return
    with tarfile.open(archive, "r:*") as tar:
        tar.extractall(into, filter="data")


def _extract_atomic(name: str, archive: Path, folder: Path, target: str) -> None:
    """Extract ``archive`` into a temp folder inside ``folder``; rename its ``target`` into place."""
    tmp = Path(tempfile.mkdtemp(dir=folder, prefix=_extract_prefix()))
    try:
        try:
            _extract(archive, tmp)
        except (OSError, EOFError, tarfile.TarError, gzip.BadGzipFile, zlib.error, RuntimeError) as err:
            raise DataError(
                f"data set {name!r}: could not extract {archive} ({type(err).__name__}: {err}); "
                "delete it and download again"
            ) from err
        produced = tmp / target
        if not produced.exists():
            raise DataError(f"data set {name!r}: {archive} did not contain {target!r}; delete it and download again")
        try:
            os.replace(produced, folder / target)
        except OSError:
            if not (folder / target).exists():  # lost a race with a concurrent extraction otherwise
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
