"""Tables as files: CSV, LaTeX (booktabs) and GitHub Markdown from a DataFrame, written
atomically. Below every study (a study's rule step writes its own table) and the report."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from .files import atomic_path, write_text


def _fmt(v) -> str:
    if isinstance(v, float):
        if v == 0 or not math.isfinite(v):
            return str(v)
        return f"{v:.4g}" if 1e-3 <= abs(v) < 1e5 else f"{v:.3e}"
    return str(v)


def to_markdown(df: pd.DataFrame) -> str:
    """A DataFrame as a GitHub Markdown table."""
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def to_latex(df: pd.DataFrame, caption: str) -> str:
    """A DataFrame as a booktabs LaTeX table with ``caption``."""

    def esc(s: str) -> str:
        return str(s).replace("\\", r"\textbackslash{}").replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")

    align = "".join("r" if pd.api.types.is_numeric_dtype(df[c]) else "l" for c in df.columns)
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{esc(caption)}}}",
        rf"\begin{{tabular}}{{{align}}}",
        r"\toprule",
        " & ".join(esc(c) for c in df.columns) + r" \\",
        r"\midrule",
    ]
    for row in df.itertuples(index=False):
        lines.append(" & ".join(esc(_fmt(v)) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def write_table(df: pd.DataFrame, stem: str | Path, caption: str) -> list[Path]:
    """Write ``stem``.csv, .tex (booktabs) and .md atomically; return the paths."""
    stem = Path(stem)
    paths = [stem.with_suffix(s) for s in (".csv", ".tex", ".md")]
    with atomic_path(paths[0]) as tmp:
        df.to_csv(tmp, index=False, float_format="%.10g")
    write_text(to_latex(df, caption), paths[1])
    write_text(f"**{caption}**\n\n" + to_markdown(df), paths[2])
    return paths
