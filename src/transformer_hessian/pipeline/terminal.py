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


def _shell_words(text: str) -> list[str] | None:
    r"""``text`` split at the spaces a shell splits at (outside quotes, not escaped), with each
    unquoted newline as a word of its own; None when a quote is left open (then the text
    is not folded)."""
    words, cur, quote, i = [], [], None, 0
    while i < len(text):
        ch = text[i]
        if quote == "'":
            cur.append(ch)
            quote = None if ch == "'" else quote
        elif quote == '"':
            cur.append(ch)
            if ch == "\\" and i + 1 < len(text):
                cur.append(text[i + 1])
                i += 1
            elif ch == '"':
                quote = None
        elif ch == "\\" and i + 1 < len(text):
            cur += [ch, text[i + 1]]
            i += 1
        elif ch in "'\"":
            quote = ch
            cur.append(ch)
        elif ch in " \n":
            if cur:
                words.append("".join(cur))
            cur = []
            if ch == "\n":
                words.append("\n")
        else:
            cur.append(ch)
        i += 1
    if cur:
        words.append("".join(cur))
    return None if quote else words


def _fold_shell(text: str, width: int) -> str:
    r"""A shell command folded between its words with `` \`` at the end of each folded line (so
    that it runs as it did when pasted into a shell); unchanged where no line is too long or a
    quote is left open."""
    words = _shell_words(text)
    if not words or all(len(line) <= width for line in text.split("\n")):
        return text
    indent = "    "
    out = words[0]
    for word in words[1:]:
        if word == "\n":
            out += "\n"
            continue
        at_start = out.endswith("\n")
        line_len = len(out) - out.rfind("\n") - 1
        first = word.split("\n", 1)[0]
        if not at_start and line_len + 1 + len(first) + 2 > width:
            out += " \\\n" + indent + word
        else:
            out += ("" if at_start else " ") + word
    return out


def _fill(first: str, pieces: list[str], indent: str, sep: str, width: int) -> list[str]:
    """``pieces`` joined by ``sep`` after ``first``, in lines of at most ``width`` characters (a piece
    longer than that alone on its line); every line but the first starts with ``indent``."""
    lines, cur = [], first
    for piece in pieces:
        joined = cur + sep + piece if cur.strip() else cur + piece
        if len(joined) > width and cur.strip():
            lines.append(cur)
            cur = indent + piece
        else:
            cur = joined
    lines.append(cur)
    return lines


def _wrap_line(line: str, width: int) -> list[str]:
    if len(line) <= width:
        return [line]
    m = _LIST.match(line)
    if m:
        indent, label, rest = m.groups()
        items = rest.split(", ")
        pieces = [item + "," for item in items[:-1]] + [items[-1]]
        cont = indent + " " * len(label)
        lines = _fill(indent + label.rstrip(), pieces, cont, " ", width)
        # an item with spaces of its own (a reason quoting a changed caption) folds at its spaces
        return [
            piece
            for line in lines
            for piece in ([line] if len(line) <= width else _fill("", line.split(" "), cont, " ", width))
        ]
    lead = line[: len(line) - len(line.lstrip())]
    return _fill(lead, line.lstrip().split(" "), lead + "  ", " ", width)


def wrap_long_lines(text: str, width: int = WIDTH) -> str:
    """``text`` (one message) with every line longer than ``width`` folded as the module docstring
    says; a message that is a shell command (``Shell command: ...``) is folded as one command, also
    across the newlines inside its quotes. Shorter lines are returned unchanged."""
    if text.startswith(_SHELL):
        return _fold_shell(text, width)
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
