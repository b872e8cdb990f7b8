"""The command line: help for every command, clear one-line errors, the theory gate."""

import json
import subprocess
import sys

import pytest

from conftest import tiny_spec
from transformer_hessian.checks import closed_form_check
from transformer_hessian.hessian import fixed_batch
from transformer_hessian.train import load_experiment_data, load_model, train

COMMANDS = ["download", "train", "hessian", "theory", "landscape", "tables", "summary", "bench", "bounds"]


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "transformer_hessian", *args], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command):
    proc = _cli(command, "--help")
    assert proc.returncode == 0 and "usage: transformer-hessian" in proc.stdout


def test_unreachable_download_fails_with_one_clear_message(tmp_path):
    proc = _cli("download", "--dataset", "mnist", "--mirror", "http://127.0.0.1:9/",
                "--manifest", str(tmp_path / "data/mnist/manifest.json"))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "mnist" in proc.stderr and "http://127.0.0.1:9/" in proc.stderr and str(tmp_path / "data/mnist") in proc.stderr
    assert not (tmp_path / "data/mnist/manifest.json").exists()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    spec = tiny_spec(epochs=1)
    train("tiny", spec, root / "data", root / "run", device="cpu")
    return root, spec


def test_closed_form_check_passes_and_gate_fails_on_tiny_tolerance(tiny_run):
    root, spec = tiny_run
    hess = {"experiment": "tiny", "block": 0, "batch_size": 8, "seed": 0, "method": "auto"}
    data = load_experiment_data(spec, root / "data")
    x, y = fixed_batch(data["train_x"], data["train_y"], 8, 0)
    res = closed_form_check(load_model(root / "run/checkpoints/final.pt"), x, y)
    assert res["passed"] and res["max_rel_error"] < 1e-12 and len(res["blocks"]) == 25
    assert all(0 <= b["functional_share"] <= 1 for b in res["blocks"])

    args = ["theory", "--checkpoint", str(root / "run/checkpoints/final.pt"), "--stage", "trained",
            "--spec", json.dumps(spec), "--hessian", json.dumps(hess), "--data-root", str(root / "data"),
            "--device", "cpu"]
    ok = _cli(*args, "--out", str(root / "ok.json"))
    assert ok.returncode == 0, ok.stderr
    assert json.loads((root / "ok.json").read_text())["passed"] is True
    # A tolerance below rounding error must stop the rule, naming the block and the tolerance.
    bad = _cli(*args, "--tolerance", "1e-300", "--out", str(root / "bad.json"))
    assert bad.returncode == 1
    assert "exceeds theory.tolerance=1e-300" in bad.stderr and "Traceback" not in bad.stderr
