"""MNIST a user already has: find its four files on disk, verify them, put them in place.

Accepted forms of each file, in each searched folder (first one that verifies wins):

* the decompressed IDX file under torchvision's hyphenated name (``train-images-idx3-ubyte``)
  or the dotted name of widely shared copies (``train-images.idx3-ubyte``), verified by the md5
  of the decompressed file (:data:`MNIST_RAW`, facts of the data set);
* the gzip archive (``train-images-idx3-ubyte.gz``), verified by torchvision's md5 of the
  archive, or, for an archive compressed again (another md5), by the md5 of what it holds.

Searched folders: the config key ``data.local`` (and its ``MNIST/raw/`` and ``mnist/``
subfolders), then the data folder ``<root>/mnist/`` and torchvision's layout ``<root>/MNIST/raw/``.
A verified file is copied (or decompressed) into ``<root>/mnist/<hyphenated name>``, atomically
and only where no file is; nothing else is ever written, and no file that this module did not
write is changed or removed. A file that fails verification is reported (:class:`Rejected`:
path, expected and actual md5, size) and left where it is.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..util.files import atomic_path
from .sources import MNIST_FILES, DataError

__all__ = [
    "MNIST_RAW",
    "Rejected",
    "dotted_name",
    "md5_of",
    "mnist_search_dirs",
    "mnist_targets",
    "place_mnist_file",
    "rejected_error",
]

log = logging.getLogger("transformer_hessian.data")

#: md5 and size of each decompressed MNIST file (the original distribution after ``gunzip``).
MNIST_RAW: dict[str, tuple[str, int]] = {
    "train-images-idx3-ubyte": ("6bbc9ace898e44ae57da46a324031adb", 47_040_016),
    "train-labels-idx1-ubyte": ("a25bea736e30d166cdddb491f175f624", 60_008),
    "t10k-images-idx3-ubyte": ("2646ac647ad5339dbf082846283269ea", 7_840_016),
    "t10k-labels-idx1-ubyte": ("27ae3e4e09519cfbb04c329615203637", 10_008),
}

_CHUNK = 1 << 20


@dataclass(frozen=True)
class Rejected:
    """A file found on disk that does not verify (left where it is)."""

    path: Path
    expected: str
    actual: str
    size: int
    note: str = ""

    def __str__(self) -> str:
        extra = f"; {self.note}" if self.note else ""
        return f"{self.path} ({self.size:,} bytes): md5 {self.actual}, expected {self.expected}{extra}"


def dotted_name(name: str) -> str:
    """``train-images-idx3-ubyte`` -> ``train-images.idx3-ubyte`` (the name of shared copies)."""
    return name.replace("-idx", ".idx")


def md5_of(path: Path) -> str:
    """md5 of the file ``path`` (hex)."""
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _gunzip_md5(path: Path) -> str:
    """md5 of what the gzip file ``path`` holds; ``ValueError`` if it is not a readable gzip file."""
    h = hashlib.md5(usedforsecurity=False)
    try:
        with gzip.open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
    except (OSError, EOFError, zlib.error) as err:
        raise ValueError(f"not a readable gzip file ({type(err).__name__}: {err})") from err
    return h.hexdigest()


def mnist_search_dirs(folder: Path, root: Path, local: Path | None) -> list[Path]:
    """Folders searched for the MNIST files, in order, without duplicates."""
    dirs = []
    if local is not None:
        dirs += [local, local / "MNIST" / "raw", local / "mnist", local / "mnist" / "MNIST" / "raw"]
    dirs += [folder, root / "MNIST" / "raw"]
    out: list[Path] = []
    for d in dirs:
        if d not in out:
            out.append(d)
    return out


def _candidates(target: str, dirs: list[Path]) -> list[Path]:
    names = [target, dotted_name(target), f"{target}.gz", f"{dotted_name(target)}.gz"]
    return [d / n for d in dirs for n in names if (d / n).is_file()]


def _copy_into(src: Path, dest: Path, gz: bool) -> str:
    """Copy (``gz``: decompress) ``src`` to ``dest`` atomically; the md5 of what was written."""
    h = hashlib.md5(usedforsecurity=False)
    with atomic_path(dest) as tmp:
        opener = gzip.open if gz else open
        with opener(src, "rb") as fin, open(tmp, "wb") as fout:
            while chunk := fin.read(_CHUNK):
                h.update(chunk)
                fout.write(chunk)
    return h.hexdigest()


def place_mnist_file(
    target: str, folder: Path, dirs: list[Path], raw_md5: str | None, gz_md5: str | None
) -> tuple[Path | None, Path | None, list[Rejected]]:
    """Put the decompressed ``target`` in ``folder`` from the first verified file in ``dirs``.

    Returns ``(path in folder or None, the file it came from, the files that did not verify)``. ``raw_md5`` is the md5
    of the decompressed file (``None``: not checked, for fabricated test data); ``gz_md5`` the
    md5 of torchvision's archive. A file already at ``folder/target`` that does not verify is
    reported, left in place, and blocks placing another copy there.
    """
    dest = folder / target
    rejected: list[Rejected] = []
    if dest.is_file():
        if raw_md5 is None:
            return dest, dest, rejected
        got = md5_of(dest)
        if got == raw_md5:
            return dest, dest, rejected
        rejected.append(Rejected(dest, raw_md5, got, dest.stat().st_size, "the decompressed file in the data folder"))
        return None, None, rejected
    for path in _candidates(target, dirs):
        if path == dest:
            continue
        size = path.stat().st_size
        if path.suffix == ".gz":
            got = md5_of(path)
            if gz_md5 is not None and got == gz_md5:
                written = _copy_into(path, dest, gz=True)
                if raw_md5 is not None and written != raw_md5:  # cannot happen with torchvision's archives
                    dest.unlink()  # written by us just now
                    rejected.append(Rejected(path, raw_md5, written, size, "md5 of its decompressed content"))
                    continue
                log.info("mnist: %s verifies (md5 of the archive); decompressed to %s", path, dest)
                return dest, path, rejected
            if raw_md5 is None:
                rejected.append(Rejected(path, gz_md5 or "?", got, size, "md5 of the gzip archive"))
                continue
            try:
                inner = _gunzip_md5(path)
            except ValueError as err:
                rejected.append(Rejected(path, gz_md5 or "?", got, size, str(err)))
                continue
            if inner != raw_md5:
                rejected.append(
                    Rejected(path, raw_md5, inner, size, f"md5 of its decompressed content (archive md5 {got})")
                )
                continue
            _copy_into(path, dest, gz=True)
            log.info("mnist: %s verifies (md5 of its decompressed content); decompressed to %s", path, dest)
            return dest, path, rejected
        got = md5_of(path)
        if raw_md5 is not None and got != raw_md5:
            rejected.append(Rejected(path, raw_md5, got, size))
            continue
        _copy_into(path, dest, gz=False)
        log.info("mnist: %s verifies (md5 %s); copied to %s", path, got, dest)
        return dest, path, rejected
    return None, None, rejected


def mnist_targets() -> list[str]:
    """The four decompressed file names, images and labels of train then test."""
    return [f for pair in MNIST_FILES.values() for f in pair]


def rejected_error(
    name: str, folder: Path, rejected: list[Rejected], missing: list[str], local: Path | None
) -> DataError:
    """The error for files that did not verify (left in place) and files not found."""
    lines = [f"data set {name!r}: the MNIST files could not all be verified."]
    if rejected:
        lines.append("These files do not verify and were left where they are (nothing was deleted):")
        lines += [f"  {r}" for r in rejected]
    if missing:
        lines.append(f"Not found in a form that verifies: {', '.join(missing)}.")
    lines.append(
        "What to do: replace each file above with an intact copy of the original MNIST file (decompressed "
        "train-images-idx3-ubyte etc., their dotted names train-images.idx3-ubyte, or torchvision's .gz), "
        f"or move it out of the way; then run again. Searched folders: {folder}/"
        + (f" and the config key data.local = {local}/ (with MNIST/raw/ and mnist/ below it)" if local else "")
        + ". The md5 sums of the decompressed files: "
        + ", ".join(f"{k} {v[0]}" for k, v in MNIST_RAW.items())
        + "."
    )
    return DataError("\n".join(lines))
