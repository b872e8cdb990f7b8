"""Download faults (fault injection) against a local server on 127.0.0.1: 404,
500, truncated, wrong checksum, hanging, trickling, closed or refused connections, HTML instead of data,
a kill mid-transfer, a status line or headers one byte per second, a Content-Length of 10^15, a body
without end and a full disk. Each ends in bounded time with one message and leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fault_helpers import _count, _dead_pid

from transformer_hessian.data import DataError, download


class _Server:
    """Local HTTP server with misbehaving routes."""

    def __init__(self, body: bytes):
        self.body = body
        self.stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):  # noqa: N802
                route = self.path.strip("/").split("/")[0]
                try:
                    getattr(self, f"r_{route}", self.r_404)()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _head(self, code=200, length=None):
                self.send_response(code)
                self.send_header("Content-Length", str(len(server.body) if length is None else length))
                self.end_headers()

            def r_ok(self):
                self._head()
                self.wfile.write(server.body)

            def r_404(self):
                self._head(404, 0)

            def r_500(self):
                self._head(500, 0)

            def r_truncated(self):
                self._head(length=len(server.body))
                self.wfile.write(server.body[: len(server.body) // 3])
                self.wfile.flush()
                self.close_connection = True

            def r_wrongmd5(self):
                self._head()
                self.wfile.write(bytes(reversed(server.body)))

            def r_hang(self):
                server.stop.wait(30)

            def r_trickle(self):
                self._head()
                for b in server.body:
                    if server.stop.wait(0.25):
                        return
                    self.wfile.write(bytes([b]))
                    self.wfile.flush()

            def r_close(self):
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

            def r_html(self):
                body = b"<html>captive portal</html>"
                self._head(length=len(body))
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def server():
    s = _Server(os.urandom(4000))
    yield s
    s.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


@pytest.mark.slow  # about 5 s
def test_download_faults_leave_nothing_and_end_in_bounded_time(server, tmp_path):
    md5 = hashlib.md5(server.body, usedforsecurity=False).hexdigest()
    res = [("blob.bin", md5)]
    faults = {
        "404": f"{server.base}/404/",
        "500": f"{server.base}/500/",
        "truncated": f"{server.base}/truncated/",
        "wrong checksum": f"{server.base}/wrongmd5/",
        "hanging server": f"{server.base}/hang/",
        "one byte every 0.25 s": f"{server.base}/trickle/",
        "connection closed": f"{server.base}/close/",
        "connection refused": f"http://127.0.0.1:{_free_port()}/",
        "html instead of data": f"{server.base}/html/",
    }
    handled = 0
    for i, (label, mirror) in enumerate(faults.items()):
        root = tmp_path / f"r{i}"
        t0 = time.monotonic()
        with pytest.raises(DataError) as err:
            download("mnist", root, mirror=mirror, resources=res, timeout=1.0, deadline=2.0)
        took = time.monotonic() - t0
        msg = str(err.value)
        assert took < 6, (label, took)
        assert mirror.rstrip("/") in msg and str(root / "mnist") in msg and "data.mirror" in msg, (label, msg)
        assert "blob.bin" in msg and md5 in msg, label  # the files to place by hand
        assert _leftovers(root / "mnist") == [], (label, _leftovers(root / "mnist"))
        handled += 1
    # a mirror that is not an http(s) url, named by its config key
    with pytest.raises(DataError, match=r"data\.mirror: 'not a url'"):
        download("mnist", tmp_path / "x", mirror="not a url", resources=res)
    handled += 1
    # the deadline is what stops the trickle (the per-read timeout alone would never fire)
    with pytest.raises(DataError, match="deadline of 1.5 s"):
        download("mnist", tmp_path / "t", mirror=f"{server.base}/trickle/", resources=res, timeout=5, deadline=1.5)
    # a stale 0-byte .part left by a killed run (dead pid on this host) goes; a live one stays
    folder = tmp_path / "stale" / "mnist"
    folder.mkdir(parents=True)
    from transformer_hessian.util.tempfiles import host_tag

    dead = folder / f".blob.bin.{host_tag()}.{_dead_pid()}.abcdefgh.part"
    live = folder / f".blob.bin.{host_tag()}.{os.getpid()}.abcdefgh.part"
    dead.touch()
    live.touch()
    download("mnist", tmp_path / "stale", mirror=f"{server.base}/ok/", resources=res, timeout=2, deadline=5)
    assert not dead.exists() and live.exists() and (folder / "blob.bin").read_bytes() == server.body
    live.unlink()
    handled += 1
    _count("download faults handled", handled, len(faults) + 2)


@pytest.mark.slow  # about 5 s
def test_download_killed_mid_transfer_then_rerun_cleans_up(server, tmp_path, env):
    md5 = hashlib.md5(server.body, usedforsecurity=False).hexdigest()
    code = (
        "from transformer_hessian.data import download\n"
        f"download('mnist', {str(tmp_path)!r}, mirror={server.base + '/trickle/'!r}, "
        f"resources=[('blob.bin', {md5!r})], timeout=5, deadline=60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    folder = tmp_path / "mnist"
    t0 = time.monotonic()
    while not list(folder.glob(".blob.bin.*.part")) and time.monotonic() - t0 < 60:
        time.sleep(0.1)
    time.sleep(0.6)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(list(folder.glob(".blob.bin.*.part"))) == 1  # what a kill leaves behind
    download("mnist", tmp_path, mirror=f"{server.base}/ok/", resources=[("blob.bin", md5)], timeout=2, deadline=5)
    assert _leftovers(folder) == ["blob.bin"]


class _RawServer:
    """A 127.0.0.1 server that answers every request with ``script(conn)`` (one thread per connection)."""

    def __init__(self, script):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.base = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        self.script = script
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        try:
            conn.recv(65536)
            self.script(conn, self.stop)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stop.set()
        self.sock.close()


def _trickle(prefix: bytes):
    """Send ``prefix`` at once, then an endless header one byte per second."""

    def script(conn, stop):
        conn.sendall(prefix)
        while not stop.is_set():
            conn.sendall(b"x")
            time.sleep(1.0)

    return script


def _huge(conn, stop):
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000000\r\n\r\n")
    block = bytes(1 << 16)
    while not stop.is_set():
        conn.sendall(block)


@pytest.mark.slow  # about 3 s a case
@pytest.mark.parametrize(
    "case",
    [("status line", b"HTTP/1.1 2"), ("headers", b"HTTP/1.1 200 OK\r\nX-Slow: ")],
    ids=lambda c: c[0],
)
def test_download_deadline_covers_status_line_and_headers(case, tmp_path):
    """One header byte per second no longer outlasts ``data.deadline``."""
    from transformer_hessian.data import DataError, download
    from transformer_hessian.data.transfer import user_agent

    user_agent()  # torchvision imported before the clock starts
    server = _RawServer(_trickle(case[1]))
    try:
        t0 = time.monotonic()
        with pytest.raises(DataError, match="deadline of 3 s") as err:
            download("mnist", tmp_path, mirror=server.base, resources=[("blob.bin", "0" * 32)], timeout=5, deadline=3)
        assert time.monotonic() - t0 < 8, time.monotonic() - t0
        assert "data.deadline" in str(err.value)
    finally:
        server.close()
    assert list((tmp_path / "mnist").iterdir()) == []


def test_download_refuses_content_length_above_the_known_size_and_full_disk(tmp_path, monkeypatch):
    """A Content-Length of 10^15 is refused before anything is written; so is a file that does not
    fit the free disk space; a body that runs past the known size is cut off."""
    from transformer_hessian.data import DataError, download
    from transformer_hessian.data.transfer import user_agent

    user_agent()  # torchvision imported before the clock starts
    server = _RawServer(_huge)
    try:
        t0 = time.monotonic()
        with pytest.raises(DataError, match=r"1,000,000,000,000,000 bytes \(Content-Length\) but the file has 4,000"):
            download("mnist", tmp_path, mirror=server.base, resources=[("blob.bin", "1" * 32, 4000)], deadline=30)
        assert time.monotonic() - t0 < 5
        assert list((tmp_path / "mnist").iterdir()) == []
    finally:
        server.close()

    def no_length(conn, stop):  # no Content-Length, and a body that never ends
        conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n")
        while not stop.is_set():
            conn.sendall(bytes(1 << 16))

    server = _RawServer(no_length)
    try:
        t0 = time.monotonic()
        with pytest.raises(DataError, match=r"more than the file's 4,000 bytes"):
            download("mnist", tmp_path, mirror=server.base, resources=[("blob.bin", "2" * 32, 4000)], deadline=30)
        assert time.monotonic() - t0 < 5
        assert list((tmp_path / "mnist").iterdir()) == []
    finally:
        server.close()

    import transformer_hessian.data.transfer as transfer

    def full(conn, stop):
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 4000\r\n\r\n" + bytes(4000))

    server = _RawServer(full)
    monkeypatch.setattr(transfer.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    try:
        with pytest.raises(DataError, match=r"needs 4,000 bytes but .* has only 1,000 free"):
            download("mnist", tmp_path, mirror=server.base, resources=[("blob.bin", "3" * 32)], deadline=30)
        assert list((tmp_path / "mnist").iterdir()) == []
    finally:
        server.close()
