"""Tables (CSV, LaTeX booktabs, Markdown) and the machine-readable paper/summary.json."""

from __future__ import annotations

import datetime as _dt

import pandas as pd

from ..studies.bounds.result import load_bounds
from ..studies.landscape.result import load_landscape
from ..util.env import device_description, git_commit, package_versions
from ..util.io import load_metrics, load_norms, load_theory_check
from ..util.tablefmt import _fmt, to_latex, to_markdown, write_table  # noqa: F401  (re-exported: they live in tablefmt)


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


def run_summary_table(metrics: dict[str, dict], hessian_seconds: dict[str, float] | None = None) -> pd.DataFrame:
    """One row per experiment: data set, sizes, parameters, epochs, accuracies, wall times."""
    rows = []
    for name, m in metrics.items():
        mc = m["model"]
        rows.append(
            {
                "experiment": name,
                "dataset": m["dataset"],
                "blocks": mc["depth"],
                "width": mc["width"],
                "d_k": mc["d_k"],
                "d_ff": mc["d_ff"],
                "tokens": (mc["image_size"] // mc["patch_size"]) ** 2,
                "parameters": m["n_parameters"],
                "n_train": m["n_train"],
                "n_val": m["n_val"],
                "epochs": m["epochs"],
                "train_acc": m["final"]["train_acc"],
                "val_acc": m["final"]["val_acc"],
                "train_seconds": m["train_seconds"],
                "device": m["device"],
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


def provenance(config_hash: str) -> dict:
    """Config hash, git commit, package versions and device of the run."""
    return {
        "config_hash": config_hash,
        "git_commit": git_commit(),
        "packages": package_versions(),
        "device": device_description(),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def build_summary(
    config_hash: str,
    norms: list[str],
    metrics: list[str],
    landscape: str,
    theory: list[str],
    figures: dict[str, str],
    tables: dict[str, str],
    bounds: list[str] | None = None,
) -> dict:
    """Gather every number the figures and tables show, with provenance.

    Each result file is read once and keyed by what it says of itself (stage, experiment).
    """
    summary = {"provenance": provenance(config_hash), "hessian": {}, "training": {}, "theory": {}}
    for path in norms:
        n = load_norms(path)
        summary["hessian"][n["stage"]] = {
            k: n[k] for k in ("blocks", "weights", "method", "seconds", "batch_size", "n_params", "experiment", "block")
        }
    for path in metrics:
        m = load_metrics(path)
        summary["training"][m["experiment"]] = {
            "dataset": m["dataset"],
            "val_acc": m["final"]["val_acc"],
            "train_acc": m["final"]["train_acc"],
            "val_loss": m["final"]["val_loss"],
            "train_loss": m["final"]["train_loss"],
            "epochs": m["epochs"],
            "n_parameters": m["n_parameters"],
            "train_seconds": m["train_seconds"],
            "history": m["history"],
            "model": m["model"],
        }
    summary["landscape"] = load_landscape(landscape)
    for path in theory:
        t = load_theory_check(path)
        summary["theory"][t["stage"]] = t
    if bounds:
        from ..studies.bounds.table import claim_rows

        results = {r["stage"]: r for r in map(load_bounds, bounds)}
        summary["bounds"] = {stage: r["summary"] for stage, r in results.items()}
        summary["bounds"]["claims"] = claim_rows(results)
    summary["figures"] = figures
    summary["tables"] = tables
    return summary
