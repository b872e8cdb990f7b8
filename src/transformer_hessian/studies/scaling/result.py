"""The study's result files: the parts of the sweep (``results/scaling/parts/part<i>of<n>.json``),
the aggregate (``results/scaling/scaling.json``) and its summary section
(``results/scaling/summary.json``): save and load."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ...util.io import load_json, load_keyed, write_json

__all__ = [
    "OUTPUTS",
    "load_scaling",
    "load_scaling_part",
    "load_summary",
    "save_scaling",
    "save_scaling_part",
    "save_summary",
    "summary_section",
]

PathLike = str | os.PathLike[str]

#: rule -> output key -> path template with Snakemake wildcards: the one place these paths are typed
#: (the rule file takes its ``output:`` from here, the registry names them as ``Output(rule, key, ...)``;
#: both through :mod:`transformer_hessian.registry.outputs`).
OUTPUTS: dict[str, dict[str, str]] = {
    "scaling_models": {"json": "results/scaling/parts/part{part}of{jobs}.json"},
    "scaling": {
        "json": "results/scaling/scaling.json",
        "summary": "results/scaling/summary.json",
    },
}


def save_scaling_part(path: PathLike, part: int, jobs: int, models: list[dict]) -> None:
    """Write one part of the scaling sweep (``results/scaling/parts/part<i>of<n>.json``):
    ``{"part", "jobs", "models": [one result of :func:`.compute.run_models` per model]}``."""
    write_json({"part": int(part), "jobs": int(jobs), "models": list(models)}, path)


def load_scaling_part(path: PathLike) -> dict[str, Any]:
    """Read a file written by :func:`save_scaling_part`."""
    return load_keyed(path, "scaling_models", ("part", "jobs", "models"))


def save_scaling(path: PathLike, result: Mapping[str, Any]) -> None:
    """Write the scaling study (``results/scaling/scaling.json``): the object of
    :func:`.compute.aggregate` (``dataset``, ``settings``, ``rows``: one per model with its
    parameter count, slope and interval, prefactor, k* measured and fitted, top eigenvalue, block
    norms; ``fits``: data-set size -> series -> quantity -> power law; ``models``: the full results)."""
    write_json(dict(result), path)


def load_scaling(path: PathLike) -> dict[str, Any]:
    """Read a file written by :func:`save_scaling`."""
    return load_keyed(path, "scaling", ("rows", "fits"))


def summary_section(result: Mapping[str, Any]) -> dict[str, Any]:
    """The ``scaling`` section of ``paper/summary.json``: the aggregate without the per-model
    results (``models``: curves), i.e. per-model numbers and power-law fits."""
    return {k: v for k, v in result.items() if k != "models"}


def save_summary(path: PathLike, section: Mapping[str, Any]) -> None:
    """Write the summary section (:func:`summary_section`); the summary rule reads it with
    ``--section scaling=PATH``."""
    write_json(dict(section), path)


def load_summary(path: PathLike) -> dict[str, Any]:
    """Read a file written by :func:`save_summary`."""
    return load_json(path, "scaling")
