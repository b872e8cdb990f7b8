"""Tests of transformer_hessian.train.lm: the GPT's loss falls on a tiny run of the embedded corpus,
the run's files and metrics, a run stopped after its first epoch and run again ends with the weights of
an uninterrupted run bit for bit, and checkpoints load (and are refused when damaged or foreign)."""

from __future__ import annotations

import json

import pytest
import torch

from transformer_hessian.core.gpt import GPT, GPTConfig, count_parameters
from transformer_hessian.data import text
from transformer_hessian.errors import CheckpointError
from transformer_hessian.train import lm
from transformer_hessian.train.checkpoints import load_checkpoint, save_checkpoint
from transformer_hessian.util.io import load_metrics

CFG = GPTConfig(context=8, width=8, depth=1, heads=2)
RUN = {"batch_size": 16, "lr": 1e-2, "weight_decay": 0.01, "seed": 5, "log_every": 2}


@pytest.fixture(scope="module")
def seqs():
    """96 training and 32 validation windows of 8 byte tokens of the embedded corpus."""
    train, val = text.split(text.encode(text.embedded_corpus()))
    return text.windows(train, 8, 96), text.windows(val, 8, 32)


def test_loss_decreases_and_the_run_writes_its_files(seqs, tmp_path, caplog):
    caplog.set_level("INFO", logger="transformer_hessian")
    m = lm.train_lm(CFG, *seqs, epochs=3, out_dir=tmp_path, **RUN)
    losses = [h["train_loss"] for h in m["history"]]
    assert losses[0] < 5.6 and losses == sorted(losses, reverse=True)  # from about ln 256 = 5.55, falling
    assert m["history"][-1]["val_loss"] < m["history"][0]["val_loss"]
    assert [h["epoch"] for h in m["history"]] == [1, 2, 3] and all(h["seconds"] > 0 for h in m["history"])
    ck = tmp_path / "checkpoints"
    assert sorted(p.name for p in ck.glob("*.pt")) == [
        "epoch_001.pt",
        "epoch_002.pt",
        "epoch_003.pt",
        "final.pt",
        "init.pt",
    ]
    assert load_metrics(tmp_path / "metrics.json") == json.loads(json.dumps(m))
    model = lm.load_lm(ck / "final.pt")
    assert m["n_parameters"] == count_parameters(model) and m["model"] == CFG.to_dict()
    assert (m["n_train"], m["n_val"], m["context"], m["train_tokens"]) == (96, 32, 8, 768)
    assert m["final"]["val_loss"] == pytest.approx(lm.evaluate_lm(model, seqs[1]), rel=1e-6)
    assert m["final"]["val_loss"] == pytest.approx(m["history"][-1]["val_loss"], rel=1e-6)
    lines = caplog.text
    assert "lm epoch 3/3: train loss" in lines and "left" in lines and "lm epoch 1/3 step 2/6" in lines
    init = lm.load_lm(ck / "init.pt")
    torch.manual_seed(RUN["seed"])
    fresh = GPT(CFG)
    assert all(torch.equal(a, b) for a, b in zip(init.state_dict().values(), fresh.state_dict().values(), strict=True))


def test_a_run_stopped_after_epoch_one_resumes_to_the_same_final_weights(seqs, tmp_path, monkeypatch):
    straight = lm.train_lm(CFG, *seqs, epochs=2, out_dir=tmp_path / "straight", **RUN)

    real_save = lm.save_checkpoint

    def save_then_stop(obj, path):
        real_save(obj, path)
        if path.name == "epoch_001.pt":
            raise KeyboardInterrupt  # stopped right after the first epoch's checkpoint

    monkeypatch.setattr(lm, "save_checkpoint", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        lm.train_lm(CFG, *seqs, epochs=2, out_dir=tmp_path / "stopped", **RUN)
    monkeypatch.setattr(lm, "save_checkpoint", real_save)
    assert not (tmp_path / "stopped" / "checkpoints" / "final.pt").exists()

    epochs_run = []
    real_epoch = lm._epoch
    monkeypatch.setattr(lm, "_epoch", lambda *a, **k: epochs_run.append(k["epoch"]) or real_epoch(*a, **k))
    resumed = lm.train_lm(CFG, *seqs, epochs=2, out_dir=tmp_path / "stopped", **RUN)
    assert epochs_run == [2]  # epoch 1 came from its checkpoint

    a = load_checkpoint(tmp_path / "straight" / "checkpoints" / "final.pt")
    b = load_checkpoint(tmp_path / "stopped" / "checkpoints" / "final.pt")
    assert list(a["model"]) == list(b["model"])
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    drop = [{k: v for k, v in h.items() if k != "seconds"} for h in straight["history"]]
    assert drop == [{k: v for k, v in h.items() if k != "seconds"} for h in resumed["history"]]
    assert resumed["final"] == straight["final"]

    # other settings: not resumed, started afresh
    epochs_run.clear()
    lm.train_lm(CFG, *seqs, epochs=2, out_dir=tmp_path / "stopped", **(RUN | {"seed": 6}))
    assert epochs_run == [1, 2]


def test_load_lm_refuses_damaged_and_foreign_checkpoints(seqs, tmp_path):
    lm.train_lm(CFG, seqs[0][:16], seqs[1][:4], epochs=1, out_dir=tmp_path, **RUN)
    final = tmp_path / "checkpoints" / "final.pt"
    model = lm.load_lm(final)
    assert not model.training and model.config == CFG
    ck = load_checkpoint(final)
    foreign = dict(ck, kind=None)
    save_checkpoint(foreign, tmp_path / "vit.pt")
    with pytest.raises(CheckpointError, match="not a GPT checkpoint"):
        lm.load_lm(tmp_path / "vit.pt")
    save_checkpoint(dict(ck, model_config={"width": 8}), tmp_path / "odd.pt")
    with pytest.raises(CheckpointError, match="model_config"):
        lm.load_lm(tmp_path / "odd.pt")
    final.write_bytes(final.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="damaged"):
        lm.load_lm(final)


def test_train_lm_checks_its_token_ids(seqs, tmp_path):
    train, val = seqs
    with pytest.raises(ValueError, match="0..6"):
        lm.train_lm(
            GPTConfig(vocab=7, context=8, width=4, depth=1, heads=1), train, val, epochs=1, out_dir=tmp_path, **RUN
        )
    with pytest.raises(ValueError, match="context"):
        lm.train_lm(GPTConfig(context=4, width=4, depth=1, heads=1), train, val, epochs=1, out_dir=tmp_path, **RUN)
    with pytest.raises(ValueError, match="torch.long"):
        lm.train_lm(CFG, train.int(), val, epochs=1, out_dir=tmp_path, **RUN)
