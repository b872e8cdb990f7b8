"""The studies, one folder each (a vertical slice: computation, result files, rule step, claim
rows, table, figure, registry entries and command). See docs/architecture.md.

A study is found by its folder alone: the command line (:func:`transformer_hessian.pipeline.cli.build_parser`)
adds the parser of every ``studies/<name>/cli.py`` (its ``add_parser``), the figure registry
(:mod:`transformer_hessian.registry`) collects every ``studies/<name>/registry.py`` (its
``FIGURES`` and ``ARTEFACTS``), and the Snakefile includes every ``workflow/rules/studies/*.smk``.
:func:`study_parts` is that discovery: sorted by study name, so the order is the same on every
machine. :mod:`.entry` holds the :class:`~.entry.Figure` record the registry entries are made of.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from types import ModuleType

__all__ = ["study_names", "study_parts"]


def study_names() -> list[str]:
    """The studies: every subpackage of this package, sorted by name."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg)


def study_parts(part: str) -> list[ModuleType]:
    """The module ``studies.<name>.<part>`` of every study that has one (e.g. ``"cli"``,
    ``"registry"``), imported, in the order of :func:`study_names`."""
    out = []
    for name in study_names():
        full = f"{__name__}.{name}.{part}"
        if importlib.util.find_spec(full) is not None:
            out.append(importlib.import_module(full))
    return out
