"""The Hessian study's rule steps (transformer_hessian.studies.hessian.step): each writes what io.py
reads back, with numbers recomputed independently here, and applies its gate; the memory and
checkpoint checks name the config keys."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from conftest import tiny_spec

from transformer_hessian.config.settings import Hessian
from transformer_hessian.config.validate import ConfigError
from transformer_hessian.core.hessian import block_norms
from transformer_hessian.studies.hessian.step import hessian_step, theory_step
from transformer_hessian.studies.hessian_batch import check_hessian_memory
from transformer_hessian.train import train
from transformer_hessian.util import io


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("hessian_steps")
    spec = tiny_spec(epochs=1)
    train("tiny", spec, root / "data", root / "run", device="cpu")
    hess = Hessian.from_dict({"experiment": "tiny", "block": 0, "batch_size": 6, "seed": 3, "method": "auto"})
    return root, spec, hess


def test_hessian_step_writes_the_hessian_and_its_norms(tiny_run):
    root, spec, hess = tiny_run
    out_npz, out_norms = root / "h/trained.npz", root / "h/trained_norms.json"
    returned = hessian_step(
        str(root / "run/checkpoints/final.pt"), "trained", spec, hess, str(root / "data"), out_npz, out_norms
    )
    H = io.load_hessian(out_npz)
    norms = io.load_norms(out_norms)
    assert norms == returned
    P = int(H["offsets"][-1])
    assert H["H"].shape == (P, P) and norms["n_params"] == P and norms["batch_size"] == 6
    np.testing.assert_allclose(H["H"], H["H"].T, atol=1e-12 * np.abs(H["H"]).max())
    assert H["names"] == ["W_Q", "W_K", "W_V", "W_1", "W_2"]
    assert np.array_equal(np.diff(H["offsets"]), H["shapes"].prod(axis=1))
    # the norms file holds the norms of the saved matrix (recomputed here)
    assert norms["blocks"] == block_norms(H["H"], H["offsets"], H["names"])
    assert norms["stage"] == "trained" and norms["experiment"] == "tiny"


def test_theory_step_passes_and_its_gate_fails_on_a_corrupted_hessian(tiny_run):
    root, spec, hess = tiny_run
    ckpt = str(root / "run/checkpoints/init.pt")
    npz, norms = root / "t/init.npz", root / "t/init_norms.json"
    hessian_step(ckpt, "init", spec, hess, str(root / "data"), npz, norms)
    res = theory_step(ckpt, "init", spec, hess, str(root / "data"), str(npz), root / "t/ok.json", norms=norms)
    assert (
        res["passed"] and io.load_theory_check(root / "t/ok.json")["hessian_method"] == io.load_norms(norms)["method"]
    )

    saved = io.load_hessian(npz)
    H = saved["H"].copy()
    i = int(saved["offsets"][3])  # first W_1 entry
    H[i, i] += 1e-3 * np.abs(H).max()
    bad = root / "t/bad.npz"
    io.save_hessian(bad, H, saved["names"], saved["offsets"], saved["shapes"])
    with pytest.raises(ValueError, match=r"disagrees with curvlinops.*W_1"):
        theory_step(ckpt, "init", spec, hess, str(root / "data"), str(bad), root / "t/bad.json", probes=4)
    # the result is written before the gate fails, so the log can name the details file
    assert not io.load_theory_check(root / "t/bad.json")["passed"]


def test_memory_check_names_the_config_keys(monkeypatch):
    import transformer_hessian.util.resources as res

    monkeypatch.setattr(res, "available_bytes", lambda dev: 1024)
    spec = dataclasses.replace(tiny_spec(), model=dataclasses.replace(tiny_spec().model, width=8, d_k=8, d_ff=16))
    hessian = Hessian.with_defaults({"experiment": "e"})
    with pytest.raises(ValueError, match=r"experiments\.e\.model\.width"):
        check_hessian_memory(spec, hessian, torch.device("cpu"))


@pytest.mark.parametrize("key, value", [("width", 8), ("d_ff", 12), ("depth", 2)])
def test_checkpoint_sizes_must_equal_the_spec(tiny_run, key, value):
    """The model sizes travel twice (JSON spec and checkpoint): a spec that no longer matches the
    checkpoint stops the step with an error naming experiments.<name>.model.<key>."""
    root, spec, hess = tiny_run
    changed = dataclasses.replace(spec, model=dataclasses.replace(spec.model, **{key: value}))
    ckpt = str(root / "run/checkpoints/final.pt")
    with pytest.raises(ConfigError, match=rf"experiments\.tiny\.model\.{key}: the config says {value}"):
        hessian_step(ckpt, "trained", changed, hess, str(root / "data"), root / f"{key}.npz", root / f"{key}.json")
    assert not (root / f"{key}.npz").exists() and not (root / f"{key}.json").exists()
