"""Text corpora for the causal language-model study, and their byte-level tokens.

A :class:`Corpus` is bytes with a name, the files it was assembled from and its sha256. Three
sources:

- :func:`embedded_corpus`: offline, the same bytes wherever the lock is installed: the
  documentation strings of the pinned torch (see :data:`EMBEDDED_FILES` for the choice), checked
  against :data:`EMBEDDED_SHA256`;
- :func:`local_corpus`: any UTF-8 text a user has, one file or a folder of ``.txt`` files;
- :func:`download_shakespeare`: Tiny Shakespeare over HTTP(S), verified by its published sha256,
  through the project's download code (:func:`.transfer.fetch_file`).

Tokens are bytes (:data:`VOCAB` = 256 symbols, no tokenizer to download): :func:`encode`, a fixed
contiguous train/validation :func:`split` and non-overlapping :func:`windows` of ``context`` tokens.
torch is imported only by the functions that return tensors.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import importlib.util
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import DataError
from ..util.tempfiles import remove_stale_temp_files
from . import transfer
from .transfer import DEFAULT_DEADLINE, DEFAULT_TIMEOUT

if TYPE_CHECKING:
    import torch

__all__ = [
    "VOCAB",
    "Corpus",
    "decode",
    "docstring_texts",
    "download_shakespeare",
    "embedded_corpus",
    "encode",
    "local_corpus",
    "split",
    "windows",
]  # and the constants of the corpora: EMBEDDED_*, SHAKESPEARE_*, MIN_CORPUS_BYTES

log = logging.getLogger("transformer_hessian.data")

#: Byte-level tokens: one symbol per byte value.
VOCAB = 256

#: The package whose documentation is the embedded corpus, and the version the lock pins.
EMBEDDED_PACKAGE = "torch"
EMBEDDED_VERSION = "2.14.1"

#: The files (relative to the installed ``torch`` package, sorted) whose documentation strings make
#: the embedded corpus: torch's reference documentation of tensors, the ``torch`` functions,
#: ``torch.nn`` (functional, init and every module that documents one), ``torch.linalg``,
#: ``torch.fft``, ``torch.special`` and the optimiser and scheduler base classes. Why these: they
#: are hand-written English prose (argument descriptions, notes, warnings, with reST markup and
#: short examples), about 1.4 MB of it, and they are the same bytes in every wheel of torch 2.14.1
#: (the RECORD hashes of the manylinux cp311 and cp312 wheels and of the macOS arm64 wheel agree on
#: every ``.py`` file but ``torch/version.py``, which holds the CUDA version and is not used).
#: Docstrings rather than the files as they are: the sources are mostly code, and a byte-level model
#: of them would learn Python syntax rather than English text.
EMBEDDED_FILES: tuple[str, ...] = (
    "_tensor_docs.py",
    "_torch_docs.py",
    "fft/__init__.py",
    "functional.py",
    "linalg/__init__.py",
    "nn/functional.py",
    "nn/init.py",
    "nn/modules/activation.py",
    "nn/modules/adaptive.py",
    "nn/modules/batchnorm.py",
    "nn/modules/channelshuffle.py",
    "nn/modules/container.py",
    "nn/modules/conv.py",
    "nn/modules/distance.py",
    "nn/modules/dropout.py",
    "nn/modules/flatten.py",
    "nn/modules/fold.py",
    "nn/modules/instancenorm.py",
    "nn/modules/lazy.py",
    "nn/modules/linear.py",
    "nn/modules/loss.py",
    "nn/modules/module.py",
    "nn/modules/normalization.py",
    "nn/modules/padding.py",
    "nn/modules/pixelshuffle.py",
    "nn/modules/pooling.py",
    "nn/modules/rnn.py",
    "nn/modules/sparse.py",
    "nn/modules/transformer.py",
    "nn/modules/upsampling.py",
    "optim/lr_scheduler.py",
    "optim/optimizer.py",
    "special/__init__.py",
)

#: A string literal that is not a docstring joins the corpus from this many characters on (after
#: :func:`_clean`): the texts given to ``add_docstr`` / ``_add_docstr`` and the shared paragraphs
#: they are built from, not short messages or format strings.
EMBEDDED_MIN_CHARS = 80

#: sha256 and size of the embedded corpus assembled from torch 2.14.1 (:func:`embedded_corpus`).
EMBEDDED_SHA256 = "a05b252f5df6cc33f0a38a373130af35e86e8857438e806132d68850df313d1b"
EMBEDDED_BYTES = 1393628

#: Tiny Shakespeare (Karpathy's char-rnn ``input.txt``). The sha256 and size are the published ones
#: of TensorFlow Datasets' checksum file for this url
#: (``tensorflow_datasets/url_checksums/tiny_shakespeare.txt`` in github.com/tensorflow/datasets).
SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
SHAKESPEARE_BYTES = 1115394
#: Its folder under the data root, and its file name there.
SHAKESPEARE_DIR = "tinyshakespeare"
SHAKESPEARE_FILE = "input.txt"

#: The smallest corpus :func:`local_corpus` accepts (bytes).
MIN_CORPUS_BYTES = 1024


@dataclass(frozen=True)
class Corpus:
    """A text corpus as bytes: ``name``, ``data``, the ``files`` it was assembled from (relative
    names, in order), ``sha256`` (of ``data``) and ``source`` (one line: where it came from)."""

    name: str
    data: bytes = field(repr=False)
    files: tuple[str, ...]
    sha256: str
    source: str

    @property
    def nbytes(self) -> int:
        """The corpus' size in bytes (its number of byte tokens)."""
        return len(self.data)

    def manifest(self) -> dict:
        """What a result or provenance records: ``{"name", "bytes", "sha256", "files", "source"}``."""
        return dict(name=self.name, bytes=self.nbytes, sha256=self.sha256, files=list(self.files), source=self.source)


