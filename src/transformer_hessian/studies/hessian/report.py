"""What the Hessian study reports from its rules' results: the tables ``block_norms`` and
``closed_form_check`` (:func:`block_norm_table`, :func:`closed_form_table`) and its two sections of
``paper/summary.json`` (:func:`summary_sections`: ``hessian``, the block and weight norms per stage,
and ``theory``, the saved Hessian's check per stage). The ``hessian_report`` rule writes them
(:func:`.step.report_step`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

__all__ = ["TABLE_CAPTIONS", "block_norm_table", "closed_form_table", "summary_sections"]

#: Caption of each table (file stem -> caption).
TABLE_CAPTIONS = {
    "block_norms": "Hessian block norms of the loss w.r.t. (W_Q, W_K, W_V, W_1, W_2) at initialisation and after training",
    "closed_form_check": "Saved Hessian vs curvlinops Hessian-vector products on random probes: errors and functional "
    "share per block pair",
}

#: The keys of a stage's norms that ``paper/summary.json`` keeps.
NORMS_KEYS = ("blocks", "weights", "method", "seconds", "batch_size", "n_params", "experiment", "block")


def block_norm_table(norms_init: dict, norms_trained: dict) -> pd.DataFrame:
    """Frobenius, spectral and max |entry| of the 25 Hessian blocks at init and after training."""
    rows = []
    for a, b in zip(norms_init["blocks"], norms_trained["blocks"]):
        assert (a["row"], a["col"]) == (b["row"], b["col"])
        rows.append(
            {
                "row": a["row"],
                "col": a["col"],
                "init_fro": a["fro"],
                "init_spectral": a["spectral"],
                "init_max_abs": a["max_abs"],
                "trained_fro": b["fro"],
                "trained_spectral": b["spectral"],
                "trained_max_abs": b["max_abs"],
            }
        )
    return pd.DataFrame(rows)


def closed_form_table(checks: dict[str, dict]) -> pd.DataFrame:
    """Per stage and block pair: the Hessian check's errors and the functional vs outer-product share."""
    rows = []
    for stage, c in checks.items():
        for b in c["blocks"]:
            rows.append(
                {
                    "stage": stage,
                    "row": b["row"],
                    "col": b["col"],
                    "max_abs_error": b["max_abs_error"],
                    "rel_error": b["rel_error"],
                    "fro_outer": b["fro_outer"],
                    "fro_functional": b["fro_functional"],
                    "functional_share": b["functional_share"],
                }
            )
    return pd.DataFrame(rows)


def summary_sections(
    norms: Iterable[Mapping[str, Any]], checks: Iterable[Mapping[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(hessian, theory)``: the stages' norms (:data:`NORMS_KEYS`) and the stages' checks, each keyed
    by the stage the file names."""
    hessian = {n["stage"]: {k: n[k] for k in NORMS_KEYS} for n in norms}
    theory = {c["stage"]: dict(c) for c in checks}
    return hessian, theory
