"""Data sets of the pipeline: download with checksum verification, and loading.

Three data sets are known (:data:`DATASETS`):

``digits``
    scikit-learn's bundled 8x8 handwritten digits (``sklearn.datasets.load_digits``). It ships
    with scikit-learn, so it needs no download: the offline default of the pipeline.
``mnist``
    28x28 grey digits. The raw files and their md5 sums come from torchvision's own table
    (``torchvision.datasets.MNIST.mirrors`` / ``.resources``); they are kept gzipped under
    ``<root>/mnist/`` and decompressed next to themselves on first use.
``cifar100``
    32x32 colour images in 100 classes. The archive, its url and md5 come from
    ``torchvision.datasets.CIFAR100`` (``url``, ``filename``, ``tgz_md5``); it is kept under
    ``<root>/cifar100/`` and extracted to ``<root>/cifar100/cifar-100-python/{train,test,meta}``.

:func:`download` owns the control flow (torchvision's ``download_url`` writes straight to the
final path, has no timeout and no clear error), but uses torchvision's resource tables and its
``check_integrity`` / ``calculate_md5`` / ``extract_archive`` helpers. Every file is fetched into
a temporary file in its final folder, verified against its md5 and only then renamed into place
(``os.replace``), so no partial or corrupted file is ever left where a later run would trust it.
Any failure (offline, unreachable host, HTTP error, checksum mismatch, unreadable file) is raised
as one :class:`DataError` whose message names the data set, the url(s) tried and the exact folder
and file names to place by hand.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import logging
import os
import pickle
import re
import shutil
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchvision.datasets import CIFAR100, MNIST
from torchvision.datasets.mnist import read_image_file, read_label_file
from torchvision.datasets.utils import USER_AGENT, calculate_md5, check_integrity, extract_archive

from .utils import atomic_path, remove_stale_temp_files, write_json

__all__ = ["DATASETS", "DataError", "download", "write_manifest", "load_dataset"]

log = logging.getLogger(__name__)

#: Names accepted by :func:`download` and :func:`load_dataset`.
DATASETS = ("digits", "mnist", "cifar100")

#: Seconds a socket may wait (connect, or each read) before a download attempt is given up.
DEFAULT_TIMEOUT = 30.0

#: Seconds one file may take in all (a server that trickles bytes never trips the per-read
#: timeout); config key ``data.deadline``.
DEFAULT_DEADLINE = 3600.0

#: Base urls tried in order for each downloadable data set (torchvision's own tables).
#: A ``mirror`` passed to :func:`download` replaces this list.
MIRRORS: dict[str, list[str]] = {
    "mnist": list(MNIST.mirrors),
    "cifar100": [CIFAR100.url.rsplit("/", 1)[0] + "/"],
}

#: ``(file name, md5)`` of the raw files of each downloadable data set (torchvision's tables).
RESOURCES: dict[str, list[tuple[str, str]]] = {
    "mnist": [(str(f), str(m)) for f, m in MNIST.resources],
    "cifar100": [(CIFAR100.filename, CIFAR100.tgz_md5)],
}

# Decompressed MNIST files: split -> (images, labels).
_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_CIFAR_DIR = CIFAR100.base_folder  # "cifar-100-python"
# Extracted CIFAR-100 files with torchvision's md5 of the real data.
_CIFAR_MEMBERS = [(str(f), str(m)) for f, m in CIFAR100.train_list + CIFAR100.test_list] + [
    (CIFAR100.meta["filename"], CIFAR100.meta["md5"])
]

_NUM_CLASSES = {"digits": 10, "mnist": 10, "cifar100": 100}
_MD5_RE = re.compile(r"^[0-9a-fA-F]{32}$")
_NETWORK_ERRORS = (urllib.error.URLError, OSError, http.client.HTTPException, ValueError)


class DataError(RuntimeError):
    """A data set cannot be downloaded, verified or read; the message says what to do."""


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _check_name(name: str) -> str:
    if name not in DATASETS:
        raise DataError(f"unknown data set {name!r}; choose one of {', '.join(DATASETS)}")
    return name


def _file_entry(path: Path, name: str | None = None, md5: str | None = None) -> dict[str, Any]:
    return {
        "name": name or path.name,
        "md5": md5 or calculate_md5(path),
        "bytes": path.stat().st_size,
    }


def _join(base: str, filename: str) -> str:
    return base.rstrip("/") + "/" + filename


def _resolve_resources(name: str, mirror: str | None, resources: list | None) -> list[tuple[str, str, list[str]]]:
    """Return ``(filename, md5, candidate urls)`` for each raw file of ``name``."""
    bases = [mirror] if mirror else list(MIRRORS[name])
    table = RESOURCES[name] if resources is None else resources
    out = []
    for item in table:
        try:
            ref, md5 = item
        except (TypeError, ValueError):
            raise DataError(
                f"data set {name!r}: each resource must be a (url-or-filename, md5) pair, got {item!r}"
            ) from None
        if not isinstance(md5, str) or not _MD5_RE.match(md5):
            raise DataError(f"data set {name!r}: resource {ref!r} needs a 32-hex-digit md5, got {md5!r}")
        ref = str(ref)
        if "://" in ref:
            filename = Path(urllib.parse.urlparse(ref).path).name
            urls = [ref]
        else:
            filename, urls = ref, [_join(b, ref) for b in bases]
        if not filename or filename in (".", "..") or "/" in filename or "\\" in filename:
            raise DataError(f"data set {name!r}: resource {ref!r} does not name a plain file")
        out.append((filename, md5.lower(), urls))
    return out


def _hand_placement(name: str, folder: Path, files: list[tuple[str, str, list[str]]]) -> str:
    lines = [f"To install {name!r} by hand, place these files (md5 in brackets) in the folder", f"  {folder}/"]
    lines += [f"    {filename}  [md5 {md5}]" for filename, md5, _ in files]
    if name == "cifar100":
        lines.append(
            f"  (or the already extracted folder {folder / _CIFAR_DIR}/ with the files "
            f"{', '.join(m for m, _ in _CIFAR_MEMBERS)})"
        )
    lines.append(
        "(config key data.root sets the data root), or set the config key data.mirror to the base url of a "
        "mirror that serves them; the offline data set 'digits' needs no download."
    )
    return "\n".join(lines)


def _fetch(url: str, dest: Path, md5: str, timeout: float, deadline: float = DEFAULT_DEADLINE) -> None:
    """Download ``url`` into a temp file next to ``dest``, verify ``md5``, then rename into place.

    Each socket wait is limited by ``timeout`` and the whole transfer by ``deadline`` seconds
    (checked after every read, so it is overrun by at most ``timeout``). Raises ``_FetchError``
    (any network problem, the deadline, or a checksum mismatch); nothing is left behind.
    """
    t_end = time.monotonic() + deadline
    try:
        with atomic_path(dest, suffix=".part") as tmp:
            request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
            with urllib.request.urlopen(request, timeout=min(timeout, deadline)) as response, open(tmp, "wb") as fh:
                received = 0
                while True:
                    if time.monotonic() > t_end:
                        raise _FetchError(
                            f"not complete after the deadline of {deadline:g} s ({received} bytes received; "
                            "config key data.deadline)"
                        )
                    # read1: returns what one socket read gives (a plain read(n) would wait for n bytes)
                    chunk = response.read1(1 << 20)
                    if not chunk:
                        break
                    fh.write(chunk)
                    received += len(chunk)
                if response.length:  # Content-Length promised more than arrived
                    raise _FetchError(f"connection closed after {received} bytes, {response.length} bytes short")
            if not check_integrity(tmp, md5):
                got = calculate_md5(tmp)
                raise _FetchError(
                    f"checksum mismatch: expected md5 {md5}, got {got} ({tmp.stat().st_size} bytes); file rejected"
                )
    except _NETWORK_ERRORS as err:
        raise _FetchError(f"{type(err).__name__}: {err}") from err


class _FetchError(Exception):
    pass


def _cifar_extracted_ok(folder: Path) -> bool:
    return all(check_integrity(folder / _CIFAR_DIR / f, m) for f, m in _CIFAR_MEMBERS)


# --------------------------------------------------------------------------------------------
# download
# --------------------------------------------------------------------------------------------


def download(
    name: str,
    root: str | Path,
    mirror: str | None = None,
    resources: list | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    deadline: float = DEFAULT_DEADLINE,
) -> dict:
    """Make sure the raw files of data set ``name`` are present and verified under ``root/<name>/``.

    Files already in place whose md5 matches are not downloaded again; a file in place whose md5
    does not match is removed and fetched anew. Each missing file is tried from each candidate url
    in turn (``mirror`` if given, else torchvision's mirrors); a download goes to a temporary
    file in the same folder, is verified and only then renamed into place.

    Parameters
    ----------
    name : one of :data:`DATASETS`.
    root : data root; the files live in ``root/<name>/``.
    mirror : base url that replaces the default mirrors (the file names are appended to it).
    resources : overrides the ``(url-or-filename, md5)`` table; a full url is used as is, a bare
        file name is appended to each mirror.
    timeout : seconds a socket may wait before an attempt is given up.
    deadline : seconds one file may take in all (config key ``data.deadline``).

    Returns:
    -------
    dict ``{"dataset", "files": [{"name", "md5", "bytes"}], "source"}``; ``source`` is the
    primary url (or mirror base) of the data, or ``"sklearn"`` for ``digits``.

    Raises:
    ------
    DataError naming the data set, the url(s) tried and where to place the files by hand.
    """
    _check_name(name)
    if mirror:
        parsed = urllib.parse.urlparse(mirror)
        if parsed.scheme not in ("http", "https") or not parsed.netloc or any(c.isspace() for c in mirror):
            raise DataError(f"data.mirror: {mirror!r} is not an http(s) url (e.g. https://example.org/mnist/)")
    if not (isinstance(deadline, (int, float)) and deadline > 0 and timeout > 0):
        raise DataError(f"data.deadline must be a positive number of seconds, got {deadline!r}")
    if name == "digits":
        return _digits_manifest()

    folder = Path(root).expanduser().resolve() / name
    files = _resolve_resources(name, mirror, resources)
    if not files:
        raise DataError(f"data set {name!r}: the resource list is empty")
    primary = [urls[0] for _, _, urls in files]
    bases = {u.rsplit("/", 1)[0] + "/" for u in primary}
    source = primary[0] if len(primary) == 1 else (bases.pop() if len(bases) == 1 else " ".join(primary))

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataError(f"data set {name!r}: cannot create the data folder {folder}: {err}") from err

    # Temp files (.<file>.<host>.<pid>.*.part, .extract-*) of a killed run on this host.
    remove_stale_temp_files(folder)
    _remove_stale_extract_dirs(folder)

    # A cluster copy of CIFAR-100 may hold only the extracted files (torchvision's layout).
    if name == "cifar100" and resources is None and not (folder / CIFAR100.filename).exists():
        if _cifar_extracted_ok(folder):
            log.info("cifar100: extracted files in %s verify; nothing to download", folder / _CIFAR_DIR)
            entries = [_file_entry(folder / _CIFAR_DIR / f, name=f"{_CIFAR_DIR}/{f}", md5=m) for f, m in _CIFAR_MEMBERS]
            return {"dataset": name, "files": entries, "source": source}

    entries = []
    for filename, md5, urls in files:
        dest = folder / filename
        if dest.exists():
            if check_integrity(dest, md5):
                log.info("%s: %s is in place and verifies", name, dest)
                entries.append(_file_entry(dest, md5=md5))
                continue
            log.warning("%s: %s does not match md5 %s; removing it and downloading again", name, dest, md5)
            try:
                dest.unlink()
            except OSError as err:
                raise DataError(
                    f"data set {name!r}: {dest} does not match md5 {md5} and cannot be removed ({err}); "
                    "remove it by hand and run again"
                ) from err
        errors = []
        for url in urls:
            log.info("%s: downloading %s -> %s", name, url, dest)
            try:
                _fetch(url, dest, md5, timeout, deadline)
            except _FetchError as err:
                log.warning("%s: %s failed: %s", name, url, err)
                errors.append((url, str(err)))
                continue
            break
        else:
            tried = "\n".join(f"  {url}\n    -> {msg}" for url, msg in errors)
            raise DataError(
                f"could not download data set {name!r}: file {filename!r} could not be fetched and verified.\n"
                f"Tried:\n{tried}\n" + _hand_placement(name, folder, files)
            )
        entries.append(_file_entry(dest, md5=md5))

    _prepare(name, folder)
    return {"dataset": name, "files": entries, "source": source}


def _digits_manifest() -> dict:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    entries = []
    for key, dtype in (("data", np.float64), ("target", np.int64)):
        raw = np.ascontiguousarray(getattr(bunch, key), dtype=dtype).tobytes()
        entries.append(
            {
                "name": f"load_digits.{key}",
                "md5": hashlib.md5(raw, usedforsecurity=False).hexdigest(),
                "bytes": len(raw),
            }
        )
    return {"dataset": "digits", "files": entries, "source": "sklearn"}


def write_manifest(manifest: dict, path: str | Path) -> None:
    """Write ``manifest`` as JSON to ``path`` atomically (temp file in the same folder, then rename)."""
    write_json(manifest, path)


# --------------------------------------------------------------------------------------------
# preparation (decompression / extraction of verified raw files; no network)
# --------------------------------------------------------------------------------------------


def _prepare(name: str, folder: Path) -> None:
    """Decompress / extract the raw files in ``folder`` into the layout that is read, atomically."""
    if name == "mnist":
        for images, labels in _MNIST_FILES.values():
            for target in (images, labels):
                archive = folder / f"{target}.gz"
                if not (folder / target).exists() and archive.exists():
                    _extract_atomic(name, archive, folder, target)
    elif name == "cifar100":
        archive = folder / CIFAR100.filename
        if not (folder / _CIFAR_DIR).exists() and archive.exists():
            _check_tar_members(name, archive)
            _extract_atomic(name, archive, folder, _CIFAR_DIR)


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
        unsafe = not parts or parts[0] != _CIFAR_DIR or ".." in parts or m.name.startswith("/")
        if unsafe or not (m.isfile() or m.isdir()):
            raise DataError(
                f"data set {name!r}: {archive} holds an unexpected member {m.name!r}; "
                f"expected only files under {_CIFAR_DIR}/. Delete it and download again."
            )


def _extract_prefix() -> str:
    from .tempfiles import _host_tag

    return f".extract-{_host_tag()}-{os.getpid()}-"


def _remove_stale_extract_dirs(folder: Path) -> None:
    """Remove ``.extract-<host>-<pid>-*`` folders of dead processes on this host (killed extractions)."""
    from .tempfiles import _host_tag, _pid_alive

    prefix = f".extract-{_host_tag()}-"
    for d in folder.glob(".extract-*"):
        rest = d.name[len(prefix) :] if d.name.startswith(prefix) else ""
        pid = rest.split("-", 1)[0]
        if d.is_dir() and pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)
            log.info("removed %s, left by an interrupted extraction", d)


def _extract_atomic(name: str, archive: Path, folder: Path, target: str) -> None:
    """Extract ``archive`` into a temp folder inside ``folder``; rename its ``target`` into place."""
    tmp = Path(tempfile.mkdtemp(dir=folder, prefix=_extract_prefix()))
    try:
        try:
            extract_archive(os.fspath(archive), os.fspath(tmp))
        except (OSError, EOFError, tarfile.TarError, gzip.BadGzipFile, RuntimeError) as err:
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


# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------


def load_dataset(
    name: str,
    root: str | Path,
    val_fraction: float = 0.2,
    seed: int = 0,
    max_train: int | None = None,
    max_val: int | None = None,
) -> dict:
    """Load data set ``name`` from ``root`` (never downloads) as normalised float32 tensors.

    ``digits`` is split into train/val by a seeded stratified split with ``val_fraction``;
    ``mnist`` and ``cifar100`` use their official train/test split (test as val, so
    ``val_fraction`` is not used). ``max_train`` / ``max_val`` keep seeded random subsets.
    Pixels are scaled to [0, 1] and then normalised per channel with the mean and standard
    deviation of the returned training images.

    Returns a dict with ``train_x`` (N, C, H, W float32), ``train_y`` (N int64), ``val_x``,
    ``val_y``, ``num_classes``, ``image_size``, ``channels``, and ``dataset``, ``mean``, ``std``
    (the per-channel statistics used).
    """
    _check_name(name)
    for key, value in (("max_train", max_train), ("max_val", max_val)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise DataError(f"{key} must be a positive integer or None, got {value!r}")

    if name == "digits":
        if not (isinstance(val_fraction, (int, float)) and 0.0 < val_fraction < 1.0):
            raise DataError(f"val_fraction must lie strictly between 0 and 1, got {val_fraction!r}")
        tx, ty, vx, vy, scale = _load_digits(val_fraction, seed)
    else:
        folder = Path(root).expanduser().resolve() / name
        reader = _load_mnist if name == "mnist" else _load_cifar100
        tx, ty, vx, vy, scale = reader(folder)

    # Subsets first (on the raw pixels, to keep memory low), then scale to [0, 1].
    tx, ty = _subset(tx, ty, max_train, seed, 0)
    vx, vy = _subset(vx, vy, max_val, seed, 1)
    tx = tx.astype(np.float32) / np.float32(scale)
    vx = vx.astype(np.float32) / np.float32(scale)

    num_classes = _NUM_CLASSES[name]
    for split, y in (("train", ty), ("val", vy)):
        if y.size and (y.min() < 0 or y.max() >= num_classes):
            raise DataError(f"data set {name!r}: {split} labels lie outside 0..{num_classes - 1}")

    train_x = torch.from_numpy(np.ascontiguousarray(tx, dtype=np.float32))
    val_x = torch.from_numpy(np.ascontiguousarray(vx, dtype=np.float32))
    # Per-channel statistics of the training images, accumulated in float64.
    mean = train_x.double().mean(dim=(0, 2, 3))
    std = train_x.double().std(dim=(0, 2, 3), correction=0).clamp_min(1e-8)
    m32, s32 = mean.float().view(1, -1, 1, 1), std.float().view(1, -1, 1, 1)
    train_x = (train_x - m32) / s32
    val_x = (val_x - m32) / s32

    return {
        "dataset": name,
        "train_x": train_x,
        "train_y": torch.from_numpy(np.ascontiguousarray(ty, dtype=np.int64)),
        "val_x": val_x,
        "val_y": torch.from_numpy(np.ascontiguousarray(vy, dtype=np.int64)),
        "num_classes": num_classes,
        "image_size": int(train_x.shape[-1]),
        "channels": int(train_x.shape[1]),
        "mean": mean.tolist(),
        "std": std.tolist(),
    }


def _subset(x: np.ndarray, y: np.ndarray, limit: int | None, seed: int, stream: int):
    if limit is None or limit >= len(y):
        return x, y
    rng = np.random.default_rng([seed, stream])
    idx = np.sort(rng.choice(len(y), size=limit, replace=False))
    return x[idx], y[idx]


def _load_digits(val_fraction: float, seed: int):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x = np.asarray(bunch.data, dtype=np.float64).reshape(-1, 1, 8, 8)  # pixels 0..16
    y = np.asarray(bunch.target, dtype=np.int64)
    try:
        tx, vx, ty, vy = train_test_split(x, y, test_size=val_fraction, random_state=seed, stratify=y)
    except ValueError as err:
        raise DataError(
            f"data set 'digits': cannot split with val_fraction={val_fraction!r}, seed={seed!r}: {err}"
        ) from err
    return tx, ty, vx, vy, 16.0


def _missing_error(name: str, folder: Path, missing: list[str], wanted: list[str]) -> DataError:
    return DataError(
        f"data set {name!r} is not in place under {folder}/: missing {', '.join(missing)}.\n"
        f"Run the download step first (download({name!r}, root)), or place these files by hand in\n"
        f"  {folder}/\n" + "".join(f"    {w}\n" for w in wanted)
    )


def _load_mnist(folder: Path):
    wanted = [f"{f}.gz" for pair in _MNIST_FILES.values() for f in pair]
    missing = [
        f"{f}.gz"
        for pair in _MNIST_FILES.values()
        for f in pair
        if not (folder / f).exists() and not (folder / f"{f}.gz").exists()
    ]
    if missing:
        raise _missing_error("mnist", folder, missing, wanted)
    _prepare("mnist", folder)
    out = []
    for images, labels in _MNIST_FILES.values():
        try:
            x = read_image_file(os.fspath(folder / images)).numpy()
            y = read_label_file(os.fspath(folder / labels)).numpy()
        except (AssertionError, ValueError, TypeError, RuntimeError, OSError, KeyError) as err:
            raise DataError(
                f"data set 'mnist': {folder / images} or {folder / labels} is not a valid idx file "
                f"({type(err).__name__}: {err}); delete the files in {folder} and download again"
            ) from err
        if x.ndim != 3 or len(x) != len(y):
            raise DataError(
                f"data set 'mnist': {images} holds {tuple(x.shape)} images but {labels} holds {len(y)} labels"
            )
        out += [x[:, None], y.astype(np.int64)]
    return (*out, 255.0)


def _load_cifar100(folder: Path):
    base = folder / _CIFAR_DIR
    members = [f for f, _ in _CIFAR_MEMBERS]
    if not base.exists() and not (folder / CIFAR100.filename).exists():
        alternative = f"{CIFAR100.filename}  (or the extracted {_CIFAR_DIR}/{{{','.join(members)}}})"
        raise _missing_error("cifar100", folder, [CIFAR100.filename], [alternative])
    _prepare("cifar100", folder)
    missing = [f"{_CIFAR_DIR}/{f}" for f in members if not (base / f).is_file()]
    if missing:
        raise _missing_error("cifar100", folder, missing, [f"{_CIFAR_DIR}/{f}" for f in members])

    def read(fname: str) -> dict:
        try:
            with open(base / fname, "rb") as fh:
                return pickle.load(fh, encoding="latin1")
        except (pickle.UnpicklingError, EOFError, OSError, ValueError, TypeError, AttributeError) as err:
            raise DataError(
                f"data set 'cifar100': {base / fname} is not a readable CIFAR pickle ({type(err).__name__}: {err}); "
                f"delete {base} and download again"
            ) from err

    out = []
    for fname in (CIFAR100.train_list[0][0], CIFAR100.test_list[0][0]):
        entry = read(fname)
        try:
            x = np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
            y = np.asarray(entry["fine_labels"], dtype=np.int64)
        except (KeyError, ValueError, TypeError) as err:
            raise DataError(
                f"data set 'cifar100': {base / fname} lacks the expected 'data' (N x 3072 uint8) and "
                f"'fine_labels' entries ({type(err).__name__}: {err})"
            ) from err
        if len(x) != len(y):
            raise DataError(f"data set 'cifar100': {base / fname} holds {len(x)} images but {len(y)} labels")
        out += [x, y]
    meta = read(CIFAR100.meta["filename"])
    if not isinstance(meta, dict) or len(meta.get(CIFAR100.meta["key"], ())) != _NUM_CLASSES["cifar100"]:
        raise DataError(
            f"data set 'cifar100': {base / 'meta'} does not list {_NUM_CLASSES['cifar100']} fine label names"
        )
    return (*out, 255.0)
