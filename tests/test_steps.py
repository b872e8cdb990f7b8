"""Tests of transformer_hessian.steps and report_steps: each rule step writes what io.py reads back, with
numbers recomputed independently here, and applies its gate (the Hessian study's steps:
tests/studies/test_hessian.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import tiny_spec

from transformer_hessian import report_steps, steps
from transformer_hessian.config import ConfigError
from transformer_hessian.settings import Experiment, Hessian, Landscape
from transformer_hessian.train import train


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("steps")
    spec = tiny_spec(epochs=1)
    train("tiny", spec, root / "data", root / "run", device="cpu")
    hess = Hessian.from_dict({"experiment": "tiny", "block": 0, "batch_size": 6, "seed": 3, "method": "auto"})
    return root, spec, hess


def test_registry_step_check_detects_a_stale_readme(tmp_path):
    path = tmp_path / "README.md"
    report_steps.registry_step(str(path), write_readme=True)
    report_steps.registry_step(str(path), check=True)
    path.write_text(path.read_text() + "\nedited by hand\n")
    with pytest.raises(ValueError, match="differs from the registry"):
        report_steps.registry_step(str(path), check=True)


@pytest.mark.parametrize("key, value", [("width", 8), ("d_ff", 12), ("depth", 2)])
def test_checkpoint_sizes_must_equal_the_spec(tiny_run, key, value):
    """The model sizes travel twice (JSON spec and checkpoint): a spec that no longer matches the
    checkpoint stops the step with an error naming experiments.<name>.model.<key>."""
    root, spec, hess = tiny_run
    changed = dataclasses.replace(spec, model=dataclasses.replace(spec.model, **{key: value}))
    ckpt = str(root / "run/checkpoints/final.pt")
    landscape = Landscape.with_defaults({"experiment": "tiny", "n_orderings": 2, "n_bootstrap": 10, "k_min": 2})
    with pytest.raises(ConfigError, match=rf"experiments\.tiny\.model\.{key}"):
        steps.landscape_step(ckpt, changed, landscape, str(root / "data"), str(root / f"{key}_l.json"), device="cpu")
    assert not (root / f"{key}_l.json").exists()
    # the unchanged spec passes the same check (the JSON round trip keeps it equal)
    same = Experiment.from_dict(json.loads(json.dumps(spec.to_dict())))
    res = steps.landscape_step(ckpt, same, landscape, str(root / "data"), str(root / f"{key}_l.json"), device="cpu")
    assert res["experiment"] == "tiny" and res["n_orderings"] == 2
