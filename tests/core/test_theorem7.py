"""Tests of transformer_hessian.core.theorem7: the loss differences D_k and D^b_j on random orderings
and Theorem 7's right-hand sides (arXiv 2510.16927, Sec. 4.3), against brute force.

Every check enumerates the running means of random losses by explicit loops; the off-w*
checks build per-sample losses that are exact quadratics (or, for the counter-example,
linear) in w, so that the left-hand side is known in closed form.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from transformer_hessian.core.theorem7 import (
    batch_loss_differences,
    landscape_bound,
    landscape_bound_tight,
    loss_differences,
    orderings,
)


def running_gaps(seq):
    """|L_{k+1} - L_k| for k = 1..n-1, explicit sums."""
    means = [sum(seq[:k]) / k for k in range(1, len(seq) + 1)]
    return [abs(means[k] - means[k - 1]) for k in range(1, len(seq))]


def test_formula_as_printed_and_broadcast():
    rng = np.random.default_rng(5)
    k = rng.integers(1, 1000, size=7)
    L, M, d2 = rng.uniform(0, 3), rng.uniform(0, 50), rng.uniform(0, 2, size=7)
    got = landscape_bound(k, L, M, d2)
    for i in range(7):
        assert got[i] == pytest.approx(2 * L / (k[i] + 1) + M * d2[i] / (k[i] + 1), rel=1e-15)
    assert isinstance(landscape_bound(3, 1.0, 2.0, 0.5), float)
    assert landscape_bound(3, 1.0, 2.0, 0.5) == pytest.approx((2.0 + 1.0) / 4)
    assert landscape_bound_tight(3, 1.0, 2.0, 0.5) == pytest.approx((1.0 + 1.0) / 4)
    assert landscape_bound_tight(9, 2.0) == pytest.approx(0.2)


@pytest.mark.parametrize("bad", [{"k": 0}, {"loss_max": -1.0}, {"M": -0.1}, {"dist2": float("nan")}])
def test_invalid_arguments_are_rejected(bad):
    args = {"k": 3, "loss_max": 1.0, "M": 1.0, "dist2": 1.0} | bad
    with pytest.raises(ValueError):
        landscape_bound(**args)


@pytest.mark.slow  # about 8 s
@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 9), L=st.floats(0.01, 100.0), seed=st.integers(0, 2**31 - 1))
def test_nonnegative_losses_obey_the_tight_bound_on_every_ordering(n, L, seed):
    rng = np.random.default_rng(seed)
    losses = rng.uniform(0, L, size=n)
    losses[rng.integers(n)] = L  # the bound L is attained by one sample
    for perm in itertools.islice(itertools.permutations(range(n)), 200):
        gaps = running_gaps([losses[i] for i in perm])
        for k, gap in enumerate(gaps, start=1):
            assert gap <= landscape_bound_tight(k, L) * (1 + 1e-12)
            assert gap <= landscape_bound(k, L, 0.0, 0.0) * (1 + 1e-12)


@pytest.mark.parametrize("k", [1, 2, 7, 40])
def test_tight_bound_is_attained(k):
    L = 1.7
    seq = [0.0] * k + [L]  # l_1..l_k = 0, l_{k+1} = L
    assert running_gaps(seq)[k - 1] == pytest.approx(landscape_bound_tight(k, L), rel=1e-14)
    # the printed 2L/(k+1) is twice the worst case for nonnegative losses ...
    assert landscape_bound(k, L, 0.0, 0.0) == pytest.approx(2 * landscape_bound_tight(k, L))
    # ... and exactly the worst case for signed losses |l_i| <= L
    signed = [-L] * k + [L]
    assert running_gaps(signed)[k - 1] == pytest.approx(landscape_bound(k, L, 0.0, 0.0), rel=1e-14)


@pytest.mark.slow  # about 9 s
@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 7), P=st.integers(1, 5), seed=st.integers(0, 2**31 - 1))
def test_off_w_star_holds_for_exact_quadratics_with_zero_gradients(n, P, seed):
    """l_i(w) = l_i* + (w-w*)^T H_i (w-w*)/2 with ||H_i||_2 <= M: the proof's setting."""
    rng = np.random.default_rng(seed)
    l_star = rng.uniform(0, 2, size=n)
    L = float(l_star.max())
    Hs = []
    for _ in range(n):
        A = rng.normal(size=(P, P))
        Hs.append((A + A.T) * rng.uniform(0.1, 5))
    M = max(np.linalg.norm(H, 2) for H in Hs)
    for _ in range(5):
        delta = rng.normal(size=P) * rng.uniform(0.01, 3)
        losses = [l_star[i] + 0.5 * delta @ Hs[i] @ delta for i in range(n)]
        for perm in itertools.islice(itertools.permutations(range(n)), 50):
            for k, gap in enumerate(running_gaps([losses[i] for i in perm]), start=1):
                d2 = float(delta @ delta)
                assert gap <= landscape_bound_tight(k, L, M, d2) * (1 + 1e-12)
                assert gap <= landscape_bound(k, L, M, d2) * (1 + 1e-12)


def test_off_w_star_fails_without_assumption1():
    """Documented counter-example: nonzero per-sample gradients (Assumption 1 violated).

    Two samples, l_1(w) = 0, l_2(w) = g w with l_i(w*) = 0, so L = 0 and every Hessian is 0
    (M = 0): the right-hand side is 0 for every w, the left-hand side |g t|/2 is not.
    """
    g, t = 3.0, 0.5
    gap = running_gaps([0.0, g * t])[0]
    assert gap == pytest.approx(0.75)
    assert landscape_bound(1, 0.0, 0.0, t * t) == 0.0
    assert gap > landscape_bound(1, 0.0, 0.0, t * t)


# ----------------------------------------------------------------------------- D_k and D^b_j on random orderings


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
