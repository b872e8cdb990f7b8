"""Scaling study (transformer_hessian.studies.scaling): power laws, k*, top eigenvalue, cache, config."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import snakemake_dry_run, tiny_vit
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from transformer_hessian import registry
from transformer_hessian.config.settings import Scaling
from transformer_hessian.config.validate import ConfigError, validate_config
from transformer_hessian.core.stats import fit_loglog_slope
from transformer_hessian.studies.scaling import compute as scaling

REPO = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
TINY_SWEEP = {
    "enabled": True,
    "patch_size": 4,
    "widths": [2, 3],
    "depths": [1],
    "fixed_width": 2,
    "fixed_depth": 1,
    "train_sizes": [60],
    "train": {"epochs": 1, "batch_size": 32},
    "n_orderings": 3,
    "n_bootstrap": 10,
    "k_min": 5,
    "lanczos_iters": 4,
    "hessian_samples": 8,
    "dense_max_params": 100,
}


def config_with(**section) -> dict:
    """The embedded default with ``scaling`` replaced by ``section``, validated (defaults filled)."""
    cfg = copy.deepcopy(BASE)
    cfg["scaling"] = copy.deepcopy(section)
    return validate_config(cfg)


def typed(**section) -> Scaling:
    """The ``scaling`` section of :func:`config_with` as the typed section the package takes."""
    return Scaling.from_dict(config_with(**section)["scaling"])


# ----------------------------------------------------------------------------- power laws


@settings(max_examples=25, deadline=None)
@given(
    b=st.floats(-2.0, 2.0),
    a=st.floats(0.01, 100.0),
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(12, 40),
)
def test_power_law_recovers_exponent_with_noise(b, a, seed, n):
    rng = np.random.default_rng(seed)
    P = np.exp(rng.uniform(np.log(10.0), np.log(1e5), n))
    y = a * P**b * np.exp(rng.normal(0.0, 0.05, n))  # 5% log-normal noise
    fit = scaling.fit_power_law(P, y, n_bootstrap=300, seed=seed)
    # standard error of b here is < 0.01; 0.06 is six of them
    assert abs(fit["exponent"] - b) < 0.06
    assert abs(math.log(fit["prefactor"] / a)) < 0.4
    lo, hi = fit["exponent_ci"]
    assert lo <= fit["exponent"] <= hi and 0 < hi - lo < 0.2
    band_lo, band_hi = np.array(fit["band_lo"]), np.array(fit["band_hi"])
    assert np.all(band_lo <= band_hi) and len(fit["band_P"]) == band_lo.size
    assert fit["n_points"] == n


def test_power_law_exact_data_and_degenerate_cases():
    rng = np.random.default_rng()
    b, a = rng.uniform(-1.5, 1.5), rng.uniform(0.1, 10)
    P = np.sort(rng.uniform(10, 1e4, 6))
    fit = scaling.fit_power_law(P, a * P**b, n_bootstrap=50)
    assert fit["exponent"] == pytest.approx(b, abs=1e-12) and fit["prefactor"] == pytest.approx(a, rel=1e-10)
    two = scaling.fit_power_law(P[:2], a * P[:2] ** b)
    assert two["exponent"] == pytest.approx(b, abs=1e-12) and two["exponent_ci"] is None  # one line only
    # non-positive values are left out; one distinct P is no fit
    fit = scaling.fit_power_law([*P, 50.0], [*(a * P**b), -1.0])
    assert fit["n_points"] == 6
    with pytest.raises(ValueError):
        scaling.fit_power_law([5.0, 5.0, 5.0], [1.0, 2.0, 3.0])


# ----------------------------------------------------------------------------- k*


@settings(max_examples=50, deadline=None)
@given(c=st.floats(0.01, 50.0), tol=st.floats(1e-4, 1e-1))
def test_k_star_of_c_over_k_is_ceil_c_over_tol(c, tol):
    expected = math.ceil(c / tol)
    n = expected + 50
    k = np.arange(1, n, dtype=np.float64)
    d = c / k
    assert scaling.k_star_measured(k, d, tol) == expected
    assert scaling.k_star_fitted(c, -1.0, tol) == expected
    slope, intercept = fit_loglog_slope(k, d, k_min=1)  # the fitted curve of the same data
    assert scaling.k_star_fitted(math.exp(intercept), slope, tol) == expected


def test_k_star_edge_cases():
    k = np.arange(1, 11)
    assert scaling.k_star_measured(k, np.full(10, 0.5), 0.1) is None  # never reaches the tolerance
    assert scaling.k_star_measured(k, np.full(10, 0.05), 0.1) == 1
    # dips below, comes back above at k = 6: k* is after the last crossing
    d = np.array([1, 0.05, 0.05, 1, 1, 1, 0.05, 0.05, 0.05, 0.05])
    assert scaling.k_star_measured(k, d, 0.1) == 7
    assert scaling.k_star_fitted(2.0, 0.1, 1.0) is None  # rising curve
    assert scaling.k_star_fitted(0.5, 0.1, 1.0) == 1
    assert scaling.k_star_fitted(1.0, -1e-6, 1e-3) is None  # only past the cap
    assert scaling.k_star_fitted(3.0, -1.0, 0.01) == 300


def test_dk_curve_on_losses_matches_its_parts():
    rng = np.random.default_rng()
    losses = rng.exponential(0.5, 300)
    s = typed(**TINY_SWEEP)
    c = scaling.dk_curve(losses, s)
    assert c["n_samples"] == 300 and c["k"][0] == 1 and c["k"][-1] == 299
    assert c["slope_ci95"][0] <= c["slope_ci95"][1]
    assert c["prefactor"] == pytest.approx(math.exp(c["intercept"]))
    assert c["k_star_fitted"] == scaling.k_star_fitted(c["prefactor"], c["slope"], s.tolerance)
    if c["k_star_measured"] is not None:
        assert 1 <= c["k_star_measured"] <= 299


# ----------------------------------------------------------------------------- curvature


@pytest.mark.slow  # about 38 s
@settings(max_examples=2, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(
    width=st.integers(2, 3),
    depth=st.integers(1, 2),
    n=st.integers(3, 9),
    seed=st.integers(0, 2**31 - 1),
)
def test_top_eigenvalue_matches_dense_hessian(width, depth, n, seed):
    """Against the eigenvalues of the dense Hessian from torch.autograd.functional.hessian
    (torch.func.hessian is wrong for F.layer_norm with a weight: docs/theory.md)."""
    import torch
    from torch.autograd.functional import hessian

    from transformer_hessian.core.krylov import FlatModel

    model = tiny_vit(width, width + 1, 2 * width + 1, depth, False, seed)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 4, 4, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (n,), generator=gen)
    fm = FlatModel.of(model)
    H = hessian(lambda w: fm.mean_loss(w, x, y), fm.w0, vectorize=True)
    dense = torch.linalg.eigvalsh(0.5 * (H + H.T))
    lam, resid = scaling.top_hessian_eigenvalue(model, x, y, n_iter=30, seed=seed)
    assert abs(lam - float(dense[-1])) <= 1e-6 * float(dense.abs().max())
    assert 0 <= resid <= 1e-6 * float(dense.abs().max())


@pytest.mark.parametrize("depth", [1, 2])
def test_block_norms_dense_or_skipped_with_reason(depth):
    """The last block's norms in closed form equal those of the dense Hessian whose every column
    is a vmapped Hessian-vector product (and, for one block, block 0's)."""
    import torch

    from transformer_hessian.core.hessian import ALL_GROUPS, group_layout, hessian_all_groups, symmetric_block_norms

    model = tiny_vit(3, 2, 5, depth, False, 3)
    with torch.no_grad():  # LayerNorm away from gamma = 1, beta = 0
        for blk in model.blocks:
            for n in ("gamma1", "beta1", "gamma2", "beta2"):
                getattr(blk, n).add_(0.3 * torch.randn_like(getattr(blk, n)))
    x = torch.randn(5, 1, 4, 4, dtype=torch.float64)
    y = torch.randint(0, 3, (5,))
    names, _, off = group_layout(model, depth - 1, ALL_GROUPS)
    got, reason = scaling.block_norms(model, x, y, max_params=10_000)
    assert reason is None and got["groups"] == names and got["n_params"] == int(off[-1])
    assert got["block"] == depth - 1 and got["method"] == "closed_form"
    H, _ = hessian_all_groups(model, depth - 1, x, y, method="vmap")
    ref = symmetric_block_norms(H.numpy(), off, names)
    np.testing.assert_allclose(got["spectral"], ref[1], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(got["fro"], ref[0], rtol=1e-10, atol=1e-14)
    none, reason = scaling.block_norms(model, x, y, max_params=int(off[-1]) - 1)
    assert none is None and "scaling.dense_max_params" in reason and f"{int(off[-1]):,}" in reason


# ----------------------------------------------------------------------------- sweep, cache


def test_sweep_models_union_of_both_directions():
    s = typed(**{**TINY_SWEEP, "widths": [4, 8, 16], "depths": [1, 2, 4], "fixed_width": 8, "train_sizes": [100, None]})
    ids = [p["id"] for p in scaling.sweep_models(s)]
    assert ids == [
        *("w4_d1_n100", "w8_d1_n100", "w16_d1_n100", "w8_d2_n100", "w8_d4_n100"),
        *("w4_d1_nall", "w8_d1_nall", "w16_d1_nall", "w8_d2_nall", "w8_d4_nall"),
    ]
    spec = scaling.experiment_spec(scaling.sweep_models(s)[2], s)
    assert spec["model"]["width"] == 16 and spec["model"]["d_k"] == 16 and spec["model"]["d_ff"] == 64
    assert spec["train"]["max_train"] == 100
    assert spec["model"]["ffn_bias"] is False and spec["model"]["ln_eps"] == 1e-5  # the schema's defaults


def test_sweep_model_architecture_keys_reach_the_models_and_their_cache_key():
    base = typed(**TINY_SWEEP)
    point = scaling.sweep_models(base)[0]
    changed = typed(**{**TINY_SWEEP, "ffn_bias": True, "ln_eps": 1e-3})
    model = scaling.experiment_spec(point, changed)["model"]
    assert model["ffn_bias"] is True and model["ln_eps"] == 1e-3
    assert scaling.model_key(point, changed) != scaling.model_key(point, base)


@pytest.mark.slow  # about 8 s
def test_cache_skips_finished_models(tmp_path, monkeypatch):
    s = typed(**TINY_SWEEP)
    points = scaling.sweep_models(s)[:1]
    first = scaling.run_models(points, s, tmp_path / "data", tmp_path / "models", device="cpu")
    path = tmp_path / "models" / f"{points[0]['id']}.json"
    assert path.is_file() and json.loads(path.read_text())["settings_key"] == scaling.model_key(points[0], s)
    r = first[0]
    assert r["n_train"] == 60 and r["curve"]["n_samples"] == 60 and r["top_eigenvalue"] > 0
    assert sorted(p.name for p in (tmp_path / "models" / points[0]["id"] / "checkpoints").glob("epoch_*.pt")) == [
        "epoch_001.pt"
    ]

    calls = []

    def counted(*args, **kwargs):
        calls.append(args[0]["id"])
        raise AssertionError("a finished model was analysed again")

    monkeypatch.setattr(scaling, "analyse_model", counted)
    again = scaling.run_models(points, s, tmp_path / "data", tmp_path / "models", device="cpu")
    assert calls == [] and json.dumps(again) == json.dumps(first)
    # keys that only choose the sweep do not invalidate a model; a setting of the model does
    assert scaling.model_key(points[0], dataclasses.replace(s, widths=(2, 3, 99), jobs=2)) == scaling.model_key(
        points[0], s
    )
    with pytest.raises(AssertionError, match="again"):
        scaling.run_models(
            points, dataclasses.replace(s, tolerance=s.tolerance / 2), tmp_path / "data", tmp_path / "models"
        )
    path.write_text("{ damaged")
    with pytest.raises(AssertionError, match="again"):
        scaling.run_models(points, s, tmp_path / "data", tmp_path / "models")
    assert calls == [points[0]["id"]] * 2


def _fake_result(point, P, slope, prefactor, lam, tol=1e-3):
    return {
        **point,
        "n_parameters": P,
        "n_train": 500,
        "final": {"val_acc": 0.5},
        "curve": {
            "slope": slope,
            "slope_ci95": [slope - 0.1, slope + 0.1],
            "prefactor": prefactor,
            "k_star_measured": scaling.k_star_fitted(prefactor, slope, tol),
            "k_star_fitted": scaling.k_star_fitted(prefactor, slope, tol),
        },
        "top_eigenvalue": lam,
        "block_norms": None,
    }


def test_aggregate_fits_each_direction_and_data_set_size():
    s = typed(**{**TINY_SWEEP, "widths": [4, 8, 16], "depths": [1, 2], "fixed_width": 4, "train_sizes": [100, None]})
    rng = np.random.default_rng()
    b_lam = rng.uniform(-1, 1)
    results = []
    for p in scaling.sweep_models(s):
        P = 100 * p["width"] ** 2 * p["depth"]
        results.append(_fake_result(p, P, -1.0, 2.0 * P**-0.5, 3.0 * P**b_lam))
    out = scaling.aggregate(results, s)
    assert set(out["fits"]) == {"100", "all"} and set(out["fits"]["all"]) == {"width", "depth"}
    width_fit = out["fits"]["all"]["width"]
    assert width_fit["top_eigenvalue"]["exponent"] == pytest.approx(b_lam, abs=1e-10)
    assert width_fit["prefactor"]["exponent"] == pytest.approx(-0.5, abs=1e-10)
    assert width_fit["decay_rate"]["exponent"] == pytest.approx(0.0, abs=1e-10)
    assert width_fit["top_eigenvalue"]["exponent_ci"] is not None  # 3 widths
    assert out["fits"]["all"]["depth"]["top_eigenvalue"]["exponent_ci"] is None  # 2 depths: no interval
    rows = {r["id"]: r for r in out["rows"]}
    assert rows["w4_d1_nall"]["series"] == ["width", "depth"] and rows["w4_d2_nall"]["series"] == ["depth"]
    assert [r["train_size"] for r in out["rows"]][:4] == [100] * 4  # sorted by size, then P
    # all k* None for a size: skipped with a reason
    for r in results:
        r["curve"]["k_star_measured"] = None
    out = scaling.aggregate(results, s)
    assert "skipped" in out["fits"]["all"]["width"]["k_star_measured"]


@pytest.mark.slow  # about 44 s
def test_scaling_figure_draws_every_panel(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from transformer_hessian import plotting
    from transformer_hessian.studies.scaling import plot as scaling_plot

    s = typed(**{**TINY_SWEEP, "widths": [4, 8, 16], "depths": [1, 2], "fixed_width": 4})
    results = []
    for p in scaling.sweep_models(s):
        P = 100 * p["width"] ** 2 * p["depth"]
        r = _fake_result(p, P, -0.9, P**-0.5, 10.0 * P**0.3)
        r["curve"].update(D_binned_k=[1, 10, 100], D_binned=[0.1, 0.01, 0.001])
        results.append(r)
    without_dense = scaling_plot.scaling_figure(scaling.aggregate(results, s))
    assert "no model small enough" in without_dense.axes[5].texts[0].get_text()
    assert len(plotting.save_figure(without_dense, tmp_path / "no_dense")) == 2
    groups = ["W_Q", "W_K", "W_V", "W_1", "W_2", "gamma1", "beta1", "gamma2", "beta2"]
    for r in results[:3]:
        norms = np.diag(np.arange(1.0, 10.0)) * r["n_parameters"] ** 0.5
        r["block_norms"] = {"groups": groups, "spectral": norms.tolist(), "fro": norms.tolist()}
    fig = scaling_plot.scaling_figure(scaling.aggregate(results, s))
    axes = fig.axes
    assert len(axes) == 6
    assert all(ax.get_xscale() == "log" and ax.get_yscale() == "log" for ax in axes)
    assert "not formed (too large): w4_d2_n" in axes[5].get_legend().get_title().get_text()
    assert all(ax.get_xlabel() and ax.get_ylabel() and ax.get_title() for ax in axes)
    text = " ".join(t.get_text() for ax in axes[1:5] for t in ax.get_legend().get_texts())
    assert "b = " in text and "widths at depth 1" in text
    title = " ".join(fig._suptitle.get_text().split())  # wrapped to the figure's width
    assert "digits" in title and "widths d in {4, 8, 16}" in title
    assert len(plotting.save_figure(fig, tmp_path / "scaling")) == 2


# ----------------------------------------------------------------------------- config, registry


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"widths": []}, "scaling.widths"),
        ({"widths": [0, 4]}, "scaling.widths"),
        ({"widths": [4, 4]}, "lists a value twice"),
        ({"depths": [1.5]}, "scaling.depths"),
        ({"train_sizes": [1]}, "scaling.train_sizes"),
        ({"train_sizes": [6]}, "scaling.k_min"),
        ({"tolerance": 0}, "scaling.tolerance"),
        ({"tolerance": float("nan")}, "scaling.tolerance"),
        ({"patch_size": 3}, "scaling.patch_size"),
        ({"jobs": 5}, "scaling.jobs"),
        ({"widths": [2], "depths": [1]}, "needs 2"),
        ({"enabled": "yes"}, "scaling.enabled"),
        ({"width": [4]}, "scaling.width"),
        ({"train": {"epochs": -1}}, "scaling.train.epochs"),
        ({"dataset": "imagenet"}, "scaling.dataset"),
    ],
)
def test_config_rejects_bad_sweep_values(change, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("[", r"\[")):
        config_with(**{**TINY_SWEEP, **change})


