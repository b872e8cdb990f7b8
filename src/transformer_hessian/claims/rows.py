"""The pipeline's own claim rows: the training accuracy of both experiments (the ``train`` rule's
``metrics.json``). A study's rows are in its folder or in the rules several studies share (``studies/block_claims.py``,
``studies/curve_claims.py``), or a rows file its rule writes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..util.datanames import described
from ..util.numfmt import fmt
from .schema import verdict

__all__ = ["training_claim_rows"]


def training_claim_rows(
    metrics_hessian: Mapping[str, Any],
    metrics_landscape: Mapping[str, Any],
    evidence_hessian: str,
    evidence_landscape: str,
) -> list[dict[str, Any]]:
    """Validation accuracy > 50 % of both trained models (rule: final ``val_acc > 0.5``)."""
    rows = []
    for key, metrics, paper_data, quote, evidence in (
        (
            "accuracy_hessian_model",
            metrics_hessian,
            "MNIST",
            "We train the model for a number of epochs, obtaining pretty high accuracy on a validation dataset (>50\\%)",
            evidence_hessian,
        ),
        (
            "accuracy_landscape_model",
            metrics_landscape,
            "CIFAR-100",
            "During traning, it is also trained for a number of epochs to achieve >50\\% Accuracy on a validation dataset.",
            evidence_landscape,
        ),
    ):
        acc = float(metrics["final"]["val_acc"])
        rows.append(
            {
                "id": key,
                "claim": quote,
                "source": "Sec. 5" + (" (MNIST model)" if paper_data == "MNIST" else " (CIFAR-100 model)"),
                "rule": "final validation accuracy > 0.50",
                "measured": f"{described(metrics['dataset'], paper_data)}: val acc {fmt(acc)} after {metrics['epochs']} epochs",
                "verdict": verdict(acc > 0.5),
                "evidence": evidence,
            }
        )
    return rows
