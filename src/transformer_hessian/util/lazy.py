"""Lazy re-exports: a package's public names, imported from the modules that define them on first use
(so that importing the package imports no torch). Imports nothing from the package."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, owners: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``name`` comes from ``owners[name]`` (a module path
    relative to ``package``, e.g. ``".loading"``) on first use and is then kept in the package."""

    def __getattr__(name: str) -> Any:
        module = owners.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
