"""Tests of the landscape study, transformer_hessian.studies.landscape (Figure 6 protocol, Theorem 7 at w*).

Every number is checked against an independent computation: explicit Python loops for the
running means and the EMA, exact power laws for the fit, and the Theorem 7 inequality. The
statistics and D_k themselves: tests/core/test_stats.py, tests/core/test_theorem7.py.
"""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import pytest
from conftest import tiny_spec

from transformer_hessian.config.settings import Experiment, Landscape
from transformer_hessian.config.validate import ConfigError
from transformer_hessian.core.landscape import analyse_landscape, ema
from transformer_hessian.core.stats import MAX_JSON_POINTS, fit_loglog_slope
from transformer_hessian.core.theorem7 import loss_differences, orderings
from transformer_hessian.studies.landscape import step

# ----------------------------------------------------------------------------- Theorem 7 at w*


def test_analyse_reports_bound_on_random_losses():
    losses = np.random.default_rng(2).lognormal(0.0, 1.0, size=3000)
    res = analyse_landscape(losses, n_orderings=10, seed=0, n_bootstrap=50)
    assert res["bound_holds"] is True
    assert 0 < res["bound_max_ratio"] <= 0.5 + 1e-12  # nonnegative losses: D_k <= L/(k+1)
    k = np.array(res["k"])
    np.testing.assert_allclose(res["theorem7_bound_2L"], 2 * losses.max() / (k + 1))
    assert np.all(np.array(res["D_mean"]) <= np.array(res["theorem7_bound_2L"]))


def test_analyse_detects_violated_bound():
    """With a negative loss (outside Theorem 7's assumption) the check must be able to fail."""
    losses = np.zeros(30)
    losses[0] = -10.0
    res = analyse_landscape(losses, n_orderings=5, seed=0, k_min=2, n_bootstrap=10)
    assert res["bound_holds"] is False


# ----------------------------------------------------------------------------- EMA


def ema_loop(x, f):
    out = [x[0]]
    for v in x[1:]:
        out.append(f * out[-1] + (1 - f) * v)
    return np.array(out)


@pytest.mark.parametrize("factor", [0.0, 0.5, 0.9, 0.99])
def test_ema_matches_loop(factor):
    x = np.random.default_rng(1).normal(size=500)
    np.testing.assert_allclose(ema(x, factor), ema_loop(x, factor), rtol=1e-12, atol=1e-12)


def test_ema_properties():
    x = np.random.default_rng(2).normal(size=(3, 80))
    out = ema(x, 0.9)
    for row_in, row_out in zip(x, out):
        np.testing.assert_allclose(row_out, ema_loop(row_in, 0.9), rtol=1e-12, atol=1e-12)
    assert ema(np.array([3.0, 1.0]), 0.99)[0] == 3.0  # starts at x_1: no bias towards 0
    np.testing.assert_allclose(ema(np.full(100, 2.5), 0.99), 2.5)
    np.testing.assert_array_equal(ema(x[0], 0.0), x[0])
    with pytest.raises(ValueError, match="factor"):
        ema(x, 1.0)


# ----------------------------------------------------------------------------- analyse


EXPECTED_KEYS = {
    "n_samples",
    "n_orderings",
    "ema_factor",
    "k",
    "D_mean",
    "D_ema",
    "slope",
    "intercept",
    "slope_ci95",
    "fit_k_min",
    "fit_k_max",
    "loss_mean",
    "loss_max",
    "theorem7_bound_2L",
    "bound_holds",
}


def test_analyse_landscape_contents():
    losses = np.random.default_rng(4).exponential(size=1800)
    res = analyse_landscape(losses, n_orderings=20, seed=0, ema_factor=0.99, k_min=10, n_bootstrap=100)
    assert EXPECTED_KEYS <= set(res)
    json.dumps(res, allow_nan=False)  # JSON-ready: plain types, no NaN
    assert res["n_samples"] == 1800 and res["n_orderings"] == 20
    assert res["fit_k_min"] == 10 and res["fit_k_max"] == 1799
    assert res["loss_mean"] == pytest.approx(losses.mean())
    assert res["loss_max"] == pytest.approx(losses.max())
    # n - 1 <= MAX_JSON_POINTS: the full curve is stored
    assert res["k"] == list(range(1, 1800))
    full = loss_differences(losses, 20, seed=0).mean(axis=0)
    np.testing.assert_allclose(res["D_mean"], full, rtol=1e-12)
    np.testing.assert_allclose(res["D_ema"], ema_loop(full, 0.99), rtol=1e-10)
    slope, intercept = fit_loglog_slope(np.arange(1, 1800), full, k_min=10)
    assert res["slope"] == pytest.approx(slope) and res["intercept"] == pytest.approx(intercept)
    lo, hi = res["slope_ci95"]
    assert lo <= res["slope"] <= hi
    # i.i.d. losses: E|l_{k+1} - L_k| tends to a constant, so D_k ~ c/(k+1): slope near -1
    assert res["slope"] == pytest.approx(-1.0, abs=0.05)


