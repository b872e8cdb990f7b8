"""The study's result file (``results/<exp>/probe/probe.json``): save and load."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ...util.io import load_keyed, write_json

__all__ = ["OUTPUTS", "load_probe", "save_probe"]

#: rule -> output key -> path template with Snakemake wildcards: the one place these paths are typed
#: (the rule file takes its ``output:`` from here, the registry names them as ``Output(rule, key, ...)``;
#: both through :mod:`transformer_hessian.registry.outputs`).
OUTPUTS: dict[str, dict[str, str]] = {
    "probe": {
        "json": "results/{exp}/probe/probe.json",
        "claims": "results/{exp}/probe/claim_rows.json",
    },
}


def save_probe(path: str | os.PathLike[str], result: Mapping[str, Any]) -> None:
    """Write the landscape probes (``results/<exp>/probe/probe.json``).

    The object of :func:`.compute.run_probe` (``M``, ``theorem7`` records and ``theorem7_summary``,
    ``taylor``, ``assumption1`` with ``slope`` and ``slope_ci95``, ``timings``, ...) plus
    ``experiment`` and ``dataset``.
    """
    write_json(dict(result), path)


def load_probe(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a file written by :func:`save_probe`."""
    return load_keyed(path, "probe", ("theorem7_summary", "assumption1"))
