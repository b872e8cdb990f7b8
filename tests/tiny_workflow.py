"""The tiny workflow of the integration tests: its config (``TINY``) and the checks of a finished
run of it.

Not a test module (pytest does not collect it by itself): the checks are collected by
``tests/test_workflow.py`` on the session's one tiny run (the ``tiny_run`` fixture of conftest.py,
tests/slurm_cluster.py: through the SLURM profile on a private cluster where one can be started, else
local); ``tests/test_slurm.py`` checks that the run's jobs ran on SLURM.
"""

import csv
import json
import math
import re

import matplotlib.image as mpimg
import numpy as np
import pytest
from helpers import json_numbers

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
    "landscape": {
        "experiment": "landscape_tiny",
        "n_orderings": 5,
        "n_bootstrap": 20,
        "k_min": 5,
        "granularity": "batch",
        "batch_size": 20,
    },
    "probe": {
        "max_samples": 60,
        "n_orderings": 5,
        "n_random_directions": 1,
        "n_t": 4,
        "n_t_linear": 5,
        "lanczos_iters": 6,
        "hessian_samples": 30,
        "curvature_samples": 4,
        "n_bootstrap": 20,
        "shift_ks": [4, 16],
        "shift_steps": 2,
        "shift_orderings": 2,
    },
    "dynamics": {"steps": 9, "every": 3, "heatmaps": 2},
    "scaling": {
        "enabled": True,
        "patch_size": 4,
        "widths": [2, 4],
        "depths": [1, 2],
        "fixed_width": 2,
        "fixed_depth": 1,
        "train_sizes": [80, 160],
        "train": {"epochs": 1, "batch_size": 32},
        "tolerance": 0.02,
        "n_orderings": 5,
        "n_bootstrap": 20,
        "k_min": 5,
        "lanczos_iters": 4,
        "hessian_samples": 16,
        "dense_max_params": 150,
        "jobs": 2,
    },
    # the architecture study at toy size (its figure, table, claim rows and summary section are
    # in the registry, so every output test below covers them): patch 4 -> 4 tokens, P <= 400
    "architectures": {
        "enabled": True,
        "patch_size": 4,
        "d_model": 4,
        "dim_feedforward": 6,
        "hessian_batch_size": 4,
        "js_points": 200,
        "train": {"epochs": 1, "batch_size": 64},
        "base": {"norm_first": False, "nhead": 1, "activation": "relu", "num_layers": 1},
        "variants": {"heads_2": {"nhead": 2}, "layers_2": {"num_layers": 2}},
    },
    # the language study at toy size: a 1-layer decoder of width 4 on the embedded corpus (P = 1216 in
    # the Hessian), a grid of 2 widths x 3 training-set sizes
    "lm": {
        "enabled": True,
        "context": 8,
        "width": 4,
        "depth": 1,
        "heads": 2,
        "val_sequences": 64,
        "train": {"epochs": 1, "batch_size": 32, "sequences": 256},
        "hessian_sequences": 2,
        "n_orderings": 5,
        "n_bootstrap": 20,
        "batch_size": 16,
        "gram_sequences": 24,
        "scaling": {
            "widths": [4, 8],
            "depths": [1],
            "train_sequences": [32, 64, 128],
            "steps": 20,
            "lanczos_iters": 5,
        },
        # the curvature over the 256 training sequences under torchrun (2 processes) and a 5 x 5 landscape
        "curvature": {
            "enabled": True,
            "processes": 2,
            "batch_size": 64,
            "top_k": 2,
            "lanczos_steps": 6,
            "probes": 2,
            "slq_probes": 1,
            "blocks": ["blocks.0.attn.*"],
            "landscape": {"points": 5, "radius": 0.5, "near": 0.5},
        },
    },
    "spectrum": {
        "batch_size": 16,
        "n_eigenvalues": 3,
        "lanczos_steps": 40,
        "n_probes": 4,
        "slq_probes": 2,
        "pair_steps": 4,
    },
}


