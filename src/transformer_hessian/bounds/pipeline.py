"""The pipeline's bound evaluation (rule ``bounds``): measured curvature against the project's
proven bounds and the paper's Theorems 1 and 6 (arXiv 2510.16927), per stage.

Two settings, reported separately because they compare different things:

* ``theory`` -- the paper's own setting. Block 0 of the model, input X = the embedded tokens of
  one sample, MSE loss l = ||out - target||_F^2/(L d) of that sample, with the target the
  output (of the block, resp. of its attention layer) on the *next* sample of the fixed batch.
  This gives a residual of the size of the outputs themselves, so the functional part of the
  Hessian is exercised (a target equal to the output would make it vanish). Per sample: the
  exact Hessian (closed form, :mod:`transformer_hessian.theory`), the project bound, the paper's
  bound. Like for like.
* ``experiment`` -- the measured cross-entropy Hessian of Figures 3-5 (the whole fixed batch,
  ``<stage>_norms.json`` of the hessian rule) against the project's bound for the same CE loss
  (like for like) and, for scale only, the paper's Theorem 6, which is an MSE bound (median over
  the theory-setting samples): *not* like for like, reported as such.

Also recorded: Lemma 4 (LayerNorm) on the actual LN_1 inputs, and the rescaled-keys
counter-example of Theorem 1 (W_Q -> W_Q/delta, W_K -> delta W_K, target F(X)) on the model's
own attention weights.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pandas as pd
import torch

from .. import GROUPS
from ..theory import attention_forward, attention_loss_hessian, block_forward, block_loss_hessian
from ..theory.layernorm import layernorm_hessian_rows, layernorm_jacobian_rows
from ..utils import log
from .attention import ATTENTION_GROUPS, attention_bound, attention_bound_paper
from .block import block_bound, block_bound_ce, block_bound_paper, lemma4_bounds

__all__ = ["bounds_summary", "bounds_table", "claim_rows", "evaluate_bounds", "spectral_norm"]

PAPER_FORMS = {
    "attention": {"statement": "Theorem 1 (statement)", "appendix": "Theorem 1 (proof's final M)"},
    "block": {
        "statement": "Theorem 6 + Lemma 4 (sigma_min = min row norm)",
        "proof": "Theorem 6 + Lemma 4 (sigma_min = min row std)",
    },
}


def spectral_norm(M: torch.Tensor, symmetric: bool = False) -> float:
    """||M||_2 of a measured matrix: dense (eigvalsh of the smaller Gram matrix, or of M when
    symmetric) up to 300 on the short side, ARPACK (eigsh/svds, tol 1e-12) beyond."""
    m, n = M.shape
    if min(m, n) <= 300:
        if symmetric:
            return float(torch.linalg.eigvalsh(0.5 * (M + M.T)).abs().max())
        G = M @ M.T if m <= n else M.T @ M
        return float(torch.linalg.eigvalsh(0.5 * (G + G.T))[-1].clamp_min(0).sqrt())
    from scipy.sparse.linalg import eigsh, svds

    A = M.detach().cpu().numpy()
    if symmetric:  # symmetric up to rounding: ARPACK's Lanczos reads it as symmetric
        return float(abs(eigsh(A, k=1, which="LM", tol=1e-12, return_eigenvectors=False)[0]))
    return float(svds(A, k=1, tol=1e-12, return_singular_vectors=False)[0])


def _dense(blocks: dict, names) -> torch.Tensor:
    return torch.cat([torch.cat([blocks[(i, j)] for j in names], 1) for i in names], 0)


def _measured(blocks: dict, names) -> dict:
    """Spectral norms of every block and of the whole (symmetric) matrix; ||H_ji|| = ||H_ij^T||."""
    out = {}
    for a, i in enumerate(names):
        for j in names[a:]:
            out[(i, j)] = out[(j, i)] = spectral_norm(blocks[(i, j)], symmetric=i == j)
    out["total"] = spectral_norm(_dense(blocks, names), symmetric=True)
    return out


def _key(k):
    return ("total", "total") if k == "total" else k


def _records(setting, layer, sample, measured, project, paper: dict):
    rows = []
    for k, m in measured.items():
        r, c = _key(k)
        rec = {
            "setting": setting,
            "layer": layer,
            "sample": sample,
            "row": r,
            "col": c,
            "measured": m,
            "project": project[k],
        }
        for form, vals in paper.items():
            rec[f"paper_{form}"] = vals if isinstance(vals, float) else vals[k]
        rows.append(rec)
    return rows


def _lemma4_record(U: torch.Tensor, sample: int) -> dict:
    """Lemma 4 on one LN input U (m x n) against the eps-free, gamma = 1 LayerNorm it is about:
    ||J_LN|| = max_i ||J_i||, ||H_LN|| = max_i ||H_i||, H_i the row's (n^2 x n) stacked Hessian."""
    m, n = U.shape
    ones = torch.ones(n, dtype=U.dtype, device=U.device)
    J = float(torch.linalg.matrix_norm(layernorm_jacobian_rows(U, ones, 0.0), ord=2).max())
    H = float(torch.linalg.matrix_norm(layernorm_hessian_rows(U, ones, 0.0).reshape(m, n * n, n), ord=2).max())
    js, hs = lemma4_bounds(U, "statement")
    jp, hp = lemma4_bounds(U, "proof")
    return {
        "sample": sample,
        "input": "X + F(X) (LN_1)",
        "true_J": J,
        "true_H": H,
        "J_statement": js,
        "H_statement": hs,
        "J_proof": jp,
        "H_proof": hp,
    }


