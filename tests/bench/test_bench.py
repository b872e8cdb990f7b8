"""Tests of transformer_hessian.bench (``transformer-hessian bench hessian``).

The benchmark machinery runs for real on a tiny model (d = 4, batch 8, one repeat): every
method in its own subprocess, under the memory cap, with the Hessians compared with (a).
Timing values are never asserted on, only their bookkeeping.
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics

import numpy as np
import pytest

from transformer_hessian.bench import hessian as bench
from transformer_hessian.bench.hessian import OK, OOM, TIMEOUT, BenchSettings, n_group_params, run_case
from transformer_hessian.pipeline.cli import main

WIDTH, BATCH = 4, 8


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(
            [
                "bench",
                "hessian",
                "--widths",
                str(WIDTH),
                "--batch-size",
                str(BATCH),
                "--repeats",
                "1",
                "--out-dir",
                str(out),
            ]
        )
    return rc, out, buf.getvalue()


@pytest.mark.slow  # about 38 s
def test_cli_writes_json_and_markdown(cli_run):
    rc, out, _ = cli_run
    assert rc == 0
    result = json.loads((out / "hessian_bench.json").read_text())
    md = (out / "hessian_bench.md").read_text()
    assert result["complete"] and result["passed"]
    assert result["disagreements"] == [] and result["errors"] == []
    assert [r["label"] for r in result["rows"]] == ["a", "b", "c", "d", "e"]
    assert [r["method"] for r in result["rows"]] == [
        "curvlinops",
        "torch_func_hessian",
        "closed_form",
        "pipeline",
        "vmap",
    ]
    for r in result["rows"]:
        assert f"| ({r['label']}) | {r['method']}" in md
        # process CPU time of each timed run, recorded by the worker next to the wall time
        assert len(r["cpu_times_s"]) == len(r["times_s"]) == 1 and r["median_cpu_s"] == r["cpu_times_s"][0] > 0
    assert "| d | P |" in md and "| CPU s |" in md
    assert not list(out.glob(".hessian_bench*"))  # no leftover temporary files of the atomic writes


@pytest.mark.slow  # reads the module fixture cli_run (13 s for the first reader in a run)
def test_all_methods_agree_with_reference(cli_run):
    _, out, _ = cli_run
    rows = json.loads((out / "hessian_bench.json").read_text())["rows"]
    assert all(r["status"] == OK for r in rows), [(r["label"], r["status"], r["message"]) for r in rows]
    for r in rows:
        assert r["width"] == WIDTH and r["n_params"] == n_group_params(WIDTH) == 176
        assert r["rel_error_vs_a"] is not None and 0.0 <= r["rel_error_vs_a"] <= 1e-10
        assert r["agrees_with_a"] is True
    assert rows[0]["rel_error_vs_a"] == 0.0
    pipeline = rows[3]
    assert pipeline["resolved_method"] == "closed_form"  # single-block model: auto -> closed form


@pytest.mark.slow  # reads cli_run (13 s for the first reader in a run)
def test_times_memory_and_ratios_are_consistent(cli_run):
    _, out, _ = cli_run
    rows = json.loads((out / "hessian_bench.json").read_text())["rows"]
    t_a = rows[0]["median_s"]
    for r in rows:
        assert len(r["times_s"]) == 1 and r["warmup_s"] is not None
        assert r["median_s"] == statistics.median(r["times_s"])
        assert r["ratio_to_a"] == pytest.approx(t_a / r["median_s"], rel=1e-12)
        assert r["baseline_rss_mib"] > 0 and r["peak_rss_mib"] > 0
        assert r["peak_above_baseline_mib"] >= 0
        assert r["peak_above_baseline_mib"] == pytest.approx(
            max(r["peak_rss_mib"] - r["baseline_rss_mib"], 0), abs=1e-6
        )
        assert "rlimit_as" in r["memory_mechanisms"]
    assert rows[0]["ratio_to_a"] == 1.0


@pytest.mark.slow  # reads cli_run (13 s for the first reader in a run)
def test_cli_prints_table(cli_run):
    _, out, stdout = cli_run
    assert stdout == (out / "hessian_bench.md").read_text()
    assert "speed-up vs ref." in stdout and "1.00x" in stdout


def test_memory_cap_tells_when_the_address_space_is_at_its_limit():
    """Near the RLIMIT_AS cap a failed allocation can surface as any exception (seen: an OSError
    from inspect.getsource); the worker then asks the cap whether it was at its limit."""
    from transformer_hessian.util.sandbox import MemoryCap, rss_bytes

    cap = MemoryCap(1 << 30, rss_bytes(), lambda rss: None)
    assert not cap.at_limit()  # not armed
    cap.arm()
    try:
        assert "rlimit_as" in cap.mechanisms
        assert not cap.at_limit()  # 1 GiB of room, 16 MiB margin
        assert cap.at_limit(margin=2 << 30)
    finally:
        cap.disarm()


@pytest.mark.slow  # about 32 s
def test_method_over_memory_cap_is_recorded_not_raised(tmp_path):
    """(a) forced over a 1 MiB cap: recorded as out of memory, (a') takes over as the reference."""
    s = BenchSettings(
        widths=[WIDTH],
        batch_size=BATCH,
        repeats=1,
        methods=["a", "e"],
        out_dir=str(tmp_path),
        cap_overrides_mib={"a": 1.0},
    )
    result = bench.benchmark(s)  # must not raise
    a, a_chunked, e = result["rows"]
    assert [r["label"] for r in result["rows"]] == ["a", "a'", "e"]
    assert a["status"] == OOM and a["oom_by"] in ("rlimit_as", "rss_watchdog")
    assert a["median_s"] is None and a["ratio_to_a"] is None and a["rel_error_vs_a"] is None
    assert a["memory_cap_mib"] == 1.0 and e["memory_cap_mib"] == 8 * 1024
    assert a_chunked["status"] == OK and a_chunked["reference"] == "a'" and a_chunked["ratio_to_a"] == 1.0
    assert e["status"] == OK and e["reference"] == "a'" and 0 <= e["rel_error_vs_a"] <= 1e-10
    assert e["ratio_to_a"] == pytest.approx(a_chunked["median_s"] / e["median_s"], rel=1e-12)
    assert result["passed"]  # running out of memory is a result, not a failure
    written = json.loads((tmp_path / "hessian_bench.json").read_text())
    assert [r["status"] for r in written["rows"]] == [OOM, OK, OK]
    assert "| out of memory |" in (tmp_path / "hessian_bench.md").read_text()


def test_timeout_is_recorded(tmp_path):
    s = BenchSettings(batch_size=BATCH, repeats=1, timeout=0.3)
    row = run_case("a", WIDTH, s, tmp_path)
    assert row["status"] == TIMEOUT and row["median_s"] is None


def _fake_row(label, median, path):
    return {
        "width": 2,
        "label": label,
        "method": bench.LABELS[label],
        "status": OK,
        "median_s": median,
        "rel_error_vs_a": None,
        "max_abs_error_vs_a": None,
        "agrees_with_a": None,
        "ratio_to_a": None,
        "message": None,
        "_hessian_path": str(path),
    }


def test_relative_error_flags_disagreement(tmp_path):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((300, 300))
    A = A + A.T
    scale = np.abs(A).max()
    close, far = A.copy(), A.copy()
    close[7, 11] += 1e-12 * scale
    far[250, 3] -= 1e-8 * scale
    for name, M in (("a", A), ("close", close), ("far", far)):
        np.save(tmp_path / f"{name}.npy", M)
    rel, err = bench.relative_error(str(tmp_path / "far.npy"), str(tmp_path / "a.npy"), chunk_rows=64)
    assert rel == pytest.approx(1e-8, rel=1e-6) and err == pytest.approx(1e-8 * scale, rel=1e-6)
    ref = _fake_row("a", 2.0, tmp_path / "a.npy")
    rows = [ref, _fake_row("c", 0.5, tmp_path / "close.npy"), _fake_row("e", 4.0, tmp_path / "far.npy")]
    for r in rows:
        bench._finalise_rows([r], ref, 1e-10)
    assert [r["agrees_with_a"] for r in rows] == [True, True, False]
    assert [r["ratio_to_a"] for r in rows] == [1.0, 4.0, 0.5]
    nan = A.copy()
    nan[0, 0] = np.nan
    np.save(tmp_path / "nan.npy", nan)
    bad = _fake_row("b", 1.0, tmp_path / "nan.npy")
    bench._finalise_rows([bad], ref, 1e-10)
    assert bad["agrees_with_a"] is False and bad["rel_error_vs_a"] is None  # JSON-safe, still flagged


def test_disagreement_makes_the_command_fail(monkeypatch, tmp_path, capsys):
    """run_bench raises (the CLI exits 1) after the results are written when a method disagrees."""

    def fake_benchmark(s):
        return {
            "settings": bench.asdict(s),
            "tolerance": s.tolerance,
            "environment": {},
            "rows": [],
            "disagreements": ["d=8 (e) vmap: 1.000e-06"],
            "errors": [],
            "passed": False,
        }

    monkeypatch.setattr(bench, "benchmark", fake_benchmark)
    assert main(["bench", "hessian", "--widths", "8", "--out-dir", str(tmp_path)]) == 1
    assert "disagree" in capsys.readouterr().err


@pytest.mark.slow  # about 7 s
def test_fallback_reference_matches_a():
    """(a'), the fallback reference, gives the same matrix as (a) (hessian_curvlinops)."""
    import torch

    from transformer_hessian.core.hessian import hessian_curvlinops

    model, images, labels = bench.build_problem(WIDTH, BATCH, seed=0)
    H = hessian_curvlinops(model, 0, images, labels)
    Hc = bench.hessian_curvlinops_chunked(model, 0, images, labels, chunk=50)  # 176 = 3 x 50 + 26
    assert H.dtype == Hc.dtype == torch.float64
    assert float((H - Hc).abs().max()) <= 1e-12 * float(H.abs().max())