def test_every_declared_output_is_valid(run):
    from transformer_hessian.registry import figure_ids

    for fig in figure_ids():
        png = mpimg.imread(run / f"paper/figures/{fig}.png")
        assert png.ndim == 3 and png.shape[0] > 100 and png.shape[1] > 100
        pdf = (run / f"paper/figures/{fig}.pdf").read_bytes()
        assert pdf.startswith(b"%PDF") and len(pdf) > 1000
    for table in ("block_norms", "run_summary", "closed_form_check", "assumption1", "bounds", "table1"):
        for ext in ("csv", "tex", "md"):
            text = (run / f"paper/tables/{table}.{ext}").read_text()
            assert len(text.splitlines()) >= 3
        assert r"\toprule" in (run / f"paper/tables/{table}.tex").read_text()
    for path in run.glob("results/**/*.json"):
        json.loads(path.read_text())


def test_dynamics_figures_and_table1_contents(run):
    for fig in ("fig7", "fig8", "fig9", "fig10", "fig11"):
        png = mpimg.imread(run / f"paper/figures/{fig}.png")
        assert png.ndim == 3 and png.shape[0] > 300 and png.shape[1] > 300
        assert (run / f"paper/figures/{fig}.pdf").read_bytes().startswith(b"%PDF")
    d = json.loads((run / "results/hessian_tiny/dynamics/dynamics.json").read_text())
    # 200 samples, batch 32: 7 steps per epoch; the replay crosses epoch 1 and matches its checkpoint.
    assert d["steps"] == [0, 3, 6, 9] and d["heat_steps"] == [0, 9] and d["steps_per_epoch"] == 7
    assert d["epoch_checks"] == [{"epoch": 1, "identical": True}]
    assert d["init_hessian_check"]["passed"] and d["init_hessian_check"]["rel_error"] <= 1e-12
    assert d["hessian_method"] == "closed_form" and len(d["groups"]) == 9
    for g, norms in d["weight_norms"].items():
        assert all(0 <= s <= f * (1 + 1e-12) for s, f in zip(norms["spectral"], norms["fro"])), g
        if g.startswith("W_") or g.startswith("gamma"):
            assert min(norms["spectral"]) > 0, g
        else:  # LayerNorm vectors: spectral norm = Euclidean norm = Frobenius norm; beta starts at 0
            assert norms["spectral"] == pytest.approx(norms["fro"], rel=1e-12) and norms["spectral"][0] == 0, g
    assert d["hessian_loss"][-1] < d["hessian_loss"][0] + 0.5 and all(0 < v < 10 for v in d["hessian_loss"])
    with open(run / "paper/tables/table1.csv", newline="") as fh:
        t = list(csv.DictReader(fh))
    key = ("source", "dataset", "patch size", "hidden dim", "ff dim", "blocks", "tokens")
    assert [tuple(r[k] for k in key) for r in t] == [
        ("paper", "MNIST", "4", "16", "64", "1", "49"),
        ("this run (hessian_tiny)", "digits 8x8 (stand-in)", "4", "4", "6", "1", "4"),
        ("paper", "CIFAR-100", "4", "128", "512", "8", "64"),
        ("this run (landscape_tiny)", "digits 8x8 (stand-in)", "4", "6", "8", "2", "4"),
    ]
    assert t[1]["differs from paper"] == "dataset, hidden dim, ff dim"
    assert 0 <= float(t[1]["val acc"].rstrip("%")) <= 100 and int(t[1]["parameters"]) > 0
    for stage in ("init", "trained"):
        c = json.loads((run / f"results/hessian_tiny/theory/{stage}.json").read_text())
        assert c["check"] == "probes" and c["n_probes"] == 40 and c["passed"] and c["max_rel_error"] < 1e-10


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
    bad = [(p, v) for p, v in json_numbers(s) if not math.isfinite(v)]
    assert not bad


