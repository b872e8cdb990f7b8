"""The study's result file (``results/<exp>/landscape/landscape.json``): save and load, and the
curve of a result that Figure 6 draws and the ``fig6_slope`` verdict uses (:func:`verdict_curve`;
the claims and the summary read the file through this module)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ...core.landscape import PAPER_GRANULARITY, verdict_curve  # noqa: F401  (the curve choice lives with the analysis)
from ...util.io import write_json

__all__ = ["OUTPUTS", "PAPER_GRANULARITY", "RESULT_KEYS", "save_landscape", "verdict_curve"]

#: Keys every result file holds (checked on reading).
RESULT_KEYS = ("slope", "slope_ci95")
RULE = "landscape"

#: rule -> output key -> path template with Snakemake wildcards: the one place these paths are typed
#: (the rule file takes its ``output:`` from here, the registry names them as ``Output(rule, key, ...)``;
#: both through :mod:`transformer_hessian.registry.outputs`).
OUTPUTS: dict[str, dict[str, str]] = {
    "landscape": {
        "json": "results/{exp}/landscape/landscape.json",
        "claims": "results/{exp}/landscape/claim_rows.json",
    },
}


def save_landscape(path: str | os.PathLike[str], result: Mapping[str, Any]) -> None:
    """Write Figure 6's result (``results/<exp>/landscape/landscape.json``).

    The object of :func:`.compute.analyse_landscape`: the settings it ran with (``granularity``,
    ``n_samples``, ``n_orderings``, ``seed``, ``ema_factor``, ``n_bootstrap``, ...), the curve (``k``,
    ``D_mean``, ``D_ema``, ``D_binned_k``, ``D_binned``: lists of floats), the fit (``slope``,
    ``intercept``, ``slope_ci95`` [lo, hi], ``ci95_contains_minus_one``, ``fit_k_min``, ``fit_k_max``,
    ``fit_n_points``), the loss range and Theorem 7's bound (``loss_mean``, ``loss_min``, ``loss_max``,
    ``theorem7_bound_2L``, ``bound_holds``, ``bound_max_ratio``), ``batch`` (the same for batch
    granularity) plus ``experiment``.
    """
    write_json(dict(result), path)
