"""Appendix A.1 dynamics: the replay follows the real training run step for step."""

import numpy as np
import pytest
import torch
from conftest import tiny_spec

from transformer_hessian import GROUPS
from transformer_hessian.config.settings import Dynamics, Hessian
from transformer_hessian.core.hessian import ALL_GROUPS, compute_hessian, fixed_batch, group_layout, hessian_all_groups
from transformer_hessian.studies.dynamics.compute import (
    check_against_saved,
    heatmap_indices,
    record_dynamics,
    replay,
    snapshot_steps,
)
from transformer_hessian.train import load_experiment_data, load_model, train


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("dyn")
    spec = tiny_spec(epochs=2)  # 160 samples, batch 32: 5 steps per epoch
    train("tiny", spec, root / "data", root / "run", device="cpu")
    return root, spec


def _state(path):
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


def test_snapshot_plan():
    assert snapshot_steps(10, 4) == [0, 4, 8, 10]
    assert snapshot_steps(8, 4) == [0, 4, 8]
    assert heatmap_indices(5, 3) == [0, 2, 4]
    assert heatmap_indices(2, 4) == [0, 1]


def test_replay_equals_the_real_trajectory(run):
    root, spec = run
    ck = root / "run" / "checkpoints"
    seen = {}

    def grab(step, model, loss):
        seen[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}

    info = replay(spec, root / "data", ck / "init.pt", 7, grab, every=1, device="cpu", checkpoint_dir=ck)
    assert sorted(seen) == list(range(8)) and info["steps_per_epoch"] == 5 and not info["capped"]
    assert info["epoch_checks"] == [{"epoch": 1, "identical": True}]
    for step, path in ((0, "init.pt"), (5, "epoch_001.pt")):
        saved = _state(ck / path)
        assert all(torch.equal(saved[k], seen[step][k]) for k in saved), step
    assert any(not torch.equal(seen[4][k], seen[5][k]) for k in seen[5])
    # Past the end of the run the replay is capped and ends on the final weights.
    last = {}
    info = replay(
        spec,
        root / "data",
        ck / "init.pt",
        99,
        lambda s, m, _: last.update(step=s, state=m.state_dict()),
        every=50,
        device="cpu",
        checkpoint_dir=ck,
    )
    assert info["capped"] and info["steps"] == last["step"] == 10
    assert [c["identical"] for c in info["epoch_checks"]] == [True, True]
    final = _state(ck / "final.pt")
    assert all(torch.equal(final[k], last["state"][k]) for k in final)


@pytest.mark.slow  # about 13 s
def test_record_dynamics_contents(run):
    root, spec = run
    ck = root / "run" / "checkpoints"
    hcfg = Hessian.with_defaults({"experiment": "tiny", "block": 0, "batch_size": 8, "seed": 0})
    arrays, summary, H0 = record_dynamics(
        spec,
        root / "data",
        ck / "init.pt",
        hcfg,
        Dynamics.from_dict({"steps": 6, "every": 5, "heatmaps": 2}),
        device="cpu",
        checkpoint_dir=ck,
    )
    assert arrays["steps"].tolist() == [0, 5, 6] and arrays["heat_steps"].tolist() == [0, 6]
    assert summary["epoch_checks"] == [{"epoch": 1, "identical": True}]
    n = 3
    assert arrays["weight_norms"].shape == (n, 2, 9) and arrays["hessian_norms"].shape == (n, 3, 9, 9)
    # Recorded entries at step 5 are the epoch-1 checkpoint's.
    e1 = _state(ck / "epoch_001.pt")
    for g in ALL_GROUPS:
        assert np.array_equal(arrays[f"weights_{g}"][1], e1[f"blocks.0.{g}"].numpy())
    # Norms against numpy on the recorded entries; Hessian norms against an independent recomputation.
    W1 = arrays["weights_W_1"][2].astype(np.float64)
    k = ALL_GROUPS.index("W_1")
    assert arrays["weight_norms"][2, 0, k] == pytest.approx(np.linalg.norm(W1, 2), rel=1e-6)
    data = load_experiment_data(spec, root / "data")
    x, y = fixed_batch(data["train_x"], data["train_y"], 8, 0)
    model = load_model(ck / "epoch_001.pt", dtype=torch.float64)
    H, _ = hessian_all_groups(model, 0, x.double(), y)
    _, _, off = group_layout(model, 0, ALL_GROUPS)
    for i in range(9):
        for j in range(9):
            blk = H[off[i] : off[i + 1], off[j] : off[j + 1]].numpy()
            assert arrays["hessian_norms"][1, 0, i, j] == pytest.approx(np.linalg.norm(blk), rel=1e-9, abs=1e-300)
            assert arrays["hessian_norms"][1, 1, i, j] == pytest.approx(np.linalg.norm(blk, 2), rel=1e-9, abs=1e-300)
    assert arrays["hdiag_W_V"].shape == (2, 36, 36) and arrays["hdiag_LN"].shape == (2, 24, 24)
    # Step 0 equals the hessian rule's init Hessian.
    Hs, _, _ = compute_hessian(load_model(ck / "init.pt"), 0, x, y, "auto")
    chk = check_against_saved(H0, {"H": Hs.numpy()})
    assert chk["rel_error"] < 1e-12
    assert check_against_saved(H0 * (1 + 1e-6), {"H": Hs.numpy()})["rel_error"] > 1e-8
    assert set(summary["weight_norms"]) == set(ALL_GROUPS) and summary["groups"][:5] == list(GROUPS)


def test_dynamics_roundtrip(tmp_path):
    from transformer_hessian.studies.dynamics.result import RULE, load_dynamics, save_dynamics
    from transformer_hessian.util.io import load_keyed

    rng = np.random.default_rng(3)
    arrays = {"steps": np.arange(4), "names": np.array(["W_Q", "W_K"]), "W_Q": rng.normal(size=(4, 2, 3))}
    summary = {"steps": [0, 1, 2, 3], "capped": False}
    save_dynamics(tmp_path / "d.npz", tmp_path / "d.json", arrays, summary)
    got = load_dynamics(tmp_path / "d.npz")
    assert got["names"] == ["W_Q", "W_K"] and all(isinstance(n, str) for n in got["names"])
    np.testing.assert_array_equal(got["W_Q"], arrays["W_Q"])
    assert load_keyed(tmp_path / "d.json", RULE, ("steps",)) == summary
