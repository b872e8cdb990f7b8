"""Download of a data set's raw files with checksum verification (the ``download`` rule).

:func:`download` owns the control flow (torchvision's ``download_url`` writes straight to the
final path, has no timeout and no clear error), but uses torchvision's resource tables
(:mod:`.sources`) and its ``check_integrity`` / ``calculate_md5`` helpers, imported only when a
downloadable data set is asked for. Every file is fetched by :func:`.transfer.fetch_file` into a
temporary file in its final folder, verified against its md5 and only then renamed into place
(``os.replace``), so no partial or corrupted file is ever left where a later run would trust it.
Any failure (offline, unreachable host, HTTP error, checksum mismatch, unreadable file) is raised
as one :class:`.sources.DataError` whose message names the data set, the url(s) tried and the
exact folder and file names to place by hand.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import urllib.parse
from pathlib import Path
from typing import Any

import numpy as np

from ..util.files import atomic_path
from ..util.tempfiles import remove_stale_temp_files
from . import sources, transfer
from .local import MNIST_RAW, Rejected, md5_of, mnist_search_dirs, mnist_targets, place_mnist_file, rejected_error
from .prepare import prepare, remove_stale_extract_dirs
from .sources import DataError, check_name
from .transfer import DEFAULT_DEADLINE, DEFAULT_TIMEOUT, KNOWN_BYTES, calculate_md5, check_integrity

__all__ = ["download", "write_manifest"]

log = logging.getLogger("transformer_hessian.data")

_MD5_RE = re.compile(r"^[0-9a-fA-F]{32}$")


def _file_entry(path: Path, name: str | None = None, md5: str | None = None) -> dict[str, Any]:
    return {
        "name": name or path.name,
        "md5": md5 or calculate_md5(path),
        "bytes": path.stat().st_size,
    }


def _join(base: str, filename: str) -> str:
    return base.rstrip("/") + "/" + filename


def _resolve_resources(name: str, mirror: str | None, resources: list | None) -> list[tuple[str, str, list[str]]]:
    """Return ``(filename, md5, candidate urls)`` for each raw file of ``name`` (a resource may be
    ``(ref, md5, bytes)``: its size is then recorded in :data:`KNOWN_BYTES`)."""
    bases = [mirror] if mirror else list(sources.mirrors()[name])
    table = sources.resources()[name] if resources is None else resources
    out = []
    for item in table:
        try:
            ref, md5, *size = item
            if size:
                (size,) = size
                KNOWN_BYTES[str(md5).lower()] = int(size)
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
            f"  (or the already extracted folder {folder / sources.cifar100_dir()}/ with the files "
            f"{', '.join(m for m, _ in sources.cifar100_members())})"
        )
    if name == "mnist":
        lines.append(
            "  (or the decompressed files "
            + ", ".join(mnist_targets())
            + ", also under the dotted names such as train-images.idx3-ubyte; or set the config key data.local "
            "to a folder that holds any of these forms, e.g. torchvision's MNIST/raw/)"
        )
    lines.append(
        "(config key data.root sets the data root), or set the config key data.mirror to the base url of a "
        "mirror that serves them; the offline data set 'digits' needs no download."
    )
    return "\n".join(lines)


def _cifar_extracted_ok(folder: Path) -> bool:
    return all(check_integrity(folder / sources.cifar100_dir() / f, m) for f, m in sources.cifar100_members())


def download(
    name: str,
    root: str | Path,
    mirror: str | None = None,
    resources: list | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    deadline: float = DEFAULT_DEADLINE,
    local: str | Path | None = None,
    raw_md5: dict[str, str] | None = None,
) -> dict:
    """Make sure the raw files of data set ``name`` are present and verified under ``root/<name>/``.

    Files already in place whose md5 matches are not downloaded again; a file in place whose md5
    does not match is reported (path, expected and actual md5, size) and left where it is: no file
    that this function did not write is ever changed or removed. MNIST is also taken from files a
    user already has, with no network (:mod:`.local`): the decompressed IDX files (hyphenated or
    dotted names), the ``.gz`` files, in ``local``, ``root/mnist/`` or torchvision's
    ``root/MNIST/raw/``. Each missing file is tried from each candidate url
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
    local : a folder that holds the data set's files (config key ``data.local``); when given, the
        network is never used.
    raw_md5 : md5 of each decompressed MNIST file, by name; only with ``resources`` (fabricated
        test data); torchvision's table is checked against :data:`.local.MNIST_RAW`.

    Returns:
    -------
    dict ``{"dataset", "files": [{"name", "md5", "bytes"}], "source"}``; ``source`` is the
    primary url (or mirror base) of the data, or ``"sklearn"`` for ``digits``.

    Raises:
    ------
    DataError naming the data set, the url(s) tried and where to place the files by hand.
    """
    _check_arguments(name, mirror, timeout, deadline)
    if name in OFFLINE_MANIFESTS:
        return OFFLINE_MANIFESTS[name]()

    folder = Path(root).expanduser().resolve() / name
    files = _resolve_resources(name, mirror, resources)
    if not files:
        raise DataError(f"data set {name!r}: the resource list is empty")
    primary = [urls[0] for _, _, urls in files]
    bases = {u.rsplit("/", 1)[0] + "/" for u in primary}
    source = primary[0] if len(primary) == 1 else (bases.pop() if len(bases) == 1 else " ".join(primary))

    _make_folder(name, folder)

    # A cluster copy of CIFAR-100 may hold only the extracted files (torchvision's layout).
    if name == "cifar100" and resources is None and not (folder / sources.cifar100().filename).exists():
        if _cifar_extracted_ok(folder):
            log.info("cifar100: extracted files in %s verify; nothing to download", folder / sources.cifar100_dir())
            return {"dataset": name, "files": _cifar_extracted_entries(folder), "source": source}

    local_dir = _local_dir(name, local)
    if name == "mnist" and sorted(f for f, _, _ in files) == sorted(f"{t}.gz" for t in mnist_targets()):
        raw = {k: v[0] for k, v in MNIST_RAW.items()} if resources is None else dict(raw_md5 or {})
        entries = _mnist_files(folder, files, raw, local_dir, timeout, deadline)
        return {"dataset": name, "files": entries, "source": str(local_dir) if local_dir else source}

    entries = [_place_file(name, item, folder, files, local_dir, timeout, deadline) for item in files]
    prepare(name, folder)
    return {"dataset": name, "files": entries, "source": source}


def _check_arguments(name: str, mirror: str | None, timeout: float, deadline: float) -> None:
    """DataError for an unknown data set, a mirror that is not an http(s) url or a deadline or
    timeout that is not a positive number of seconds."""
    check_name(name)
    if mirror:
        parsed = urllib.parse.urlparse(mirror)
        if parsed.scheme not in ("http", "https") or not parsed.netloc or any(c.isspace() for c in mirror):
            raise DataError(f"data.mirror: {mirror!r} is not an http(s) url (e.g. https://example.org/mnist/)")
    if not (isinstance(deadline, (int, float)) and deadline > 0 and timeout > 0):
        raise DataError(f"data.deadline must be a positive number of seconds, got {deadline!r}")


def _make_folder(name: str, folder: Path) -> None:
    """Create the data set's ``folder`` (DataError if it cannot be) and remove the temp files
    (``.<file>.<host>.<pid>.*.part``, ``.extract-*``) a killed run on this host left in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataError(f"data set {name!r}: cannot create the data folder {folder}: {err}") from err
    remove_stale_temp_files(folder)
    remove_stale_extract_dirs(folder)


