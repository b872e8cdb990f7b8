"""Where each data set comes from: names, class counts, file layouts (from :data:`transformer_hessian.util.datanames.DATA_SETS`) and torchvision's tables.

torchvision (about 2 s to import) is imported only when a table of a downloadable data set is
first needed (:func:`torchvision_datasets`), so loading or "downloading" the offline ``digits``
never pays for it. :data:`MIRRORS` and :data:`RESOURCES` are built on first access from
torchvision's ``MNIST`` / ``CIFAR100`` classes and cached (the same dicts every time).
"""

from __future__ import annotations

import functools

from ..errors import DataError  # noqa: F401  (re-exported: the class lives in errors.py)
from ..util.datanames import DATA_SETS

__all__ = [
    "DATASETS",
    "NUM_CLASSES",
    "MNIST_FILES",
    "DataError",
    "check_name",
    "torchvision_datasets",
    "cifar100",
    "cifar100_dir",
    "cifar100_members",
    "mirrors",
    "resources",
]

#: Names accepted by :func:`.fetch.download` and :func:`.datasets.load_dataset` (:data:`transformer_hessian.util.datanames.DATA_SETS`).
DATASETS = tuple(DATA_SETS)

#: Number of classes of each data set.
NUM_CLASSES = {d.name: d.num_classes for d in DATA_SETS.values()}

#: Decompressed MNIST files: split -> (images, labels).
MNIST_FILES = {split: (images, labels) for split, images, labels in DATA_SETS["mnist"].files}


def check_name(name: str) -> str:
    """``name`` if it is one of :data:`DATASETS`, else :class:`DataError` listing them."""
    if name not in DATASETS:
        raise DataError(f"unknown data set {name!r}; choose one of {', '.join(DATASETS)}")
    return name


@functools.cache
def torchvision_datasets():
    """``(MNIST, CIFAR100)``: torchvision's data set classes, whose attributes are the url and md5
    tables used here (imported on first call only)."""
    from torchvision.datasets import CIFAR100, MNIST

    return MNIST, CIFAR100


def cifar100():
    """torchvision's ``CIFAR100`` class (``url``, ``filename``, ``tgz_md5``, ``base_folder``,
    ``train_list``, ``test_list``, ``meta``)."""
    return torchvision_datasets()[1]


def cifar100_dir() -> str:
    """Folder the CIFAR-100 archive extracts to (``cifar-100-python``)."""
    return cifar100().base_folder


def cifar100_members() -> list[tuple[str, str]]:
    """``(file name, md5)`` of the extracted CIFAR-100 files (train, test, meta), torchvision's md5."""
    c = cifar100()
    return [(str(f), str(m)) for f, m in c.train_list + c.test_list] + [(c.meta["filename"], c.meta["md5"])]


@functools.cache
def mirrors() -> dict[str, list[str]]:
    """Base urls tried in order for each downloadable data set (torchvision's own tables); a
    ``mirror`` passed to :func:`.fetch.download` replaces this list. Cached: one dict."""
    MNIST, CIFAR100 = torchvision_datasets()
    return {"mnist": list(MNIST.mirrors), "cifar100": [CIFAR100.url.rsplit("/", 1)[0] + "/"]}


@functools.cache
def resources() -> dict[str, list[tuple[str, str]]]:
    """``(file name, md5)`` of the raw files of each downloadable data set (torchvision's tables).
    Cached: one dict."""
    MNIST, CIFAR100 = torchvision_datasets()
    return {
        "mnist": [(str(f), str(m)) for f, m in MNIST.resources],
        "cifar100": [(CIFAR100.filename, CIFAR100.tgz_md5)],
    }


def __getattr__(name: str):
    # MIRRORS / RESOURCES as module attributes, built (and torchvision imported) on first access.
    if name == "MIRRORS":
        return mirrors()
    if name == "RESOURCES":
        return resources()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
