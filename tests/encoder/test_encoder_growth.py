"""bench encoder --growth: the exponent fit, the table writer, the CLI parse, one tiny real sweep."""

import json
import math
import random

import numpy as np
import pytest
import torch

from transformer_hessian.bench.encoder import build_problem
from transformer_hessian.bench.growth import QUICK_BASE, case_shape, fit_exponent, fits, growth_markdown, run_growth
from transformer_hessian.pipeline.cli import build_parser


def test_fit_exponent_recovers_known_exponents():
    xs = [8, 16, 32, 64]
    for k in (-1.0, 0.0, 1.5, 2.0, 4.0):
        assert fit_exponent(xs, [3.7 * x**k for x in xs]) == pytest.approx(k, abs=1e-12)
    # multiplicative noise of +-5 %: the slope stays within a few hundredths (log(1.05)/log(8))
    rng = random.Random(1)
    ys = [0.2 * x**2.5 * math.exp(rng.uniform(-0.05, 0.05)) for x in xs]
    assert abs(fit_exponent(xs, ys) - 2.5) < 0.05
    # uneven points: the least-squares slope (numpy's polyfit of the logs), not the end-point slope
    xs, ys = [1, 2, 3, 8], [1.0, 10.0, 4.0, 16.0]
    assert fit_exponent(xs, ys) == pytest.approx(np.polyfit(np.log(xs), np.log(ys), 1)[0], rel=1e-12)
    assert fit_exponent(xs, ys) != pytest.approx(math.log(16) / math.log(8))