def _lemma4_counterexample() -> dict:
    """Lemma 4 as stated (sigma_min = min row norm) on one zero-mean row u = [1, -1, 2, -2]:
    ||J_LN|| = 2/||u|| while the bound is 1.5/||u|| (ratio n/(sqrt(n) + 1) = 4/3)."""
    U = torch.tensor([[1.0, -1.0, 2.0, -2.0]], dtype=torch.float64)
    rec = _lemma4_record(U, -1)
    rec["input"] = "one zero-mean row [1, -1, 2, -2]"
    rec["ratio_J_statement"] = rec["true_J"] / rec["J_statement"]
    return rec


def _counterexample(X: torch.Tensor, params: dict, delta_min: float) -> dict:
    """Theorem 1 with W_Q -> W_Q/delta, W_K -> delta W_K and target F(X) (scores and F unchanged,
    the printed M does not grow while ||H(K,K)|| ~ delta^-2), for delta = 1, 1/10, ... down to
    ``delta_min``. Returns the scan and, per form, the largest delta where M fails."""
    scan = []
    delta = 1.0
    while delta >= delta_min * (1 - 1e-9):
        p = {"W_Q": params["W_Q"] / delta, "W_K": params["W_K"] * delta, "W_V": params["W_V"]}
        target = attention_forward(X, p["W_Q"], p["W_K"], p["W_V"])["F"]
        true = spectral_norm(_dense(attention_loss_hessian(X, p, target), ATTENTION_GROUPS), symmetric=True)
        rec = {"delta": delta, "true_total": true, "project_total": attention_bound(X, p, target)["total"]}
        for form in ("statement", "appendix"):
            rec[f"M_{form}"] = attention_bound_paper(X, p, target, form)
            rec[f"ratio_{form}"] = true / rec[f"M_{form}"]
        scan.append(rec)
        delta /= 10
    out = {"delta": scan[-1]["delta"], "scan": scan}
    for form in ("statement", "appendix"):
        out[f"ratio_{form}"] = scan[-1][f"ratio_{form}"]
        out[f"holds_{form}"] = all(r[f"ratio_{form}"] <= 1 for r in scan)
        fails = [r["delta"] for r in scan if r[f"ratio_{form}"] > 1]
        out[f"fails_from_delta_{form}"] = max(fails) if fails else None
    out["project_holds"] = all(r["project_total"] >= r["true_total"] * (1 - 1e-9) for r in scan)
    return out


