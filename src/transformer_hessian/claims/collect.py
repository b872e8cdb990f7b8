"""Collecting the claim rows: this package's rows and the finished rows the studies' rules write,
validated, in order."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .schema import validate_row

__all__ = ["collect_claims"]


def collect_claims(*row_lists: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Validate and concatenate rows, in order. Duplicate ids raise ``ValueError``."""
    rows = [validate_row(r) for rows_ in row_lists for r in rows_]
    seen: set[str] = set()
    for r in rows:
        if r["id"] in seen:
            raise ValueError(f"duplicate claim id {r['id']!r}")
        seen.add(r["id"])
    return rows