def test_fit_exponent_rejects_bad_input():
    with pytest.raises(ValueError, match="two distinct"):
        fit_exponent([4, 4], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        fit_exponent([1, 2], [1.0, 0.0])
    with pytest.raises(ValueError, match="positive"):
        fit_exponent([1, 2], [1.0, float("nan")])


def _row(d, nhead, T, layers, sweeps, t, mib, flops, B=2):
    s = case_shape(dict(QUICK_BASE, B=B), None)
    s.update(d=d, nhead=nhead, T=T, layers=layers, d_ff=4 * d)
    P = 12 * d * d * layers  # any positive P: the writer only formats it
    return {
        **s,
        "sweeps": sweeps,
        "N": B * T,
        "P": P,
        "median_s": t,
        "peak_above_baseline_mib": mib,
        "flops": flops,
        "ns_per_P2_token": t / (P * P * B * T) * 1e9,
        "gflops_per_s": flops / t / 1e9,
        "frac_of_gemm_peak": flops / t / 1e9 / 10.0,
    }


def test_fits_and_table_writer():
    rows = [
        _row(4, 2, 3, 1, ["d", "T"], 1.0, 2.0, 1e9),
        _row(8, 2, 3, 1, ["d"], 16.0, 32.0, 16e9),  # time, memory, flops ~ d^4
        _row(4, 2, 6, 1, ["T"], 2.0, 2.0, 2e9),  # time ~ T, memory flat
        {**_row(4, 2, 12, 1, ["T"], 1.0, 1.0, 1.0), "error": "timeout after 5 s"},
    ]
    sweeps = {"d": [4, 8], "T": [3, 6, 12], "layers": [1, 2]}
    f = fits(rows, sweeps)
    assert f["d"]["exp_time"] == pytest.approx(4) and f["d"]["exp_memory"] == pytest.approx(4)
    assert f["d"]["exp_flops"] == pytest.approx(4) and f["d"]["exp_model_8P2"] == pytest.approx(4)
    assert f["T"]["values"] == [3, 6]  # the failed case is left out of the fit
    assert f["T"]["exp_time"] == pytest.approx(1) and f["T"]["exp_memory"] == pytest.approx(0)
    assert f["T"]["exp_model_P2N"] == pytest.approx(1)
    assert "fewer than two" in f["layers"]["error"]
    result = {
        "base": dict(QUICK_BASE, B=2),
        "ff_mult": 4,
        "repeats": 3,
        "rows": rows,
        "fits": f,
        "gemm_start": {"n": 256, "threads": 2, "gflops_median": 10.0, "gflops_best": 12.0},
        "gemm_end": {"error": "timeout after 1 s"},
        "gemm_peak_gflops": 10.0,
        "largest": {"d": 8, "nhead": 2, "T": 3, "B": 2, "layers": 1, "P": 768},
        "load_average_start": [1.0, 2.0, 3.0],
        "load_average_end": [4.0, 5.0, 6.0],
        "flop_note": "FlopCounterMode counts matrix products, not elementwise work.",
    }
    md = growth_markdown(result)
    assert "| d | 4, 8 | 192, 768 | 4.00 | 4.00 | 4.00 |" in md
    assert "| T | 3, 6 | 192, 192 | 1.00 | 0.00 | 1.00 | 1.00 | 0.00 |" in md
    assert "| layers |  |  | fewer than two finished cases" in md
    assert "error: timeout after 5 s" in md
    assert "at start 1.00, 2.00, 3.00, at end 4.00, 5.00, 6.00" in md
    assert "median 10.00 GFLOP/s" in md and "at end: timeout after 1 s" in md
    assert "Fractions use the larger median, 10.00 GFLOP/s." in md
    # the largest case's line: 16 GFLOP in 16 s = 1 GFLOP/s = 10 % of 10 GFLOP/s
    assert "16.00 GFLOP counted in 16.00 s = 1.000 GFLOP/s, 10.0% of the measured gemm peak" in md
    assert "not elementwise work" in md
    # every table row has the header's number of cells
    for table_head in ("| d | nhead |", "| factor |"):
        block = md.split(table_head)[1].split("\n\n")[0].splitlines()
        n = (table_head + block[0]).count("|")
        assert all(line.count("|") == n for line in block[1:] if line.startswith("|")), block


def test_cli_parses_growth():
    a = build_parser().parse_args(
        ["bench", "encoder", "--growth", "--quick", "--factors", "d", "T", "--repeats", "1", "--out-dir", "x"]
    )
    assert a.bench == "encoder" and a.growth and a.quick and a.factors == ["d", "T"] and a.repeats == 1
    a = build_parser().parse_args(["bench", "encoder"])
    assert not a.growth and not a.quick and a.factors is None


def test_cli_rejects_unknown_factor(tmp_path):
    a = build_parser().parse_args(["bench", "encoder", "--growth", "--quick", "--factors", "width"])
    a.out_dir = str(tmp_path)
    with pytest.raises(SystemExit, match="unknown --factors.*width"):
        a.func(a)


@pytest.mark.slow  # about 7 s
def test_tiny_real_sweep_in_process(tmp_path):
    """Two factors at toy sizes, in this process (seconds): P, flops and the files are right."""
    base = dict(QUICK_BASE, d=4, nhead=1, T=2, B=1)
    sweeps = {"d": [4, 8], "layers": [1, 2]}
    res = run_growth(
        base=base, sweeps=sweeps, repeats=1, out_dir=str(tmp_path), gemm_n=128, gemm_repeats=2, spawn=False
    )
    rows = res["rows"]
    assert len(rows) == 3  # the base case is shared by both sweeps
    for r in rows:
        assert "error" not in r, r
        model, head, _, _ = build_problem(r, 0)
        assert r["P"] == sum(p.numel() for p in model.parameters())
        assert r["median_s"] > 0 and r["flops"] > 0 and 0 < r["frac_of_gemm_peak"]
        assert r["threads"] == torch.get_num_threads()
    peak = max(res["gemm_start"]["gflops_median"], res["gemm_end"]["gflops_median"])
    assert res["gemm_peak_gflops"] == peak
    for r in rows:
        assert r["frac_of_gemm_peak"] == pytest.approx(r["flops"] / r["median_s"] / 1e9 / peak)
    assert res["fits"]["layers"]["exp_model_8P2"] == pytest.approx(2)  # P doubles with the layers
    assert res["fits"]["d"]["exp_flops"] > 2  # at least P (~ d^2) times the tokens' d^... work
    assert len(res["load_average_start"]) == 3 and len(res["load_average_end"]) == 3
    data = json.loads((tmp_path / "encoder_growth.json").read_text())
    assert data["fits"]["d"]["values"] == [4, 8] and len(data["rows"]) == 3
    md = (tmp_path / "encoder_growth.md").read_text()
    assert "| layers | 1, 2 |" in md and "of the measured gemm peak" in md


@pytest.mark.slow
def test_tiny_real_sweep_spawned(tmp_path):
    """The same through the CLI, every case in its own process (spawn start-up: tens of seconds)."""
    a = build_parser().parse_args(
        ["bench", "encoder", "--growth", "--quick", "--factors", "layers", "--repeats", "1", "--out-dir", str(tmp_path)]
    )
    a.func(a)
    data = json.loads((tmp_path / "encoder_growth.json").read_text())
    assert data["spawned"] and [r["layers"] for r in data["rows"]] == [1, 2]
    assert all("error" not in r and r["peak_above_baseline_mib"] >= 0 for r in data["rows"])
    assert data["fits"]["layers"]["exp_model_P2N"] == pytest.approx(2)
