"""The pipeline's own table (``run_summary``) and the frame of the machine-readable ``paper/summary.json``
(provenance, training, figures, tables); every study adds its own sections (``SUMMARY_SECTIONS``)."""

from __future__ import annotations

import datetime as _dt

import pandas as pd

from ..util.env import device_description, git_commit, package_versions
from ..util.io import load_metrics


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


def provenance(config_hash: str) -> dict:
    """Config hash, git commit, package versions and device of the run."""
    return {
        "config_hash": config_hash,
        "git_commit": git_commit(),
        "packages": package_versions(),
        "device": device_description(),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def build_summary(config_hash: str, metrics: list[str], figures: dict[str, str], tables: dict[str, str]) -> dict:
    """The frame of ``paper/summary.json``: provenance, every experiment's training, the figures and
    tables by file stem. The studies' sections are added by the summary rule's step.

    Each result file is read once and keyed by what it says of itself (experiment).
    """
    summary = {"provenance": provenance(config_hash), "training": {}}
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
    summary["figures"] = figures
    summary["tables"] = tables
    return summary