@torch.no_grad()
def evaluate_bounds(
    model, images: torch.Tensor, labels: torch.Tensor, ce_norms: dict | None, n_samples: int = 2, delta: float = 1e-6
) -> dict:
    """All bound evaluations for one stage (module docstring). ``model`` must be a single-block
    float64 ViT; ``images, labels`` the Hessian experiment's fixed batch; ``ce_norms`` the hessian
    rule's ``<stage>_norms.json`` (or None to skip the experiment setting); the theory setting
    uses the first ``n_samples`` samples of the batch. Returns a JSON-ready dict."""
    if len(model.blocks) != 1:
        raise ValueError(f"bounds: the model has {len(model.blocks)} blocks; the bounds cover a single block")
    blk = model.blocks[0]
    eps = blk.eps
    p = {k: v.detach() for k, v in blk.theory_params().items()}
    pa = {n: p[n] for n in ATTENTION_GROUPS}
    X = model.block_input(images, 0).detach()
    Bn, L, d = X.shape
    n = min(n_samples, Bn)
    Z = block_forward(X, p, eps)
    F = attention_forward(X, p["W_Q"], p["W_K"], p["W_V"])["F"]
    rows, lemma4 = [], []
    paper_block_median = {}
    for b in range(n):
        nb = (b + 1) % Bn
        # attention layer alone, target = F on the next sample
        Ha = attention_loss_hessian(X[b], pa, F[nb])
        meas = _measured(Ha, ATTENTION_GROUPS)
        paper = {f: attention_bound_paper(X[b], pa, F[nb], f) for f in ("statement", "appendix")}
        rows += _records("theory", "attention", b, meas, attention_bound(X[b], pa, F[nb]), paper)
        # full block, target = Z on the next sample
        Hb = block_loss_hessian(X[b], p, Z[nb], eps)
        meas = _measured(Hb, GROUPS)
        paper = {f: block_bound_paper(X[b], p, Z[nb], eps, reading=f) for f in ("statement", "proof")}
        rows += _records("theory", "block", b, meas, block_bound(X[b], p, Z[nb], eps), paper)
        lemma4.append(_lemma4_record((X[b] + F[b]), b))
    for k in [*[(i, j) for i in GROUPS for j in GROUPS], ("total", "total")]:
        vals = [r["paper_statement"] for r in rows if r["layer"] == "block" and (r["row"], r["col"]) == k]
        paper_block_median[k] = statistics.median(vals)
    if ce_norms is not None:
        ce = block_bound_ce(model, images, labels)
        measured = {(r["row"], r["col"]): r["spectral"] for r in ce_norms["blocks"]}
        if "total_spectral" in ce_norms:
            measured["total"] = ce_norms["total_spectral"]
        for k, m in measured.items():
            r, c = _key(k)
            rows.append(
                {
                    "setting": "experiment",
                    "layer": "block",
                    "sample": -1,
                    "row": r,
                    "col": c,
                    "measured": m,
                    "project": ce[k],
                    "paper_statement": paper_block_median[(r, c)],
                }
            )
    counter = _counterexample(X[0], pa, delta)
    for r in rows:
        r["ratio"] = r["project"] / r["measured"] if r["measured"] > 0 else math.inf
        r["held"] = bool(r["project"] >= r["measured"] * (1 - 1e-9) - 1e-300)
    result = {
        "experiment": None,
        "stage": None,
        "n_samples": n,
        "batch_size": Bn,
        "tokens": L,
        "width": d,
        "d_k": p["W_Q"].shape[1],
        "d_ff": p["W_1"].shape[1],
        "ln_eps": eps,
        "target": "the output on the next sample of the fixed batch (block: Z, attention: F)",
        "records": rows,
        "lemma4": lemma4,
        "lemma4_counterexample": _lemma4_counterexample(),
        "counterexample": counter,
    }
    result["summary"] = bounds_summary(result)
    bad = [r for r in rows if not r["held"]]
    if bad:
        log.warning("bounds: the project bound is below the measured norm in %d cases, e.g. %s", len(bad), bad[0])
    for form in ("statement", "appendix"):
        if not counter[f"holds_{form}"]:
            log.warning(
                "bounds: Theorem 1 (%s) fails for W_Q/delta, W_K*delta from delta = %g; at delta = %g ||H|| / M = %.3g",
                form,
                counter[f"fails_from_delta_{form}"],
                counter["delta"],
                counter[f"ratio_{form}"],
            )
    return result


def _frac(xs) -> float | None:
    xs = list(xs)
    return float(np.mean(xs)) if xs else None


