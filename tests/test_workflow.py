"""Integration: the whole workflow on a tiny config in a temporary folder."""

import json
import math
import subprocess
import sys

import matplotlib.image as mpimg
import pytest
import yaml

TINY = {
    "data": {"root": "results/data"},
    "device": "cpu",
    "experiments": {
        "hessian_tiny": {
            "dataset": "digits",
            "model": {"patch_size": 4, "width": 4, "depth": 1, "d_k": 3, "d_ff": 6},
            "train": {"epochs": 2, "batch_size": 32, "lr": 3e-3, "max_train": 200, "max_val": 80},
        },
        "landscape_tiny": {
            "dataset": "digits",
            "model": {"patch_size": 4, "width": 6, "depth": 2, "d_k": 4, "d_ff": 8},
            "train": {"epochs": 2, "batch_size": 32, "lr": 3e-3, "max_train": 300, "max_val": 80},
        },
    },
    "hessian": {"experiment": "hessian_tiny", "batch_size": 16},
    "landscape": {"experiment": "landscape_tiny", "n_orderings": 5, "n_bootstrap": 20, "k_min": 5},
}


def _snakemake(root, workdir, env, *args, timeout=900):
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(root / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(workdir / "tiny.yaml"), "--cores", "2", *args],
        capture_output=True, text=True, env=env, timeout=timeout,
    )


def _numbers(obj, path=""):
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return
    if isinstance(obj, (int, float)):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _numbers(v, f"{path}[{i}]")


@pytest.fixture(scope="module")
def run(root, env, tmp_path_factory):
    work = tmp_path_factory.mktemp("workflow")
    (work / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    proc = _snakemake(root, work, env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return work


def test_every_declared_output_is_valid(run):
    for fig in ("fig3", "fig4", "fig5", "fig6", "bounds"):
        png = mpimg.imread(run / f"paper/figures/{fig}.png")
        assert png.ndim == 3 and png.shape[0] > 100 and png.shape[1] > 100
        pdf = (run / f"paper/figures/{fig}.pdf").read_bytes()
        assert pdf.startswith(b"%PDF") and len(pdf) > 1000
    for table in ("block_norms", "run_summary", "closed_form_check", "bounds"):
        for ext in ("csv", "tex", "md"):
            text = (run / f"paper/tables/{table}.{ext}").read_text()
            assert len(text.splitlines()) >= 3
        assert r"\toprule" in (run / f"paper/tables/{table}.tex").read_text()
    for path in run.glob("results/**/*.json"):
        json.loads(path.read_text())


def test_summary_has_required_keys_and_finite_numbers(run):
    s = json.loads((run / "paper/summary.json").read_text())
    groups = {"W_Q", "W_K", "W_V", "W_1", "W_2"}
    for stage in ("init", "trained"):
        blocks = s["hessian"][stage]["blocks"]
        assert len(blocks) == 25
        assert {(b["row"], b["col"]) for b in blocks} == {(a, b) for a in groups for b in groups}
        assert all({"fro", "spectral", "max_abs"} <= b.keys() for b in blocks)
        assert set(s["hessian"][stage]["weights"]) == groups
        assert all({"spectral", "fro"} <= v.keys() for v in s["hessian"][stage]["weights"].values())
        assert s["theory"][stage]["max_rel_error"] <= 1e-8
    lo, hi = s["landscape"]["slope_ci95"]
    assert lo <= s["landscape"]["slope"] <= hi
    assert 0 <= s["training"]["hessian_tiny"]["val_acc"] <= 1
    prov = s["provenance"]
    assert len(prov["config_hash"]) == 16 and prov["git_commit"] and prov["packages"]["torch"] and prov["device"]
    bad = [(p, v) for p, v in _numbers(s) if not math.isfinite(v)]
    assert not bad


def test_executed_notebooks_have_no_errors(run):
    nbs = list(run.glob("results/notebooks/*.ipynb"))
    assert len(nbs) == 4
    for nb in nbs:
        cells = json.loads(nb.read_text())["cells"]
        outputs = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])]
        assert outputs and not [o for o in outputs if o.get("output_type") == "error"], nb.name


def test_bounds_outputs_hold_and_are_complete(run):
    """The project bounds hold everywhere; every block pair appears per stage and setting; the
    paper's Theorem 1 fails on the rescaled-keys counter-example; the summary carries the key."""
    import pandas as pd

    s = json.loads((run / "paper/summary.json").read_text())["bounds"]
    for stage in ("init", "trained"):
        b = s[stage]
        assert b["holds_fraction"] == 1.0 and b["violations"] == 0
        assert 1.0 <= b["median_tightness"] <= b["max_tightness"] < 1e4
        assert 1.0 <= b["experiment_median_tightness"] <= b["experiment_max_tightness"] < 1e5
        assert set(b["paper_holds_fraction"]) == {"theorem1_statement", "theorem1_appendix", "theorem6_statement",
                                                  "theorem6_proof"}
        assert all(0.0 <= v <= 1.0 for v in b["paper_holds_fraction"].values())
        assert b["theorem1_counterexample"]["ratio_statement"] > 1  # Theorem 1 as printed fails
        assert len(b["tightness_per_pair"]) == 25
    assert {c["id"] for c in s["claims"]} == {"theorem1_bound", "theorem6_bound", "lemma4_layernorm"}
    assert next(c for c in s["claims"] if c["id"] == "lemma4_layernorm")["verdict"] == "not reproduced"
    assert all(c["verdict"] in ("reproduced", "not reproduced", "not testable on this data set") for c in s["claims"])
    assert next(c for c in s["claims"] if c["id"] == "theorem1_bound")["verdict"] == "not reproduced"
    rows = json.loads((run / "results/hessian_tiny/bounds/claim_rows.json").read_text())
    assert [r["id"] for r in rows] == [c["id"] for c in s["claims"]]
    df = pd.read_csv(run / "paper/tables/bounds.csv")
    for stage in ("init", "trained"):
        for setting, layer, n in (("theory", "attention", 10), ("theory", "block", 26), ("experiment", "block", 26)):
            sel = df[(df.stage == stage) & (df.setting == setting) & (df.layer == layer)]
            assert len(sel) == n, (stage, setting, layer)
            assert (sel.project_held == 1.0).all() and (sel.project_bound >= sel.measured).all()
            assert (sel.measured > 0).all() and (sel.ratio_median >= 1).all()


def test_rerun_does_nothing_and_report_builds(run, root, env):
    proc = _snakemake(root, run, env, "-n")
    assert proc.returncode == 0
    assert "Nothing to be done" in proc.stdout + proc.stderr
    rep = _snakemake(root, run, env, "--report", str(run / "paper/report.html"))
    assert rep.returncode == 0, rep.stderr[-3000:]
    assert "ERROR/" not in rep.stdout + rep.stderr  # docutils errors in captions
    html = (run / "paper/report.html").read_text(errors="replace")
    assert len(html) > 10_000
    for fig in ("Figure 3", "Figure 6"):
        assert fig in html


def test_lint_is_clean(root, env):
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--lint", "--snakefile", str(root / "Snakefile"),
                           "--directory", str(root)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0
    assert "Congratulations" in proc.stdout + proc.stderr
