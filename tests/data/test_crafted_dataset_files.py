"""A crafted data set file (fault injection): CIFAR-100's pickles are verified by md5
before they are read and then read by a restricted unpickler, so that no code in them runs.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from fault_helpers import _Evil


def test_cifar_pickle_verified_by_md5_and_never_runs_code(tmp_path, monkeypatch):
    """A crafted ``cifar-100-python/train`` is refused by its md5 and, even with a matching md5,
    by the restricted unpickler: no code runs."""
    from transformer_hessian.data import DataError, load_dataset, sources

    folder = tmp_path / "cifar100" / "cifar-100-python"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    good = {"data": rng.integers(0, 256, (4, 3072)).astype(np.uint8), "fine_labels": [1, 2, 3, 4]}
    evil = {"data": good["data"], "fine_labels": [1, 2, 3, 4], "x": _Evil()}
    (folder / "train").write_bytes(pickle.dumps(evil, protocol=2))
    (folder / "test").write_bytes(pickle.dumps(good, protocol=2))
    (folder / "meta").write_bytes(pickle.dumps({"fine_label_names": [str(i) for i in range(100)]}, protocol=2))
    monkeypatch.chdir(tmp_path)
    # 1. the real table: the crafted file's md5 is not CIFAR-100's; it is refused before unpickling
    with pytest.raises(DataError, match=r"train does not match its md5 .* not unpickled"):
        load_dataset("cifar100", tmp_path)
    assert not (tmp_path / "PWNED").exists()
    # 2. even a table that lists the crafted md5 does not make it run code
    import hashlib

    def md5(p):
        return hashlib.md5(p.read_bytes(), usedforsecurity=False).hexdigest()

    members = [(n, md5(folder / n)) for n in ("train", "test", "meta")]
    monkeypatch.setattr(sources, "cifar100_members", lambda: members)
    with pytest.raises(DataError, match=r"global posix\.system is not allowed"):
        load_dataset("cifar100", tmp_path)
    assert not (tmp_path / "PWNED").exists()
    # 3. a genuine-format file (dicts, lists, a numpy uint8 array) still loads
    (folder / "train").write_bytes(pickle.dumps(good, protocol=2))
    members[0] = ("train", md5(folder / "train"))
    d = load_dataset("cifar100", tmp_path)
    assert d["train_x"].shape == (4, 3, 32, 32) and d["train_y"].tolist() == [1, 2, 3, 4]