def bounds_summary(result: dict) -> dict:
    """Holds-fractions and tightness (bound / measured) of one stage's evaluation.

    ``holds_fraction``: over every project-bound evaluation (both settings, all pairs, totals,
    samples). ``paper_holds_fraction``: per form, over the like-for-like (theory-setting)
    evaluations. ``median_tightness`` / ``max_tightness``: project bound / measured over the
    theory-setting block pairs (the 25 pairs, every sample); ``tightness_per_pair``: median per
    pair there; ``experiment_*``: the same for the CE setting."""
    rows = result["records"]
    th = [r for r in rows if r["setting"] == "theory"]
    blk = [r for r in th if r["layer"] == "block" and r["row"] != "total"]
    ex = [r for r in rows if r["setting"] == "experiment" and r["row"] != "total"]
    paper = {}
    for layer, forms in PAPER_FORMS.items():
        for form in forms:
            name = ("theorem1_" if layer == "attention" else "theorem6_") + form
            sel = [r for r in th if r["layer"] == layer]
            paper[name] = _frac(r[f"paper_{form}"] >= r["measured"] for r in sel)
    ratios = [r["ratio"] for r in blk]
    per_pair = {}
    for i in GROUPS:
        for j in GROUPS:
            per_pair[f"{i},{j}"] = statistics.median(r["ratio"] for r in blk if (r["row"], r["col"]) == (i, j))
    c = result["counterexample"]
    return {
        "holds_fraction": _frac(r["held"] for r in rows),
        "violations": sum(not r["held"] for r in rows),
        "paper_holds_fraction": paper,
        "median_tightness": statistics.median(ratios),
        "max_tightness": max(ratios),
        "tightness_per_pair": per_pair,
        "experiment_median_tightness": statistics.median(r["ratio"] for r in ex) if ex else None,
        "experiment_max_tightness": max(r["ratio"] for r in ex) if ex else None,
        "experiment_paper_holds_fraction_not_like_for_like": _frac(r["paper_statement"] >= r["measured"] for r in ex),
        "lemma4_statement_J_holds_fraction": _frac(r["J_statement"] >= r["true_J"] for r in result["lemma4"]),
        "lemma4_proof_J_holds_fraction": _frac(r["J_proof"] >= r["true_J"] for r in result["lemma4"]),
        "lemma4_statement_H_holds_fraction": _frac(r["H_statement"] >= r["true_H"] for r in result["lemma4"]),
        "lemma4_proof_H_holds_fraction": _frac(r["H_proof"] >= r["true_H"] for r in result["lemma4"]),
        "theorem1_counterexample": {
            "delta": c["delta"],
            **{f"ratio_{f}": c[f"ratio_{f}"] for f in ("statement", "appendix")},
            **{f"fails_from_delta_{f}": c[f"fails_from_delta_{f}"] for f in ("statement", "appendix")},
        },
        "n_samples": result["n_samples"],
    }


COMPARISON = {
    ("theory", "attention"): "MSE Hessian of the attention layer vs MSE bounds (like for like)",
    ("theory", "block"): "MSE Hessian of the block vs MSE bounds (like for like)",
    ("experiment", "block"): "CE Hessian (Figs 3-5) vs project CE bound (like for like); "
    "paper column: Thm 6 MSE bound, NOT like for like",
}


def bounds_table(results: dict[str, dict]) -> pd.DataFrame:
    """One row per stage, setting, layer and block pair (plus the total): medians over the
    theory-setting samples of the measured norm, the project bound and the paper's bound(s),
    median and max ratio bound/measured, and the fraction of samples where each bound held."""
    out = []
    for stage, res in results.items():
        df = pd.DataFrame(res["records"])
        for (setting, layer, r, c), g in df.groupby(["setting", "layer", "row", "col"], sort=False):
            forms = list(PAPER_FORMS[layer]) if setting == "theory" else ["statement"]
            row = {
                "stage": stage,
                "setting": setting,
                "layer": layer,
                "row": r,
                "col": c,
                "compared": COMPARISON[(setting, layer)],
                "samples": len(g),
                "measured": g["measured"].median(),
                "project_bound": g["project"].median(),
                "ratio_median": g["ratio"].median(),
                "ratio_max": g["ratio"].max(),
                "project_held": g["held"].mean(),
            }
            for k, form in enumerate(forms[:2]):
                col = "paper_bound" if k == 0 else "paper_bound_alt"
                row[col] = g[f"paper_{form}"].median()
                row[col + "_held"] = float((g[f"paper_{form}"] >= g["measured"]).mean())
            row["paper_forms"] = (
                " / ".join(PAPER_FORMS[layer][f] for f in forms[:2])
                if setting == "theory"
                else "Theorem 6 MSE bound, median over theory samples (not like for like)"
            )
            out.append(row)
    return pd.DataFrame(out)