def _cifar_extracted_entries(folder: Path) -> list[dict[str, Any]]:
    """The manifest entries of CIFAR-100's extracted files (verified by :func:`_cifar_extracted_ok`)."""
    return [
        _file_entry(folder / sources.cifar100_dir() / f, name=f"{sources.cifar100_dir()}/{f}", md5=m)
        for f, m in sources.cifar100_members()
    ]


def _place_file(name: str, item, folder: Path, files, local_dir: Path | None, timeout, deadline) -> dict[str, Any]:
    """The manifest entry of one raw file ``item`` = (filename, md5, urls) of data set ``name``:
    copied from ``local_dir`` when given, else kept when in place and verified, else downloaded.
    A file that does not verify is left where it is (DataError naming it)."""
    filename, md5, urls = item
    dest = folder / filename
    if local_dir is not None and not dest.exists():
        src = local_dir / filename
        if not src.is_file():
            raise DataError(
                f"data set {name!r}: {filename} is not in the folder data.local = {local_dir}/ (no download is "
                "tried when data.local is set)\n" + _hand_placement(name, folder, files)
            )
        got = calculate_md5(src)
        if got != md5:
            raise DataError(
                f"data set {name!r}: {Rejected(src, md5, got, src.stat().st_size)}; it was left where it is. "
                "Replace it with an intact copy (or unset data.local to download it), then run again."
            )
        with atomic_path(dest) as tmp:
            shutil.copyfile(src, tmp)
        log.info("%s: %s verifies; copied to %s", name, src, dest)
    if dest.exists():
        got = calculate_md5(dest)
        if got == md5:
            log.info("%s: %s is in place and verifies", name, dest)
            return _file_entry(dest, md5=md5)
        raise DataError(
            f"data set {name!r}: {dest} ({dest.stat().st_size:,} bytes) has md5 {got}, expected {md5}; it was "
            "left in place. Replace it with an intact copy, or move it out of the way so that it is downloaded "
            "again, then run again."
        )
    _download_file(name, filename, md5, urls, dest, timeout, deadline, files, folder)
    return _file_entry(dest, md5=md5)


