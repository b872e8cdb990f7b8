"""Process sandbox of the benchmarks: peak resident memory, a memory cap, OOM detection.

A benchmark child measures its RSS after imports (the baseline), resets the kernel's
high-water mark, and runs under :class:`MemoryCap`: ``RLIMIT_AS`` = current address space +
cap, plus a watchdog thread on the resident set (baseline + cap). Status strings of a row are
defined here too.
"""

from __future__ import annotations

import os
import resource
import threading
from pathlib import Path

OK, OOM, TIMEOUT, ERROR = "ok", "out of memory", "timeout", "error"


#: Exit code of a child whose RSS watchdog fired (it writes its result first).
WATCHDOG_EXIT = 86


#: bytes in a mebibyte
MIB = 2**20


def proc_status() -> dict[str, int]:
    """VmRSS, VmHWM, VmSize, ... of this process in bytes."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, val = line.partition(":")
            if key.startswith("Vm") and val.strip().endswith("kB"):
                out[key] = int(val.split()[0]) * 1024
    return out


def rss_bytes() -> int:
    """This process's resident memory now, in bytes (/proc/self/statm)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> bool:
    """Reset the kernel's resident high-water mark (VmHWM); False where not permitted."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def is_oom(err: BaseException) -> bool:
    """Whether ``err`` is an allocation failure: MemoryError, or torch's RuntimeError saying so."""
    if isinstance(err, MemoryError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and any(
        s in text for s in ("can't allocate memory", "cannot allocate memory", "out of memory", "bad_alloc")
    )


class MemoryCap:
    """RLIMIT_AS (address space now + cap) and an RSS watchdog thread (baseline + cap)."""

    def __init__(self, cap_bytes: int, baseline_rss: int, on_fire):
        self.cap, self.baseline, self.on_fire = cap_bytes, baseline_rss, on_fire
        self.mechanisms: list[str] = []
        self.limit_as: int | None = None  # the RLIMIT_AS set by arm(), bytes
        self._old = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        limit = self.baseline + self.cap
        while not self._stop.wait(0.01):
            rss = rss_bytes()
            if rss > limit and not self._stop.is_set():
                try:
                    self.on_fire(rss)
                finally:
                    os._exit(WATCHDOG_EXIT)

    def arm(self) -> None:
        """Start the watchdog, then lower RLIMIT_AS to the address space now plus the cap (where allowed)."""
        self._thread.start()  # before the limit: the thread's stack is address space too
        self.mechanisms.append("rss_watchdog")
        try:
            self._old = resource.getrlimit(resource.RLIMIT_AS)
            limit = proc_status()["VmSize"] + self.cap
            hard = self._old[1]
            if hard != resource.RLIM_INFINITY:
                limit = min(limit, hard)
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
            self.limit_as = limit
            self.mechanisms.append("rlimit_as")
        except (ValueError, OSError, KeyError):
            self._old = None

    def at_limit(self, margin: int = 16 * MIB) -> bool:
        """Whether the address space is within ``margin`` of the RLIMIT_AS that arm() set. Near
        the cap a failed allocation can surface as any exception (e.g. an OSError from a source
        file that could not be read), not only as MemoryError; this tells those apart."""
        if self.limit_as is None:
            return False
        return proc_status().get("VmSize", 0) >= self.limit_as - margin

    def disarm(self) -> None:
        """Restore the RLIMIT_AS that arm() replaced and stop the watchdog."""
        if self._old is not None:
            resource.setrlimit(resource.RLIMIT_AS, self._old)
            self._old = None
        self._stop.set()


def log_tail(path: Path, n: int = 1500) -> str:
    """The last ``n`` characters of a log file; "" where it cannot be read."""
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


class _Box:
    """A one-item stand-in for a multiprocessing queue (in-process runs)."""

    def put(self, item) -> None:
        self.item = item


def _wait_for(q, p, timeout: float) -> dict:
    """The one item the process ``p`` puts on ``q``; an error after ``timeout`` seconds, or as soon
    as ``p`` has ended without putting one (killed for memory, crashed)."""
    import queue
    import time

    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return {"error": f"timeout after {timeout:.0f} s"}
        alive = p.is_alive()
        try:
            return q.get(timeout=min(1.0, left) if alive else 1.0)
        except queue.Empty:
            if not alive:
                return {"error": f"the process ended (exit code {p.exitcode}) without a result"}


def run_spawned(target, args: tuple, timeout: float, spawn: bool = True, preload: tuple[str, ...] = ()) -> dict:
    """``target(*args, queue)`` in a spawned process; the one item it puts, or ``{"error": ...}`` after
    ``timeout`` seconds (the child is killed). ``spawn=False`` runs it in this process (tests).
    ``preload``: modules to import once in a fork server whose forks run the targets (a fresh
    process each, without paying the imports each time; the server starts at the first such call,
    and later calls' ``preload`` are not imported by it)."""
    if not spawn:  # in this process (tests): no timeout, the peak is reset per case but shared
        box = _Box()
        target(*args, box)
        return box.item
    import multiprocessing as mp

    ctx = mp.get_context("forkserver" if preload else "spawn")
    if preload:
        ctx.set_forkserver_preload(list(preload))
    q = ctx.Queue()
    p = ctx.Process(target=target, args=(*args, q))
    p.start()
    res = _wait_for(q, p, timeout)
    p.join(5)
    if p.is_alive():
        p.kill()
    return res
