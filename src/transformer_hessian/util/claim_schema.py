"""The shared claim-row schema: the three verdict words, the required keys, :func:`verdict` and
:func:`validate_row` (the contract every module's ``claim_rows`` follows).

It sits below the studies (they write rows) and :mod:`transformer_hessian.claims` (it collects them);
``claims.schema`` re-exports it. Imports nothing from the package."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["NOT_REPRODUCED", "NOT_TESTABLE", "REPRODUCED", "ROW_KEYS", "VERDICTS", "validate_row", "verdict"]

REPRODUCED, NOT_REPRODUCED, NOT_TESTABLE = "reproduced", "not reproduced", "not testable on this data set"
#: The three verdict words of the shared schema.
VERDICTS = (REPRODUCED, NOT_REPRODUCED, NOT_TESTABLE)
#: Keys every row must have (``rule`` is optional for rows of other modules).
ROW_KEYS = ("id", "claim", "source", "measured", "verdict", "evidence")


def verdict(holds: bool | None) -> str:
    """``reproduced`` if ``holds``, ``not reproduced`` if not, ``not testable...`` if None."""
    if holds is None:
        return NOT_TESTABLE
    return REPRODUCED if holds else NOT_REPRODUCED


def validate_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """Check one claim row against the shared schema; returns it as a dict.

    Every key of :data:`ROW_KEYS` must be a non-empty string and ``verdict`` one of
    :data:`VERDICTS`; ``ValueError`` names the row and the problem otherwise.
    """
    name = row.get("id", "<no id>") if isinstance(row, Mapping) else repr(row)
    if not isinstance(row, Mapping):
        raise ValueError(f"claim row {name} is not a dict")
    for key in ROW_KEYS:
        if not isinstance(row.get(key), str) or not row[key].strip():
            raise ValueError(f"claim row {name!r}: {key!r} must be a non-empty string")
    if row["verdict"] not in VERDICTS:
        raise ValueError(f"claim row {name!r}: verdict {row['verdict']!r} is not one of {VERDICTS}")
    return dict(row)
