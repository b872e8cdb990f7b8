"""The one table of data sets, and how texts name a data set.

:data:`DATA_SETS` holds every fact about a data set the pipeline knows, typed once, as a frozen
:class:`DataSet` per data set (config name -> record, in the order of the schema's ``enum``):
name, shape, classes, training images, split, the library that ships it, its files, the paper's
name and what it stands in for. Everything else derives from it: the names accepted by
:func:`.data.sources.check_name`, the class counts, the shapes of the cross-key checks
(``config_checks``), the decompressed MNIST files, and every display name of the figures, tables
and claims (:func:`named`, :func:`described`, :func:`library_name`, :func:`table_name`). Each data
set's reader is registered by the same name in :data:`.data.datasets.READERS`. This module imports
only the standard library (util layer), so the bottom layers (``plotting``, the config checks)
read it without torch or torchvision.

The paper runs its Hessian experiments (Figures 3-5, 7-11) on MNIST and its landscape, probe
and spectrum experiments (Figures 1, 6, 12) on CIFAR-100. A run on another data set (the
embedded default's 8x8 digits, or MNIST in the CIFAR-100 experiments of
``config/paper_mnist.yaml``) is a stand-in, and every text that names the data set says so
("MNIST, stand-in for CIFAR-100").
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DATA_SETS",
    "PAPER_NAMES",
    "DataSet",
    "described",
    "library_name",
    "named",
    "stands_in",
    "table_name",
]


@dataclass(frozen=True)
class DataSet:
    """One data set.

    ``name``: its config name (``experiments.<exp>.dataset``, the folder ``<root>/<name>/``).
    ``paper_name``: the name as the paper writes it ("MNIST", "CIFAR-100"; "8x8 digits").
    ``side``, ``channels``, ``num_classes``: square images of ``side`` x ``side`` pixels.
    ``train_images``: training images before ``max_train`` (official split), or all images when
    ``val_fraction`` splits them (``official_split`` False).
    ``library``: the Python library that ships it (offline, no files; named in figure titles),
    ``None`` for a download.
    ``files``: the decompressed files its reader reads, ``(split, images, labels)`` (empty when the
    file names come from torchvision's tables, :mod:`.data.sources`, or there are none).
    ``stands_in_for``: the paper's data sets it replaces when the paper's are not at hand (empty
    for the paper's own data sets; whether a run stands in depends on the experiment:
    :func:`stands_in`).
    """

    name: str
    paper_name: str
    side: int
    channels: int
    num_classes: int
    train_images: int
    official_split: bool
    library: str | None = None
    files: tuple[tuple[str, str, str], ...] = ()
    stands_in_for: tuple[str, ...] = ()

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(side, channels, classes)``: what the cross-key checks and the parameter count need."""
        return (self.side, self.channels, self.num_classes)


DATA_SETS: dict[str, DataSet] = {
    d.name: d
    for d in (
        DataSet(
            name="digits",
            paper_name="8x8 digits",
            side=8,
            channels=1,
            num_classes=10,
            train_images=1797,
            official_split=False,
            library="scikit-learn",
            stands_in_for=("MNIST", "CIFAR-100"),
        ),
        DataSet(
            name="mnist",
            paper_name="MNIST",
            side=28,
            channels=1,
            num_classes=10,
            train_images=60000,
            official_split=True,
            files=(
                ("train", "train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
                ("test", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
            ),
        ),
        DataSet(
            name="cifar100",
            paper_name="CIFAR-100",
            side=32,
            channels=3,
            num_classes=100,
            train_images=50000,
            official_split=True,
        ),
    )
}

#: The data sets' names as the paper writes them (:data:`DATA_SETS`).
PAPER_NAMES = {d.name: d.paper_name for d in DATA_SETS.values()}


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


def named(
    dataset: str, paper_data: str | None = None, *, library: bool = True, stand_in: str = "stand-in for {}"
) -> str:
    """The data set's name as the paper writes it with its notes in parentheses, joined by "; ":
    the library that ships it (``library``; "8x8 digits (scikit-learn)") and ``stand_in``
    (formatted with ``paper_data``) when it stands in for the paper's data of that experiment
    ("8x8 digits (scikit-learn; stand-in for MNIST)", "MNIST (stand-in for CIFAR-100)").
    An unknown name stands for itself (no library)."""
    d = DATA_SETS.get(dataset)
    notes = [d.library] if d is not None and library and d.library else []
    if stands_in(dataset, paper_data):
        notes.append(stand_in.format(paper_data))
    return (d.paper_name if d is not None else dataset) + (f" ({'; '.join(notes)})" if notes else "")


def library_name(dataset: str, possessive: bool = False) -> str:
    """The name with the library that ships it in front: "scikit-learn 8x8 digits" (or
    "scikit-learn's 8x8 digits" when ``possessive``); the paper's name when no library ships it."""
    d = DATA_SETS.get(dataset)
    if d is None:
        return dataset
    owner = f"{d.library}'s" if possessive else d.library
    return f"{owner} {d.paper_name}" if d.library else d.paper_name


def table_name(dataset: str) -> str:
    """Table 1's name: "digits 8x8 (stand-in)" for a data set the paper did not use (config name and
    image size), the paper's name otherwise."""
    d = DATA_SETS.get(dataset)
    if d is not None and d.stands_in_for:
        return f"{d.name} {d.side}x{d.side} (stand-in)"
    return PAPER_NAMES.get(dataset, dataset)
