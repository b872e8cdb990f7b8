"""Theorem 7 (arXiv 2510.16927, Sec. 4.3) right-hand sides against brute force.

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

from transformer_hessian.bounds.landscape import landscape_bound, landscape_bound_tight


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