def _local_dir(name: str, local: str | Path | None) -> Path | None:
    if not local:
        return None
    path = Path(local).expanduser().resolve()
    if not path.is_dir():
        raise DataError(
            f"data.local: {local!r} ({path}) is not a folder; it must name the folder that holds {name}'s files"
        )
    return path


def _download_file(name, filename, md5, urls, dest, timeout, deadline, files, folder) -> None:
    """Fetch ``filename`` from the first of ``urls`` that gives a verified file, or DataError."""
    errors = []
    for url in urls:
        log.info("%s: downloading %s -> %s", name, url, dest)
        try:
            transfer.fetch_file(url, dest, md5, timeout, deadline)
        except transfer.FetchError as err:
            log.warning("%s: %s failed: %s", name, url, err)
            errors.append((url, str(err)))
            continue
        return
    tried = "\n".join(f"  {url}\n    -> {msg}" for url, msg in errors)
    raise DataError(
        f"could not download data set {name!r}: file {filename!r} could not be fetched and verified.\n"
        f"Tried:\n{tried}\n" + _hand_placement(name, folder, files)
    )


def _mnist_files(folder: Path, files, raw: dict[str, str], local_dir: Path | None, timeout, deadline) -> list[dict]:
    """MNIST's four decompressed files in ``folder``, from files on disk or downloaded ``.gz`` files."""
    dirs = mnist_search_dirs(folder, folder.parent, local_dir)
    entries, rejected, missing = [], [], []
    for filename, md5, urls in files:
        target = filename[: -len(".gz")]
        dest, src, rej = place_mnist_file(target, folder, dirs, raw.get(target), md5)
        rejected += rej
        # Download only when nothing on disk is in the way (a file that failed is never overwritten).
        if dest is None and local_dir is None and not (folder / target).exists() and not (folder / filename).exists():
            _download_file("mnist", filename, md5, urls, folder / filename, timeout, deadline, files, folder)
            dest, src, rej = place_mnist_file(target, folder, [folder], raw.get(target), md5)
            rejected += rej
        if dest is None:
            missing.append(target)
            continue
        for r in rej:
            log.warning("mnist: skipped %s", r)
        entries.append({"name": target, "md5": md5_of(dest), "bytes": dest.stat().st_size, "from": str(src)})
    if missing:
        raise rejected_error("mnist", folder, rejected, missing, local_dir)
    return entries


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


#: The data sets a library ships (no download), registered by name: their "download" is the
#: manifest of what that library returns (md5 of the arrays), so a changed library shows.
OFFLINE_MANIFESTS = {"digits": _digits_manifest}


def write_manifest(manifest: dict, path: str | Path) -> None:
    """Write ``manifest`` as JSON to ``path`` atomically (:func:`..io.save_manifest`)."""
    from ..util.io import save_manifest

    save_manifest(path, manifest)
