"""Data sets of the pipeline: where they come from, their download and their loading.

Three data sets are known (:data:`DATASETS`):

``digits``
    scikit-learn's bundled 8x8 handwritten digits (``sklearn.datasets.load_digits``). It ships
    with scikit-learn, so it needs no download: the offline default of the pipeline.
``mnist``
    28x28 grey digits. The raw files and their md5 sums come from torchvision's own table
    (``torchvision.datasets.MNIST.mirrors`` / ``.resources``); they are kept gzipped under
    ``<root>/mnist/`` and decompressed next to themselves on first use.
``cifar100``
    32x32 colour images in 100 classes. The archive, its url and md5 come from
    ``torchvision.datasets.CIFAR100`` (``url``, ``filename``, ``tgz_md5``); it is kept under
    ``<root>/cifar100/`` and extracted to ``<root>/cifar100/cifar-100-python/{train,test,meta}``.

Modules: :mod:`.sources` (names, class counts, torchvision's url/md5 tables, :class:`DataError`),
:mod:`.fetch` (download and verify raw files, the manifest; not named ``download`` so that
``data.download`` stays the function), :mod:`.transfer` (one file over HTTP(S) with a deadline,
size limits and its md5 checked), :mod:`.local` (MNIST files a user already has), :mod:`.prepare` (decompress and extract verified files),
:mod:`.datasets` (load as normalised tensors), :mod:`.text` (the language-model study's text corpora
and byte tokens, imported on its own: ``from transformer_hessian.data import text``). torchvision is imported
only inside the functions that need its tables or readers (not for ``digits``).
"""

from . import sources
from .datasets import load_dataset
from .fetch import download, write_manifest
from .sources import DATASETS, NUM_CLASSES, DataError
from .transfer import DEFAULT_DEADLINE, DEFAULT_TIMEOUT

__all__ = [
    "DATASETS",
    "DEFAULT_DEADLINE",
    "DEFAULT_TIMEOUT",
    "NUM_CLASSES",
    "DataError",
    "download",
    "load_dataset",
    "sources",
    "write_manifest",
]


def __getattr__(name: str):
    # MIRRORS / RESOURCES: torchvision's tables, built on first access (see :mod:`.sources`).
    if name in ("MIRRORS", "RESOURCES"):
        return getattr(sources, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
