r"""Short terminal lines for a workflow run: snakemake prints each job's inputs and outputs as one
comma-separated line and each shell command on one line (``rule all`` alone listed its 80 inputs on
a line of 2,085 characters). :func:`wrap_long_lines` folds such lines, losing nothing:
a file list at its commas, a shell command at the spaces between its words, with `` \`` at the end
of each folded line so that the command still runs when pasted into a shell.

The Snakefile installs it on snakemake's terminal handler (:func:`install`), so that both
``make reproduce`` and a bare ``snakemake --cores all`` print no line longer than :data:`WIDTH`.
Reads nothing, imports nothing heavy: it runs in snakemake's own process.
"""

from __future__ import annotations

import logging
import re

__all__ = ["WIDTH", "install", "wrap_long_lines"]

#: No folded line is longer than this (a word longer than it stays whole on its own line).
WIDTH = 160

# "    input: a, b, c" (snakemake's job info) and "    reason: Missing output files: a, b"
_LIST = re.compile(r"^(\s*)(\w[\w ]*: )(.*, .*)$")
_SHELL = "Shell command: "


def _words_outside_quotes(text: str) -> list[str]:
    """``text`` split at the spaces that are not inside single or double quotes."""
    words, cur, quote = [], [], None
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            cur.append(ch)
        elif ch == " ":
            if cur:
                words.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        words.append("".join(cur))
    return words


def _fill(first: str, pieces: list[str], indent: str, sep: str, tail: str, width: int) -> list[str]:
    """``pieces`` joined by ``sep`` after ``first``, in lines of at most ``width`` characters (a piece
    longer than that alone on its line); every line but the last ends in ``tail``, every line but the
    first starts with ``indent``."""
    lines, cur = [], first
    for piece in pieces:
        joined = cur + sep + piece if cur.strip() else cur + piece
        if len(joined) + len(tail) > width and cur.strip():
            lines.append(cur + tail)
            cur = indent + piece
        else:
            cur = joined
    lines.append(cur)
    return lines


def _wrap_line(line: str, width: int) -> list[str]:
    if len(line) <= width:
        return [line]
    lead = line[: len(line) - len(line.lstrip())]
    body = line.lstrip()
    if body.startswith(_SHELL) or body.split(" ", 1)[0] in ("transformer-hessian", "papermill"):
        words = _words_outside_quotes(body)
        return _fill(lead + words[0], words[1:], lead + "    ", " ", " \\", width)
    m = _LIST.match(line)
    if m:
        indent, label, rest = m.groups()
        items = rest.split(", ")
        pieces = [item + "," for item in items[:-1]] + [items[-1]]
        return _fill(indent + label.rstrip(), pieces, indent + " " * len(label), " ", "", width)
    return _fill(lead, body.split(" "), lead + "  ", " ", "", width)


def wrap_long_lines(text: str, width: int = WIDTH) -> str:
    """``text`` with every line longer than ``width`` folded as the module docstring says; shorter
    lines are returned unchanged, and joining the folded pieces gives back the words of the line."""
    return "\n".join(piece for line in text.split("\n") for piece in _wrap_line(line, width))


class _Folding(logging.Formatter):
    """A formatter that folds the lines of another formatter's output."""

    def __init__(self, inner: logging.Formatter | None, width: int):
        super().__init__()
        self.inner, self.width = inner or logging.Formatter(), width

    def format(self, record: logging.LogRecord) -> str:
        return wrap_long_lines(self.inner.format(record), self.width)

    def __getattr__(self, name):  # snakemake's formatter keeps state (quiet, show_failed_logs)
        return getattr(self.inner, name)


def install(logger: logging.Logger, width: int = WIDTH) -> None:
    """Fold the lines of every stream handler of ``logger`` (snakemake's terminal); idempotent."""
    for handler in logger.handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            if not isinstance(handler.formatter, _Folding):
                handler.setFormatter(_Folding(handler.formatter, width))