def test_spectrum_in_summary(run):
    """Matrix-free spectrum of the 2-block landscape model: shapes, finiteness, and what holds for
    any Lanczos run (Ritz values sorted, inside [smallest, largest]; sqrt of a Ritz value of
    H_ab^T H_ab symmetric in (a, b)); interlacing lambda_max(H) >= lambda_max(H_block) is exact
    for eigenvalues and holds for the Ritz values once converged (40 steps, a large gap here)."""
    sp = json.loads((run / "paper/summary.json").read_text())["spectrum"]
    assert sp["experiment"] == "landscape_tiny" and sp["batch_size"] == 16 and len(sp["blocks"]) == 2
    whole = sp["whole_model"]
    assert whole["n_params"] > sum(b["n_params"] for b in sp["blocks"]) and len(whole["top_eigenvalues"]) == 3
    for b in sp["blocks"]:
        ev = b["top_eigenvalues"]
        assert len(ev) == 3 and all(math.isfinite(v) for v in ev) and ev == sorted(ev, reverse=True)
        assert b["smallest_ritz"] <= ev[-1] and b["n_params"] == 6 * 4 * 2 + 6 * 6 + 2 * 6 * 8
        assert math.isfinite(b["trace"]["mean"]) and b["trace"]["stderr"] >= 0 and b["trace"]["n_probes"] == 4
        N = np.asarray(b["pair_norms"])
        assert N.shape == (5, 5) and np.all(N >= 0) and np.allclose(N, N.T)
        assert whole["top_eigenvalues"][0] >= ev[0]
    assert sp["interlacing"]["holds"]
    r = json.loads((run / "results/spectrum/landscape_tiny.json").read_text())
    for b in r["blocks"]:
        d = b["density"]
        assert np.trapezoid(d["density"], d["grid"]) == pytest.approx(1.0, abs=1e-3)
    table = (run / "paper/tables/spectrum.csv").read_text().splitlines()
    assert table[0].startswith("parameters,P,lambda_max") and len(table) == 1 + 3


def test_probe_result_contents(run):
    r = json.loads((run / "results/landscape_tiny/probe/probe.json").read_text())
    assert r["n_samples"] == 60 and r["dataset"] == "digits"
    s = r["theorem7_summary"]
    assert s["n_comparisons"] == 2 * 11 * 5 * 59  # directions x t x orderings x k
    assert 0.0 <= s["held_fraction"] <= 1.0 and s["at_w_star"]["holds_printed"]
    assert s["at_w_star"]["max_ratio_printed"] <= 0.5 + 1e-12  # nonnegative losses: L/(k+1)
    assert r["M"] >= r["M_star"] > 0 and r["loss_max"] > 0
    a1 = r["assumption1"]
    assert a1["k"][0] == 2 and a1["k"][-1] == 60
    assert a1["grad_norm_k_mean"][-1] == pytest.approx(a1["full_grad_norm"], rel=1e-9)
    assert a1["slope_ci95"][0] <= a1["slope_ci95"][1]
    assert [row["k"] for row in r["minimiser_shift"]["rows"]] == [4, 16]
    assert all(row["shift"] > 0 for row in r["minimiser_shift"]["rows"])
    table = (run / "paper/tables/assumption1.csv").read_text().splitlines()
    assert table[0].startswith("k,grad_norm_k") and len(table) == 1 + len(a1["k"])


def test_executed_notebooks_have_no_errors(run):
    from transformer_hessian.registry import groups

    nbs = list(run.glob("results/notebooks/*.ipynb"))
    assert sorted(nb.stem for nb in nbs) == sorted(groups())
    for nb in nbs:
        cells = json.loads(nb.read_text())["cells"]
        outputs = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])]
        assert outputs and not [o for o in outputs if o.get("output_type") == "error"], nb.name


