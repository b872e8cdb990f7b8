"""Progress of long steps on the terminal where snakemake runs, not only in the rule's log.

A rule's command logs to stderr, which the rule sends to its log file (``2> {log}``); its stdout
is left alone, so snakemake's terminal shows it. :class:`Progress` writes a line about every
``every`` seconds (step, total, elapsed, estimated time left) to the log (``logging``) and, when
stdout is not the same file as stderr (the job runs under snakemake with a log), to stdout too.
A background thread writes the lines, so a step that takes longer than ``every`` seconds still
gets its line on time; the estimate is the elapsed time per finished step times the steps left.

Use::

    with Progress("dynamics", total=21, unit="snapshot") as p:
        for ...:
            ...
            p.advance()
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import TextIO

__all__ = ["Progress", "format_seconds"]

log = logging.getLogger("transformer_hessian.util.progress")

#: Seconds between two progress lines.
EVERY = 10.0


def format_seconds(s: float) -> str:
    """A duration rounded to the second: ``"42 s"``, ``"3 min 05 s"``, ``"1 h 02 min"`` (the
    progress lines and the end-of-run recap write durations with it)."""
    s = round(max(0.0, float(s)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _terminal() -> TextIO | None:
    """stdout when it is not the file stderr goes to (else the log line already reaches it)."""
    try:
        out, err = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    return None if (out.st_dev, out.st_ino) == (err.st_dev, err.st_ino) else sys.stdout


class Progress:
    """Reports ``what: <unit> i/total (p %), elapsed, about T left`` every ``every`` seconds.

    ``total`` is the number of steps; :meth:`advance` / :meth:`update` move the count (``note``
    adds a word on what is being done). Used as a context manager: the reporting thread starts on
    enter and a last line with the total time is written on exit.
    """

    def __init__(
        self,
        what: str,
        total: int,
        unit: str = "step",
        every: float = EVERY,
        stream: TextIO | None | bool = True,
    ):
        self.what, self.total, self.unit, self.every = what, max(int(total), 0), unit, float(every)
        self.done, self.note = 0, ""
        self._stream = _terminal() if stream is True else (stream or None)
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- counting
    def update(self, done: int, note: str = "") -> None:
        """Set the number of finished steps (and what is under way)."""
        with self._lock:
            self.done = min(max(int(done), 0), self.total) if self.total else int(done)
            self.note = note

    def advance(self, n: int = 1, note: str = "") -> None:
        """``n`` more steps finished."""
        self.update(self.done + n, note)

    # ----------------------------------------------------------------- reporting
    def line(self) -> str:
        """The progress line as it would be written now."""
        with self._lock:
            done, note = self.done, self.note
        elapsed = time.monotonic() - self._t0
        head = f"{self.what}: {self.unit} {done}/{self.total}"
        if self.total:
            head += f" ({100 * done / self.total:.0f} %)"
        tail = f", {format_seconds(elapsed)} elapsed"
        if 0 < done < self.total:
            tail += f", about {format_seconds(elapsed / done * (self.total - done))} left"
        elif done == 0 and self.total:
            tail += ", time left not known yet"
        return head + tail + (f" [{note}]" if note else "")

    def emit(self, text: str | None = None) -> None:
        """Write ``text`` (default: :meth:`line`) to the log and the terminal."""
        text = text or self.line()
        log.info("%s", text)
        if self._stream is not None:
            try:
                self._stream.write(f"[progress] {text}\n")
                self._stream.flush()
            except (OSError, ValueError):
                self._stream = None

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.emit()

    def __enter__(self) -> Progress:
        self._t0 = time.monotonic()
        self.emit(f"{self.what}: {self.total} {self.unit}(s) to do")
        self._thread = threading.Thread(target=self._run, name=f"progress {self.what}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        elapsed = format_seconds(time.monotonic() - self._t0)
        if exc_type is None:
            self.emit(f"{self.what}: done, {self.done}/{self.total} {self.unit}(s) in {elapsed}")
        else:
            self.emit(f"{self.what}: stopped at {self.unit} {self.done}/{self.total} after {elapsed}")