def test_analyse_landscape_deterministic():
    losses = np.random.default_rng(8).exponential(size=600)
    a = analyse_landscape(losses, n_orderings=6, seed=3, n_bootstrap=30)
    b = analyse_landscape(losses, n_orderings=6, seed=3, n_bootstrap=30)
    c = analyse_landscape(losses, n_orderings=6, seed=4, n_bootstrap=30)
    assert a == b
    assert a["D_mean"] != c["D_mean"]


def test_analyse_landscape_thins_large_curves_but_fits_full_curve():
    n = 50_000
    losses = np.random.default_rng(9).exponential(size=n)
    start = time.perf_counter()
    res = analyse_landscape(losses, n_orderings=100, seed=0, n_bootstrap=200)
    elapsed = time.perf_counter() - start
    assert elapsed < 10.0, f"analyse_landscape took {elapsed:.1f} s for n=50k, R=100"
    k = np.array(res["k"])
    assert len(k) <= MAX_JSON_POINTS
    assert k[0] == 1 and k[-1] == n - 1 and 10 in k
    assert np.all(np.diff(k) > 0)
    assert len(res["D_mean"]) == len(res["D_ema"]) == len(res["theorem7_bound_2L"]) == len(k)
    full = loss_differences(losses, 100, seed=0).mean(axis=0)
    np.testing.assert_allclose(res["D_mean"], full[k - 1], rtol=1e-12)
    slope, _ = fit_loglog_slope(np.arange(1, n), full, k_min=10)
    assert res["slope"] == pytest.approx(slope, rel=1e-12)
    assert res["fit_n_points"] == n - 10


def test_analyse_landscape_rejects_too_few_samples():
    with pytest.raises(ValueError, match="k_min"):
        analyse_landscape(np.ones(8), n_orderings=2, k_min=10)


def test_ci_flag_reports_whether_minus_one_is_inside():
    rng = np.random.default_rng(0)
    res = analyse_landscape(rng.exponential(size=3000), n_orderings=20, seed=0, n_bootstrap=50)
    lo, hi = res["slope_ci95"]
    assert res["ci95_contains_minus_one"] == (lo <= -1.0 <= hi)


# ----------------------------------------------------------------------------- batch granularity


def brute_force_batch_differences(losses, perm, b):
    """|L_((j+1)b) - L_(jb)| with L the explicit mean over the first j whole batches."""
    seq = [float(losses[i]) for i in perm]
    m = len(seq) // b
    means = [sum(seq[: j * b]) / (j * b) for j in range(1, m + 1)]
    return np.array([abs(means[j] - means[j - 1]) for j in range(1, m)])


def test_analyse_landscape_batch_entry():
    rng = np.random.default_rng(21)
    losses = rng.exponential(size=1003)
    res = analyse_landscape(losses, n_orderings=6, seed=2, n_bootstrap=30, k_min=10, granularity="batch", batch_size=16)
    bt = res["batch"]
    assert res["granularity"] == "batch"
    assert bt["n_batches"] == 1003 // 16 and len(bt["k"]) == bt["n_batches"] - 1
    assert bt["k"] == [16 * j for j in bt["j"]]
    loops = np.mean([brute_force_batch_differences(losses, p, 16) for p in orderings(1003, 6, 2)], axis=0)
    np.testing.assert_allclose(bt["D_mean"], loops, rtol=1e-10)
    k = np.array(bt["k"], dtype=float)
    slope, _ = fit_loglog_slope(k, loops, k_min=16)
    assert bt["slope"] == pytest.approx(slope)
    assert bt["slope_ci95"][0] <= bt["slope"] <= bt["slope_ci95"][1]
    bound = 2 * losses.max() / (np.array(bt["j"]) + 1.0)
    np.testing.assert_allclose(bt["theorem7_bound_2L"], bound)
    assert bt["bound_holds"] and bt["bound_max_ratio"] <= 0.5 + 1e-12
    # the per-sample curve is unchanged by asking for the batch one
    plain = analyse_landscape(losses, n_orderings=6, seed=2, n_bootstrap=30, k_min=10)
    assert plain["batch"] is None and plain["granularity"] == "sample"
    assert plain["D_mean"] == res["D_mean"] and plain["slope"] == res["slope"]
    with pytest.raises(ValueError, match="batch_size"):
        analyse_landscape(losses, granularity="batch")
    with pytest.raises(ValueError, match="granularity"):
        analyse_landscape(losses, granularity="epoch")


