"""The report rules' steps (tables, summary, claims, claims-readme, registry): plain-argument
functions that read the results through :mod:`.io`, build the tables, ``summary.json``, the claim
verdicts and the registry's README, and write them (the layering of :mod:`.steps`, whose
``cli`` commands call them)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..util.files import log

__all__ = ["tables_step", "summary_step", "claims_step", "claims_readme_step", "registry_step"]


def tables_step(metrics: Sequence[str], out_dir: str) -> None:
    """Rule tables: the pipeline's own table, ``out_dir/run_summary.{csv,tex,md}`` (a study writes its own)."""
    from ..util.io import load_metrics_by_experiment
    from ..util.tablefmt import write_table
    from .report import run_summary_table

    write_table(
        run_summary_table(load_metrics_by_experiment(metrics)), Path(out_dir) / "run_summary", "Runs behind the figures"
    )


def summary_step(
    config_hash: str,
    metrics: Sequence[str],
    out: str,
    figures: Sequence[str] = (),
    tables: Sequence[str] = (),
    registry_config: Mapping[str, Any] | None = None,
    notebook_dir: str | None = None,
    claims: str | None = None,
    sections: Sequence[str] = (),
) -> dict[str, Any]:
    """Rule summary: ``paper/summary.json`` (:func:`.report.build_summary`, keyed by file stem for
    figures and tables) with, when given, the figures' provenance, the claim rows and each
    study's section (``sections``: ``NAME=PATH``, the JSON its rule wrote; ``SUMMARY_SECTIONS``)."""
    from ..util.io import load_claims, save_summary
    from .report import build_summary

    fig_map = {Path(p).stem: p for p in figures}
    table_map = {Path(p).stem: p for p in tables}
    summary = build_summary(config_hash, metrics, fig_map, table_map)
    if registry_config:
        from ..registry import provenance

        summary["figure_provenance"] = provenance(registry_config, notebook_dir=notebook_dir)
    if claims:
        summary["claims"] = load_claims(claims)
    for item in sections:  # NAME=PATH: a study's own section (e.g. architectures)
        name, _, path = item.partition("=")
        if not name or not path or name in summary:
            raise ValueError(f"--section {item!r}: expected NAME=PATH with a NAME not already in the summary")
        from ..util.io import load_json

        summary[name] = load_json(path)
    save_summary(out, summary)
    return summary


def claims_step(
    metrics_hessian: str,
    metrics_landscape: str,
    out_json: str,
    out_md: str,
    rows: Sequence[str] = (),
    own_rows_at: int | None = None,
    config_hash: str | None = None,
) -> list[dict]:
    """Rule claims: one verdict per empirical claim of the paper (:func:`.claims.collect_claims`).

    ``rows``: the JSON lists of finished rows the studies' rules write (``CLAIM_ROW_FILES``, in the
    order of their ranks); the pipeline's own rows (training accuracy) go after the first
    ``own_rows_at`` of them (at the end when None). Writes ``out_json`` and ``out_md``
    (:func:`.io.save_claims`); returns the rows."""
    from .. import claims
    from ..util.io import load_json, load_metrics, save_claims

    mh, ml = load_metrics(metrics_hessian), load_metrics(metrics_landscape)
    files = [load_json(path) for path in rows]
    at = len(files) if own_rows_at is None else own_rows_at
    own = claims.training_claim_rows(mh, ml, metrics_hessian, metrics_landscape)
    out = claims.collect_claims(*files[:at], own, *files[at:])
    save_claims(out_json, out_md, out, config_hash, claims.claims_document(out, config_hash))
    failed = [r["id"] for r in out if r["verdict"] == claims.NOT_REPRODUCED]
    log.info("claims: %d rows, not reproduced: %s", len(out), ", ".join(failed) or "none")
    return out


def claims_readme_step(
    claims_path: str, readme: str, check: bool = False, tag: str = "claims", doc: str | None = None
) -> None:
    """Refresh the generated claims sections (markers ``<!-- <tag>:start -->``) from ``claims_path``:
    the full table in ``doc`` (``docs/claims.md``) and its short summary, which links ``doc``, in
    ``readme``; with ``check``, raise :class:`ValueError` when either differs instead of writing."""
    from .. import claims
    from ..util.files import write_text
    from ..util.io import load_claims

    rows = load_claims(claims_path)
    doc = doc or claims.CLAIMS_DOC
    link = os.path.relpath(os.path.abspath(doc), os.path.dirname(os.path.abspath(readme)))
    targets = [(doc, None), (readme, link)]
    for path, summary_link in targets:
        text = Path(path).read_text()
        new = claims.update_readme(text, rows, tag, summary_link)
        if check:
            if new != text:
                raise ValueError(
                    f"{path}: the claims section differs from {claims_path}; run "
                    f"`transformer-hessian claims-readme --claims {claims_path} --readme {readme} --doc {doc}"
                    + ("" if tag == "claims" else f" --tag {tag}")
                    + "`"
                )
            log.info("%s: claims section up to date", path)
        else:
            write_text(new, path)
            log.info("%s: claims section refreshed from %s", path, claims_path)


def registry_step(path: str, write_readme: bool = False, check: bool = False) -> None:
    """Write (``write_readme``) or check (``check``) the generated paper README at ``path``, or print
    the figure registry (id, paper label, notebook) one figure per line."""
    from .. import registry
    from ..util.files import write_text

    text = registry.render_paper_readme()
    if write_readme:
        write_text(text, path)
        log.info("wrote %s from the figure registry", path)
    elif check:
        if Path(path).read_text() != text:
            raise ValueError(f"{path} differs from the registry; run `transformer-hessian registry --write-readme`")
        log.info("%s matches the registry", path)
    else:
        for fig in registry.FIGURES:
            print(f"{fig.id}\t{fig.paper}\t{fig.label}\tnotebooks/{fig.notebook}")