def claim_rows(results: dict) -> list[dict]:
    """Verdict rows (shared claim schema) for Theorem 1, Theorem 6 and Lemma 4 from the bounds
    results: {stage: result} or one stage's result. Theorem 1 is "reproduced" only if it held
    on every theory-setting evaluation *and* on the rescaled-keys scan; Theorem 6 if it held on
    every theory-setting evaluation (statement's Lemma 4); Lemma 4 if the stated J and H
    estimates held on every LN_1 input and on the zero-mean-row case."""
    if "records" in results:
        results = {results.get("stage") or "stage": results}
    rows = []
    th1 = {s: r["summary"]["paper_holds_fraction"] for s, r in results.items()}
    ce = {s: r["counterexample"] for s, r in results.items()}
    holds1 = all(v[f"theorem1_{f}"] == 1.0 for v in th1.values() for f in ("statement", "appendix"))
    fails_ce = [s for s, c in ce.items() if not (c["holds_statement"] and c["holds_appendix"])]
    meas = "; ".join(
        f"{s}: holds on {th1[s]['theorem1_statement']:.0%} (statement) / {th1[s]['theorem1_appendix']:.0%} "
        f"(appendix) of the theory-setting evaluations; with W_Q/delta, W_K*delta and target F(X) it fails from "
        f"delta = {ce[s]['fails_from_delta_statement']} (statement) / {ce[s]['fails_from_delta_appendix']} (appendix); "
        f"at delta = {ce[s]['delta']:g} ||H||/M = {ce[s]['ratio_statement']:.3g} / {ce[s]['ratio_appendix']:.3g}"
        for s in results
    )
    rows.append(
        {
            "id": "theorem1_bound",
            "claim": r"Let $\|\cdot\|_2$ be a spectral matrix norm, then for a single Self-Attention layer we have "
            r"$\|\mathbf{H}_i(\mathbf{w}^*)\|_2 \leq M$",
            "source": "Sec. 4.1, Theorem 1 (proof: App. C.1)",
            "measured": meas,
            "verdict": "reproduced" if holds1 and not fails_ce else "not reproduced",
            "rule": "the printed M (both forms) bounds ||H||_2 on every theory-setting sample and on the W_Q/delta, W_K*delta scan",
            "evidence": "results/<exp>/bounds/{init,trained}.json",
        }
    )
    th6 = {s: r["summary"]["paper_holds_fraction"] for s, r in results.items()}
    holds6 = all(v["theorem6_statement"] == 1.0 for v in th6.values())
    rows.append(
        {
            "id": "theorem6_bound",
            "claim": r"$\|\mathbf{H}_{\mathrm{tr}}\|_2 \le \sqrt{m_b n_b}\; \max_{i,j} \left(\frac{2}{L d_V}"
            r"\|\frac{\partial \mathbf{Z}}{\partial \mathbf{W}_i}\|_2 \|\frac{\partial \mathbf{Z}}{\partial "
            r"\mathbf{W}_j}\|_2 + \|\mathbf{R}^{\text{tr}}_m\|_2 \|\mathbf{H}_{\text{tr}}^{(i,j)}\|_2 \right)$",
            "source": "Sec. 4.2, Theorem 6 (explicit terms: App. C.6, Lemma 4)",
            "measured": "; ".join(
                f"{s}: holds on {th6[s]['theorem6_statement']:.0%} (Lemma 4 sigma_min as stated) / "
                f"{th6[s]['theorem6_proof']:.0%} (as in the proof) of the theory-setting evaluations, median "
                f"bound/measured of the block pairs {statistics.median(x['paper_statement'] / x['measured'] for x in results[s]['records'] if x['setting'] == 'theory' and x['layer'] == 'block'):.3g}"
                for s in results
            ),
            "verdict": "reproduced" if holds6 else "not reproduced",
            "rule": "Theorem 6's right-hand side (explicit proof terms, Lemma 4 as stated) bounds ||H_tr||_2 on every theory-setting sample",
            "evidence": "results/<exp>/bounds/{init,trained}.json",
        }
    )
    l4 = {s: r["summary"] for s, r in results.items()}
    l4c = next(iter(results.values())).get("lemma4_counterexample") or _lemma4_counterexample()
    holds4 = l4c["J_statement"] >= l4c["true_J"] * (1 - 1e-12) and all(
        v["lemma4_statement_J_holds_fraction"] == 1.0 and v["lemma4_statement_H_holds_fraction"] == 1.0
        for v in l4.values()
    )
    rows.append(
        {
            "id": "lemma4_layernorm",
            "claim": r"$\big\|\mathbf{J}_{\mathrm{LN}}(\mathbf{X})\big\|_2 \le \frac{1}{\sigma_{\min}} + "
            r"\frac{\|\mathbf{X}\|_2^2}{\sqrt{n}\,\sigma_{\min}^3}$ ... where $\sigma_{\min}$ denotes "
            r"$\min \limits_i \|\mathbf{M}_i \|_2$",
            "source": "App. C.6, Lemma 4",
            "measured": "; ".join(
                f"{s}: J bound holds on {v['lemma4_statement_J_holds_fraction']:.0%} (sigma_min = min row norm, as "
                f"stated) / {v['lemma4_proof_J_holds_fraction']:.0%} (min row std); H bound "
                f"{v['lemma4_statement_H_holds_fraction']:.0%} / {v['lemma4_proof_H_holds_fraction']:.0%} of the LN_1 inputs"
                for s, v in l4.items()
            )
            + f"; on {l4c['input']}: ||J_LN|| = {l4c['true_J']:.3f} vs bound {l4c['J_statement']:.3f} as stated "
            f"(ratio {l4c['ratio_J_statement']:.3f}), {l4c['J_proof']:.3f} with the row std",
            "verdict": "reproduced" if holds4 else "not reproduced",
            "rule": "Lemma 4's J and H estimates with sigma_min as stated hold on every LN_1 input and on a zero-mean row",
            "evidence": "results/<exp>/bounds/{init,trained}.json",
        }
    )
    for r in rows:
        r["evidence"] = r["evidence"].replace("<exp>", str(next(iter(results.values())).get("experiment")))
    return rows


