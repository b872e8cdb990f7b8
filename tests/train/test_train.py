import json
import os
import signal
import subprocess
import sys

import pytest
import torch
from conftest import tiny_spec

from transformer_hessian.train import KILL_ENV, TrainingError, load_model, per_sample_losses, train


def _cli_train(out, spec, env, extra_env=None):
    e = dict(env)
    e.update(extra_env or {})
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_hessian",
            "train",
            "--experiment",
            "tiny",
            "--spec",
            json.dumps(spec.to_dict()),
            "--data-root",
            str(out.parent / "data"),
            "--out",
            str(out),
            "--device",
            "cpu",
        ],
        env=e,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _state(path):
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


@pytest.mark.slow  # about 36 s
def test_killed_run_resumes_to_identical_final_weights(tmp_path, env):
    spec = tiny_spec(epochs=4)
    straight = _cli_train(tmp_path / "straight", spec, env)
    assert straight.returncode == 0, straight.stderr

    killed = _cli_train(tmp_path / "killed", spec, env, {KILL_ENV: "2"})
    assert killed.returncode == -signal.SIGKILL
    ck = tmp_path / "killed" / "checkpoints"
    assert (ck / "epoch_002.pt").exists() and not (ck / "final.pt").exists()
    assert not (tmp_path / "killed" / "metrics.json").exists()

    resumed = _cli_train(tmp_path / "killed", spec, env)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stderr

    a, b = _state(tmp_path / "straight/checkpoints/final.pt"), _state(ck / "final.pt")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    m1 = json.loads((tmp_path / "straight/metrics.json").read_text())
    m2 = json.loads((tmp_path / "killed/metrics.json").read_text())
    assert [h["val_loss"] for h in m1["history"]] == [h["val_loss"] for h in m2["history"]]


def test_checkpoints_load_weights_only_and_metrics_are_complete(tmp_path):
    spec = tiny_spec(epochs=2)
    m = train("tiny", spec, tmp_path / "data", tmp_path / "run", device="cpu")
    ck = tmp_path / "run" / "checkpoints"
    for name in ("init.pt", "epoch_001.pt", "epoch_002.pt", "final.pt"):
        obj = torch.load(ck / name, map_location="cpu", weights_only=True)
        assert {"model", "model_config", "optimizer", "epoch"} <= obj.keys()
    init, final = _state(ck / "init.pt"), _state(ck / "final.pt")
    assert any(not torch.equal(init[k], final[k]) for k in init)
    assert [h["epoch"] for h in m["history"]] == [1, 2]
    for h in m["history"]:
        assert {"train_loss", "train_acc", "val_loss", "val_acc"} <= h.keys()
    on_disk = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert on_disk["final"]["val_acc"] == pytest.approx(m["final"]["val_acc"])
    # Weights are stored in the math orientation: X @ W.
    model = load_model(ck / "final.pt")
    assert model.blocks[0].W_Q.shape == (6, 4) and model.blocks[0].W_1.shape == (6, 10)


def test_changed_settings_start_afresh(tmp_path):
    train("tiny", tiny_spec(epochs=2), tmp_path / "data", tmp_path / "run", device="cpu")
    m = train("tiny", tiny_spec(epochs=2, lr=1e-3), tmp_path / "data", tmp_path / "run", device="cpu")
    fresh = train("tiny", tiny_spec(epochs=2, lr=1e-3), tmp_path / "data", tmp_path / "fresh", device="cpu")
    assert m["final"]["val_loss"] == pytest.approx(fresh["final"]["val_loss"], abs=0)


_NAN_LOSS = """
import torch
import torch.nn.functional as F

_ce = F.cross_entropy


def _nan_after_two(*args, _n=[0], **kwargs):
    _n[0] += 1
    loss = _ce(*args, **kwargs)
    return loss * float("nan") if _n[0] > 2 else loss


F.cross_entropy = _nan_after_two
"""


@pytest.mark.slow  # about 9 s
def test_non_finite_loss_names_epoch_and_step(tmp_path, env, monkeypatch):
    # The schema refuses a learning rate that would diverge (lr <= 100), so the loss is made
    # non-finite from the third step on: in this process by patching F.cross_entropy, in the CLI's
    # process by a sitecustomize module on its PYTHONPATH doing the same.
    spec = tiny_spec(epochs=2)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_NAN_LOSS)
    ce, calls = torch.nn.functional.cross_entropy, [0]

    def nan_after_two(*args, **kwargs):
        calls[0] += 1
        loss = ce(*args, **kwargs)
        return loss * float("nan") if calls[0] > 2 else loss

    monkeypatch.setattr(torch.nn.functional, "cross_entropy", nan_after_two)
    with pytest.raises(TrainingError, match=r"non-finite loss .* at epoch \d+, step \d+"):
        train("tiny", spec, tmp_path / "data", tmp_path / "run", device="cpu")
    monkeypatch.undo()
    pythonpath = os.pathsep.join(p for p in (str(hook), env.get("PYTHONPATH", "")) if p)
    proc = _cli_train(tmp_path / "cli", spec, env, {"PYTHONPATH": pythonpath})
    assert proc.returncode == 1
    assert "non-finite loss" in proc.stderr and "Traceback" not in proc.stderr


def test_per_sample_losses_match_cross_entropy(tmp_path):
    train("tiny", tiny_spec(epochs=1), tmp_path / "data", tmp_path / "run", device="cpu")
    model = load_model(tmp_path / "run/checkpoints/final.pt")
    x, y = torch.randn(7, 1, 8, 8), torch.randint(0, 10, (7,))
    losses = per_sample_losses(model, x, y, batch_size=3)
    ref = torch.nn.functional.cross_entropy(model(x), y, reduction="none").double()
    assert losses.shape == (7,)
    assert torch.allclose(torch.from_numpy(losses), ref, rtol=1e-6)


def test_resume_rebuilds_a_removed_init_checkpoint(tmp_path):
    """snakemake --forceall deletes init.pt/final.pt but not the epoch checkpoints."""
    train("tiny", tiny_spec(epochs=2), tmp_path / "data", tmp_path / "run", device="cpu")
    ck = tmp_path / "run" / "checkpoints"
    init_before = _state(ck / "init.pt")
    (ck / "init.pt").unlink()
    (ck / "final.pt").unlink()
    train("tiny", tiny_spec(epochs=2), tmp_path / "data", tmp_path / "run", device="cpu")
    init_after = _state(ck / "init.pt")
    assert all(torch.equal(init_before[k], init_after[k]) for k in init_before)
    assert (ck / "final.pt").exists()
