"""Damaged checkpoints (fault injection): a truncated or emptied checkpoint at
every position (latest, middle, init, final, every epoch) is skipped or set aside and training rebuilds
it with the weights of an uninterrupted run (the ``reference_run`` fixture of tests/conftest.py), bit
for bit; a damaged epoch checkpoint no longer blocks the dynamics replay.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from conftest import tiny_spec
from fault_helpers import _truncate

from transformer_hessian.train import load_model, train


def _interrupted_copy(ref: Path, dest: Path, after_epoch: int) -> Path:
    """The checkpoint folder as a run killed right after ``after_epoch`` leaves it."""
    shutil.copytree(ref / "run", dest)
    ck = dest / "checkpoints"
    for p in ck.glob("epoch_*.pt"):
        if int(p.stem.split("_")[1]) > after_epoch:
            p.unlink()
            p.with_name(p.name + ".sha256").unlink(missing_ok=True)
    (ck / "final.pt").unlink()
    (dest / "metrics.json").unlink()
    return ck


def _same_weights(a: Path, b: Path) -> bool:
    sa = torch.load(a, weights_only=True)["model"]
    sb = torch.load(b, weights_only=True)["model"]
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize(
    "position", [pytest.param("latest", marks=pytest.mark.slow), "middle", "init", "final"]
)  # latest: about 3 s
def test_damaged_checkpoint_is_recovered(reference_run, tmp_path, position, caplog):
    root, spec = reference_run
    ref_ck = root / "run" / "checkpoints"
    if position == "final":
        from transformer_hessian.train.checkpoints import CheckpointError, set_aside_damaged

        # A finished run whose final.pt was damaged afterwards: the workflow sets it aside at start-up
        # (so the train rule runs again) and training rebuilds it from the last epoch checkpoint.
        shutil.copytree(root / "run", tmp_path / "run")
        ck = tmp_path / "run" / "checkpoints"
        _truncate(ck / "final.pt")
        with pytest.raises(CheckpointError, match=r"final\.pt is damaged: sha256 mismatch"):
            load_model(ck / "final.pt")
        assert set_aside_damaged([ck / "final.pt", ck / "init.pt"], recheck_s=0) == [ck / "final.pt"]
        assert (ck / "final.pt.damaged").exists() and not (ck / "final.pt").exists()
    else:
        ck = _interrupted_copy(root, tmp_path / "run", after_epoch=3)
        victim = {"latest": "epoch_003.pt", "middle": "epoch_002.pt", "init": "init.pt"}[position]
        _truncate(ck / victim)
    with caplog.at_level("INFO", logger="transformer_hessian"):
        train("tiny", spec, root / "data", tmp_path / "run", device="cpu")
    from transformer_hessian.train.checkpoints import load_checkpoint

    log = caplog.text
    if position == "latest":
        assert "skipping epoch_003.pt" in log and "resuming from" in log and "epoch_002.pt" in log
    if position == "init":
        assert "rebuilding init.pt" in log
    for name in ("init.pt", "final.pt", "epoch_004.pt"):
        assert _same_weights(ref_ck / name, ck / name), name
        assert load_checkpoint(ck / name)  # verifies against its new sidecar


@pytest.mark.slow  # about 9 s
def test_every_epoch_checkpoint_damaged_starts_afresh(reference_run, tmp_path, caplog):
    root, spec = reference_run
    ck = _interrupted_copy(root, tmp_path / "run", after_epoch=2)
    for p in ck.glob("epoch_*.pt"):
        p.write_bytes(b"")
    with caplog.at_level("INFO", logger="transformer_hessian"):
        train("tiny", spec, root / "data", tmp_path / "run", device="cpu")
    assert "skipping epoch_002.pt" in caplog.text and "skipping epoch_001.pt" in caplog.text
    assert _same_weights(root / "run/checkpoints/final.pt", ck / "final.pt")
    from transformer_hessian.train.checkpoints import load_checkpoint

    assert load_checkpoint(ck / "final.pt")


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """A 2-epoch tiny run (160 samples, batch 32: 5 steps per epoch)."""
    root = tmp_path_factory.mktemp("r2")
    spec = tiny_spec(epochs=2)
    train("tiny", spec, root / "data", root / "run", device="cpu")
    return root, spec


@pytest.mark.slow
def test_damaged_epoch_checkpoint_is_set_aside_not_a_block(short_run, tmp_path, caplog):
    """A truncated epoch_001.pt no longer stops the dynamics replay for good."""
    from transformer_hessian.studies.dynamics.compute import replay

    root, spec = short_run
    run = tmp_path / "run"
    shutil.copytree(root / "run", run)
    ck = run / "checkpoints"
    _truncate(ck / "epoch_001.pt")
    with caplog.at_level("WARNING", logger="transformer_hessian"):
        info = replay(spec, root / "data", ck / "init.pt", 10, lambda *a: None, every=5, checkpoint_dir=ck)
    assert "epoch_001.pt" in caplog.text and "damaged" in caplog.text
    assert not (ck / "epoch_001.pt").exists() and (ck / "epoch_001.pt.damaged").exists()
    assert info["epoch_checks"][0]["identical"] is None and info["epoch_checks"][1] == {"epoch": 2, "identical": True}
    # the next run is not blocked: it simply has no epoch-1 checkpoint to compare with
    info = replay(spec, root / "data", ck / "init.pt", 10, lambda *a: None, every=5, checkpoint_dir=ck)
    assert info["epoch_checks"] == [{"epoch": 2, "identical": True}]
    # ... and training rebuilds it when it runs again
    (ck / "final.pt").unlink()
    for p in ck.glob("epoch_002.pt*"):
        p.unlink()
    train("tiny", spec, root / "data", run, device="cpu")
    from transformer_hessian.train.checkpoints import load_checkpoint

    assert load_checkpoint(ck / "epoch_001.pt") and load_checkpoint(ck / "epoch_002.pt")
    # a damaged init checkpoint is refused naming the file (not a bare torch.load traceback)
    _truncate(ck / "init.pt")
    from transformer_hessian.train.checkpoints import CheckpointError

    with pytest.raises(CheckpointError, match=r"init\.pt is damaged"):
        replay(spec, root / "data", ck / "init.pt", 10, lambda *a: None, every=5, checkpoint_dir=ck)
