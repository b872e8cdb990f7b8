"""``bench hessian --paper-shape``, ``--methods`` and the reference cache (tiny runs; timings are
never asserted on, only their bookkeeping)."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_hessian.bench.hessian import (
    OK,
    BenchSettings,
    benchmark,
    build_problem,
    n_group_params,
    run_bench,
    settings_from_args,
)
from transformer_hessian.pipeline.cli import build_parser


def _args(*argv):
    return build_parser().parse_args(["bench", "hessian", *argv])


def test_paper_shape_defaults_and_overrides():
    s = settings_from_args(_args("--paper-shape"))
    assert (s.shape, s.widths, s.batch_size, s.methods) == ("paper", [16], 128, ["a", "c"])
    assert s.reference_repeats == 1 and s.reference_warmup is False and s.tolerance == 1e-12
    s = settings_from_args(_args("--paper-shape", "--widths", "8", "--batch-size", "4", "--methods", "a", "b"))
    assert (s.widths, s.batch_size, s.methods, s.shape) == ([8], 4, ["a", "b"], "paper")
    plain = settings_from_args(_args())
    assert plain == BenchSettings(threads=None)  # without the flag: the old defaults
    s = settings_from_args(_args("--paper-shape", "--reference-repeats", "3"))
    assert s.reference_repeats == 3 and s.reference_warmup is False
    assert settings_from_args(_args("--reference-repeats", "2")).reference_repeats == 2


def test_reference_repeats_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="--reference-repeats must be positive"):
        run_bench(_args("--reference-repeats", "0", "--out-dir", str(tmp_path)))


def test_paper_shape_problem_is_the_papers():
    model, images, labels = build_problem(16, 3, 0, shape="paper")
    assert model.cfg.num_tokens == 49 and model.cfg.d_ff == 64 and model.cfg.d_k == 16
    assert tuple(images.shape) == (3, 1, 28, 28) and str(images.dtype) == "torch.float64"
    assert sum(p.numel() for p in model.group_params(0).values()) == n_group_params(16) == 2816
    assert labels.shape == (3,) and int(labels.max()) < 10


@pytest.mark.slow  # about 35 s
def test_reference_cache_is_reused(tmp_path):
    cache = tmp_path / "cache"
    common = dict(widths=[3], batch_size=4, repeats=1, methods=["a", "c"], reference_cache=str(cache), timeout=300.0)
    first = benchmark(BenchSettings(out_dir=str(tmp_path / "one"), **common))
    a1, c1 = first["rows"]
    assert a1["status"] == c1["status"] == OK and not a1.get("cached")
    assert len(list(cache.glob("*.npy"))) == 1 and len(list(cache.glob("*.json"))) == 1
    second = benchmark(BenchSettings(out_dir=str(tmp_path / "two"), **common))
    a2, c2 = second["rows"]
    assert a2["cached"] is True and a2["times_s"] == a1["times_s"] and a2["median_s"] == a1["median_s"]
    assert c2["agrees_with_a"] is True and c2["rel_error_vs_a"] < 1e-12
    assert second["passed"] and len(list(cache.glob("*.npy"))) == 1  # the cached file is kept
    # a different problem (batch) does not hit the cache
    third = benchmark(BenchSettings(out_dir=str(tmp_path / "three"), **{**common, "batch_size": 5, "methods": ["a"]}))
    assert not third["rows"][0].get("cached") and len(list(cache.glob("*.npy"))) == 2
    # a corrupted cached Hessian is caught by the comparison, not trusted blindly
    for f in cache.glob("*.npy"):
        h = np.load(f)
        np.save(f, h + 1.0)
    bad = benchmark(BenchSettings(out_dir=str(tmp_path / "four"), **common))
    assert bad["rows"][1]["agrees_with_a"] is False and not bad["passed"]


@pytest.mark.slow  # about 15 s
def test_reference_runs_once_without_warmup(tmp_path):
    res = benchmark(
        BenchSettings(
            widths=[3],
            batch_size=4,
            repeats=2,
            methods=["a", "c"],
            reference_repeats=1,
            reference_warmup=False,
            out_dir=str(tmp_path),
            timeout=300.0,
        )
    )
    a, c = res["rows"]
    assert a["warmup_s"] is None and len(a["times_s"]) == 1 and a["repeats"] == 1
    assert c["warmup_s"] is not None and len(c["times_s"]) == 2
    md = (tmp_path / "hessian_bench.md").read_text()
    assert "(reference: 1 run, no warm-up)" in md and "8x8 images, patch 2, L=16" in md


@pytest.mark.parametrize("bad", [["--methods", "z"]])
def test_unknown_method_label_is_rejected(bad, tmp_path):
    s = settings_from_args(_args(*bad, "--out-dir", str(tmp_path)))
    with pytest.raises(ValueError, match="unknown method"):
        s.labels()
