"""Tests of transformer_hessian.core.stats: the log-log slope against exact power laws, its bootstrap
interval (degenerate, noisy, coverage, seeded), the log-binned median against a loop, thinning."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_hessian.core.stats import bootstrap_slope_ci, fit_loglog_slope, log_binned_median, thin_indices


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


def test_thin_indices():
    np.testing.assert_array_equal(thin_indices(10), np.arange(10))
    idx = thin_indices(100_000, max_points=500, include=(37, 12_345))
    assert idx[0] == 0 and idx[-1] == 99_999 and 37 in idx and 12_345 in idx
    assert len(idx) <= 500 and np.all(np.diff(idx) > 0)
    # log-spaced: dense at the start, sparse at the end
    assert np.all(np.isin(np.arange(20), idx))


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
