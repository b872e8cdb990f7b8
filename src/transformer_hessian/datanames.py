"""Whether a run's data set stands in for the one the paper used in that experiment.

The paper runs its Hessian experiments (Figures 3-5, 7-11) on MNIST and its landscape, probe
and spectrum experiments (Figures 1, 6, 12) on CIFAR-100. A run on another data set (the
embedded default's 8x8 digits, or MNIST in the CIFAR-100 experiments of
``config/paper_mnist.yaml``) is a stand-in, and every text that names the data set says so
("MNIST, stand-in for CIFAR-100").
"""

from __future__ import annotations

__all__ = ["PAPER_NAMES", "described", "stands_in"]

#: The data sets' names as the paper writes them.
PAPER_NAMES = {"digits": "8x8 digits", "mnist": "MNIST", "cifar100": "CIFAR-100"}


def stands_in(dataset: str, paper_data: str | None) -> bool:
    """True when ``dataset`` (a config name) is not the paper's ``paper_data`` of that experiment.

    ``paper_data`` is "MNIST", "CIFAR-100" or "MNIST / CIFAR-100" (either); ``None`` or "" means
    no comparison (never a stand-in).
    """
    if not paper_data:
        return False
    return PAPER_NAMES.get(dataset, dataset) not in [p.strip() for p in paper_data.split("/")]


def described(dataset: str, paper_data: str | None, stand_in: str = ", stand-in for {}") -> str:
    """The data set's name as the paper writes it, with ``stand_in`` (formatted with
    ``paper_data``) appended when it stands in for the paper's data of that experiment."""
    name = PAPER_NAMES.get(dataset, dataset)
    return name + stand_in.format(paper_data) if stands_in(dataset, paper_data) else name
