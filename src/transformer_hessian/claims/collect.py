"""Collecting the claim rows of every module: this package's rows, the providers' (other modules'
``claim_rows(result)``, registered in :data:`PROVIDERS`) and finished rows, validated, in order."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Any

from .schema import validate_row

__all__ = ["PROVIDERS", "collect_claims"]

#: Other modules' ``claim_rows`` functions: name -> "module:function" (see the module doc).
PROVIDERS: dict[str, str] = {"probe": "transformer_hessian.probe:claim_rows"}


def _provider(spec: str):
    module, _, function = spec.partition(":")
    return getattr(importlib.import_module(module), function)


def collect_claims(
    *row_lists: Iterable[Mapping[str, Any]], extra: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Validate and concatenate rows; ``extra`` maps a :data:`PROVIDERS` name to its loaded
    result, whose ``claim_rows(result)`` rows are appended. Duplicate ids raise ``ValueError``."""
    rows = [validate_row(r) for rows_ in row_lists for r in rows_]
    for name, result in (extra or {}).items():
        if name not in PROVIDERS:
            raise ValueError(f"no claim provider {name!r}; known: {sorted(PROVIDERS)}")
        rows += [validate_row(r) for r in _provider(PROVIDERS[name])(result)]
    seen: set[str] = set()
    for r in rows:
        if r["id"] in seen:
            raise ValueError(f"duplicate claim id {r['id']!r}")
        seen.add(r["id"])
    return rows
