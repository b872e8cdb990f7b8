"""MNIST a user already has (data.local, torchvision's layout, dotted names, re-compressed .gz)
and the strict IDX reader. Fabricated IDX files are written here; the real files are used when
the folder in TH_MNIST_DIR holds them (.ci/run sets it when CI has a copy). No test uses the network:
``transfer.fetch_file`` is replaced by a function that fails the test if it is called.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from transformer_hessian.data import DataError, download, load_dataset, transfer
from transformer_hessian.data.idx import read_idx_images, read_idx_labels
from transformer_hessian.data.local import MNIST_RAW, dotted_name

REPO = Path(__file__).resolve().parents[2]
TARGETS = list(MNIST_RAW)


def md5(b: bytes) -> str:
    return hashlib.md5(b).hexdigest()


def idx_images(x: np.ndarray, magic: int = 0x00000803) -> bytes:
    return struct.pack(">I", magic) + struct.pack(f">{x.ndim}I", *x.shape) + x.astype(np.uint8).tobytes()


def idx_labels(y: np.ndarray) -> bytes:
    return struct.pack(">II", 0x00000801, len(y)) + y.astype(np.uint8).tobytes()


@pytest.fixture
def no_network(monkeypatch):
    def refuse(url, *args, **kwargs):
        raise AssertionError(f"the network was used: {url}")

    monkeypatch.setattr(transfer, "fetch_file", refuse)


def fabricated(seed: int = 0, n_train: int = 30, n_test: int = 12) -> dict[str, bytes]:
    """Decompressed bodies of the four MNIST files, fabricated (valid IDX)."""
    rng = np.random.default_rng(seed)
    return {
        "train-images-idx3-ubyte": idx_images(rng.integers(0, 256, (n_train, 28, 28))),
        "train-labels-idx1-ubyte": idx_labels(rng.integers(0, 10, n_train)),
        "t10k-images-idx3-ubyte": idx_images(rng.integers(0, 256, (n_test, 28, 28))),
        "t10k-labels-idx1-ubyte": idx_labels(rng.integers(0, 10, n_test)),
    }


def tables(bodies: dict[str, bytes]):
    """(resources, raw_md5) for fabricated bodies: the .gz md5 is of gzip.compress(mtime=0)."""
    resources = [(f"{t}.gz", md5(gzip.compress(bodies[t], mtime=0))) for t in TARGETS]
    return resources, {t: md5(bodies[t]) for t in TARGETS}


def snapshot(folder: Path) -> dict[Path, tuple[bytes, int]]:
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------- the IDX reader


def test_idx_reader_reads_valid_files(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (5, 28, 28)), rng.integers(0, 10, 5)
    (tmp_path / "i").write_bytes(idx_images(x))
    (tmp_path / "l").write_bytes(idx_labels(y))
    assert np.array_equal(read_idx_images(tmp_path / "i"), x)
    got = read_idx_labels(tmp_path / "l")
    assert got.dtype == np.int64 and np.array_equal(got, y)


@pytest.mark.parametrize(
    "case, body, words",
    [
        ("32x32 images", idx_images(np.ones((3, 32, 32)) * np.arange(32)), ["32x32", "expected 28x28"]),
        ("1x784 images", idx_images(np.ones((3, 1, 784)) * np.arange(784) % 256), ["1x784", "expected 28x28"]),
        (
            "784-vectors (2 dims)",
            idx_images(np.ones((3, 784)) * np.arange(784) % 256, magic=0x00000802),
            ["0x00000802", "expected 0x00000803"],
        ),
        ("a label file", idx_labels(np.arange(10)), ["0x00000801", "expected 0x00000803"]),
        ("int32 type", struct.pack(">IIII", 0x00000C03, 1, 28, 28) + bytes(4 * 784), ["int", "0x00000803"]),
        ("all-zero pixels", idx_images(np.zeros((4, 28, 28))), ["every pixel", "0"]),
        ("truncated", idx_images(np.arange(3 * 784).reshape(3, 28, 28) % 256)[:-100], ["truncated"]),
        ("trailing bytes", idx_images(np.arange(3 * 784).reshape(3, 28, 28) % 256) + b"xx", ["trailing"]),
        ("no images", idx_images(np.zeros((0, 28, 28))), ["no images"]),
        ("header only", struct.pack(">I", 0x00000803), ["too short"]),
        ("empty", b"", ["too short"]),
    ],
)
def test_idx_reader_refuses_bad_image_files(tmp_path, case, body, words):
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(body)
    with pytest.raises(DataError) as info:
        read_idx_images(path)
    msg = str(info.value)
    assert str(path) in msg, case
    assert all(w in msg for w in words), (case, msg)


@pytest.mark.parametrize(
    "case, body, words",
    [
        ("label 10", idx_labels(np.array([0, 3, 10, 9])), ["outside 0..9", "largest 10"]),
        ("label 255", idx_labels(np.array([255, 1])), ["outside 0..9"]),
        ("image file", idx_images(np.arange(784).reshape(1, 28, 28) % 256), ["0x00000803", "expected 0x00000801"]),
        ("truncated", idx_labels(np.arange(10))[:-1], ["truncated"]),
        ("no labels", idx_labels(np.array([], dtype=np.uint8)), ["no labels"]),
    ],
)
def test_idx_reader_refuses_bad_label_files(tmp_path, case, body, words):
    path = tmp_path / "train-labels-idx1-ubyte"
    path.write_bytes(body)
    with pytest.raises(DataError) as info:
        read_idx_labels(path)
    msg = str(info.value)
    assert str(path) in msg and all(w in msg for w in words), (case, msg)


def test_load_refuses_image_and_label_counts_that_differ(tmp_path):
    bodies = fabricated()
    bodies["t10k-labels-idx1-ubyte"] = idx_labels(np.arange(11) % 10)  # 12 images, 11 labels
    folder = tmp_path / "mnist"
    folder.mkdir()
    for t, b in bodies.items():
        (folder / t).write_bytes(b)
    with pytest.raises(DataError) as info:
        load_dataset("mnist", tmp_path)
    msg = str(info.value)
    assert "12 images" in msg and "11 labels" in msg and str(folder / "t10k-labels-idx1-ubyte") in msg


# ----------------------------------------------------------------------------- files on disk


@pytest.mark.parametrize("form", ["hyphenated", "dotted", "gz", "recompressed gz", "torchvision raw"])
def test_local_folder_is_used_without_network(tmp_path, no_network, form):
    bodies = fabricated(seed=1)
    resources, raw = tables(bodies)
    local = tmp_path / "my copy"
    where = local / "MNIST" / "raw" if form == "torchvision raw" else local
    where.mkdir(parents=True)
    for t, b in bodies.items():
        if form == "dotted":
            (where / dotted_name(t)).write_bytes(b)
        elif form == "gz":
            (where / f"{t}.gz").write_bytes(gzip.compress(b, mtime=0))
        elif form == "recompressed gz":  # same content, another archive md5
            (where / f"{t}.gz").write_bytes(gzip.compress(b, compresslevel=1, mtime=12345))
        else:
            (where / t).write_bytes(b)
    before = snapshot(local)
    root = tmp_path / "data"
    manifest = download("mnist", root, resources=resources, raw_md5=raw, local=local)
    assert snapshot(local) == before  # nothing changed in the user's folder
    assert manifest["source"] == str(local.resolve())
    assert [(f["name"], f["md5"], f["bytes"]) for f in manifest["files"]] == [
        (t, raw[t], len(bodies[t])) for t in TARGETS
    ]
    assert all(Path(f["from"]).parent == where.resolve() for f in manifest["files"])
    for t in TARGETS:
        assert (root / "mnist" / t).read_bytes() == bodies[t]
    d = load_dataset("mnist", root)
    assert d["train_x"].shape == (30, 1, 28, 28) and d["val_x"].shape == (12, 1, 28, 28)
    assert np.array_equal(d["train_y"].numpy(), np.frombuffer(bodies["train-labels-idx1-ubyte"][8:], np.uint8))
    # A second call finds the files in place and copies nothing.
    placed = snapshot(root / "mnist")
    again = download("mnist", root, resources=resources, raw_md5=raw, local=local)
    assert [(f["name"], f["md5"]) for f in again["files"]] == [(f["name"], f["md5"]) for f in manifest["files"]]
    assert all(Path(f["from"]).parent == (root / "mnist").resolve() for f in again["files"])
    assert snapshot(root / "mnist") == placed


def test_torchvision_layout_under_data_root_needs_no_key(tmp_path, no_network):
    bodies = fabricated(seed=2)
    resources, raw = tables(bodies)
    raw_dir = tmp_path / "data" / "MNIST" / "raw"
    raw_dir.mkdir(parents=True)
    for t, b in bodies.items():
        (raw_dir / t).write_bytes(b)
    manifest = download("mnist", tmp_path / "data", resources=resources, raw_md5=raw)
    assert [Path(f["from"]) for f in manifest["files"]] == [raw_dir.resolve() / t for t in TARGETS]


def test_recompressed_gz_in_data_folder_is_kept_and_accepted(tmp_path, no_network):
    """The reported bug: a re-compressed .gz (other md5, same content) was deleted."""
    bodies = fabricated(seed=3)
    resources, raw = tables(bodies)
    folder = tmp_path / "data" / "mnist"
    folder.mkdir(parents=True)
    for t, b in bodies.items():
        (folder / f"{t}.gz").write_bytes(gzip.compress(b, compresslevel=9, mtime=7))
    gz_before = {p: p.read_bytes() for p in folder.glob("*.gz")}
    assert all(md5(b) != dict(resources)[p.name] for p, b in gz_before.items())
    download("mnist", tmp_path / "data", resources=resources, raw_md5=raw)
    assert {p: p.read_bytes() for p in folder.glob("*.gz")} == gz_before
    assert all((folder / t).read_bytes() == bodies[t] for t in TARGETS)


@pytest.mark.parametrize("where", ["local", "data folder gz", "data folder decompressed"])
def test_file_failing_verification_is_reported_and_left_in_place(tmp_path, no_network, where):
    bodies = fabricated(seed=4)
    resources, raw = tables(bodies)
    bad = bytearray(bodies["train-labels-idx1-ubyte"])
    bad[-1] = (bad[-1] + 1) % 10  # one label changed: a valid IDX file, another md5
    local = tmp_path / "local"
    local.mkdir()
    folder = tmp_path / "data" / "mnist"
    folder.mkdir(parents=True)
    for t, b in bodies.items():
        if t != "train-labels-idx1-ubyte":
            (local / t).write_bytes(b)
    if where == "local":
        path, content = local / "train-labels-idx1-ubyte", bytes(bad)
    elif where == "data folder gz":
        path, content = folder / "train-labels-idx1-ubyte.gz", gzip.compress(bytes(bad), mtime=0)
    else:
        path, content = folder / "train-labels-idx1-ubyte", bytes(bad)
    path.write_bytes(content)
    before = snapshot(tmp_path)
    with pytest.raises(DataError) as info:
        download("mnist", tmp_path / "data", resources=resources, raw_md5=raw, local=local)
    msg = str(info.value)
    expected = raw["train-labels-idx1-ubyte"]
    actual = md5(bytes(bad))
    assert str(path) in msg and expected in msg and actual in msg and f"{len(content):,} bytes" in msg, msg
    assert "left where they are" in msg and "What to do" in msg
    assert path.read_bytes() == content  # never deleted nor changed
    # nothing of the user's changed; only verified copies of the other three files were added
    after = snapshot(tmp_path)
    assert {p: v for p, v in after.items() if p in before} == before
    assert sorted(p.name for p in after if p not in before) == sorted(
        t for t in TARGETS if t != "train-labels-idx1-ubyte"
    )


def test_failing_file_in_data_folder_blocks_download_instead_of_being_replaced(tmp_path, monkeypatch):
    """Without data.local the network is tried only for a file with nothing in its way."""
    calls = []
    monkeypatch.setattr(transfer, "fetch_file", lambda url, *a, **k: calls.append(url))
    bodies = fabricated(seed=5)
    resources, raw = tables(bodies)
    folder = tmp_path / "mnist"
    folder.mkdir()
    (folder / "t10k-images-idx3-ubyte.gz").write_bytes(b"not a gzip file at all")
    with pytest.raises(DataError) as info:
        download("mnist", tmp_path, resources=resources, raw_md5=raw, mirror="http://127.0.0.1:9/")
    assert "not a readable gzip file" in str(info.value)
    assert (folder / "t10k-images-idx3-ubyte.gz").read_bytes() == b"not a gzip file at all"
    assert not any("t10k-images" in u for u in calls)


def test_generic_file_in_place_that_fails_is_not_replaced(tmp_path, no_network):
    target = tmp_path / "cifar100" / "cifar-100-python.tar.gz"
    target.parent.mkdir()
    target.write_bytes(b"stale and wrong")
    with pytest.raises(DataError) as info:
        download("cifar100", tmp_path, resources=[("cifar-100-python.tar.gz", "0" * 32)])
    msg = str(info.value)
    assert str(target) in msg and "0" * 32 in msg and md5(b"stale and wrong") in msg and "left in place" in msg
    assert target.read_bytes() == b"stale and wrong"


def test_local_must_be_a_folder(tmp_path):
    with pytest.raises(DataError, match="data.local"):
        download("mnist", tmp_path, local=tmp_path / "nowhere")


def test_local_folder_with_missing_files_names_them_and_does_not_download(tmp_path, no_network):
    bodies = fabricated(seed=6)
    resources, raw = tables(bodies)
    local = tmp_path / "local"
    local.mkdir()
    (local / "train-images-idx3-ubyte").write_bytes(bodies["train-images-idx3-ubyte"])
    with pytest.raises(DataError) as info:
        download("mnist", tmp_path / "data", resources=resources, raw_md5=raw, local=local)
    msg = str(info.value)
    assert "train-labels-idx1-ubyte" in msg and "t10k-images-idx3-ubyte" in msg and str(local) in msg


# ----------------------------------------------------------------------------- the real MNIST


def real_mnist_dir() -> Path | None:
    env = os.environ.get("TH_MNIST_DIR")
    if not env:
        return None
    path = Path(env)
    return path if all((path / t).is_file() for t in TARGETS) else None


@pytest.mark.skipif(
    real_mnist_dir() is None,
    reason="real MNIST not found: set TH_MNIST_DIR to a folder with the four decompressed MNIST files",
)
def test_real_mnist_from_a_local_folder(tmp_path, no_network):
    src = real_mnist_dir()
    # The user's folder: dotted names (links to the real files) and a re-compressed label archive.
    local = tmp_path / "local"
    (local / "MNIST" / "raw").mkdir(parents=True)
    for t in ("train-images-idx3-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (local / dotted_name(t)).symlink_to(src / t)
    with gzip.open(local / "MNIST" / "raw" / "train-labels-idx1-ubyte.gz", "wb", compresslevel=1) as fh:
        fh.write((src / "train-labels-idx1-ubyte").read_bytes())
    root = tmp_path / "data"
    manifest = download("mnist", root, local=local)
    assert {f["name"]: (f["md5"], f["bytes"]) for f in manifest["files"]} == MNIST_RAW
    d = load_dataset("mnist", root)
    assert d["train_x"].shape == (60000, 1, 28, 28) and d["val_x"].shape == (10000, 1, 28, 28)
    # The checks of the data set's README: label counts and the mean training pixel.
    assert np.bincount(d["train_y"].numpy()).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    assert np.bincount(d["val_y"].numpy()).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert d["mean"][0] * 255 == pytest.approx(33.318, abs=5e-4)

    # A shuffled label file (a valid IDX file: only the md5 can tell) is refused and left in place.
    bad = tmp_path / "bad"
    bad.mkdir()
    labels = bytearray((src / "t10k-labels-idx1-ubyte").read_bytes())
    body = np.frombuffer(bytes(labels[8:]), np.uint8).copy()
    np.random.default_rng(0).shuffle(body)
    (bad / "t10k-labels-idx1-ubyte").write_bytes(bytes(labels[:8]) + body.tobytes())
    for t in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte"):
        (bad / t).symlink_to(src / t)
    with pytest.raises(DataError) as info:
        download("mnist", tmp_path / "data2", local=bad)
    assert str(bad / "t10k-labels-idx1-ubyte") in str(info.value) and MNIST_RAW["t10k-labels-idx1-ubyte"][0] in str(
        info.value
    )


def test_local_folder_for_other_files_copies_verified_and_keeps_bad(tmp_path, no_network):
    local = tmp_path / "local"
    local.mkdir()
    (local / "blob.bin").write_bytes(b"good bytes")
    manifest = download("cifar100", tmp_path / "data", resources=[("blob.bin", md5(b"good bytes"))], local=local)
    assert manifest["files"][0]["md5"] == md5(b"good bytes")
    assert (tmp_path / "data" / "cifar100" / "blob.bin").read_bytes() == b"good bytes"
    (local / "other.bin").write_bytes(b"bad bytes")
    with pytest.raises(DataError) as info:
        download("cifar100", tmp_path / "data", resources=[("other.bin", "0" * 32)], local=local)
    msg = str(info.value)
    assert (
        str(local / "other.bin") in msg and md5(b"bad bytes") in msg and "0" * 32 in msg and "left where it is" in msg
    )
    assert (local / "other.bin").read_bytes() == b"bad bytes"
    assert not (tmp_path / "data" / "cifar100" / "other.bin").exists()