def test_config_defaults_and_switch_off():
    cfg = copy.deepcopy(BASE)
    cfg.pop("scaling")
    s = validate_config(cfg)["scaling"]
    assert s["enabled"] is False and s["widths"] and s["train_sizes"] == [None]
    # cross-key checks apply only to an enabled sweep
    assert config_with(**{**TINY_SWEEP, "enabled": False, "jobs": 50})["scaling"]["jobs"] == 50
    assert BASE["scaling"]["enabled"] is True  # the embedded default runs the small sweep


def test_registry_switch_removes_the_figure():
    on = config_with(**TINY_SWEEP)
    off = config_with(**{**TINY_SWEEP, "enabled": False})
    assert "scaling" in registry.figure_ids(on) and "scaling" not in registry.figure_ids(off)
    assert "scaling" in registry.figure_ids()  # the registry itself lists every figure
    assert "scaling_figure" in {s["name"] for s in registry.rule_specs(on)}
    assert "scaling_figure" not in {s["name"] for s in registry.rule_specs(off)}
    assert "scaling" not in registry.provenance(off, root=REPO)
    spec = next(s for s in registry.rule_specs(on) if s["name"] == "scaling_figure")
    assert "stand-in for MNIST / CIFAR-100" in spec["caption"] and "{" not in spec["caption"]
    readme = registry.render_paper_readme()
    assert "`figures/scaling.{pdf,png}`" in readme and "optional: only with `scaling.enabled: true`" in readme