def test_batch_entry_is_skipped_when_two_batches_do_not_fit():
    losses = np.random.default_rng(1).exponential(size=30)
    res = analyse_landscape(losses, n_orderings=3, n_bootstrap=10, k_min=2, batch_size=16)
    assert res["batch"] is None and res["granularity"] == "sample"
    with pytest.raises(ValueError, match="2 full batches"):
        analyse_landscape(losses, n_orderings=3, n_bootstrap=10, k_min=2, batch_size=16, granularity="batch")


def test_rate_reference_slope_and_verdict_curve():
    """rate_reference_slope is the least-squares log-log slope of 1/(k+1) (per sample) and of
    1/(j+1) against k = j b (per batch) over the fit points, computed here with np.polyfit; the
    verdict curve follows the granularity; the batch curve's rate is further from -1 than the
    per-sample one (b/(k+b) bends away from k^-1 where k is not >> b)."""
    from transformer_hessian.studies.landscape.result import PAPER_GRANULARITY, verdict_curve

    losses = np.random.default_rng(3).exponential(size=400)
    res = analyse_landscape(losses, n_orderings=4, n_bootstrap=10, k_min=10, batch_size=20, granularity="batch")
    k = np.arange(10, 400, dtype=float)
    assert res["rate_reference_slope"] == pytest.approx(np.polyfit(np.log(k), -np.log(k + 1), 1)[0], rel=1e-10)
    b = res["batch"]
    kb = np.asarray(b["k"], dtype=float)
    sel = kb >= b["fit_k_min"]
    jb = kb[sel] / 20
    assert b["rate_reference_slope"] == pytest.approx(np.polyfit(np.log(kb[sel]), -np.log(jb + 1), 1)[0], rel=1e-10)
    assert -1 < res["rate_reference_slope"] < b["rate_reference_slope"] < 0
    assert PAPER_GRANULARITY == "batch"
    assert verdict_curve(res) == ("batch", res["batch"])
    res["granularity"] = "sample"
    assert verdict_curve(res) == ("sample", res)
    res["granularity"], res["batch"] = "batch", None
    with pytest.raises(KeyError, match="batch"):
        verdict_curve(res)


def test_landscape_log_names_the_verdict_curve(caplog):
    """The landscape rule's log gives both curves' slopes and intervals and says which curve the
    fig6_slope verdict uses."""
    import logging

    losses = np.random.default_rng(5).exponential(size=300)
    for granularity in ("sample", "batch"):
        res = analyse_landscape(losses, n_orderings=4, n_bootstrap=10, batch_size=10, granularity=granularity)
        res["batch"]["slope_ci95"] = [-0.998, -0.975]
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="transformer_hessian"):
            step.log_landscape(res)
        lines = [r.getMessage() for r in caplog.records]
        verdict_line = next(m for m in lines if "verdict uses this curve" in m)
        assert ("batch-by-batch" in verdict_line) == (granularity == "batch")
        batch_line = next(m for m in lines if "batch-by-batch (b = 10) curve (the paper's definition)" in m)
        assert "95% CI [-0.998, -0.975]" in batch_line
        assert any("excludes -1" in m for m in lines) == (
            granularity == "batch" or not (res["slope_ci95"][0] <= -1 <= res["slope_ci95"][1])
        )


# ----------------------------------------------------------------------------- the rule's step


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from transformer_hessian.train import train

    root = tmp_path_factory.mktemp("landscape_step")
    spec = tiny_spec(epochs=1)
    train("tiny", spec, root / "data", root / "run", device="cpu")
    return root, spec


@pytest.mark.parametrize("key, value", [("width", 8), ("d_ff", 12), ("depth", 2)])
def test_step_checks_the_checkpoint_sizes_against_the_spec(tiny_run, key, value):
    """The model sizes travel twice (JSON spec and checkpoint): a spec that no longer matches the
    checkpoint stops the step with an error naming experiments.<name>.model.<key> and writes
    nothing; the unchanged spec passes the same check (the JSON round trip keeps it equal)."""
    root, spec = tiny_run
    changed = dataclasses.replace(spec, model=dataclasses.replace(spec.model, **{key: value}))
    ckpt = str(root / "run/checkpoints/final.pt")
    landscape = Landscape.with_defaults({"experiment": "tiny", "n_orderings": 2, "n_bootstrap": 10, "k_min": 2})
    with pytest.raises(ConfigError, match=rf"experiments\.tiny\.model\.{key}"):
        step.run_step(ckpt, changed, landscape, str(root / "data"), str(root / f"{key}_l.json"), device="cpu")
    assert not (root / f"{key}_l.json").exists()
    same = Experiment.from_dict(json.loads(json.dumps(spec.to_dict())))
    res = step.run_step(ckpt, same, landscape, str(root / "data"), str(root / f"{key}_l.json"), device="cpu")
    assert res["experiment"] == "tiny" and res["n_orderings"] == 2
