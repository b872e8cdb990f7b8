"""The rules' steps of the architecture study: plain-argument functions that load the inputs, call
the computation and write the outputs (``transformer-hessian architectures run`` / ``report``)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...util.files import log

__all__ = ["report_step", "run_step"]


def run_step(
    *,
    spec: Any,
    experiment: str,
    section: Mapping[str, Any],
    data_root: str | os.PathLike[str],
    out: str | os.PathLike[str],
) -> dict[str, Any]:
    """Rule ``architectures``: every architecture of ``section`` (the validated
    ``architectures`` config section) trained on the data of ``spec`` (the Hessian experiment's
    :class:`~transformer_hessian.config.settings.Experiment`: data set, split, caps), with its Hessian on
    the fixed batch (``section.hessian_batch_size``, ``section.seed``) at init and after training;
    the result written to ``out`` and returned."""
    from ...config.architectures import architectures
    from ...core.hessian import fixed_batch
    from ...train import load_experiment_data
    from .compute import run_architecture
    from .result import save_result

    t0 = time.perf_counter()
    data = load_experiment_data(spec, data_root)
    batch = fixed_batch(data["train_x"], data["train_y"], int(section["hessian_batch_size"]), int(section["seed"]))
    archs = architectures(section)
    results = []
    for k, arch in enumerate(archs, 1):
        t1 = time.perf_counter()
        r = run_architecture(arch, section, data, batch)
        results.append(r)
        log.info(
            "architectures %d/%d %s: P %d, val acc %.3f, largest RMS block %s-%s, JS0 init %.3g trained %.3g, "
            "HVP check %.1e (%.1f s)",
            k,
            len(archs),
            arch.label(),
            r["trained"]["n_params"],
            r["training"]["val_acc"],
            *r["trained"]["leaders"]["rms"][0][:2],
            r["init"]["js0"]["js0"],
            r["trained"]["js0"]["js0"],
            max(r["init"]["hvp_rel_error"], r["trained"]["hvp_rel_error"]),
            time.perf_counter() - t1,
        )
    result = {
        "experiment": experiment,
        "dataset": spec.dataset,
        "settings": dict(section),
        "architectures": results,
        "seconds": time.perf_counter() - t0,
    }
    save_result(result, out)
    return result


def report_step(
    result_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    claims_out: str | os.PathLike[str],
    summary_out: str | os.PathLike[str],
) -> None:
    """Rule ``architectures_report``: ``<out_dir>/architectures.{csv,tex,md}``, the claim rows
    (a JSON list, for the claims rule's ``--rows``) and the summary section (JSON, for the summary
    rule's ``--section``) from the result file."""
    from ...util.io import write_json
    from ...util.tablefmt import write_table
    from .report import TABLE_CAPTION, claim_rows, summary_section, table
    from .result import load_result

    result = load_result(result_path)
    write_json(claim_rows(result, evidence=str(result_path)), claims_out)
    write_json(summary_section(result), summary_out)
    write_table(table(result), Path(out_dir) / "architectures", TABLE_CAPTION)
