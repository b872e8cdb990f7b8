"""The language study's result files: paths (:data:`OUTPUTS`, the one place they are typed) and
their save/load pairs. Standard library only (the Snakefile imports it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ...util.io import load_keyed, write_json

__all__ = ["OUTPUTS", "load_result", "save_result"]

PathLike = str | os.PathLike[str]

#: rule -> output key -> path template.
OUTPUTS: dict[str, dict[str, str]] = {
    "lm_train": {
        "init": "results/lm/main/checkpoints/init.pt",
        "final": "results/lm/main/checkpoints/final.pt",
        "metrics": "results/lm/main/metrics.json",
        "corpus": "results/lm/main/corpus.json",
    },
    "lm_hessian": {"json": "results/lm/hessian.json", "maps": "results/lm/hessian_maps.npz"},
    "lm_vit_approx": {"json": "results/lm/vit_approx.json"},
    "lm_landscape": {"json": "results/lm/landscape.json"},
    "lm_scaling_models": {"json": "results/lm/scaling/parts/part{part}of{jobs}.json"},
    "lm_law": {"json": "results/lm/scaling/scaling.json"},
    # the package's curvature command writes all three into one folder (its --out)
    "lm_curvature": {
        "json": "results/lm/curvature/curvature.json",
        "eigenvectors": "results/lm/curvature/eigenvectors.pt",
        "png": "results/lm/curvature/curvature.png",
    },
    "lm_landscape2d": {"json": "results/lm/landscape2d.json"},
    "lm_claims": {"claims": "results/lm/claims.json", "summary": "results/lm/summary.json"},
}

#: keys every result of a rule holds (what its loader checks)
_KEYS = {
    "lm_hessian": ("corpus", "init", "trained"),
    "lm_vit_approx": ("approximations",),
    "lm_landscape": ("corpus", "curve", "assumption1"),
    "lm_scaling_models": ("part", "jobs", "models"),
    "lm_law": ("corpus", "rows", "law", "fits", "stationarity"),
    "lm_summary": ("corpus",),
    "lm_train": ("name", "sha256", "files"),
    "lm_curvature": ("eigenvalues", "trace", "P"),
    "lm_landscape2d": ("corpus", "a", "b", "loss", "quadratic", "eigenvalues", "near"),
}


def save_result(path: PathLike, result: Mapping[str, Any]) -> None:
    """Write one of the study's JSON results (atomic, with its digest)."""
    write_json(dict(result), path)


def load_result(path: PathLike, rule: str) -> dict[str, Any]:
    """Read the JSON result of ``rule`` (``lm_hessian``, ``lm_landscape``, ``lm_scaling_models``,
    ``lm_scaling``, ``lm_summary``, ``lm_curvature``, ``lm_landscape2d``), checking its keys."""
    return load_keyed(path, rule, _KEYS[rule])
