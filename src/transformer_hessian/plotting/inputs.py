"""Result inputs of the figure helpers: a loaded document or a path to it; the readers are
:mod:`transformer_hessian.util.io`'s (which owns every result format)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..util.io import load_json

__all__ = ["as_mapping"]


def as_mapping(obj: Mapping[str, Any] | str | os.PathLike[str]) -> Mapping[str, Any]:
    """``obj`` itself when it is a mapping, else the JSON document at the path ``obj``."""
    if isinstance(obj, (str, os.PathLike)):
        return load_json(obj)
    return obj
