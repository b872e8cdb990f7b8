"""The architecture study (transformer_hessian.studies.architectures): its measures against
independent computations, its config checks, and one small end-to-end run of its steps."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon

from transformer_hessian.config.architectures import architectures, config_errors
from transformer_hessian.config.checks import DATASET_SHAPES
from transformer_hessian.config.validate import ConfigError, load_config, validate_config
from transformer_hessian.studies.architectures import metrics
from transformer_hessian.util.resources import encoder_parameter_count

CONFIG = Path(__file__).resolve().parents[2] / "config"

# ----------------------------------------------------------------------------- measures


def test_js_distance_matches_scipy_on_random_distributions():
    rng = np.random.default_rng(7)
    for n in (3, 17, 200):
        p, q = rng.random(n), rng.random(n)
        p[rng.integers(n)] = 0.0  # a zero where the other is not
        assert metrics.js_distance(p, q) == pytest.approx(jensenshannon(p, q, base=2), rel=1e-12, abs=1e-15)
    assert metrics.js_distance([1, 0], [0, 1]) == pytest.approx(1.0)  # disjoint: the maximum, base 2
    assert metrics.js_distance([0.3, 0.7], [0.3, 0.7]) == 0.0


def test_js0_is_the_mean_over_pairs_of_the_scipy_distance():
    rng = np.random.default_rng(3)
    dens = {k: rng.random(50) for k in "abcd"}
    want = np.mean(
        [
            jensenshannon(dens[a], dens[b], base=2)
            for a, b in [("a", "b"), ("a", "c"), ("a", "d"), ("b", "c"), ("b", "d"), ("c", "d")]
        ]
    )
    got = metrics.js0(dens)
    assert got["js0"] == pytest.approx(want, rel=1e-12)
    assert len(got["pairs"]) == 6
    assert got["max_pair"]["js"] == pytest.approx(max(p["js"] for p in got["pairs"]))


def test_spectral_densities_separate_distinct_spectra_and_merge_equal_ones():
    eig = {"x": np.array([0.0, 1.0, 2.0]), "y": np.array([0.0, 1.0, 2.0]), "z": np.array([50.0, 60.0, 70.0])}
    grid, dens = metrics.spectral_densities(eig, 2000, 0.01)
    for p in dens.values():
        assert p.sum() == pytest.approx(1.0) and (p >= 0).all()
    assert metrics.js_distance(dens["x"], dens["y"]) == pytest.approx(0.0, abs=1e-12)
    assert metrics.js_distance(dens["x"], dens["z"]) == pytest.approx(1.0, abs=1e-6)  # no overlap at width 0.7
    assert grid[0] < 0.0 and grid[-1] > 70.0


def _random_blocks(rng, sizes):
    names, idx, off = list(sizes), {}, 0
    for n in names:
        idx[n] = np.arange(off, off + sizes[n])
        off += sizes[n]
    A = rng.standard_normal((off, off))
    return A + A.T, idx


def test_block_norms_match_numpy_on_a_known_matrix():
    rng = np.random.default_rng(0)
    H, idx = _random_blocks(rng, {"L0.W_Q": 4, "L0.W_K": 3, "L0.W_V": 5})
    rows = {(r["row"], r["col"]): r for r in metrics.block_norms(H, idx)}
    assert len(rows) == 9
    sub = H[4:7, 7:12]  # K-V by hand
    r = rows[("L0.W_K", "L0.W_V")]
    assert r["fro"] == pytest.approx(math.sqrt((sub**2).sum()))
    assert r["spectral"] == pytest.approx(np.sqrt(np.linalg.eigvalsh(sub @ sub.T).max()))
    assert r["rms"] == pytest.approx(math.sqrt((sub**2).mean()))
    assert r["max_abs"] == np.abs(sub).max()
    top = metrics.leaders(list(rows.values()), "rms")
    assert top[0][2] == max(v["rms"] for v in rows.values())
    assert all(a == b for a, b, _ in metrics.leaders(list(rows.values()), "fro", diagonal=True))
    assert metrics.spread_decades([1.0, 10.0, 1000.0]) == pytest.approx(3.0)
    assert math.isnan(metrics.spread_decades([0.0, 5.0]))


def test_layer_offdiag_share_on_a_constructed_block_matrix():
    # layer 0: 2 rows, layer 1: 3 rows; diagonal blocks all 1, off-layer blocks all 2
    layer = np.array([0, 0, 1, 1, 1])
    H = np.where(layer[:, None] == layer[None, :], 1.0, 2.0)
    off = 2 * (2 * 3) * 4.0  # 12 entries of value 2
    total = off + (4 + 9) * 1.0
    got = metrics.layer_offdiag_share(H, layer)
    assert got["energy"] == pytest.approx(off / total)
    assert got["fro_ratio"] == pytest.approx(math.sqrt(off / total))
    assert metrics.layer_offdiag_share(np.ones((3, 3)), np.zeros(3, dtype=int))["energy"] == 0.0


def test_block_index_splits_in_proj_by_rows_for_a_stack():
    d, dff = 4, 6
    enc = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(d, 2, dff, dropout=0.0, batch_first=True, bias=False),
        2,
        enable_nested_tensor=False,
    )
    shapes = [(n, tuple(p.shape)) for n, p in enc.named_parameters()]
    blocks, layer_rows = metrics.block_index(shapes)
    assert sorted(blocks) == sorted(f"L{i}.{k}" for i in (0, 1) for k in metrics.KINDS)
    flat = torch.cat([p.detach().reshape(-1) for p in enc.parameters()]).numpy()
    W = enc.layers[1].self_attn.in_proj_weight.detach().numpy()
    np.testing.assert_array_equal(flat[blocks["L1.W_K"]], W[d : 2 * d].reshape(-1))
    np.testing.assert_array_equal(flat[blocks["L0.W_2"]], enc.layers[0].linear2.weight.detach().numpy().reshape(-1))
    assert (layer_rows == 0).sum() == (layer_rows == 1).sum() == encoder_parameter_count(d, dff, 1, False)
    assert len(layer_rows) == encoder_parameter_count(d, dff, 2, False) == sum(p.numel() for p in enc.parameters())


def test_encoder_params_counts_torch_parameters_with_bias():
    layer = torch.nn.TransformerEncoderLayer(6, 3, 10, dropout=0.0, batch_first=True, bias=True)
    assert encoder_parameter_count(6, 10, 1, True) == sum(p.numel() for p in layer.parameters())


# ----------------------------------------------------------------------------- config


def _config(**arch):
    c = load_config(CONFIG / "config.yaml")
    c = copy.deepcopy(c)
    c["architectures"].update(arch)
    return c


def test_default_config_enables_the_study_and_paper_configs_do_not():
    assert load_config(CONFIG / "config.yaml")["architectures"]["enabled"] is True
    for path in (CONFIG / "paper.yaml", CONFIG / "paper_mnist.yaml"):
        assert load_config(path)["architectures"]["enabled"] is False
    names = [a.name for a in architectures(load_config(CONFIG / "config.yaml")["architectures"])]
    assert names == ["base", "pre_norm", "heads_4", "gelu", "layers_2"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"variants": {"heads_3": {"nhead": 3}}},
            "architectures.variants.heads_3.nhead: 3 does not divide architectures.d_model = 8",
        ),
        (
            {"base": {"norm_first": False, "nhead": 3, "activation": "relu", "num_layers": 1}},
            "architectures.base.nhead: 3",
        ),
        ({"patch_size": 3}, "architectures.patch_size: 3 does not divide the 8x8 images"),
        ({"variants": {"same": {"nhead": 1}}}, "architectures.variants.same: changes nothing"),
        (
            {"variants": {"a": {"nhead": 2}, "b": {"nhead": 2}}},
            "architectures.variants.b: the same architecture as architectures.variants.a",
        ),
        ({"max_params": 100}, "more than architectures.max_params = 100"),
        ({"variants": {"base": {"nhead": 2}}}, "architectures.variants.base"),
    ],
)
def test_cross_key_errors_name_the_key(change, message):
    c = _config(**change)
    errors = config_errors(c, DATASET_SHAPES)
    assert any(message in e for e in errors), errors
    with pytest.raises(ConfigError, match="architectures"):
        validate_config(c)


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"variants": {"x": {"activation": "tanh"}}}, "architectures.variants.x.activation"),
        ({"variants": {"x": {"heads": 2}}}, "architectures.variants.x"),
        ({"d_model": 0}, "architectures.d_model"),
        ({"js_sigma": 0}, "architectures.js_sigma"),
        ({"variants": {"1bad": {"nhead": 2}}}, "architectures.variants"),
    ],
)
def test_schema_errors_name_the_key(change, key):
    c = _config(**change)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate_config(c)


def test_disabled_section_is_not_checked():
    assert config_errors(_config(enabled=False, patch_size=3), DATASET_SHAPES) == []


# ----------------------------------------------------------------------------- end to end


@pytest.mark.slow  # trains three tiny models (about 20 s on 2 quiet cores)
def test_steps_end_to_end_on_a_tiny_config(tmp_path):
    """run_step on 8x8 digits (a tiny model, 1 epoch, 3 architectures) then report_step: the
    Hessians pass the HVP check against autograd, the verdicts in the claim rows follow the
    numbers in the result, the table and the summary section exist, and the figure draws."""
    import json

    from transformer_hessian.config.settings import Experiment
    from transformer_hessian.studies.architectures.plot import architectures_figure
    from transformer_hessian.studies.architectures.report import kv_verdict, vv_verdict
    from transformer_hessian.studies.architectures.step import report_step, run_step

    c = _config(
        d_model=4,
        dim_feedforward=6,
        patch_size=4,
        hessian_batch_size=3,
        train={"epochs": 1, "batch_size": 128, "lr": 0.02, "weight_decay": 0.01, "seed": 1},
        variants={"pre_norm": {"norm_first": True}, "layers_2": {"num_layers": 2, "nhead": 2}},
    )
    c = validate_config(c)
    hexp = c["hessian"]["experiment"]
    spec_dict = copy.deepcopy(c["experiments"][hexp])
    spec_dict["train"]["max_train"], spec_dict["train"]["max_val"] = 200, 50
    spec = Experiment.from_dict(spec_dict)
    out = tmp_path / "arch.json"
    result = run_step(spec=spec, experiment=hexp, section=c["architectures"], data_root=tmp_path / "data", out=out)
    assert [a["name"] for a in result["architectures"]] == ["base", "pre_norm", "layers_2"]
    for a in result["architectures"]:
        P = encoder_parameter_count(4, 6, a["arch"]["num_layers"], False)
        for stage in ("init", "trained"):
            s = a[stage]
            assert s["n_params"] == P
            assert s["hvp_rel_error"] < 1e-10
            assert len(s["blocks"]) == (6 * a["arch"]["num_layers"]) ** 2
            assert 0.0 <= s["js0"]["js0"] <= 1.0
        stack = a["arch"]["num_layers"] > 1
        assert (a["trained"]["layer_offdiag"]["energy"] > 0) == stack
    report_step(out, tmp_path / "tables", tmp_path / "claims.json", tmp_path / "summary.json")
    rows = json.loads((tmp_path / "claims.json").read_text())
    rows = rows["data"] if isinstance(rows, dict) and "data" in rows else rows
    by_id = {r["id"]: r for r in rows}
    for a in result["architectures"]:
        vv = by_id[f"arch_{a['name']}_vv_largest_trained"]
        kv = by_id[f"arch_{a['name']}_keys_values_highest"]
        assert vv["source"].startswith("beyond the paper") and kv["source"].startswith("beyond the paper")
        assert (vv["verdict"] == "reproduced") == vv_verdict(a)
        assert (kv["verdict"] == "reproduced") == kv_verdict(a)
    md = (tmp_path / "tables" / "architectures.md").read_text()
    assert "layers_2" in md and "JS0 trained" in md
    summary = json.loads((tmp_path / "summary.json").read_text())
    summary = summary.get("data", summary)
    assert set(summary["architectures"]) == {"base", "pre_norm", "layers_2"}
    fig = architectures_figure(result)
    assert len(fig.axes) == 6


def test_leaders_list_a_pair_once_and_break_ties_by_block_order():
    """H_ji = H_ij^T has the same norms: the ranking lists the unordered pair once; norms equal up to
    the last bits (a transpose computed separately, or blocks tied by symmetry) keep block order."""
    rng = np.random.default_rng(1)
    H, idx = _random_blocks(rng, {"L0.W_Q": 3, "L0.W_K": 4, "L0.W_V": 2})
    norms = metrics.block_norms(H, idx)
    for field in ("rms", "fro", "spectral"):
        top = metrics.leaders(norms, field)
        pairs = [frozenset((a, b)) for a, b, _ in top]
        assert len(pairs) == len(set(pairs)) == 6  # 3 diagonal + 3 off-diagonal unordered pairs
        assert [v for *_, v in top] == sorted((v for *_, v in top), reverse=True)
    # two blocks whose norms differ in the last bit: the earlier block stays first, whichever is larger
    tied = [
        {"row": "A", "col": "A", "rms": 1.0},
        {"row": "B", "col": "B", "rms": 1.0 + 2e-16},
        {"row": "A", "col": "B", "rms": 0.5},
        {"row": "B", "col": "A", "rms": 0.5 + 1e-16},
    ]
    assert [(a, b) for a, b, _ in metrics.leaders(tied, "rms")] == [("A", "A"), ("B", "B"), ("A", "B")]
    tied[1]["rms"] = 1.0 - 2e-16
    assert [(a, b) for a, b, _ in metrics.leaders(tied, "rms")] == [("A", "A"), ("B", "B"), ("A", "B")]
    tied[1]["rms"] = 1.001  # a real difference still ranks
    assert metrics.leaders(tied, "rms")[0][:2] == ("B", "B")