def _corpus(name: str, data: bytes, files, source: str) -> Corpus:
    return Corpus(name, data, tuple(files), hashlib.sha256(data).hexdigest(), source)


# ----------------------------------------------------------------------------- the embedded corpus


def _clean(text: str) -> str:
    """A docstring's lines without their common indentation (the first line's own is dropped),
    trailing spaces and leading or trailing blank lines; tabs expanded to 8 columns."""
    lines = text.expandtabs(8).splitlines()
    if not lines:
        return ""
    indents = [len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()]
    cut = min(indents, default=0)
    lines = [lines[0].strip()] + [line[cut:].rstrip() for line in lines[1:]]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def docstring_texts(source: bytes | str, min_chars: int = EMBEDDED_MIN_CHARS) -> list[str]:
    """The documentation text of one Python source, in source order: every docstring (of the
    module, a class or a function) and every other string literal of at least ``min_chars``
    characters, each cleaned by :func:`_clean`. A string split by an f-string's fields counts as its
    literal parts."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    out = []
    stack = [tree]
    while stack:  # pre-order, children in field order: the order of the source
        node = stack.pop()
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = _clean(node.value)
            if text and (id(node) in docstrings or len(text) >= min_chars):
                out.append(text)
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
    return out


def _package_root(package: str) -> Path:
    """The folder of installed ``package``, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"the embedded corpus needs the package {package!r}, which is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _assemble(root: Path, files) -> bytes:
    """The docstring texts of ``files`` under ``root``, in order, joined by blank lines."""
    texts = []
    for rel in files:
        path = root / rel
        try:
            source = path.read_bytes()
        except OSError as err:
            raise DataError(f"the embedded corpus: cannot read {path} ({err.strerror or err})") from None
        texts += docstring_texts(source)
    return ("\n\n".join(texts) + "\n").encode("utf-8")


