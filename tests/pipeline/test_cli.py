"""The command line: help for every command, clear one-line errors, the theory gate."""

import json
import subprocess
import sys

import pytest
import torch
from conftest import tiny_spec

from transformer_hessian.core.checks import closed_form_check, gauss_newton, saved_hessian_check
from transformer_hessian.core.hessian import compute_hessian, fixed_batch, group_layout
from transformer_hessian.theory import model_loss_hessian_parts
from transformer_hessian.train import load_experiment_data, load_model, train

COMMANDS = [
    "download",
    "train",
    "hessian",
    "theory",
    "landscape",
    "tables",
    "summary",
    "bench",
    "claims",
    "claims-readme",
    "claims-compare",
    "registry",
    "dynamics",
    "table1",
    "probe",
    "bounds",
]


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "transformer_hessian", *args], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command):
    proc = _cli(command, "--help")
    assert proc.returncode == 0 and "usage: transformer-hessian" in proc.stdout


@pytest.mark.slow  # about 8 s
def test_unreachable_download_fails_with_one_clear_message(tmp_path):
    proc = _cli(
        "download",
        "--dataset",
        "mnist",
        "--mirror",
        "http://127.0.0.1:9/",
        "--manifest",
        str(tmp_path / "data/mnist/manifest.json"),
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert (
        "mnist" in proc.stderr and "http://127.0.0.1:9/" in proc.stderr and str(tmp_path / "data/mnist") in proc.stderr
    )
    assert not (tmp_path / "data/mnist/manifest.json").exists()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    spec = tiny_spec(epochs=1)
    train("tiny", spec, root / "data", root / "run", device="cpu")
    return root, spec


@pytest.mark.slow  # about 40 s
def test_closed_form_check_passes_and_gate_fails_on_tiny_tolerance(tiny_run):
    root, spec = tiny_run
    hess = {"experiment": "tiny", "block": 0, "batch_size": 8, "seed": 0, "method": "auto"}
    data = load_experiment_data(spec, root / "data")
    x, y = fixed_batch(data["train_x"], data["train_y"], 8, 0)
    res = closed_form_check(load_model(root / "run/checkpoints/final.pt"), x, y, tolerance=1e-8)
    assert res["passed"] and res["max_rel_error"] < 1e-12 and len(res["blocks"]) == 25
    assert all(0 <= b["functional_share"] <= 1 for b in res["blocks"])

    base = [
        "--checkpoint",
        str(root / "run/checkpoints/final.pt"),
        "--stage",
        "trained",
        "--spec",
        json.dumps(spec.to_dict()),
        "--hessian",
        json.dumps(hess),
        "--data-root",
        str(root / "data"),
        "--device",
        "cpu",
    ]
    made = _cli("hessian", *base, "--out-npz", str(root / "H.npz"), "--out-norms", str(root / "H.json"))
    assert made.returncode == 0, made.stderr
    args = ["theory", *base, "--hessian-npz", str(root / "H.npz"), "--norms", str(root / "H.json"), "--probes", "3"]
    ok = _cli(*args, "--out", str(root / "ok.json"))
    assert ok.returncode == 0, ok.stderr
    res = json.loads((root / "ok.json").read_text())
    assert res["passed"] is True and res["n_probes"] == 15 and res["hessian_method"] == "closed_form"
    assert len(res["blocks"]) == 25 and res["max_rel_error"] < 1e-12
    # A tolerance below rounding error must stop the rule, naming the block and the tolerance.
    bad = _cli(*args, "--tolerance", "1e-300", "--out", str(root / "bad.json"))
    assert bad.returncode == 1
    assert "exceeds theory.tolerance=1e-300" in bad.stderr and "Traceback" not in bad.stderr


def test_help_imports_no_heavy_library():
    # `--help` must answer instantly: the command line defers torch/numpy to the command that runs.
    code = (
        "import sys; from transformer_hessian.pipeline.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('torch', 'numpy', 'pandas', 'matplotlib') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_every_option_has_help_and_description_is_plain_text():
    import argparse

    from transformer_hessian.pipeline.cli import build_parser

    parser = build_parser()
    assert "``" not in parser.description
    missing = []

    def walk(p, path):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(parser, "transformer-hessian")
    assert missing == []


@pytest.mark.slow  # about 11 s
def test_probe_check_catches_one_wrong_entry_and_splits_like_the_closed_form(tiny_run):
    root, spec = tiny_run
    data = load_experiment_data(spec, root / "data")
    x, y = fixed_batch(data["train_x"], data["train_y"], 8, 0)
    model = load_model(root / "run/checkpoints/final.pt", dtype=torch.float64)
    H, _, _ = compute_hessian(model, 0, x, y, "auto")
    good = saved_hessian_check(H, model, x, y, probes=4, tolerance=1e-8, seed=1)
    assert good["passed"] and good["max_rel_error"] < 1e-12
    # One perturbed entry (and its mirror) in the (W_K, W_1) block is found and located.
    _, _, off = group_layout(model, 0)
    i, j = int(off[1]) + 3, int(off[3]) + 7  # a W_K row, a W_1 column
    Hbad = H.clone()
    Hbad[i, j] += 1e-6 * H.abs().max()
    Hbad[j, i] = Hbad[i, j]
    bad = saved_hessian_check(Hbad, model, x, y, probes=4, tolerance=1e-8, seed=1)
    worst = max(bad["blocks"], key=lambda r: r["rel_error"])
    assert not bad["passed"] and {worst["row"], worst["col"]} == {"W_K", "W_1"}
    # Gauss-Newton part by autograd equals the closed form's outer part.
    outer, func = model_loss_hessian_parts(model, x.double(), y, block=0)
    G = gauss_newton(model, 0, x.double(), y)
    assert (G - outer.dense).abs().max() <= 1e-12 * outer.dense.abs().max()
    cf = closed_form_check(model, x, y, tolerance=1e-8)
    for a, b in zip(good["blocks"], cf["blocks"]):
        assert a["fro_outer"] == pytest.approx(b["fro_outer"], rel=1e-9, abs=1e-14)
        assert a["fro_functional"] == pytest.approx(b["fro_functional"], rel=1e-9, abs=1e-14)
