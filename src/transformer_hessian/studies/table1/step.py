"""The rule's step of Table 1 (``transformer-hessian table1``): read the runs' metrics, build the
table, write it as CSV, LaTeX and Markdown."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...config.settings import Experiment

__all__ = ["run_step"]


def run_step(
    experiments: Mapping[str, Experiment], roles: Mapping[str, str], metrics: Sequence[str], out_dir: str
) -> None:
    """Rule table1: ``out_dir/table1.{csv,tex,md}`` from the experiments' sections, the experiment
    of each role (``{"hessian": ..., "landscape": ...}``) and the runs' metrics."""
    from ...util.io import load_metrics_by_experiment
    from ...util.tablefmt import write_table
    from .compute import table1

    df = table1(experiments, roles, load_metrics_by_experiment(metrics))
    write_table(
        df,
        Path(out_dir) / "table1",
        "Table 1: ViT hyperparameters of both experiments, this run next to the paper's values",
    )
