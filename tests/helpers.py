"""Helpers shared by test modules of several folders: not a test module (``from helpers import rel_err``).

* ``rel_err``: the relative error of a tensor against its reference;
* ``json_numbers``: every number inside a JSON value, with its path.
"""

from __future__ import annotations

import math


def rel_err(a, ref, *, norm: str = "fro", absolute_at_zero: bool = False) -> float:
    """||a - ref|| / ||ref||, in the Frobenius norm (``norm="fro"``, the engine and encoder tests) or
    by the largest entry, max |a - ref| / max |ref| (``norm="max"``, the theory tests).

    A reference that is exactly zero has no relative error: the result is then the absolute error
    ||a - ref|| with ``absolute_at_zero`` (for references that are zero by construction), else 0.0
    where ``a`` is exactly zero too and inf otherwise, so that no tolerance passes a nonzero ``a``."""
    diff = a - ref
    if norm == "fro":
        num, den = diff.norm().item(), ref.norm().item()
    elif norm == "max":
        num, den = diff.abs().max().item(), ref.abs().max().item()
    else:
        raise ValueError(f"norm must be 'fro' or 'max', not {norm!r}")
    if den > 0:
        return num / den
    if absolute_at_zero or num == 0:
        return num
    return math.inf


def json_numbers(obj, path=""):
    """Every number (int/float, not bool) inside a JSON value, as (path, number) pairs."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return
    if isinstance(obj, (int, float)):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from json_numbers(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from json_numbers(v, f"{path}[{i}]")