def test_claims_verdicts_printed_and_in_summary(run):
    from transformer_hessian.claims import VERDICTS

    doc = json.loads((run / "paper/claims.json").read_text())
    rows = {r["id"]: r for r in doc["claims"]}
    assert {
        "hessian_heterogeneity",
        "values_larger_at_init",
        "every_block_grows",
        "vv_largest_trained",
        "keys_values_highest",
        "accuracy_hessian_model",
        "accuracy_landscape_model",
        "fig6_slope",
        "theorem7_bound_at_wstar",
    } <= set(rows)
    assert all(r["verdict"] in VERDICTS and r["measured"] and r["evidence"] for r in rows.values())
    s = json.loads((run / "paper/summary.json").read_text())
    assert s["claims"] == doc["claims"]
    # the verdicts follow the numbers in the results
    acc = s["training"]["hessian_tiny"]["val_acc"]
    assert rows["accuracy_hessian_model"]["verdict"] == ("reproduced" if acc > 0.5 else "not reproduced")
    batch = s["landscape"]["batch"]
    assert batch["batch_size"] == 20 and s["landscape"]["granularity"] == "batch"
    lo, hi = batch["slope_ci95"]
    assert rows["fig6_slope"]["verdict"] == ("reproduced" if lo <= -1 <= hi else "not reproduced")
    assert "batch-by-batch (b = 20)" in rows["fig6_slope"]["measured"]
    assert rows["theorem7_bound_at_wstar"]["verdict"] == "reproduced"
    # onsuccess printed the recap last (at most 20 lines), not the table (that is paper/claims.md)
    out = (run / "run_output.txt").read_text()
    assert "| claim | paper | verdict | measured | rule |" not in out
    stdout = (run / "run_stdout.txt").read_text().rstrip("\n").splitlines()
    start = max(i for i, line in enumerate(stdout) if line.startswith("Finished in "))
    recap = stdout[start:]
    assert 4 <= len(recap) <= 20, recap
    text = "\n".join(recap)
    failed = [key for key, r in rows.items() if r["verdict"] == "not reproduced"]
    n_ok = sum(r["verdict"] == "reproduced" for r in rows.values())
    assert f"Claims: {n_ok} reproduced, {len(failed)} not reproduced" in text
    # the names of the claims not reproduced, in the order of the rows, up to the recap's line limit,
    # then "... and N more" (whole words: "every_block_grows" is part of "lm_every_block_grows")
    named = [key for key in failed if re.search(rf"(?<!\w){re.escape(key)}(?!\w)", text)]
    assert named == failed[: len(named)] and len(named) >= min(len(failed), 10), (named, failed)
    if len(named) < len(failed):
        assert f"... and {len(failed) - len(named)} more" in text
    assert "paper/claims.md" in text and "paper/" in text
    assert "Open first: paper/figures/fig3.png" in text


def _unfolded(text: str) -> list[str]:
    """The lines of a run's output with the shell commands that the terminal folded (`` \\`` at the
    end of a line, transformer_hessian.pipeline.terminal) joined again."""
    return re.sub(r" \\\n\s*", " ", text).splitlines()


def test_command_lines_stay_short(run):
    """Settings travel as files (@results/settings/...), not as inlined config sections."""
    out = (run / "run_output.txt").read_text()
    commands = [line for line in _unfolded(out) if "transformer-hessian " in line and "--out" in line]
    assert commands, "the run printed no shell commands (printshellcmds in profiles/default)"
    assert "@results/settings/" in out and '{"' not in "".join(commands)
    # what is left of their length is file paths (the summary rule lists every figure and table);
    # on the embedded default the longest went from 3,851 characters (inlined config) to 1,368
    assert max(len(line) for line in commands) < 1500


def test_terminal_lines_stay_short(run):
    """No line of the run's terminal output is longer than 300 characters (snakemake printed rule
    all's input list on one line of 2,085 on the embedded default); the folded shell commands, joined
    again, are the commands snakemake ran, and the recap is still the last thing printed."""
    from transformer_hessian.pipeline.terminal import WIDTH

    out = (run / "run_output.txt").read_text()
    longest = max(out.splitlines(), key=len)
    assert len(longest) <= min(300, WIDTH), longest[:400]
    assert any(line.endswith(" \\") for line in out.splitlines()), "no command was folded: the check tests nothing"
    joined = [line for line in _unfolded(out) if line.startswith("Shell command: transformer-hessian summary ")]
    assert joined and len(joined[0]) > WIDTH
    assert "--figures " in joined[0] and "--sections @results/settings/" in joined[0]
    stdout = (run / "run_stdout.txt").read_text().rstrip("\n").splitlines()
    assert any(line.startswith("Finished in ") for line in stdout[-20:])


def test_figure_provenance_hashes_the_inputs(run):
    import hashlib

    from transformer_hessian.registry import by_id, figure_ids

    prov = json.loads((run / "paper/summary.json").read_text())["figure_provenance"]
    assert sorted(prov) == sorted(figure_ids())
    for fig, entry in prov.items():
        assert entry["rule"] == by_id(fig).rule and entry["notebook"].startswith("notebooks/")
        for path, digest in entry["inputs"].items():
            if not path.startswith("notebooks/"):
                assert digest == hashlib.sha256((run / path).read_bytes()).hexdigest(), (fig, path)
            else:
                assert digest and len(digest) == 64
        for path, digest in entry["outputs"].items():
            assert digest == hashlib.sha256((run / path).read_bytes()).hexdigest(), (fig, path)


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
        assert set(b["paper_holds_fraction"]) == {
            "theorem1_statement",
            "theorem1_appendix",
            "theorem6_statement",
            "theorem6_proof",
        }
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


