"""Tests of transformer_hessian.util.numfmt: three significant digits, and no value printed as a
reference it is not equal to."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformer_hessian.util.numfmt import fmt, fmt_interval, fmt_pct


@pytest.mark.parametrize(
    "x, text",
    [
        (10017.6, "1.00e+04"),  # was printed as "1e+04"
        (1.0000000000000002e-06, "1.00e-06"),  # was printed in full
        (0.491, "0.491"),
        (3.8, "3.80"),
        (929.4, "929"),
        (12.04, "12.0"),
        (0.000123, "0.000123"),
        (-0.987, "-0.987"),
        (0.0, "0"),
        (25550, "25550"),
        (float("inf"), "inf"),
    ],
)
def test_three_significant_digits(x, text):
    assert fmt(x) == text


def test_avoid_and_intervals():
    assert fmt(-0.9996) == "-1.00" and fmt(-0.9996, avoid=-1) == "-0.9996"
    assert fmt(-1.0, avoid=-1) == "-1.00"  # equal: no extra digits
    assert fmt_interval(-0.998, -0.975, reference=-1) == "[-0.998, -0.975]"
    assert fmt_interval(-1.003, -0.995, reference=-1) == "[-1.003, -0.995]"
    assert fmt_pct(0.775921) == "77.6%" and fmt_pct(0.99996) == "99.996%" and fmt_pct(1.0) == "100%"
    assert fmt_pct(0.0) == "0%"
    with pytest.raises(TypeError, match="real number"):
        fmt("1.0")
    with pytest.raises(TypeError):
        fmt(True)


@given(
    st.floats(min_value=-3, max_value=1, allow_nan=False),
    st.floats(min_value=-3, max_value=1, allow_nan=False),
)
def test_printed_interval_contains_the_reference_exactly_when_it_does(a, b):
    lo, hi = min(a, b), max(a, b)
    text = fmt_interval(lo, hi, reference=-1.0)
    plo, phi = (float(v) for v in text.strip("[]").split(", "))
    assert (plo <= -1.0 <= phi) == (lo <= -1.0 <= hi)


@given(st.floats(min_value=-1e12, max_value=1e12, allow_nan=False).filter(lambda v: v != 0 and abs(v) > 1e-300))
def test_three_digits_are_within_rounding(x):
    assert math.isclose(float(fmt(x)), x, rel_tol=5e-3)
