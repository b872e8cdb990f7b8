"""Loading a data set that is in place (never downloads) as normalised float32 tensors.

``digits`` comes from scikit-learn (no files); ``mnist`` and ``cifar100`` are read from the
layout that :mod:`.fetch` and :mod:`.prepare` leave under ``<root>/<name>/``. torch and
torchvision are imported inside the functions that need them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..util.datanames import DATA_SETS
from . import sources
from .idx import check_pair, read_idx_images, read_idx_labels
from .prepare import prepare
from .safe_pickle import load_verified_pickle
from .sources import MNIST_FILES, NUM_CLASSES, DataError, check_name

__all__ = ["READERS", "load_dataset", "reader_of"]


def load_dataset(
    name: str,
    root: str | Path,
    val_fraction: float = 0.2,
    seed: int = 0,
    max_train: int | None = None,
    max_val: int | None = None,
) -> dict:
    """Load data set ``name`` from ``root`` (never downloads) as normalised float32 tensors.

    ``digits`` is split into train/val by a seeded stratified split with ``val_fraction``;
    ``mnist`` and ``cifar100`` use their official train/test split (test as val, so
    ``val_fraction`` is not used). ``max_train`` / ``max_val`` keep seeded random subsets.
    Pixels are scaled to [0, 1] and then normalised per channel with the mean and standard
    deviation of the returned training images.

    Returns a dict with ``train_x`` (N, C, H, W float32), ``train_y`` (N int64), ``val_x``,
    ``val_y``, ``num_classes``, ``image_size``, ``channels``, and ``dataset``, ``mean``, ``std``
    (the per-channel statistics used).
    """
    check_name(name)
    for key, value in (("max_train", max_train), ("max_val", max_val)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise DataError(f"{key} must be a positive integer or None, got {value!r}")

    tx, ty, vx, vy, scale = reader_of(name)(Path(root).expanduser().resolve() / name, val_fraction, seed)

    # Subsets first (on the raw pixels, to keep memory low), then scale to [0, 1].
    tx, ty = _subset(tx, ty, max_train, seed, 0)
    vx, vy = _subset(vx, vy, max_val, seed, 1)
    tx = tx.astype(np.float32) / np.float32(scale)
    vx = vx.astype(np.float32) / np.float32(scale)

    num_classes = NUM_CLASSES[name]
    for split, y in (("train", ty), ("val", vy)):
        if y.size and (y.min() < 0 or y.max() >= num_classes):
            raise DataError(f"data set {name!r}: {split} labels lie outside 0..{num_classes - 1}")

    import torch

    train_x = torch.from_numpy(np.ascontiguousarray(tx, dtype=np.float32))
    val_x = torch.from_numpy(np.ascontiguousarray(vx, dtype=np.float32))
    # Per-channel statistics of the training images, accumulated in float64.
    mean = train_x.double().mean(dim=(0, 2, 3))
    std = train_x.double().std(dim=(0, 2, 3), correction=0).clamp_min(1e-8)
    m32, s32 = mean.float().view(1, -1, 1, 1), std.float().view(1, -1, 1, 1)
    train_x = (train_x - m32) / s32
    val_x = (val_x - m32) / s32

    return {
        "dataset": name,
        "train_x": train_x,
        "train_y": torch.from_numpy(np.ascontiguousarray(ty, dtype=np.int64)),
        "val_x": val_x,
        "val_y": torch.from_numpy(np.ascontiguousarray(vy, dtype=np.int64)),
        "num_classes": num_classes,
        "image_size": int(train_x.shape[-1]),
        "channels": int(train_x.shape[1]),
        "mean": mean.tolist(),
        "std": std.tolist(),
    }


def _subset(x: np.ndarray, y: np.ndarray, limit: int | None, seed: int, stream: int):
    if limit is None or limit >= len(y):
        return x, y
    rng = np.random.default_rng([seed, stream])
    idx = np.sort(rng.choice(len(y), size=limit, replace=False))
    return x[idx], y[idx]


def _load_digits(folder: Path, val_fraction: float, seed: int):
    # no files: ``folder`` is not read
    if not (isinstance(val_fraction, (int, float)) and 0.0 < val_fraction < 1.0):
        raise DataError(f"val_fraction must lie strictly between 0 and 1, got {val_fraction!r}")
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = DATA_SETS["digits"]
    bunch = load_digits()
    x = np.asarray(bunch.data, dtype=np.float64).reshape(-1, d.channels, d.side, d.side)  # pixels 0..16
    y = np.asarray(bunch.target, dtype=np.int64)
    try:
        tx, vx, ty, vy = train_test_split(x, y, test_size=val_fraction, random_state=seed, stratify=y)
    except ValueError as err:
        raise DataError(
            f"data set 'digits': cannot split with val_fraction={val_fraction!r}, seed={seed!r}: {err}"
        ) from err
    return tx, ty, vx, vy, 16.0


def _missing_error(name: str, folder: Path, missing: list[str], wanted: list[str]) -> DataError:
    return DataError(
        f"data set {name!r} is not in place under {folder}/: missing {', '.join(missing)}.\n"
        f"Run the download step first (download({name!r}, root)), or place these files by hand in\n"
        f"  {folder}/\n" + "".join(f"    {w}\n" for w in wanted)
    )


def _load_mnist(folder: Path, val_fraction: float, seed: int):
    # the official split: ``val_fraction`` and ``seed`` are not used
    wanted = [f"{f}  (or {f}.gz)" for pair in MNIST_FILES.values() for f in pair]
    missing = [
        f
        for pair in MNIST_FILES.values()
        for f in pair
        if not (folder / f).exists() and not (folder / f"{f}.gz").exists()
    ]
    if missing:
        raise _missing_error("mnist", folder, missing, wanted)
    prepare("mnist", folder)
    out = []
    for images, labels in MNIST_FILES.values():
        side = DATA_SETS["mnist"].side
        x = read_idx_images(folder / images, shape=(side, side))
        y = read_idx_labels(folder / labels, num_classes=NUM_CLASSES["mnist"])
        check_pair(folder / images, folder / labels, x, y)
        out += [x[:, None], y]
    return (*out, 255.0)


def _load_cifar100(folder: Path, val_fraction: float, seed: int):
    # the official split: ``val_fraction`` and ``seed`` are not used
    base = folder / sources.cifar100_dir()
    members = [f for f, _ in sources.cifar100_members()]
    if not base.exists() and not (folder / sources.cifar100().filename).exists():
        alternative = (
            f"{sources.cifar100().filename}  (or the extracted {sources.cifar100_dir()}/{{{','.join(members)}}})"
        )
        raise _missing_error("cifar100", folder, [sources.cifar100().filename], [alternative])
    prepare("cifar100", folder)
    missing = [f"{sources.cifar100_dir()}/{f}" for f in members if not (base / f).is_file()]
    if missing:
        raise _missing_error("cifar100", folder, missing, [f"{sources.cifar100_dir()}/{f}" for f in members])

    known = dict(sources.cifar100_members())

    def read(fname: str) -> dict:
        # md5 first (torchvision's table), then an unpickler that resolves only numpy's array globals
        return load_verified_pickle(base / fname, known[fname], "cifar100", f"delete {base} and download again")

    out = []
    for fname in (sources.cifar100().train_list[0][0], sources.cifar100().test_list[0][0]):
        entry = read(fname)
        try:
            c = DATA_SETS["cifar100"]
            x = np.asarray(entry["data"], dtype=np.uint8).reshape(-1, c.channels, c.side, c.side)
            y = np.asarray(entry["fine_labels"], dtype=np.int64)
        except (KeyError, ValueError, TypeError) as err:
            raise DataError(
                f"data set 'cifar100': {base / fname} lacks the expected 'data' (N x 3072 uint8) and "
                f"'fine_labels' entries ({type(err).__name__}: {err})"
            ) from err
        if len(x) != len(y):
            raise DataError(f"data set 'cifar100': {base / fname} holds {len(x)} images but {len(y)} labels")
        out += [x, y]
    meta = read(sources.cifar100().meta["filename"])
    if not isinstance(meta, dict) or len(meta.get(sources.cifar100().meta["key"], ())) != NUM_CLASSES["cifar100"]:
        raise DataError(
            f"data set 'cifar100': {base / 'meta'} does not list {NUM_CLASSES['cifar100']} fine label names"
        )
    return (*out, 255.0)


#: One reader per data set, registered by its name (:data:`transformer_hessian.util.datanames.DATA_SETS`): ``reader(folder,
#: val_fraction, seed) -> (train_x, train_y, val_x, val_y, pixel scale)`` on the raw pixels, from
#: ``folder`` = ``<root>/<name>/``, never downloading. A data set with an official split ignores
#: ``val_fraction`` and ``seed``.
READERS = {"digits": _load_digits, "mnist": _load_mnist, "cifar100": _load_cifar100}


def reader_of(name: str):
    """The reader registered for data set ``name``; :class:`DataError` naming it when it has none."""
    check_name(name)
    if name not in READERS:
        raise DataError(f"data set {name!r} has no reader; readers exist for {', '.join(READERS)}")
    return READERS[name]