def test_scaling_outputs(run):
    """Three architectures x two data-set sizes, split into two jobs; finite slopes, positive integer
    k*, parameter counts growing with the width, fits per size and direction, the summary's copy."""
    r = json.loads((run / "results/scaling/scaling.json").read_text())
    rows = r["rows"]
    assert [row["id"] for row in rows] == [
        *("w2_d1_n80", "w2_d2_n80", "w4_d1_n80"),
        *("w2_d1_n160", "w2_d2_n160", "w4_d1_n160"),
    ]
    parts = [json.loads((run / f"results/scaling/parts/part{i}of2.json").read_text()) for i in range(2)]
    assert sorted(m["id"] for p in parts for m in p["models"]) == sorted(row["id"] for row in rows)
    assert len(list((run / "results/scaling/models").glob("*.json"))) == 6
    for row in rows:
        assert row["n_train"] == row["train_size"]
        assert math.isfinite(row["slope"]) and row["slope_ci95"][0] <= row["slope"] <= row["slope_ci95"][1]
        assert row["prefactor"] > 0 and row["top_eigenvalue"] > 0
        for key in ("k_star_measured", "k_star_fitted"):
            assert isinstance(row[key], int) and row[key] >= 1, (row["id"], key)
        assert row["k_star_measured"] <= row["n_train"] - 1
        # block 0 of width 2 has 52 parameters (dense), of width 4 192 > dense_max_params = 150
        assert (row["block_diag_spectral"] is None) == (row["width"] == 4)
    for size in (80, 160):
        width_series = sorted(
            (row for row in rows if row["train_size"] == size and "width" in row["series"]),
            key=lambda row: row["width"],
        )
        assert [row["width"] for row in width_series] == [2, 4]
        assert width_series[0]["n_parameters"] < width_series[1]["n_parameters"]
        fits = r["fits"][str(size)]
        assert set(fits) == {"width", "depth"}
        assert all(math.isfinite(f["exponent"]) for f in fits["width"].values() if "exponent" in f)
    skipped = next(m for m in r["models"] if m["id"] == "w4_d1_n80")["block_norms_skipped"]
    assert "scaling.dense_max_params = 150" in skipped
    s = json.loads((run / "paper/summary.json").read_text())
    assert s["scaling"]["rows"] == rows and s["scaling"]["fits"] == r["fits"]
    assert "scaling" in s["figure_provenance"]


def test_language_study_outputs(run):
    """The language study's rows (ids lm_*, marked beyond the paper), its summary section (the corpus'
    sha256, the law's constants under their names with intervals, the approximations' errors on the
    decoder and on the paper's ViT) and its tables."""
    s = json.loads((run / "paper/summary.json").read_text())["lm"]
    assert len(s["corpus"]["sha256"]) == 64 and s["corpus"]["bytes"] >= 1_000_000
    law = s["scaling_law"]
    assert law["fitted"] and law["n_models"] == 6
    for name in ("E", "A", "alpha", "B", "beta"):
        assert math.isfinite(law[name]) and f"{name}_ci95" in law
    for stage in ("init", "trained"):
        h = s["hessian"][stage]
        assert h["P"] == 256 * 4 + 4 * 16 + 2 * 4 * 16 and h["asymmetry"] < 1e-10
        assert len(h["layers"]) == 1 and len(h["layers"][0]) == 25
        a = h["approximations"]
        assert set(a["whole"]) == {"GGN", "K-FAC", "EK-FAC", "block-diagonal"}
        assert all(0 <= e["fro"] < 10 for e in a["whole"].values())
        v = s["approximations_vit"][stage]  # the same on the paper's ViT, against the Hessian study's H
        assert set(v["whole"]) == {"GGN", "K-FAC", "EK-FAC", "block-diagonal"} and v["kfac_approx"] == "reduce"
        assert list(v["blocks"]) == ["W_Q", "W_K", "W_V", "W_1", "W_2"] and v["off_layer_share"] == 0
        assert all(0 < v["whole"][m]["fro"] < 10 for m in ("GGN", "K-FAC", "EK-FAC"))
    approx_rows = (run / "paper/tables/lm_approx.csv").read_text()
    assert "paper's ViT" in approx_rows and "language model" in approx_rows
    lm = [r for r in json.loads((run / "paper/claims.json").read_text())["claims"] if r["id"].startswith("lm_")]
    assert {r["id"] for r in lm} >= {
        "lm_vv_largest_trained",
        "lm_fig6_slope",
        "lm_scaling_law",
        "lm_data_to_model_scaling",
    }
    assert all(r["source"].startswith("beyond the paper: language model") for r in lm)
    for table in ("lm_approx", "lm_scaling"):
        assert len((run / f"paper/tables/{table}.csv").read_text().splitlines()) >= 4


