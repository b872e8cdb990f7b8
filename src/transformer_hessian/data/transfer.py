"""One file over HTTP(S) into place, verified (the network half of :func:`.fetch.download`).

:func:`fetch_file` downloads into a temporary file next to the destination, checks its md5 or
sha256 (or both) and only then renames it into place, so no partial or corrupted file is ever left where a later run
would trust it. Each socket wait is limited by a timeout and the whole exchange by a deadline (a
watchdog shuts the sockets down, so a server that trickles bytes cannot outlast it); a size above
the file's known size (:data:`KNOWN_BYTES`) or beyond the free disk space is refused before it is
written. Every failure is one :class:`FetchError`; :mod:`.fetch` turns them into a
:class:`.sources.DataError` that names the urls tried. torchvision (its user agent and md5
helpers) is imported only inside the functions that need it.
"""

from __future__ import annotations

import http.client
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..util.files import atomic_path, sha256_file

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_DEADLINE",
    "KNOWN_BYTES",
    "DISK_MARGIN",
    "FetchError",
    "calculate_md5",
    "check_integrity",
    "fetch_file",
    "user_agent",
]

#: Seconds a socket may wait (connect, or each read) before a download attempt is given up.
DEFAULT_TIMEOUT = 30.0

#: Seconds one file may take in all (a server that trickles bytes never trips the per-read
#: timeout); config key ``data.deadline``.
DEFAULT_DEADLINE = 3600.0

#: Bytes of each raw file of torchvision's tables, by md5 (the sizes the servers send): a
#: Content-Length above it is refused before anything is written, and so is a body that runs past it.
KNOWN_BYTES = {
    "f68b3c2dcbeaaa9fbdd348bbdeb94873": 9912422,  # MNIST train-images-idx3-ubyte.gz
    "d53e105ee54ea40749a09fcbcd1e9432": 28881,  # MNIST train-labels-idx1-ubyte.gz
    "9fb629c4189551a2d022fa330f9573f3": 1648877,  # MNIST t10k-images-idx3-ubyte.gz
    "ec29112dd5afa0611ce80d1b7f02629c": 4542,  # MNIST t10k-labels-idx1-ubyte.gz
    "eb9058c3a382ffc7106e4002c42a8d85": 169001437,  # cifar-100-python.tar.gz
}

#: Bytes kept free on the data folder's disk beyond the file itself.
DISK_MARGIN = 64 << 20

_NETWORK_ERRORS = (urllib.error.URLError, OSError, http.client.HTTPException, ValueError)


def calculate_md5(path) -> str:
    """The md5 hex digest of the file at ``path`` (torchvision's ``calculate_md5``)."""
    from torchvision.datasets.utils import calculate_md5

    return calculate_md5(path)


def check_integrity(path, md5: str) -> bool:
    """Whether the file at ``path`` exists and has md5 ``md5`` (torchvision's ``check_integrity``)."""
    from torchvision.datasets.utils import check_integrity

    return check_integrity(path, md5)


def user_agent() -> str:
    """The User-Agent header torchvision's downloads send (some mirrors refuse other agents)."""
    from torchvision.datasets.utils import USER_AGENT

    return USER_AGENT


class _Watchdog:
    """Shuts down every socket a download opened when its deadline passes, so that a server that
    trickles the status line or the headers (where no read of ours runs) cannot outlast it."""

    def __init__(self, seconds: float):
        self.sockets: list[socket.socket] = []
        self.expired = threading.Event()
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True

    def watch(self, sock) -> None:
        with self._lock:
            self.sockets.append(sock)
            if self.expired.is_set():
                self._shut(sock)

    @staticmethod
    def _shut(sock) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _fire(self) -> None:
        with self._lock:
            self.expired.set()
            for sock in self.sockets:
                self._shut(sock)

    def __enter__(self):
        self._timer.start()
        return self

    def __exit__(self, *exc):
        self._timer.cancel()


