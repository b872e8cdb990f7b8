"""Table 1's entry in ``paper/README.md`` (:mod:`transformer_hessian.registry` collects it): no
figure, one table."""

from __future__ import annotations

from ..entry import Figure

__all__ = ["ARTEFACTS", "FIGURES"]

FIGURES: list[Figure] = []

ARTEFACTS: list[tuple[str, str, str, str, str]] = [
    (
        "tables/table1.{csv,tex,md}",
        "Table 1: the ViT hyperparameters of both experiments from the config, next to the "
        "paper's, plus tokens, parameters, epochs, optimiser, learning rate, batch size and validation accuracy reached",
        "`transformer-hessian table1`",
        "`table1`",
        "`studies.table1.compute.table1`",
    ),
]
