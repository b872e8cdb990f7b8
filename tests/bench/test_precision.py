"""bench precision: a float32 and a bfloat16 model's data-set products against float64."""

import pytest

from transformer_hessian.bench.precision import markdown, precision_table


@pytest.mark.slow  # six operators (seconds)
def test_lower_precisions_against_float64():
    res = precision_table(vocab=11, T=6, d=8, heads=2, layers=1, batches=3, B=2)
    rows = {(r["dtype"], r["accumulate"]): r for r in res["rows"]}
    assert len(rows) == 6 and res["data"]["terms"] == 3 * 2 * 5
    assert rows[("float32", "model's")]["result_dtype"] == "float32"
    assert rows[("bfloat16", "float64")]["result_dtype"] == "float64"
    for (dt, _), r in rows.items():
        assert 0 < r["rel_error"] < (1e-5 if dt == "float32" else 0.05)
    assert "| bfloat16 | float64 | float64 |" in markdown(res)
