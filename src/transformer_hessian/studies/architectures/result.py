"""The study's result file (``results/architectures/<exp>/architectures.json``): save and load."""

from __future__ import annotations

import math
import os
from typing import Any

__all__ = ["OUTPUTS", "RESULT_KEYS", "load_result", "save_result"]

#: Keys every result file holds.
RESULT_KEYS = ("experiment", "dataset", "settings", "architectures", "seconds")
RULE = "architectures"

#: rule -> output key -> path template with Snakemake wildcards: the one place these paths are typed
#: (the rule file takes its ``output:`` from here, the registry names them as ``Output(rule, key, ...)``;
#: both through :mod:`transformer_hessian.registry.outputs`).
OUTPUTS: dict[str, dict[str, str]] = {
    "architectures": {"json": "results/architectures/{exp}/architectures.json"},
    "architectures_report": {
        "claims": "results/architectures/{exp}/claim_rows.json",
        "summary": "results/architectures/{exp}/summary.json",
    },
}


def _finite(obj: Any) -> Any:
    """NaN and infinities as None (JSON has no NaN; the project's writer refuses them)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def save_result(result: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Write ``result`` (non-finite numbers as null) atomically with its digest."""
    from ...util.io import write_json

    missing = [k for k in RESULT_KEYS if k not in result]
    if missing:
        raise ValueError(f"architectures result lacks {missing}")
    write_json(_finite(result), path)


def load_result(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a result file; ``KeyError`` names missing keys and the rule that writes the file."""
    from ...util.io import load_keyed

    return load_keyed(path, RULE, RESULT_KEYS)