def _opener(watchdog: _Watchdog):
    """A urllib opener whose HTTP(S) connections register their socket with ``watchdog``."""

    def watched(base):
        class Connection(base):
            def connect(self):
                super().connect()
                watchdog.watch(self.sock)

        return Connection

    class Http(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(watched(http.client.HTTPConnection), req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req):
            kw = {"context": self._context}
            if hasattr(self, "_check_hostname"):
                kw["check_hostname"] = self._check_hostname
            return self.do_open(watched(http.client.HTTPSConnection), req, **kw)

    return urllib.request.build_opener(Http, Https)


def fetch_file(
    url: str,
    dest: Path,
    md5: str | None,
    timeout: float,
    deadline: float = DEFAULT_DEADLINE,
    *,
    sha256: str | None = None,
    size: int | None = None,
) -> None:
    """Download ``url`` into a temp file next to ``dest``, verify its checksum, then rename into place.

    The checksum is ``md5`` (torchvision's tables), ``sha256`` (hex digest), or both; at least one
    must be given, and every one given must match. Each socket wait is limited by ``timeout``, and
    the whole exchange (connect, status line, headers, body) by ``deadline`` seconds: a watchdog
    shuts the socket down when it passes. A Content-Length above the file's known size (``size``
    when given, else :data:`KNOWN_BYTES` by md5), a body that runs past it, or a file that does not
    fit the free disk space is refused before it is written. Raises :class:`FetchError` (any
    network problem, the deadline, a size, or a checksum mismatch); nothing is left behind.
    """
    if md5 is None and sha256 is None:
        raise ValueError("fetch_file: give the file's md5 or sha256 (a download is never trusted unchecked)")
    agent = user_agent()  # imports torchvision: before the clock starts
    t_end = time.monotonic() + deadline
    known = size if size is not None else KNOWN_BYTES.get(md5) if md5 is not None else None
    late = (
        f"not complete after the deadline of {deadline:g} s (config key data.deadline); the server answers too slowly"
    )
    try:
        with _Watchdog(deadline) as watchdog, atomic_path(dest, suffix=".part") as tmp:
            request = urllib.request.Request(url, headers={"User-Agent": agent})
            try:
                response = _opener(watchdog).open(request, timeout=min(timeout, deadline))
            except _NETWORK_ERRORS as err:
                if watchdog.expired.is_set():
                    raise FetchError(f"{late} (no complete status line and headers)") from err
                raise
            with response, open(tmp, "wb") as fh:
                length = response.length
                if known is not None and length is not None and length > known:
                    raise FetchError(
                        f"the server announces {length:,} bytes (Content-Length) but the file has {known:,}; refused"
                    )
                need = length if length is not None else known
                free = shutil.disk_usage(tmp.parent).free
                if need is not None and need + DISK_MARGIN > free:
                    raise FetchError(
                        f"the file needs {need:,} bytes but {tmp.parent} has only {free:,} free (keeping "
                        f"{DISK_MARGIN >> 20} MiB spare); free some space or set data.root to another disk"
                    )
                received = 0
                while True:
                    if time.monotonic() > t_end or watchdog.expired.is_set():
                        raise FetchError(f"{late} ({received} bytes received)")
                    # read1: returns what one socket read gives (a plain read(n) would wait for n bytes)
                    try:
                        chunk = response.read1(1 << 20)
                    except _NETWORK_ERRORS:
                        if watchdog.expired.is_set():
                            raise FetchError(f"{late} ({received} bytes received)") from None
                        raise
                    if not chunk:
                        break
                    received += len(chunk)
                    if known is not None and received > known:
                        raise FetchError(f"the server sent more than the file's {known:,} bytes; refused")
                    fh.write(chunk)
                if watchdog.expired.is_set():
                    raise FetchError(f"{late} ({received} bytes received)")
                if response.length:  # Content-Length promised more than arrived
                    raise FetchError(f"connection closed after {received} bytes, {response.length} bytes short")
            mismatch = _checksum_mismatch(tmp, md5, sha256)
            if mismatch:
                raise FetchError(f"checksum mismatch: {mismatch} ({tmp.stat().st_size} bytes); file rejected")
    except _NETWORK_ERRORS as err:
        raise FetchError(f"{type(err).__name__}: {err}") from err


def _checksum_mismatch(path: Path, md5: str | None, sha256: str | None) -> str | None:
    """``"expected <kind> X, got Y"`` for the first given checksum the file at ``path`` fails, else None."""
    if md5 is not None and not check_integrity(path, md5):
        return f"expected md5 {md5}, got {calculate_md5(path)}"
    if sha256 is not None:
        got = sha256_file(path)
        if got != sha256.lower():
            return f"expected sha256 {sha256.lower()}, got {got}"
    return None


class FetchError(Exception):
    """One failed attempt of :func:`fetch_file` (network, deadline, size or checksum), with the reason."""
