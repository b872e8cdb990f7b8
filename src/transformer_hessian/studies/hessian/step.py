"""The rules' steps of the Hessian study: ``transformer-hessian hessian`` (the dense Hessian of one
block's five groups and its norms) and ``transformer-hessian theory`` (the saved Hessian against
curvlinops products, the gate of Figures 3-5); both load the model in float64 and the fixed Hessian
batch through :func:`transformer_hessian.studies.hessian_batch.hessian_inputs` (shared with the bounds study); and
``transformer-hessian hessian-report`` (the study's tables, claim rows and summary sections)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...util.files import log

if TYPE_CHECKING:
    from ...config.settings import Experiment, Hessian

__all__ = ["hessian_step", "report_step", "theory_step"]


def hessian_step(
    checkpoint: str,
    stage: str,
    spec: Experiment,
    hessian: Hessian,
    data_root: str,
    out_npz: str,
    out_norms: str,
    device: str = "auto",
) -> dict[str, Any]:
    """Rule hessian: the dense Hessian of one block's five groups (``out_npz``,
    :func:`transformer_hessian.util.io.save_hessian`) and its block and weight norms (``out_norms``,
    :func:`transformer_hessian.util.io.save_norms`); returns the norms."""
    from ...core.hessian import block_norms, compute_hessian, group_layout, weight_norms
    from ...util.io import save_hessian, save_norms
    from ..hessian_batch import hessian_inputs

    model, images, labels = hessian_inputs(checkpoint, spec, hessian, data_root, device)
    block = hessian.block
    H, method, seconds = compute_hessian(model, block, images, labels, hessian.method)
    names, shapes, offsets = group_layout(model, block)
    Hn = H.cpu().numpy()
    save_hessian(out_npz, Hn, names, offsets, shapes)
    norms = {
        "stage": stage,
        "experiment": hessian.experiment,
        "block": block,
        "method": method,
        "seconds": seconds,
        "batch_size": int(len(images)),
        "n_params": int(offsets[-1]),
        "blocks": block_norms(Hn, offsets, names),
        "weights": weight_norms(model, block),
    }
    save_norms(out_norms, norms)
    log.info("hessian %s: %d x %d via %s in %.2f s", stage, Hn.shape[0], Hn.shape[1], method, seconds)
    return norms


def theory_step(
    checkpoint: str,
    stage: str,
    spec: Experiment,
    hessian: Hessian,
    data_root: str,
    hessian_npz: str,
    out: str,
    norms: str | None = None,
    probes: int | None = None,
    tolerance: float | None = None,
    device: str = "auto",
) -> dict[str, Any]:
    """Rule theory: check the saved Hessian against curvlinops products on ``probes`` random vectors
    per group; write the errors (:func:`transformer_hessian.util.io.save_theory_check`) and raise
    :class:`ValueError` when the largest relative error exceeds ``tolerance`` (the gate of the Hessian
    figures). ``probes`` and ``tolerance`` left as None take the schema's ``theory`` defaults."""
    from ...config.settings import Theory
    from ...core.checks import saved_hessian_check
    from ...util.io import load_hessian, load_norms, save_theory_check
    from ..hessian_batch import hessian_inputs

    given = {"probes": probes, "tolerance": tolerance}
    theory = Theory.with_defaults({k: v for k, v in given.items() if v is not None})
    probes, tolerance = theory.probes, theory.tolerance
    model, images, labels = hessian_inputs(checkpoint, spec, hessian, data_root, device)
    H = load_hessian(hessian_npz)["H"]
    result = saved_hessian_check(
        H,
        model,
        images,
        labels,
        probes=probes,
        seed=hessian.seed,
        tolerance=tolerance,
        block=hessian.block,
    )
    result["stage"] = stage
    result["hessian_file"] = hessian_npz
    result["hessian_method"] = load_norms(norms)["method"] if norms else "unknown"
    save_theory_check(out, result)
    worst = max(result["blocks"], key=lambda r: r["rel_error"])
    log.info(
        "saved Hessian (%s) vs curvlinops on %d probes (%s): max relative error %.3e (block %s-%s)",
        result["hessian_method"],
        result["n_probes"],
        stage,
        result["max_rel_error"],
        worst["row"],
        worst["col"],
    )
    if not result["passed"]:
        raise ValueError(
            f"the saved {result['hessian_method']} Hessian {hessian_npz} disagrees with curvlinops at stage "
            f"{stage}: relative error {result['max_rel_error']:.3e} in block ({worst['row']}, {worst['col']}) "
            f"exceeds theory.tolerance={tolerance:g} (details in {out})"
        )
    return result


def report_step(
    hessian_init: str,
    norms: Sequence[str],
    theory: Sequence[str],
    metrics: str,
    tables_dir: str,
    claims_out: str,
    hessian_section_out: str,
    theory_section_out: str,
) -> list[dict[str, Any]]:
    """Rule hessian_report: from both stages' norms and checks, the tables ``block_norms`` and
    ``closed_form_check`` in ``tables_dir``, the claim rows of Figures 3-5 (:func:`.claims.hessian_claim_rows`,
    with the spread of the entries of ``hessian_init``) as a JSON list, and the study's two
    ``paper/summary.json`` sections (:func:`.report.summary_sections`). Returns the claim rows."""
    from ...util.io import load_hessian, load_metrics, load_norms, load_theory_check, write_json
    from ...util.tablefmt import write_table
    from ..block_claims import entry_spread, hessian_claim_rows
    from .report import TABLE_CAPTIONS, block_norm_table, closed_form_table, summary_sections

    by_stage = {n["stage"]: (path, n) for path, n in ((p, load_norms(p)) for p in norms)}
    checks = [load_theory_check(p) for p in theory]
    (path_init, n_init), (path_trained, n_trained) = by_stage["init"], by_stage["trained"]
    rows = hessian_claim_rows(
        n_init,
        n_trained,
        load_metrics(metrics),
        evidence=", ".join((hessian_init, path_init, path_trained, metrics)),
        spread=entry_spread(load_hessian(hessian_init)["H"]),
    )
    write_json(rows, claims_out)
    hessian_section, theory_section = summary_sections([n for _, n in by_stage.values()], checks)
    write_json(hessian_section, hessian_section_out)
    write_json(theory_section, theory_section_out)
    out = Path(tables_dir)
    write_table(block_norm_table(n_init, n_trained), out / "block_norms", TABLE_CAPTIONS["block_norms"])
    write_table(
        closed_form_table({c["stage"]: c for c in checks}),
        out / "closed_form_check",
        TABLE_CAPTIONS["closed_form_check"],
    )
    return rows