def run_evaluate(a) -> None:
    """``transformer-hessian bounds evaluate``: one stage's evaluation to ``a.out`` (JSON)."""
    import time

    from ..hessian import fixed_batch
    from ..io import load_hessian, load_norms, save_bounds
    from ..train import load_experiment_data, load_model
    from ..utils import resolve_device

    t0 = time.perf_counter()
    dev = resolve_device(a.device)
    from ..settings import Experiment

    data = load_experiment_data(Experiment.from_dict(a.spec), a.data_root)  # the typed section (settings.py)
    images, labels = fixed_batch(data["train_x"], data["train_y"], a.hessian["batch_size"], a.hessian["seed"])
    model = load_model(a.checkpoint, device=dev, dtype=torch.float64)
    images = images.to(device=dev, dtype=torch.float64)
    norms = load_norms(a.norms)
    if a.hessian_npz:
        H = torch.as_tensor(load_hessian(a.hessian_npz)["H"])
        norms["total_spectral"] = spectral_norm(H, symmetric=True)
    result = evaluate_bounds(
        model, images, labels.to(dev), norms, n_samples=a.bounds["n_samples"], delta=a.bounds["delta"]
    )
    result["experiment"], result["stage"] = a.hessian["experiment"], a.stage
    result["dataset"] = a.spec["dataset"]
    result["seconds"] = time.perf_counter() - t0
    save_bounds(a.out, result)
    s = result["summary"]
    log.info(
        "bounds %s: project bound held in %.1f%% of %d evaluations; median tightness %.3g (max %.3g); paper holds %s",
        a.stage,
        100 * s["holds_fraction"],
        len(result["records"]),
        s["median_tightness"],
        s["max_tightness"],
        s["paper_holds_fraction"],
    )


def run_table(a) -> None:
    """``transformer-hessian bounds table``: paper/tables/bounds.{csv,tex,md} from the stages' JSON
    and, with ``--claims-out``, the claim rows as a JSON list (for a claims collector)."""
    from pathlib import Path

    from ..io import load_bounds, save_json
    from ..report import write_table

    results = {r["stage"]: r for r in map(load_bounds, a.results)}
    if a.claims_out:
        save_json(claim_rows(results), a.claims_out)
    write_table(
        bounds_table(results),
        Path(a.out_dir) / "bounds",
        "Hessian spectral norms vs bounds per block pair: measured, project bound (proven), paper bound "
        "(Theorems 1 and 6 with Lemma 4), ratio project/measured, fraction of samples where each held. "
        "theory = per-sample MSE to the next sample's output (like for like); experiment = the CE Hessian "
        "of Figs 3-5 vs the project CE bound (like for like) and the paper's MSE bound (not like for like)",
    )
