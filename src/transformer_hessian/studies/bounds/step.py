"""The bounds rules' steps: plain-argument functions that load the inputs, call the computation
(:mod:`.pipeline`, :mod:`.table`) and write the outputs; ``cli.py`` only parses arguments and
calls them (``transformer-hessian bounds evaluate`` / ``bounds table``, :mod:`.cli`)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from ...config.settings import Bounds, Experiment, Hessian
from ...util.files import log

__all__ = ["evaluate_step", "table_step"]

#: Caption of ``paper/tables/bounds.*``.
TABLE_CAPTION = (
    "Hessian spectral norms vs bounds per block pair: measured, project bound (proven), paper bound "
    "(Theorems 1 and 6 with Lemma 4), ratio project/measured, fraction of samples where each held. "
    "theory = per-sample MSE to the next sample's output (like for like); experiment = the CE Hessian "
    "of Figs 3-5 vs the project CE bound (like for like) and the paper's MSE bound (not like for like)"
)


def evaluate_step(
    *,
    checkpoint: str | os.PathLike[str],
    stage: str,
    spec: Experiment,
    hessian: Hessian,
    bounds: Bounds,
    data_root: str | os.PathLike[str],
    norms: str | os.PathLike[str],
    out: str | os.PathLike[str],
    hessian_npz: str | os.PathLike[str] | None = None,
    device: str = "auto",
) -> dict:
    """Rule ``bounds``: one stage's evaluation written to ``out`` (JSON); returns the result.

    The model at ``checkpoint`` (float64) on the Hessian experiment's fixed batch
    (``hessian.batch_size``, ``hessian.seed`` of the data set ``spec`` under ``data_root``),
    the measured CE blocks of ``norms`` (the hessian rule's ``<stage>_norms.json``) and, with
    ``hessian_npz``, the spectral norm of the whole saved Hessian as the ``total`` entry; then
    :func:`.pipeline.evaluate_bounds` with ``bounds.n_samples`` and ``bounds.delta``. The result
    also names ``experiment``, ``stage``, ``dataset`` and its wall time ``seconds``."""
    import torch

    from ...util.io import load_hessian, load_norms
    from ..hessian_batch import hessian_inputs
    from .pipeline import evaluate_bounds, single_threaded, spectral_norm
    from .result import save_bounds

    t0 = time.perf_counter()
    model, images, labels = hessian_inputs(checkpoint, spec, hessian, data_root, device)
    measured = load_norms(norms)
    if hessian_npz:
        H = torch.as_tensor(load_hessian(hessian_npz)["H"])
        with single_threaded():
            measured["total_spectral"] = spectral_norm(H, symmetric=True)
    result = evaluate_bounds(
        model, images, labels, measured, n_samples=bounds.n_samples, delta=bounds.delta, label=f"bounds {stage}"
    )
    result["experiment"], result["stage"] = hessian.experiment, stage
    result["dataset"] = spec.dataset
    result["seconds"] = time.perf_counter() - t0
    save_bounds(out, result)
    s = result["summary"]
    log.info(
        "bounds %s: project bound held in %.1f%% of %d evaluations; median tightness %.3g (max %.3g); paper holds %s",
        stage,
        100 * s["holds_fraction"],
        len(result["records"]),
        s["median_tightness"],
        s["max_tightness"],
        s["paper_holds_fraction"],
    )
    return result


def table_step(
    results: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    claims_out: str | os.PathLike[str] | None = None,
    summary_out: str | os.PathLike[str] | None = None,
) -> None:
    """Rule ``bounds_table``: ``<out_dir>/bounds.{csv,tex,md}`` (:func:`.table.bounds_table`) from
    the stages' result JSONs and, with ``claims_out``, their claim rows (:func:`.table.claim_rows`)
    as a JSON list; with ``summary_out``, the study's ``paper/summary.json`` section (each stage's
    ``summary`` and, under ``claims``, the claim rows)."""
    from ...util.io import write_json
    from ...util.tablefmt import write_table
    from .result import load_bounds
    from .table import bounds_table, claim_rows

    loaded = {r["stage"]: r for r in map(load_bounds, results)}
    if claims_out:
        write_json(claim_rows(loaded), claims_out)
    if summary_out:
        section = {stage: r["summary"] for stage, r in loaded.items()}
        section["claims"] = claim_rows(loaded)
        write_json(section, summary_out)
    write_table(bounds_table(loaded), Path(out_dir) / "bounds", TABLE_CAPTION)
