"""Tests of transformer_hessian.data.

The download tests exercise the real download code against a local HTTP server (127.0.0.1,
ephemeral port) that serves small files generated here; nothing touches the internet.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import pickle
import socket
import struct
import subprocess
import sys
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer_hessian import data
from transformer_hessian.data import DATASETS, DataError, download, load_dataset, write_manifest


def md5(b: bytes) -> str:
    return hashlib.md5(b).hexdigest()


class _Server:
    """A tiny HTTP server: serves registered byte strings, 404 for anything else, counts requests."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.requests: list[str] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                with outer._lock:
                    outer.requests.append(self.path)
                    body = outer.files.get(self.path)
                if body is None:
                    self.send_error(404, "File not found")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # keep the test output quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def add(self, path: str, body: bytes) -> str:
        self.files[path] = body
        return self.base + path

    def count(self, prefix: str = "") -> int:
        return sum(p.startswith(prefix) for p in self.requests)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def server():
    srv = _Server()
    yield srv
    srv.close()


def closed_port_url() -> str:
    """A url on 127.0.0.1 whose port nobody listens on (connection refused at once)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def all_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


# --------------------------------------------------------------------------------------------
# download: good, corrupted, missing, unreachable
# --------------------------------------------------------------------------------------------


def test_download_good_file_verifies_writes_manifest_and_is_idempotent(server, tmp_path):
    body = np.random.default_rng(0).bytes(5000)
    url = server.add("/good/blob.bin", body)
    root = tmp_path / "data"

    before = server.count("/good/")
    manifest = download("mnist", root, resources=[(url, md5(body))], timeout=5)
    assert server.count("/good/") == before + 1
    target = root / "mnist" / "blob.bin"
    assert target.read_bytes() == body
    assert manifest == {
        "dataset": "mnist",
        "files": [{"name": "blob.bin", "md5": md5(body), "bytes": len(body)}],
        "source": url,
    }
    assert all_files(root) == [target]  # no temp file left behind

    # Second call: the file is in place and verifies, so nothing is requested.
    again = download("mnist", root, resources=[(url, md5(body))], timeout=5)
    assert again == manifest
    assert server.count("/good/") == before + 1

    # A file in place that does not verify is reported and left in place (never replaced).
    target.write_bytes(b"stale and wrong")
    with pytest.raises(DataError) as info:
        download("mnist", root, resources=[(url, md5(body))], timeout=5)
    assert str(target) in str(info.value) and md5(b"stale and wrong") in str(info.value)
    assert target.read_bytes() == b"stale and wrong"
    assert server.count("/good/") == before + 1
    target.write_bytes(body)

    out = tmp_path / "results" / "data" / "mnist" / "manifest.json"
    write_manifest(manifest, out)
    assert json.loads(out.read_text()) == manifest
    assert sorted(p.name for p in out.parent.iterdir()) == ["manifest.json", "manifest.json.sha256"]  # and its digest


def test_download_with_mirror_and_bare_file_names(server, tmp_path):
    body = b"mirror payload " * 100
    server.add("/mirror/a/file.dat", body)
    for mirror in (server.base + "/mirror/a", server.base + "/mirror/a/"):
        root = tmp_path / mirror[-1]
        manifest = download("cifar100", root, mirror=mirror, resources=[("file.dat", md5(body))], timeout=5)
        assert (root / "cifar100" / "file.dat").read_bytes() == body
        assert manifest["source"] == server.base + "/mirror/a/file.dat"


def test_download_falls_back_to_the_next_mirror(server, tmp_path, monkeypatch):
    body = b"second mirror works"
    server.add("/fallback/x.bin", body)
    dead = closed_port_url()
    monkeypatch.setitem(data.MIRRORS, "mnist", [dead + "/", server.base + "/fallback/"])
    manifest = download("mnist", tmp_path, resources=[("x.bin", md5(body))], timeout=5)
    assert (tmp_path / "mnist" / "x.bin").read_bytes() == body
    assert manifest["source"] == dead + "/x.bin"  # the primary origin, as listed
    assert all_files(tmp_path) == [tmp_path / "mnist" / "x.bin"]


def test_download_corrupted_file_is_rejected_and_nothing_is_left(server, tmp_path):
    good = b"the bytes the md5 was computed from"
    url = server.add("/bad/corrupt.bin", b"the bytes the server actually sends")
    root = tmp_path / "data"
    with pytest.raises(DataError) as info:
        download("mnist", root, resources=[(url, md5(good))], timeout=5)
    msg = str(info.value)
    assert "'mnist'" in msg and url in msg and "checksum mismatch" in msg and md5(good) in msg
    assert all_files(root) == []  # neither the bad file nor a temp file
    assert not (root / "mnist" / "corrupt.bin").exists()


def test_download_missing_file_404_names_dataset_url_and_folder(server, tmp_path):
    url = server.base + "/nowhere/t10k-images-idx3-ubyte.gz"
    root = tmp_path / "data"
    with pytest.raises(DataError) as info:
        download("mnist", root, resources=[(url, "0" * 32)], timeout=5)
    msg = str(info.value)
    assert "'mnist'" in msg
    assert url in msg and "404" in msg
    assert str((root / "mnist").resolve()) in msg
    assert "t10k-images-idx3-ubyte.gz" in msg
    assert all_files(root) == []


def test_download_unreachable_url_fails_fast_with_clear_error(tmp_path):
    mirror = closed_port_url()
    t0 = time.monotonic()
    with pytest.raises(DataError) as info:
        download("cifar100", tmp_path, mirror=mirror, timeout=2)
    assert time.monotonic() - t0 < 10
    msg = str(info.value)
    url = f"{mirror}/cifar-100-python.tar.gz"
    assert "'cifar100'" in msg and url in msg
    # Where to put the file by hand, with torchvision's own name and md5.
    assert str((tmp_path / "cifar100").resolve()) in msg
    assert "cifar-100-python.tar.gz" in msg and "eb9058c3a382ffc7106e4002c42a8d85" in msg
    assert all_files(tmp_path) == []


def test_default_tables_come_from_torchvision():
    from torchvision.datasets import CIFAR100, MNIST

    assert data.RESOURCES["mnist"] == [tuple(r) for r in MNIST.resources]
    assert data.MIRRORS["mnist"] == list(MNIST.mirrors)
    assert data.RESOURCES["cifar100"] == [(CIFAR100.filename, CIFAR100.tgz_md5)]
    assert data.MIRRORS["cifar100"][0] + CIFAR100.filename == CIFAR100.url


def test_bad_arguments_raise_data_error(tmp_path):
    assert DATASETS == ("digits", "mnist", "cifar100")
    assert issubclass(DataError, RuntimeError)
    with pytest.raises(DataError, match="unknown data set 'imagenet'"):
        download("imagenet", tmp_path)
    with pytest.raises(DataError, match="md5"):
        download("mnist", tmp_path, resources=[("x.bin", "not-an-md5")])
    with pytest.raises(DataError, match="max_train"):
        load_dataset("digits", tmp_path, max_train=0)
    with pytest.raises(DataError, match="val_fraction"):
        load_dataset("digits", tmp_path, val_fraction=1.5)


# --------------------------------------------------------------------------------------------
# digits
# --------------------------------------------------------------------------------------------


def test_digits_download_is_offline_and_writes_nothing(tmp_path):
    from sklearn.datasets import load_digits

    manifest = download("digits", tmp_path / "data")
    assert manifest["dataset"] == "digits" and manifest["source"] == "sklearn"
    raw = np.ascontiguousarray(load_digits().data, dtype=np.float64).tobytes()
    assert manifest["files"][0] == {"name": "load_digits.data", "md5": md5(raw), "bytes": len(raw)}
    assert not (tmp_path / "data").exists()


def test_load_digits_shapes_split_normalisation_and_determinism(tmp_path):
    from sklearn.datasets import load_digits

    d = load_dataset("digits", tmp_path, val_fraction=0.2, seed=0)
    n = len(load_digits().target)
    assert d["num_classes"] == 10 and d["image_size"] == 8 and d["channels"] == 1
    assert d["train_x"].dtype == torch.float32 and d["val_x"].dtype == torch.float32
    assert d["train_y"].dtype == torch.int64 and d["val_y"].dtype == torch.int64
    assert d["train_x"].shape[1:] == (1, 8, 8) and d["val_x"].shape[1:] == (1, 8, 8)
    assert len(d["train_x"]) == len(d["train_y"]) and len(d["val_x"]) == len(d["val_y"])
    assert len(d["train_y"]) + len(d["val_y"]) == n
    assert len(d["val_y"]) == int(np.ceil(0.2 * n))

    # Normalised per channel with the training statistics (independent recomputation).
    tx = d["train_x"].double()
    assert abs(tx.mean().item()) < 1e-5 and abs(tx.std(correction=0).item() - 1) < 1e-5
    raw = np.asarray(load_digits().data, dtype=np.float64) / 16.0
    assert d["mean"][0] == pytest.approx(raw.mean(), rel=0.05)  # the split keeps the statistics close
    # Undoing the normalisation gives back pixels k/16.
    pix = (d["val_x"].double() * d["std"][0] + d["mean"][0]) * 16
    assert torch.allclose(pix, pix.round(), atol=1e-3) and pix.min() > -1e-3 and pix.max() < 16 + 1e-3

    # Stratified: every class keeps its share in val up to rounding.
    counts = np.bincount(load_digits().target, minlength=10)
    val_counts = np.bincount(d["val_y"].numpy(), minlength=10)
    assert np.all(np.abs(val_counts - 0.2 * counts) <= 1)

    # Deterministic for a seed, different for another seed.
    again = load_dataset("digits", tmp_path, val_fraction=0.2, seed=0)
    for key in ("train_x", "train_y", "val_x", "val_y"):
        assert torch.equal(d[key], again[key])
    other = load_dataset("digits", tmp_path, val_fraction=0.2, seed=1)
    assert not torch.equal(d["val_y"], other["val_y"])

    # Seeded random subsets.
    small = load_dataset("digits", tmp_path, seed=3, max_train=100, max_val=50)
    assert len(small["train_y"]) == 100 and len(small["val_y"]) == 50
    small2 = load_dataset("digits", tmp_path, seed=3, max_train=100, max_val=50)
    assert torch.equal(small["train_x"], small2["train_x"]) and torch.equal(small["val_y"], small2["val_y"])
    assert abs(small["train_x"].double().mean().item()) < 1e-5  # statistics of the returned train set


# --------------------------------------------------------------------------------------------
# mnist and cifar100 from fabricated files in the real on-disk formats
# --------------------------------------------------------------------------------------------


def idx_images(x: np.ndarray) -> bytes:
    n, h, w = x.shape
    return struct.pack(">IIII", 0x00000803, n, h, w) + x.astype(np.uint8).tobytes()


def idx_labels(y: np.ndarray) -> bytes:
    return struct.pack(">II", 0x00000801, len(y)) + y.astype(np.uint8).tobytes()


def gz(b: bytes) -> bytes:
    return gzip.compress(b, mtime=0)


def test_mnist_download_and_load_fabricated_idx_files(server, tmp_path):
    rng = np.random.default_rng(1)
    split = {
        "train": (rng.integers(0, 256, (30, 28, 28)), rng.integers(0, 10, 30)),
        "t10k": (rng.integers(0, 256, (12, 28, 28)), rng.integers(0, 10, 12)),
    }
    resources = []
    for prefix, (x, y) in split.items():
        for fname, body in (
            (f"{prefix}-images-idx3-ubyte.gz", gz(idx_images(x))),
            (f"{prefix}-labels-idx1-ubyte.gz", gz(idx_labels(y))),
        ):
            server.add(f"/mnist-mirror/{fname}", body)
            resources.append((fname, md5(body)))

    root = tmp_path / "data"
    # Before the download, loading names the missing files and where to put them.
    with pytest.raises(DataError) as info:
        load_dataset("mnist", root)
    msg = str(info.value)
    assert "train-images-idx3-ubyte.gz" in msg and str((root / "mnist").resolve()) in msg

    before = server.count("/mnist-mirror/")
    manifest = download("mnist", root, mirror=server.base + "/mnist-mirror/", resources=resources, timeout=5)
    assert server.count("/mnist-mirror/") == before + 4
    assert manifest["source"] == server.base + "/mnist-mirror/"
    # The manifest lists the decompressed files (what is read), each with the archive it came from.
    assert [(f["name"] + ".gz", Path(f["from"]).name) for f in manifest["files"]] == [(n, n) for n, _ in resources]
    download("mnist", root, mirror=server.base + "/mnist-mirror/", resources=resources, timeout=5)
    assert server.count("/mnist-mirror/") == before + 4  # second call downloads nothing
    assert not [p for p in (root / "mnist").iterdir() if p.name.startswith(".")]

    d = load_dataset("mnist", root)
    assert d["num_classes"] == 10 and d["image_size"] == 28 and d["channels"] == 1
    assert d["train_x"].shape == (30, 1, 28, 28) and d["val_x"].shape == (12, 1, 28, 28)
    assert d["train_x"].dtype == torch.float32 and d["val_y"].dtype == torch.int64
    x_tr, y_tr = split["train"]
    x_va, y_va = split["t10k"]
    assert np.array_equal(d["train_y"].numpy(), y_tr) and np.array_equal(d["val_y"].numpy(), y_va)
    mean, std = (x_tr / 255.0).mean(), (x_tr / 255.0).std()
    np.testing.assert_allclose(d["train_x"].numpy()[:, 0], (x_tr / 255.0 - mean) / std, atol=1e-5)
    np.testing.assert_allclose(d["val_x"].numpy()[:, 0], (x_va / 255.0 - mean) / std, atol=1e-5)

    sub = load_dataset("mnist", root, seed=5, max_train=7, max_val=5)
    assert sub["train_x"].shape == (7, 1, 28, 28) and sub["val_x"].shape == (5, 1, 28, 28)
    assert set(sub["val_y"].tolist()) <= set(y_va.tolist())


def cifar_tarball(rng, n_train: int, n_test: int):
    batches = {}
    for split, n in (("train", n_train), ("test", n_test)):
        batches[split] = {
            "batch_label": f"fabricated {split}",
            "filenames": [f"img_{i}.png" for i in range(n)],
            "fine_labels": rng.integers(0, 100, n).tolist(),
            "coarse_labels": rng.integers(0, 20, n).tolist(),
            "data": rng.integers(0, 256, (n, 3072)).astype(np.uint8),
        }
    meta = {
        "fine_label_names": [f"class_{i}" for i in range(100)],
        "coarse_label_names": [f"super_{i}" for i in range(20)],
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, obj in (("train", batches["train"]), ("test", batches["test"]), ("meta", meta)):
            payload = pickle.dumps(obj, protocol=2)
            info = tarfile.TarInfo(f"cifar-100-python/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue(), batches


def test_cifar100_download_and_load_fabricated_tarball(server, tmp_path, monkeypatch):
    body, batches = cifar_tarball(np.random.default_rng(2), n_train=20, n_test=8)
    # only files whose md5 is in the table are unpickled: the fabricated members' md5s stand in for torchvision's
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        members = [(n, md5(tar.extractfile(f"cifar-100-python/{n}").read())) for n in ("train", "test", "meta")]
    monkeypatch.setattr(data.sources, "cifar100_members", lambda: members)
    server.add("/cifar-mirror/cifar-100-python.tar.gz", body)
    resources = [("cifar-100-python.tar.gz", md5(body))]
    root = tmp_path / "data"

    with pytest.raises(DataError, match="cifar-100-python.tar.gz"):
        load_dataset("cifar100", root)

    before = server.count("/cifar-mirror/")
    manifest = download("cifar100", root, mirror=server.base + "/cifar-mirror", resources=resources, timeout=5)
    assert manifest["files"] == [{"name": "cifar-100-python.tar.gz", "md5": md5(body), "bytes": len(body)}]
    assert server.count("/cifar-mirror/") == before + 1
    assert sorted(p.name for p in (root / "cifar100" / "cifar-100-python").iterdir()) == ["meta", "test", "train"]
    assert not [p for p in (root / "cifar100").iterdir() if p.name.startswith(".")]
    download("cifar100", root, mirror=server.base + "/cifar-mirror", resources=resources, timeout=5)
    assert server.count("/cifar-mirror/") == before + 1

    d = load_dataset("cifar100", root)
    assert d["num_classes"] == 100 and d["image_size"] == 32 and d["channels"] == 3
    assert d["train_x"].shape == (20, 3, 32, 32) and d["val_x"].shape == (8, 3, 32, 32)
    assert d["train_x"].dtype == torch.float32 and d["train_y"].dtype == torch.int64
    assert d["train_y"].tolist() == batches["train"]["fine_labels"]
    assert d["val_y"].tolist() == batches["test"]["fine_labels"]
    # Channel-major pixel layout and per-channel statistics, recomputed independently.
    x_tr = batches["train"]["data"].reshape(-1, 3, 32, 32) / 255.0
    x_va = batches["test"]["data"].reshape(-1, 3, 32, 32) / 255.0
    mean = x_tr.mean(axis=(0, 2, 3), keepdims=True)
    std = x_tr.std(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(d["train_x"].numpy(), (x_tr - mean) / std, atol=1e-5)
    np.testing.assert_allclose(d["val_x"].numpy(), (x_va - mean) / std, atol=1e-5)
    np.testing.assert_allclose(d["mean"], mean.ravel(), rtol=1e-6)


def test_cifar100_extracted_cluster_copy_needs_no_download(tmp_path, monkeypatch):
    """A pre-extracted copy (torchvision's layout) whose files verify is used as is, even offline."""
    _, batches = cifar_tarball(np.random.default_rng(3), n_train=6, n_test=4)
    folder = tmp_path / "cifar100" / "cifar-100-python"
    folder.mkdir(parents=True)
    meta = {"fine_label_names": [f"class_{i}" for i in range(100)]}
    members = []
    for name, obj in (("train", batches["train"]), ("test", batches["test"]), ("meta", meta)):
        payload = pickle.dumps(obj, protocol=2)
        (folder / name).write_bytes(payload)
        members.append((name, md5(payload)))
    monkeypatch.setattr(data.sources, "cifar100_members", lambda: members)

    manifest = download("cifar100", tmp_path, mirror=closed_port_url(), timeout=2)
    assert [(f["name"], f["md5"]) for f in manifest["files"]] == [(f"cifar-100-python/{n}", m) for n, m in members]
    d = load_dataset("cifar100", tmp_path, max_train=4)
    assert d["train_x"].shape == (4, 3, 32, 32) and d["val_x"].shape == (4, 3, 32, 32)

    # A file that does not verify is not trusted: the download is attempted and fails clearly.
    (folder / "test").write_bytes(b"garbage")
    with pytest.raises(DataError, match="cifar-100-python.tar.gz"):
        download("cifar100", tmp_path, mirror=closed_port_url(), timeout=2)


@pytest.mark.slow  # about 9 s
def test_digits_needs_neither_torchvision_nor_torch_until_tensors():
    """Importing the package and 'downloading' digits import no torchvision (about 2 s per job);
    loading digits imports torch (tensors) but still no torchvision."""
    code = (
        "import sys, tempfile\n"
        "from transformer_hessian.data import download, load_dataset\n"
        "m = download('digits', tempfile.mkdtemp())\n"
        "assert m['dataset'] == 'digits' and len(m['files']) == 2\n"
        "print('torchvision' in sys.modules, 'torch' in sys.modules)\n"
        "d = load_dataset('digits', '.', max_train=10)\n"
        "assert tuple(d['train_x'].shape) == (10, 1, 8, 8)\n"
        "print('torchvision' in sys.modules, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split() == ["False", "False", "False", "True"]


def test_one_reader_per_data_set_registered_by_name(tmp_path):
    """Every data set of the table has its reader, registered by name; an unknown name is a DataError
    naming it; the digits reader returns the table's shape and classes."""
    from transformer_hessian.data.datasets import READERS, reader_of
    from transformer_hessian.data.fetch import OFFLINE_MANIFESTS
    from transformer_hessian.util.datanames import DATA_SETS

    assert set(READERS) == set(DATA_SETS)
    # a data set a library ships has no files: its "download" is a registered manifest
    assert set(OFFLINE_MANIFESTS) == {n for n, d in DATA_SETS.items() if d.library} >= {"digits"}
    for name in DATA_SETS:
        assert reader_of(name) is READERS[name]
    with pytest.raises(DataError, match="unknown data set 'svhn'; choose one of digits, mnist, cifar100"):
        reader_of("svhn")
    d = load_dataset("digits", tmp_path, max_train=20, max_val=10)
    t = DATA_SETS["digits"]
    assert d["train_x"].shape[1:] == (t.channels, t.side, t.side) and d["num_classes"] == t.num_classes
