"""Tests of transformer_hessian.util.io: every result format survives a write/read round trip on fresh
random contents, the writers are atomic, and the readers name the file (and rule) on failure."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_hessian import plotting
from transformer_hessian.studies.bounds.result import load_bounds, save_bounds
from transformer_hessian.studies.landscape.result import RESULT_KEYS, RULE, save_landscape
from transformer_hessian.util import io


def _norms(stage="init"):
    return {
        "stage": stage,
        "experiment": "e",
        "block": 0,
        "method": "closed_form",
        "seconds": 0.5,
        "batch_size": 3,
        "n_params": 4,
        "blocks": [{"row": "W_Q", "col": "W_K", "fro": 1.5}],
        "weights": {"W_Q": {"fro": 2.0}},
    }


@settings(max_examples=15, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)), min_size=1, max_size=4), seed=st.integers(0, 10**6)
)
def test_hessian_roundtrip_random_layouts(tmp_path_factory, sizes, seed):
    rng = np.random.default_rng(seed)
    shapes = np.array(sizes, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(shapes.prod(axis=1))]).astype(np.int64)
    P = int(offsets[-1])
    A = rng.standard_normal((P, P))
    H = A + A.T
    names = [f"G{i}" for i in range(len(sizes))]
    path = tmp_path_factory.mktemp("h") / "stage.npz"
    io.save_hessian(path, H, names, offsets, shapes)
    got = io.load_hessian(path)
    np.testing.assert_array_equal(got["H"], H)
    assert got["H"].dtype == np.float64
    assert got["names"] == names
    np.testing.assert_array_equal(got["offsets"], offsets)
    np.testing.assert_array_equal(got["shapes"], shapes)
    # no temporary file left beside the result
    assert sorted(os.listdir(path.parent)) == ["stage.npz", "stage.npz.sha256"]  # the result and its digest


def test_hessian_reader_names_missing_file_and_arrays(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.npz.*hessian rule"):
        io.load_hessian(tmp_path / "missing.npz")
    bad = tmp_path / "bad.npz"
    np.savez(bad, H=np.eye(2))
    with pytest.raises(KeyError, match=r"names.*offsets"):
        io.load_hessian(bad)


def test_plotting_readers_are_the_io_ones():
    assert plotting.load_hessian is io.load_hessian
    assert plotting.load_json is io.load_json


def test_norms_roundtrip_key_order_and_schema(tmp_path):
    n = _norms()
    n_shuffled = dict(reversed(list(n.items())))
    path = tmp_path / "init_norms.json"
    io.save_norms(path, n_shuffled)
    assert list(json.loads(path.read_text())) == list(io.NORMS_KEYS)
    assert io.load_norms(path) == n
    with pytest.raises(ValueError, match=r"missing keys \['weights'\]"):
        io.save_norms(path, {k: v for k, v in n.items() if k != "weights"})
    with pytest.raises(ValueError, match=r"unknown keys \['extra'\]"):
        io.save_norms(path, {**n, "extra": 1})
    (tmp_path / "partial.json").write_text(json.dumps({"stage": "init"}))
    with pytest.raises(KeyError, match="partial.json.*hessian rule"):
        io.load_norms(tmp_path / "partial.json")


def test_json_writers_refuse_nan_and_readers_name_the_file(tmp_path):
    with pytest.raises(ValueError):
        save_landscape(tmp_path / "l.json", {"slope": math.nan, "slope_ci95": [0, 1]})
    assert not (tmp_path / "l.json").exists()
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match="broken.json.*not valid JSON"):
        io.load_json(tmp_path / "broken.json")
    with pytest.raises(FileNotFoundError, match="probe.json.*probe rule"):
        io.load_json(tmp_path / "probe.json", "probe")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not an object"):
        io.load_metrics(tmp_path / "list.json")


def test_numpy_values_become_json_numbers(tmp_path):
    rng = np.random.default_rng(7)
    slope = rng.normal()
    ci = rng.normal(size=2)
    save_landscape(tmp_path / "l.json", {"slope": np.float64(slope), "slope_ci95": ci, "k": np.arange(3)})
    got = io.load_keyed(tmp_path / "l.json", RULE, RESULT_KEYS)
    assert got["slope"] == slope and got["slope_ci95"] == list(ci) and got["k"] == [0, 1, 2]


def test_claims_roundtrip_dict_and_bare_list(tmp_path):
    rows = [{"id": "a", "verdict": "reproduced"}, {"id": "b", "verdict": "not reproduced"}]
    io.save_claims(tmp_path / "c.json", tmp_path / "c.md", rows, "abc", "# doc\n")
    assert io.load_claims(tmp_path / "c.json") == rows
    assert json.loads((tmp_path / "c.json").read_text())["config_hash"] == "abc"
    assert (tmp_path / "c.md").read_text() == "# doc\n"
    (tmp_path / "bare.json").write_text(json.dumps(rows))
    assert io.load_claims(tmp_path / "bare.json") == rows


@pytest.mark.parametrize(
    ("save", "load", "obj"),
    [
        (
            io.save_theory_check,
            io.load_theory_check,
            {"stage": "init", "blocks": [], "max_rel_error": 0.1, "passed": True},
        ),
        (save_bounds, load_bounds, {"stage": "trained", "summary": {"holds_fraction": 1.0}}),
        (io.save_metrics, io.load_metrics, {"experiment": "e", "final": {"val_acc": 0.5}}),
        (io.save_summary, io.load_summary, {"provenance": {"config_hash": "x"}}),
        (io.save_manifest, io.load_manifest, {"dataset": "digits", "files": []}),
    ],
)
def test_json_formats_roundtrip(tmp_path, save, load, obj):
    save(tmp_path / "r.json", obj)
    assert load(tmp_path / "r.json") == obj
