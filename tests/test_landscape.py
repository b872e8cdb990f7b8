"""Tests of transformer_hessian.landscape (Figure 6 protocol, Theorem 7).

Every number is checked against an independent computation: explicit Python loops for the
running means and the EMA, exact power laws for the fit, and the Theorem 7 inequality.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from transformer_hessian.landscape import (
    MAX_JSON_POINTS,
    analyse_landscape,
    batch_loss_differences,
    bootstrap_slope_ci,
    ema,
    fit_loglog_slope,
    log_binned_median,
    loss_differences,
    orderings,
    thin_indices,
)


def brute_force_differences(losses, perm):
    """|L_{k+1} - L_k| for k = 1..n-1 with L_k the explicit mean of the first k losses."""
    seq = [float(losses[i]) for i in perm]
    means = []
    for k in range(1, len(seq) + 1):
        total = 0.0
        for v in seq[:k]:
            total += v
        means.append(total / k)
    return np.array([abs(means[k] - means[k - 1]) for k in range(1, len(seq))]), means, seq


# ----------------------------------------------------------------------------- D_k


def test_orderings_are_seeded_permutations():
    perms = orderings(40, 6, seed=3)
    assert perms.shape == (6, 40)
    for row in perms:
        assert sorted(row.tolist()) == list(range(40))
    assert len({tuple(row) for row in perms}) == 6  # distinct orderings
    np.testing.assert_array_equal(perms, orderings(40, 6, seed=3))
    assert not np.array_equal(perms, orderings(40, 6, seed=4))


def test_loss_differences_match_brute_force_loop():
    rng = np.random.default_rng(11)
    losses = rng.gamma(2.0, 1.5, size=37)
    d = loss_differences(losses, n_orderings=4, seed=7)
    assert d.shape == (4, 36)
    for r, perm in enumerate(orderings(37, 4, seed=7)):
        expected, _, _ = brute_force_differences(losses, perm)
        np.testing.assert_allclose(d[r], expected, rtol=1e-10, atol=1e-15)


def test_loss_differences_identity_of_theorem_7():
    """L_{k+1} - L_k = (l_{k+1} - L_k) / (k + 1), checked with loop-computed means."""
    rng = np.random.default_rng(5)
    losses = rng.exponential(size=25)
    d = loss_differences(losses, n_orderings=3, seed=1)
    for r, perm in enumerate(orderings(25, 3, seed=1)):
        _, means, seq = brute_force_differences(losses, perm)
        identity = np.array([abs(seq[k] - means[k - 1]) / (k + 1) for k in range(1, 25)])
        np.testing.assert_allclose(d[r], identity, rtol=1e-12, atol=1e-15)


def test_loss_differences_deterministic_with_seed():
    losses = np.random.default_rng(0).exponential(size=100)
    a = loss_differences(losses, 5, seed=42)
    b = loss_differences(losses, 5, seed=42)
    c = loss_differences(losses, 5, seed=43)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_constant_losses_give_zero_differences():
    d = loss_differences(np.full(50, 0.7), 3, seed=0)
    np.testing.assert_allclose(d, 0.0, atol=1e-15)


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.array([1.0, np.nan, 2.0]), "non-finite"),
        (np.array([1.0]), "at least 2"),
        (np.ones((3, 3)), "1-D"),
    ],
)
def test_bad_losses_raise_clear_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        loss_differences(bad, 2, seed=0)


# ----------------------------------------------------------------------------- Theorem 7


@settings(max_examples=60, deadline=None)
@given(
    losses=hnp.arrays(
        np.float64,
        st.integers(2, 60),
        elements=st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False, allow_subnormal=False),
    ),
    seed=st.integers(0, 2**31 - 1),
)
def test_theorem7_bound_holds_for_nonnegative_losses(losses, seed):
    d = loss_differences(losses, 3, seed)
    k = np.arange(1, losses.size)
    big_l = losses.max()
    assert np.all(d <= 2.0 * big_l / (k + 1))
    # the sharper consequence of the identity: |l_{k+1} - L_k| <= max - min (up to the
    # rounding of a running sum of n terms)
    rounding = 4 * losses.size * np.finfo(float).eps * big_l
    assert np.all(d * (k + 1) <= losses.max() - losses.min() + rounding)


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


# ----------------------------------------------------------------------------- fit


@pytest.mark.parametrize("exponent", [-1.0, -0.5, -2.0, 0.3])
def test_fit_recovers_exact_power_law(exponent):
    k = np.arange(1, 5001, dtype=float)
    d = 3.7 * k**exponent
    slope, intercept = fit_loglog_slope(k, d, k_min=10)
    assert slope == pytest.approx(exponent, abs=1e-10)
    assert intercept == pytest.approx(np.log(3.7), abs=1e-9)


def test_fit_uses_only_the_range_and_positive_points():
    k = np.arange(1, 2001, dtype=float)
    d = np.where(k < 50, 5.0 * k**-0.2, 2.0 * k**-1.0)  # a different law below k = 50
    d[k > 1500] = 1e6  # and garbage above 1500
    d[100:110] = 0.0  # zeros are left out of a log fit
    slope, intercept = fit_loglog_slope(k, d, k_min=50, k_max=1500)
    assert slope == pytest.approx(-1.0, abs=1e-10)
    assert intercept == pytest.approx(np.log(2.0), abs=1e-9)


def test_fit_needs_two_points():
    with pytest.raises(ValueError, match="at least 2"):
        fit_loglog_slope(np.arange(1, 20.0), np.ones(19), k_min=19)


@pytest.mark.parametrize("exponent", [-1.0, -0.7, -1.5])
def test_bootstrap_ci_degenerate_for_identical_orderings(exponent):
    k = np.arange(1, 3001, dtype=float)
    diffs = np.tile(0.4 * k**exponent, (8, 1))
    lo, hi, slopes = bootstrap_slope_ci(diffs, k, k_min=10, n_bootstrap=50, seed=0)
    assert lo == pytest.approx(exponent, abs=1e-9)
    assert hi == pytest.approx(exponent, abs=1e-9)
    assert slopes.shape == (50,)


def noisy_power_law(rng, exponent, n_orderings=30, n_k=3000, sigma=0.5):
    k = np.arange(1, n_k + 1, dtype=float)
    scale = rng.lognormal(0.0, 0.3, size=(n_orderings, 1))  # per-ordering level
    noise = rng.lognormal(0.0, sigma, size=(n_orderings, n_k))  # independent over k
    return k, scale * 2.0 * k**exponent * noise


@pytest.mark.parametrize("exponent", [-1.0, -0.5, -2.0])
def test_fit_and_bootstrap_recover_noisy_power_law(exponent):
    rng = np.random.default_rng(100)
    k, diffs = noisy_power_law(rng, exponent)
    slope, _ = fit_loglog_slope(k, diffs.mean(axis=0), k_min=10)
    lo, hi, _ = bootstrap_slope_ci(diffs, k, k_min=10, n_bootstrap=300, seed=1)
    assert lo < slope < hi
    assert lo <= exponent <= hi
    assert 0 < hi - lo < 0.05


def test_bootstrap_interval_coverage():
    """Over many synthetic data sets the 95% interval holds the true exponent most times."""
    rng = np.random.default_rng(7)
    hits = 0
    trials = 80
    for t in range(trials):
        k, diffs = noisy_power_law(rng, -1.0, n_orderings=20, n_k=400, sigma=1.0)
        lo, hi, _ = bootstrap_slope_ci(diffs, k, k_min=10, n_bootstrap=200, seed=t)
        hits += lo <= -1.0 <= hi
    assert 0.85 <= hits / trials <= 1.0


def test_bootstrap_deterministic_with_seed():
    rng = np.random.default_rng(3)
    k, diffs = noisy_power_law(rng, -1.0, n_orderings=10, n_k=500)
    a = bootstrap_slope_ci(diffs, k, n_bootstrap=40, seed=9)
    b = bootstrap_slope_ci(diffs, k, n_bootstrap=40, seed=9)
    c = bootstrap_slope_ci(diffs, k, n_bootstrap=40, seed=10)
    assert a[:2] == b[:2]
    np.testing.assert_array_equal(a[2], b[2])
    assert not np.array_equal(a[2], c[2])


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


def test_thin_indices():
    np.testing.assert_array_equal(thin_indices(10), np.arange(10))
    idx = thin_indices(100_000, max_points=500, include=(37, 12_345))
    assert idx[0] == 0 and idx[-1] == 99_999 and 37 in idx and 12_345 in idx
    assert len(idx) <= 500 and np.all(np.diff(idx) > 0)
    # log-spaced: dense at the start, sparse at the end
    assert np.all(np.isin(np.arange(20), idx))


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


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(min_value=6, max_value=80),
    b=st.integers(min_value=1, max_value=9),
    r=st.integers(min_value=1, max_value=4),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_batch_differences_match_brute_force_loop(n, b, r, seed):
    if n // b < 2:
        with pytest.raises(ValueError, match="2 full batches"):
            batch_loss_differences(np.ones(n), r, seed, b)
        return
    losses = np.random.default_rng(seed).gamma(1.5, 2.0, size=n) + 3.0
    d = batch_loss_differences(losses, r, seed, b)
    assert d.shape == (r, n // b - 1)
    for row, perm in enumerate(orderings(n, r, seed)):
        np.testing.assert_allclose(d[row], brute_force_batch_differences(losses, perm, b), rtol=1e-10, atol=1e-13)


def test_batch_size_one_is_the_per_sample_curve():
    losses = np.random.default_rng(5).exponential(size=50)
    np.testing.assert_allclose(
        batch_loss_differences(losses, 3, 9, 1), loss_differences(losses, 3, 9), rtol=1e-12, atol=1e-15
    )


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


def test_log_binned_median_matches_loop():
    rng = np.random.default_rng(4)
    k = np.arange(1, 3000, dtype=float)
    d = rng.exponential(size=k.size) / k
    d[::7] = 0.0  # zeros are left out
    centres, medians = log_binned_median(k, d, bins_per_decade=5)
    expected_c, expected_m = [], []
    for i in range(0, 30):
        lo, hi = 10 ** (i / 5), 10 ** ((i + 1) / 5)
        sel = (k >= lo * (1 - 1e-12)) & (k < hi * (1 - 1e-12)) & (d > 0)
        if sel.any():
            expected_c.append(np.exp(np.log(k[sel]).mean()))
            expected_m.append(np.median(d[sel]))
    np.testing.assert_allclose(centres, expected_c)
    np.testing.assert_allclose(medians, expected_m)
    # on an exact power law the binned medians lie on it (within the bin's spread)
    c, m = log_binned_median(k, 1.0 / k, bins_per_decade=8)
    assert np.all(np.abs(np.log10(m * c)) < np.log10(10 ** (1 / 8)))


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
    from transformer_hessian.landscape import PAPER_GRANULARITY, verdict_curve

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

    from transformer_hessian.steps import _log_landscape

    losses = np.random.default_rng(5).exponential(size=300)
    for granularity in ("sample", "batch"):
        res = analyse_landscape(losses, n_orderings=4, n_bootstrap=10, batch_size=10, granularity=granularity)
        res["batch"]["slope_ci95"] = [-0.998, -0.975]
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="transformer_hessian"):
            _log_landscape(res)
        lines = [r.getMessage() for r in caplog.records]
        verdict_line = next(m for m in lines if "verdict uses this curve" in m)
        assert ("batch-by-batch" in verdict_line) == (granularity == "batch")
        batch_line = next(m for m in lines if "batch-by-batch (b = 10) curve (the paper's definition)" in m)
        assert "95% CI [-0.998, -0.975]" in batch_line
        assert any("excludes -1" in m for m in lines) == (
            granularity == "batch" or not (res["slope_ci95"][0] <= -1 <= res["slope_ci95"][1])
        )
