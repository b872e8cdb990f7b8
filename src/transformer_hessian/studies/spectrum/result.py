"""The study's result file (``results/spectrum/<exp>.json``) and its summary section
(``results/spectrum/<exp>/summary.json``): save and load."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ...util.io import load_json, load_keyed, write_json

__all__ = ["OUTPUTS", "RESULT_KEYS", "load_result", "load_summary", "save_result", "save_summary"]

#: Keys every result file holds (checked on reading).
RESULT_KEYS = ("blocks", "whole_model", "interlacing")
RULE = "spectrum_compute"

#: rule -> output key -> path template with Snakemake wildcards: the one place these paths are typed
#: (the rule file takes its ``output:`` from here, the registry names them as ``Output(rule, key, ...)``;
#: both through :mod:`transformer_hessian.registry.outputs`).
OUTPUTS: dict[str, dict[str, str]] = {
    "spectrum_compute": {
        "json": "results/spectrum/{exp}.json",
        "summary": "results/spectrum/{exp}/summary.json",
    },
}


def save_result(path: str | os.PathLike[str], result: Mapping[str, Any]) -> None:
    """Write the matrix-free spectrum (``results/spectrum/<exp>.json``) atomically with its digest.

    The object of :func:`.compute.run_spectrum`: ``settings``, ``groups``, ``batch_size``,
    ``blocks`` (per block: ``top`` Ritz values with residuals, ``trace`` mean/stderr, ``density``
    grid and values, ``pair_norms`` 5 x 5), ``whole_model`` (``top``, ``trace``, ``n_params``),
    ``interlacing`` (``holds``, ``gap``) and ``seconds``; plus ``experiment``, ``dataset``, ``device``.
    """
    write_json(dict(result), path)


def load_result(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a file written by :func:`save_result`; ``KeyError`` names missing keys and the rule."""
    return load_keyed(path, RULE, RESULT_KEYS)


def save_summary(path: str | os.PathLike[str], section: Mapping[str, Any]) -> None:
    """Write the ``spectrum`` section of ``paper/summary.json`` (:func:`.compute.summary_section`);
    the summary rule reads it with ``--section spectrum=PATH``."""
    write_json(dict(section), path)


def load_summary(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a file written by :func:`save_summary`."""
    return load_json(path, RULE)