@functools.cache
def embedded_corpus() -> Corpus:
    """The embedded corpus: the docstrings of :data:`EMBEDDED_FILES` of the installed torch, by
    :func:`docstring_texts`, joined by blank lines (about 1.4 MB of English documentation, the
    same bytes wherever the lock is installed; needs no network). Its sha256 must be
    :data:`EMBEDDED_SHA256`: any other corpus (another torch, a changed file) is refused with a
    :class:`DataError` naming both hashes and the torch version. Computed once per process."""
    try:
        version = importlib.metadata.version(EMBEDDED_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = "not installed"
    data = _assemble(_package_root(EMBEDDED_PACKAGE), EMBEDDED_FILES)
    corpus = _corpus(
        "torch-docs",
        data,
        EMBEDDED_FILES,
        f"embedded: docstrings of {len(EMBEDDED_FILES)} files of {EMBEDDED_PACKAGE} {version}",
    )
    if corpus.sha256 != EMBEDDED_SHA256:
        raise DataError(
            f"the embedded corpus (docstrings of {len(EMBEDDED_FILES)} files of the installed {EMBEDDED_PACKAGE} "
            f"{version}) has sha256 {corpus.sha256} ({corpus.nbytes:,} bytes), expected {EMBEDDED_SHA256} "
            f"({EMBEDDED_BYTES:,} bytes, {EMBEDDED_PACKAGE} {EMBEDDED_VERSION}); install the pinned lock "
            "(make setup) or use a local corpus"
        )
    return corpus


# ----------------------------------------------------------------------------- local text


def _check_utf8(data: bytes, path: Path) -> None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        bad = data[err.start : err.start + 1].hex()
        raise DataError(
            f"{path} is not UTF-8 text: byte 0x{bad} at byte offset {err.start} ({err.reason}); save it as UTF-8"
        ) from None


def _text_files(folder: Path) -> list[Path]:
    """The ``.txt`` files under ``folder`` (any depth; nothing under a hidden name), in the order
    of their relative paths."""
    found = []
    for path in folder.rglob("*.txt"):
        rel = path.relative_to(folder)
        if path.is_file() and not any(part.startswith(".") for part in rel.parts):
            found.append((rel.as_posix(), path))
    return [p for _, p in sorted(found)]


def local_corpus(path: str | Path, *, min_bytes: int = MIN_CORPUS_BYTES) -> Corpus:
    """A corpus from a text file (any name) or a folder of ``.txt`` files (searched at every depth,
    hidden files and folders skipped, in the order of their relative paths). Each file must be
    UTF-8 (:class:`DataError` naming the file and the byte offset otherwise). The files' bytes are
    concatenated, with a newline between two files where the first does not end with one (so one
    file's bytes, and its sha256, are kept as they are). A corpus under ``min_bytes`` bytes is refused."""
    root = Path(path).expanduser()
    if root.is_file():
        paths, names = [root], [root.name]
    elif root.is_dir():
        paths = _text_files(root)
        names = [p.relative_to(root).as_posix() for p in paths]
        if not paths:
            raise DataError(
                f"local corpus: the folder {root} holds no .txt file (hidden files and folders are skipped)"
            )
    else:
        raise DataError(f"local corpus: {root} is neither a file nor a folder of .txt files")
    parts = []
    for p in paths:
        try:
            data = p.read_bytes()
        except OSError as err:
            raise DataError(f"local corpus: cannot read {p} ({err.strerror or err})") from None
        _check_utf8(data, p)
        if parts and parts[-1] and not parts[-1].endswith(b"\n"):
            parts.append(b"\n")
        parts.append(data)
    data = b"".join(parts)
    if len(data) < min_bytes:
        raise DataError(
            f"local corpus {root}: {len(data):,} bytes in {len(paths)} file(s), too short: a language model needs at "
            f"least {min_bytes:,} bytes of text to train and validate on"
        )
    return _corpus(root.stem if root.is_file() else root.name, data, names, f"local: {root.resolve()}")


# ----------------------------------------------------------------------------- Tiny Shakespeare


def download_shakespeare(
    root: str | Path,
    url: str = SHAKESPEARE_URL,
    sha256: str = SHAKESPEARE_SHA256,
    timeout: float = DEFAULT_TIMEOUT,
    deadline: float = DEFAULT_DEADLINE,
) -> Corpus:
    """Tiny Shakespeare as a corpus, from ``root/tinyshakespeare/input.txt``: downloaded from ``url``
    when it is not there (:func:`.transfer.fetch_file`: a temporary file, verified against
    ``sha256``, renamed into place; nothing is kept on a failure). A file in place with another
    sha256 is reported and left where it is. Raises :class:`DataError` naming the url, the hashes
    and where to put the file by hand."""
    sha256 = str(sha256).lower()
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise DataError(f"Tiny Shakespeare: {sha256!r} is not a sha256 (64 hex digits)")
    folder = Path(root).expanduser().resolve() / SHAKESPEARE_DIR
    dest = folder / SHAKESPEARE_FILE
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataError(f"Tiny Shakespeare: cannot create the folder {folder}: {err}") from err
    remove_stale_temp_files(folder)
    if not dest.exists():
        log.info("Tiny Shakespeare: downloading %s -> %s", url, dest)
        size = SHAKESPEARE_BYTES if sha256 == SHAKESPEARE_SHA256 else None
        try:
            transfer.fetch_file(url, dest, None, timeout, deadline, sha256=sha256, size=size)
        except transfer.FetchError as err:
            raise DataError(
                f"could not download Tiny Shakespeare from {url}: {err}; place the file with sha256 {sha256} at "
                f"{dest} by hand, or use a local corpus"
            ) from None
    data = dest.read_bytes()
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise DataError(
            f"Tiny Shakespeare: {dest} ({len(data):,} bytes) has sha256 {got}, expected {sha256}; it was left in "
            "place. Replace it with an intact copy, or move it out of the way so that it is downloaded again"
        )
    _check_utf8(data, dest)
    return Corpus("tinyshakespeare", data, (SHAKESPEARE_FILE,), got, f"downloaded: {url}")


# ----------------------------------------------------------------------------- byte tokens


def encode(corpus: Corpus | bytes) -> torch.Tensor:
    """The corpus' bytes as a 1-D ``torch.long`` tensor of token ids in ``0..255``."""
    import torch

    data = corpus.data if isinstance(corpus, Corpus) else bytes(corpus)
    if not data:
        return torch.zeros(0, dtype=torch.long)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def decode(tokens) -> bytes:
    """The bytes of byte tokens (any integer tensor or sequence with values in ``0..255``)."""
    return bytes(int(t) for t in (tokens.reshape(-1).tolist() if hasattr(tokens, "reshape") else tokens))


def split(tokens: torch.Tensor, val_fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed, contiguous split of 1-D ``tokens``: (train, validation) = (the first
    ``n - floor(n val_fraction)`` tokens, the rest). No randomness: the same corpus gives the same
    split everywhere."""
    if not 0.0 < float(val_fraction) < 1.0 or tokens.dim() != 1:
        raise ValueError(f"split: 1-D tokens and 0 < val_fraction < 1, got {tuple(tokens.shape)} and {val_fraction!r}")
    n = tokens.numel()
    n_val = int(n * float(val_fraction))
    if n_val < 1 or n_val >= n:
        raise DataError(f"{n} tokens are too few to split with val_fraction={val_fraction}")
    return tokens[: n - n_val], tokens[n - n_val :]


def windows(tokens: torch.Tensor, context: int, n: int | None = None) -> torch.Tensor:
    """Non-overlapping sequences of ``context`` tokens, in order: row i is
    ``tokens[i context : (i + 1) context]``; the first ``n`` of them (all when None), shape
    ``(N, context)``. The tokens after the last whole window are not used."""
    if tokens.dim() != 1 or int(context) < 1:
        raise ValueError(f"windows: 1-D tokens and a positive context, got {tuple(tokens.shape)} and {context!r}")
    context = int(context)
    have = tokens.numel() // context
    n = have if n is None else int(n)
    if not 1 <= n <= have:
        raise DataError(f"{tokens.numel():,} tokens hold {have:,} windows of {context} tokens; {n} were asked for")
    return tokens[: n * context].reshape(n, context)
