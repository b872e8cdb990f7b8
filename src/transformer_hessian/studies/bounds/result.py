"""The study's result file (``results/<exp>/bounds/<stage>.json``, one per stage): save and load."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ...util.io import load_keyed, write_json

__all__ = ["OUTPUTS", "RESULT_KEYS", "load_bounds", "save_bounds"]

#: Keys every result file holds (checked on reading).
RESULT_KEYS = ("stage", "summary")
RULE = "bounds"

#: rule -> output key -> path template with Snakemake wildcards: the one place these paths are typed
#: (the rule file takes its ``output:`` from here, the registry names them as ``Output(rule, key, ...)``;
#: both through :mod:`transformer_hessian.registry.outputs`).
OUTPUTS: dict[str, dict[str, str]] = {
    "bounds": {"json": "results/{exp}/bounds/{stage}.json"},
    "bounds_table": {
        "claims": "results/{exp}/bounds/claim_rows.json",
        "summary": "results/{exp}/bounds/summary_section.json",
    },
}


def save_bounds(path: str | os.PathLike[str], result: Mapping[str, Any]) -> None:
    """Write one stage's bound evaluation (``results/<exp>/bounds/<stage>.json``).

    The object of :func:`.pipeline.evaluate_bounds` (the sizes ``n_samples``, ``batch_size``,
    ``tokens``, ``width``, ``d_k``, ``d_ff``, ``ln_eps``, ``target``; ``records``: one row per block
    pair and bound; ``lemma4`` and its counter-examples; ``summary``: ``holds_fraction``,
    ``median_tightness``, ``max_tightness``, ``paper_holds_fraction``, ...) plus ``experiment``,
    ``stage``, ``dataset`` and ``seconds``.
    """
    write_json(dict(result), path)


def load_bounds(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a file written by :func:`save_bounds`; ``KeyError`` names missing keys and the rule."""
    return load_keyed(path, RULE, RESULT_KEYS)
