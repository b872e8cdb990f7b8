"""The study's result files (``results/<exp>/dynamics/dynamics.{npz,json}``): save and load."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...util.io import open_npz, save_npz, write_json

__all__ = ["OUTPUTS", "load_dynamics", "save_dynamics"]

RULE = "dynamics"

#: rule -> output key -> path template with Snakemake wildcards: the one place these paths are typed
#: (the rule file takes its ``output:`` from here, the registry names them as ``Output(rule, key, ...)``;
#: both through :mod:`transformer_hessian.registry.outputs`).
OUTPUTS: dict[str, dict[str, str]] = {
    "dynamics": {
        "npz": "results/{exp}/dynamics/dynamics.npz",
        "json": "results/{exp}/dynamics/dynamics.json",
    },
}


def save_dynamics(
    npz_path: str | os.PathLike[str],
    json_path: str | os.PathLike[str],
    arrays: Mapping[str, Any],
    summary: Mapping[str, Any],
) -> None:
    """Write the training-dynamics snapshots (``results/<exp>/dynamics/dynamics.{npz,json}``).

    ``npz_path``: the arrays of :func:`.compute.record_dynamics` (``steps`` int64 ``(S,)``,
    ``names`` str ``(G,)``, per group the weight snapshots ``(S, out, in)`` and the diagonal and
    chosen off-diagonal Hessian blocks per snapshot; float64). ``json_path``: its summary (``steps``,
    per-snapshot norms and Hessian block norms, ``seconds``, ``hessian_seconds``, ``hessian_method``,
    ``capped``, ``requested_steps``, ``replayed_steps``, ``epoch_checks``, ``experiment``,
    ``dataset``, ``model`` and, when checked, ``init_hessian_check``).
    """
    save_npz(npz_path, **arrays)
    write_json(dict(summary), json_path)


def load_dynamics(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read the ``.npz`` of :func:`save_dynamics` into a dict of arrays (``names`` as a list of str)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"dynamics file {str(path)!r} not found; run the pipeline's dynamics rule")
    with open_npz(path, RULE) as data:
        out = {k: np.asarray(data[k]) for k in data.files}
    out["names"] = [str(n) for n in out["names"]]
    return out
