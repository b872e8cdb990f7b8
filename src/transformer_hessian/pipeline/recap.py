"""The few lines a finished workflow run prints last (the Snakefile's ``onsuccess``): where the
outputs are, the claim counts with the claims that were not reproduced named, the figure to open
first and the run's wall time. The full verdict table stays in ``paper/claims.md``.

Reads only JSON (no torch), so that it costs nothing at the end of a run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from ..claims.schema import NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED
from ..util.progress import format_seconds

__all__ = ["MAX_LINES", "FIRST_FIGURES", "recap_lines"]

#: The recap never has more lines than this.
MAX_LINES = 20
#: The figure to open first, in order of preference, with what it shows: the five-group Hessian
#: at initialisation (the paper's central figure), then the one after training, then the landscape.
FIRST_FIGURES = {
    "fig3": "the loss Hessian's 25 blocks at initialisation",
    "fig4": "the loss Hessian's 25 blocks after training",
    "fig6": "the loss landscape's convergence in k",
}
WIDTH = 100
#: Lines of claim names per verdict at most (the rest: "... and N more").
NAME_LINES = 6


def _wrapped(label: str, words: Sequence[str]) -> list[str]:
    """``words`` after ``label``, comma-separated, in lines of at most :data:`WIDTH` characters and
    at most :data:`NAME_LINES` lines (then the last one says how many were left out)."""
    indent = " " * len(label)
    lines = [label]
    for i, word in enumerate(words):
        piece = word + ("," if i < len(words) - 1 else "")
        if lines[-1] not in (label, indent) and len(lines[-1]) + 1 + len(piece) > WIDTH:
            if len(lines) == NAME_LINES:
                lines[-1] = f"{lines[-1]} ... and {len(words) - i} more"
                return lines
            lines.append(indent)
        lines[-1] += piece if lines[-1] in (label, indent) else " " + piece
    return lines


def recap_lines(
    claims_json: str | Path,
    figures: dict[str, str],
    seconds: float,
    paper_dir: str = "paper",
    report_command: str = "make report",
) -> list[str]:
    """The recap of a finished run, at most :data:`MAX_LINES` lines of at most ~100 characters.

    ``claims_json``: ``paper/claims.json``; ``figures``: figure id -> PNG path of the figures this
    config makes (registry order); ``seconds``: wall time of the run.
    """
    rows = json.loads(Path(claims_json).read_text(encoding="utf-8"))["claims"]
    by = {v: [r["id"] for r in rows if r["verdict"] == v] for v in (REPRODUCED, NOT_REPRODUCED, NOT_TESTABLE)}
    lines = [
        f"Finished in {format_seconds(seconds)}. Everything is in {paper_dir}/: figures/ (PDF, PNG), tables/ "
        "(CSV, LaTeX, Markdown),",
        "  summary.json (every number, provenance), claims.md (the verdict on each claim of the paper).",
        f"Claims: {len(by[REPRODUCED])} reproduced, {len(by[NOT_REPRODUCED])} not reproduced, "
        f"{len(by[NOT_TESTABLE])} not testable on this data set (of {len(rows)}); why: {paper_dir}/claims.md",
    ]
    if by[NOT_REPRODUCED]:
        lines += _wrapped("  not reproduced: ", by[NOT_REPRODUCED])
    if by[NOT_TESTABLE]:
        lines += _wrapped("  not testable: ", by[NOT_TESTABLE])
    first = next((f for f in FIRST_FIGURES if f in figures), next(iter(figures), None))
    if first:
        what = f" ({FIRST_FIGURES[first]})" if first in FIRST_FIGURES else ""
        lines.append(f"Open first: {figures[first]}{what}")
    lines.append(f"Review report (figures, tables, claims, config): {report_command}")
    return lines
