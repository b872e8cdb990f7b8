"""A strict reader of the IDX files of MNIST (images ``idx3-ubyte``, labels ``idx1-ubyte``).

Every check names the file: the magic number (0x00000803 for images: unsigned bytes, three
dimensions; 0x00000801 for labels: unsigned bytes, one dimension), the image size (28 x 28 for
MNIST), the file size against the counts of the header (a truncated or padded file is refused),
the labels' range (0..num_classes - 1) and images that are all one value (all-zero pixels).
Anything else raises :class:`.sources.DataError`; the reader never returns garbage.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from .sources import DataError

__all__ = ["IMAGES_MAGIC", "LABELS_MAGIC", "read_idx_images", "read_idx_labels", "check_pair"]

#: Magic number of an IDX file of unsigned bytes with three dimensions (images).
IMAGES_MAGIC = 0x00000803
#: Magic number of an IDX file of unsigned bytes with one dimension (labels).
LABELS_MAGIC = 0x00000801

_TYPES = {0x08: "unsigned byte", 0x09: "signed byte", 0x0B: "short", 0x0C: "int", 0x0D: "float", 0x0E: "double"}


def _header(path: Path, ndim: int, what: str) -> tuple[tuple[int, ...], int]:
    """``(dims, file size)`` of an IDX file of unsigned bytes with ``ndim`` dimensions."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            head = fh.read(4 + 4 * ndim)
    except OSError as err:
        raise DataError(f"{path}: cannot read the {what} file ({err})") from err
    if len(head) < 4:
        raise DataError(f"{path}: {size} bytes, too short for an IDX header ({what} file)")
    zero, dtype, got_ndim = struct.unpack(">HBB", head[:4])
    magic = struct.unpack(">I", head[:4])[0]
    expected = 0x0800 + ndim
    if zero != 0 or dtype != 0x08 or got_ndim != ndim:
        kind = _TYPES.get(dtype, f"unknown type 0x{dtype:02x}")
        raise DataError(
            f"{path}: IDX magic number 0x{magic:08x} ({kind}, {got_ndim} dimension(s)), expected "
            f"0x{expected:08x} (unsigned byte, {ndim} dimension(s)) for an MNIST {what} file"
        )
    if len(head) < 4 + 4 * ndim:
        raise DataError(f"{path}: {size} bytes, too short for the IDX header of {ndim} dimension(s) ({what} file)")
    dims = struct.unpack(f">{ndim}I", head[4:])
    return dims, size


def _payload(path: Path, offset: int, count: int) -> np.ndarray:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            out = np.fromfile(fh, dtype=np.uint8, count=count)
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err})") from err
    if out.size != count:  # the file changed under us
        raise DataError(f"{path}: expected {count} data bytes, read {out.size}")
    return out


def read_idx_images(path: str | Path, shape: tuple[int, int] = (28, 28)) -> np.ndarray:
    """The images of an IDX image file as a ``(n, h, w)`` uint8 array, ``(h, w) == shape``.

    Raises :class:`DataError` naming ``path`` on a wrong magic number, image size, a file size
    that disagrees with the header's counts, no images, or images that are all one value.
    """
    path = Path(path)
    (n, h, w), size = _header(path, 3, "images")
    if (h, w) != tuple(shape):
        raise DataError(f"{path}: images of {h}x{w} pixels, expected {shape[0]}x{shape[1]} (MNIST)")
    want = 16 + n * h * w
    if size != want:
        raise DataError(
            f"{path}: {size} bytes, but the header promises {n} images of {h}x{w} = {want} bytes "
            f"({'truncated' if size < want else 'trailing bytes'}); replace the file with a complete copy"
        )
    if n == 0:
        raise DataError(f"{path}: holds no images")
    x = _payload(path, 16, n * h * w).reshape(n, h, w)
    if int(x.min()) == int(x.max()):
        raise DataError(f"{path}: every pixel of all {n} images is {int(x.min())}; not image data")
    return x


def read_idx_labels(path: str | Path, num_classes: int = 10) -> np.ndarray:
    """The labels of an IDX label file as an int64 array with values in ``0..num_classes - 1``.

    Raises :class:`DataError` naming ``path`` on a wrong magic number, a file size that
    disagrees with the header's count, no labels, or a label out of range.
    """
    path = Path(path)
    (n,), size = _header(path, 1, "labels")
    want = 8 + n
    if size != want:
        raise DataError(
            f"{path}: {size} bytes, but the header promises {n} labels = {want} bytes "
            f"({'truncated' if size < want else 'trailing bytes'}); replace the file with a complete copy"
        )
    if n == 0:
        raise DataError(f"{path}: holds no labels")
    y = _payload(path, 8, n)
    if int(y.max()) >= num_classes:
        bad = int(np.count_nonzero(y >= num_classes))
        raise DataError(
            f"{path}: {bad} of {n} labels lie outside 0..{num_classes - 1} (largest {int(y.max())}); not MNIST labels"
        )
    return y.astype(np.int64)


def check_pair(images: str | Path, labels: str | Path, x: np.ndarray, y: np.ndarray) -> None:
    """:class:`DataError` naming both files unless there is one label per image."""
    if len(x) != len(y):
        raise DataError(f"{images} holds {len(x)} images but {labels} holds {len(y)} labels; they must be equal")
