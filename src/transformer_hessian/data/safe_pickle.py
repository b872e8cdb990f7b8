"""Reading CIFAR-100's pickle files without running code: md5 first, then a restricted unpickler.

A pickle can name any importable callable, so an unchecked ``pickle.load`` of a file in the data
folder runs whatever that file asks for. :func:`load_verified_pickle` refuses a file whose md5 is
not the one torchvision's table gives for it, and even then unpickles with
:class:`RestrictedUnpickler`, which resolves only the globals a CIFAR batch holds (numpy's array
reconstruction, ``_codecs.encode``; dicts, lists, strings, bytes and numbers need no global at all).
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

from .sources import DataError

#: The only globals a CIFAR-100 pickle (a dict of lists, strings and one uint8 numpy array) names.
ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("copy_reg", "_reconstructor"),
    ("copyreg", "_reconstructor"),
    ("__builtin__", "object"),
    ("builtins", "object"),
    ("_codecs", "encode"),  # bytes pickled by Python 3 with protocol 2 (no side effects)
}


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only :data:`ALLOWED_GLOBALS`; any other global is refused."""

    def find_class(self, module: str, name: str):
        """Resolve ``module.name`` only if it is in :data:`ALLOWED_GLOBALS`."""
        if (module, name) not in ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a data file")
        if module in ("copy_reg", "__builtin__"):  # Python 2 names
            module = {"copy_reg": "copyreg", "__builtin__": "builtins"}[module]
        return super().find_class(module, name)


def md5_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """MD5 hex digest of the bytes of ``path``."""
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def load_verified_pickle(path: str | Path, md5: str, dataset: str, fix: str):
    """Unpickle ``path`` (latin-1 strings) if its md5 is ``md5``; :class:`DataError` naming the file otherwise.

    ``fix`` is what the user should do (e.g. "delete the folder and download again").
    """
    path = Path(path)
    try:
        got = md5_file(path)
    except OSError as err:
        raise DataError(f"data set {dataset!r}: {path} cannot be read ({err.strerror}); {fix}") from None
    if got != md5.lower():
        raise DataError(
            f"data set {dataset!r}: {path} does not match its md5 (expected {md5}, got {got}); it was not "
            f"unpickled (a pickle can run code); {fix}"
        )
    try:
        with open(path, "rb") as fh:
            return RestrictedUnpickler(fh, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, OSError, ValueError, TypeError, AttributeError, IndexError) as err:
        raise DataError(
            f"data set {dataset!r}: {path} is not a readable CIFAR pickle ({type(err).__name__}: {err}); {fix}"
        ) from None
