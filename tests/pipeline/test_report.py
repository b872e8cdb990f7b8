"""Tables: the three formats carry the same numbers; block tables follow the norms they are given."""

from __future__ import annotations

import io
import math
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_hessian import GROUPS
from transformer_hessian.core.hessian import block_norms
from transformer_hessian.studies.hessian.report import block_norm_table
from transformer_hessian.util.tablefmt import to_latex, to_markdown, write_table

finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)


@settings(max_examples=30, deadline=None)
@given(
    values=st.lists(finite, min_size=1, max_size=6),
    names=st.lists(st.sampled_from(["a_b", "x%", "y&z", "W_Q"]), min_size=1, max_size=6),
)
def test_csv_markdown_and_latex_hold_the_same_numbers(tmp_path_factory, values, names):
    n = min(len(values), len(names))
    df = pd.DataFrame({"name": names[:n], "value": values[:n]})
    stem = tmp_path_factory.mktemp("t") / "table"
    paths = write_table(df, stem, "caption with _ and %")
    assert [p.suffix for p in paths] == [".csv", ".tex", ".md"]
    back = pd.read_csv(paths[0])
    np.testing.assert_allclose(back["value"].to_numpy(), df["value"].to_numpy(), rtol=1e-9, atol=0)
    md_rows = [line for line in paths[2].read_text().splitlines() if line.startswith("| ") and "---" not in line][1:]
    tex_rows = [line for line in paths[1].read_text().splitlines() if line.endswith(r"\\")][1:]
    assert len(md_rows) == len(tex_rows) == n
    for i, (md, tex) in enumerate(zip(md_rows, tex_rows)):
        md_value = float(md.strip("| ").split(" | ")[1])
        tex_value = float(tex[: -len(r" \\")].split(" & ")[1])
        assert md_value == tex_value  # both formats print the same rounded number
        assert math.isclose(md_value, df["value"][i], rel_tol=5e-4, abs_tol=1e-300)


def test_latex_escapes_specials_and_is_booktabs():
    df = pd.DataFrame({"block_pair": ["W_Q,W_K"], "share %": [0.5]})
    tex = to_latex(df, "50% of A & B")
    assert r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex
    assert r"50\% of A \& B" in tex and r"block\_pair" in tex and r"W\_Q,W\_K" in tex
    assert re.search(r"\\begin\{tabular\}\{lr\}", tex)  # text left, numbers right
    assert to_markdown(df).splitlines()[1] == "|---|---|"


def test_block_norm_table_follows_the_norms_of_a_random_hessian():
    rng = np.random.default_rng(3)
    sizes = [6, 6, 9, 12, 12]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    A = rng.standard_normal((offsets[-1], offsets[-1]))
    H0, H1 = A + A.T, 3.0 * (A + A.T)
    table = block_norm_table({"blocks": block_norms(H0, offsets, GROUPS)}, {"blocks": block_norms(H1, offsets, GROUPS)})
    assert len(table) == 25 and list(table["row"][:5]) == [GROUPS[0]] * 5
    for _, r in table.iterrows():
        i, j = GROUPS.index(r["row"]), GROUPS.index(r["col"])
        blk = H0[offsets[i] : offsets[i + 1], offsets[j] : offsets[j + 1]]
        assert r["init_fro"] == pytest.approx(np.linalg.norm(blk))
        assert r["init_spectral"] == pytest.approx(np.linalg.norm(blk, 2))
        assert r["init_max_abs"] == pytest.approx(np.abs(blk).max())
        assert r["trained_fro"] == pytest.approx(3.0 * r["init_fro"])
    csv = io.StringIO()
    table.to_csv(csv, index=False)
    assert csv.getvalue().count("\n") == 26