@pytest.mark.slow  # about 16 s
def test_dry_run_without_scaling_has_no_scaling_job(root, env, tmp_path):
    default = ("--configfile", str(root / "config" / "config.yaml"))
    proc = snakemake_dry_run(root, tmp_path, env, *default, "--config", "scaling={enabled: false}", timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "scaling_models" not in out and "scaling_figure" not in out and "paper/figures/scaling" not in out
    proc = snakemake_dry_run(root, tmp_path, env, *default, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "scaling_models" in out and "scaling_figure" in out


def test_scaling_part_roundtrip_and_missing_keys(tmp_path):
    from transformer_hessian.studies.scaling.result import (
        load_scaling,
        load_scaling_part,
        load_summary,
        save_scaling,
        save_scaling_part,
        save_summary,
        summary_section,
    )
    from transformer_hessian.util.io import write_json

    save_scaling_part(tmp_path / "p.json", 1, 3, [{"id": "w4_d1_nall"}])
    assert load_scaling_part(tmp_path / "p.json") == {"part": 1, "jobs": 3, "models": [{"id": "w4_d1_nall"}]}
    write_json({"rows": []}, tmp_path / "bad.json")  # no "fits": not a scaling result
    with pytest.raises(Exception, match="bad.json"):
        load_scaling(tmp_path / "bad.json")
    agg = {"rows": [{"n_params": 10}], "fits": {"all": {}}, "models": [{"id": "m"}], "dataset": "digits"}
    save_scaling(tmp_path / "s.json", agg)
    assert load_scaling(tmp_path / "s.json") == agg
    section = summary_section(load_scaling(tmp_path / "s.json"))
    assert section == {"rows": [{"n_params": 10}], "fits": {"all": {}}, "dataset": "digits"}  # no per-model curves
    save_summary(tmp_path / "sec.json", section)
    assert load_summary(tmp_path / "sec.json") == section