def test_language_curvature_outputs(run):
    """The curvature command's result over the tiny decoder's 256 training sequences (2 processes),
    its eigenvectors, the 2-D landscape, its claim row and the summary's copy; the figure exists."""
    import torch

    c = json.loads((run / "results/lm/curvature/curvature.json").read_text())
    assert {"eigenvalues", "residuals", "trace", "slq", "blocks", "P", "batches", "processes", "products"} <= set(c)
    assert len(c["eigenvalues"]) == 2 and c["eigenvalues"] == sorted(c["eigenvalues"], reverse=True)
    assert c["processes"] == 2 and c["batches"] == 4 and set(c["blocks"]) == {"blocks.0.attn.*"}
    assert c["trace"]["n_probes"] == 2 and c["blocks"]["blocks.0.attn.*"]["P"] == 4 * (4 * 4 + 4)
    bad = [(p, v) for p, v in json_numbers(c) if not math.isfinite(v)]
    assert not bad
    e = torch.load(run / "results/lm/curvature/eigenvectors.pt", weights_only=True)
    assert e["vectors"].shape == (2, c["P"]) and e["eigenvalues"] == pytest.approx(c["eigenvalues"])
    assert torch.allclose(e["vectors"].norm(dim=1), torch.ones(2, dtype=e["vectors"].dtype), atol=1e-8)
    r = json.loads((run / "results/lm/landscape2d.json").read_text())
    assert r["sequences"] == 256 and r["points"] == 5 and np.asarray(r["loss"]).shape == (5, 5)
    assert r["eigenvalues"] == pytest.approx(c["eigenvalues"][:2]) and r["loss"][2][2] == pytest.approx(r["L0"])
    assert all(math.isfinite(v) for row in r["loss"] + r["quadratic"] for v in row)
    assert (run / "results/lm/curvature/curvature.png").stat().st_size > 1000
    assert mpimg.imread(run / "paper/figures/lm_landscape2d.png").shape[1] > 100
    rows = {x["id"]: x for x in json.loads((run / "paper/claims.json").read_text())["claims"]}
    row = rows["lm_quadratic_model_near_wstar"]
    rel = r["near"]["rel_gap"]
    assert row["verdict"] == ("not testable on this data set" if rel is None else
                              "reproduced" if rel <= r["tolerance"] else "not reproduced")  # fmt: skip
    s = json.loads((run / "paper/summary.json").read_text())["lm"]["curvature"]
    assert s["eigenvalues"] == c["eigenvalues"] and s["sequences"] == 256


# The checks above, by name: every test of a finished run that the local and the SLURM run share.
RUN_CHECKS = {
    "test_every_declared_output_is_valid": test_every_declared_output_is_valid,
    "test_dynamics_figures_and_table1_contents": test_dynamics_figures_and_table1_contents,
    "test_summary_has_required_keys_and_finite_numbers": test_summary_has_required_keys_and_finite_numbers,
    "test_spectrum_in_summary": test_spectrum_in_summary,
    "test_probe_result_contents": test_probe_result_contents,
    "test_executed_notebooks_have_no_errors": test_executed_notebooks_have_no_errors,
    "test_claims_verdicts_printed_and_in_summary": test_claims_verdicts_printed_and_in_summary,
    "test_command_lines_stay_short": test_command_lines_stay_short,
    "test_terminal_lines_stay_short": test_terminal_lines_stay_short,
    "test_figure_provenance_hashes_the_inputs": test_figure_provenance_hashes_the_inputs,
    "test_bounds_outputs_hold_and_are_complete": test_bounds_outputs_hold_and_are_complete,
    "test_scaling_outputs": test_scaling_outputs,
    "test_language_study_outputs": test_language_study_outputs,
    "test_language_curvature_outputs": test_language_curvature_outputs,
}
