"""The language study's claim rows (ids ``lm_*``, sources marked "beyond the paper: language
model"): the paper's claims on the Hessian (Figures 3-5), Figure 6 and Theorem 7 at w*, and
Assumption 1, tested by the same rules as on the ViT (the rules of :mod:`..block_claims` and
:mod:`..curve_claims`, shared with the Hessian, landscape and probe studies), plus the scaling law and the paper's
reading of it on the grid."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...util.claim_schema import NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, verdict
from ...util.datanames import described
from ...util.numfmt import fmt, fmt_interval

__all__ = ["BEYOND", "landscape2d_rows", "lm_claim_rows"]

#: how every row of the study marks its source
BEYOND = "beyond the paper: language model"


def _corpus_label(h: Mapping[str, Any]) -> str:
    c = h["corpus"]
    return f"{c['name']} corpus ({fmt(c['bytes'] / 1e6)} MB of bytes, sha256 {c['sha256'][:12]})"


def _relabel(row: dict[str, Any], name: str, label: str, paper_data: str) -> dict[str, Any]:
    """A row of another study's rules as this study's: id ``lm_<id>``, source marked, the data
    set's description replaced by the corpus'."""
    out = dict(row)
    out["id"] = f"lm_{row['id']}"
    out["source"] = f"{BEYOND}; {row['source']}"
    out["measured"] = row["measured"].replace(described(name, paper_data), label)
    return out


def _combine(per_layer: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from the same rule on every layer: reproduced only where it holds on each."""
    verdicts = [r["verdict"] for r in per_layer]
    if NOT_REPRODUCED in verdicts:
        v = NOT_REPRODUCED
    elif all(x == REPRODUCED for x in verdicts):
        v = REPRODUCED
    else:
        v = NOT_TESTABLE
    row = dict(per_layer[0])
    row["rule"] = (
        f"{row['rule']}; on each layer of the decoder (whole W_Q, W_K, W_V, W_1, W_2), reproduced only if on every layer"
    )
    row["measured"] = "; ".join(f"layer {i}: {r['measured']} [{r['verdict']}]" for i, r in enumerate(per_layer))
    row["verdict"] = v
    return row


def hessian_rows(h: Mapping[str, Any], evidence: str) -> list[dict[str, Any]]:
    """The five claims on the Hessian's blocks, per layer, by the Hessian study's rules."""
    from ..block_claims import hessian_claim_rows

    d = int(h["model"]["width"])
    metrics = {
        "model": {"width": d, "d_k": d, "d_ff": d * int(h["model"]["mlp_ratio"])},
        "dataset": h["corpus"]["name"],
    }
    label = _corpus_label(h)
    layers = []
    for i in range(len(h["init"]["layers"])):
        rows = hessian_claim_rows(
            {"blocks": h["init"]["layers"][i]},
            {"blocks": h["trained"]["layers"][i]},
            metrics,
            evidence,
            spread=h["init"]["spread"],
        )
        layers.append([_relabel(r, h["corpus"]["name"], label, "MNIST") for r in rows])
    return [_combine([layer[j] for layer in layers]) for j in range(len(layers[0]))]


def landscape_rows(ls: Mapping[str, Any], h: Mapping[str, Any], evidence: str) -> list[dict[str, Any]]:
    """Figure 6's slope and Theorem 7 at w* (the landscape study's rules) and Assumption 1 (the
    probe study's rule), on training sequences."""
    from ..curve_claims import assumption1_measured, landscape_claim_rows

    name, label = h["corpus"]["name"], _corpus_label(h)
    rows = [
        _relabel(r, name, f"{label}, sequences of byte tokens", "CIFAR-100")
        for r in landscape_claim_rows(ls["curve"], {"dataset": name}, evidence)
    ]
    measured, holds = assumption1_measured(ls["assumption1"])
    rows.append(
        {
            "id": "lm_assumption1_trend",
            "claim": "while Assumption \\ref{as:zero_grad} can be relaxed, its validity increases with longer "
            "sequence lengths (i.e., a larger number of samples).",
            "source": f"{BEYOND}; App. A.2, Fig. 12",
            "rule": "the mean gradient over the first lm.gram_sequences training sequences at w* is not "
            "distinguishable from 0 (sign-flip test, p >= 0.05), as for the ViT's probe",
            "measured": f"{label}, {ls['gram_sequences']} sequences: {measured}",
            "verdict": verdict(holds),
            "evidence": evidence,
        }
    )
    return rows


def scaling_rows(sc: Mapping[str, Any], s, evidence: str) -> list[dict[str, Any]]:
    """The law's fit (both exponents' intervals above 0) and the paper's reading on the grid."""
    from .scaling import EXPONENT_BOUND

    law = sc["law"]
    rows = []
    if law.get("fitted") and law.get("alpha_ci95") and law.get("beta_ci95"):
        bounds = (law["alpha_ci95"], law["beta_ci95"])
        holds = all(lo > 0 and hi < EXPONENT_BOUND * (1 - 1e-3) for lo, hi in bounds)
        measured = (
            f"{law['n_models']} models: L(N, D) = {fmt(law['E'])} + {fmt(law['A'])} N^-{fmt(law['alpha'])} + "
            f"{fmt(law['B'])} D^-{fmt(law['beta'])}; alpha {fmt_interval(*law['alpha_ci95'], reference=0)}, "
            f"beta {fmt_interval(*law['beta_ci95'], reference=0)} (95%, {law['n_bootstrap']} bootstrap fits); "
            f"rms residual {fmt(law['rms_residual'])} nats"
        )
    else:
        holds, measured = None, f"the law was not fitted with intervals ({law.get('why', 'too few models')})"
    rows.append(
        {
            "id": "lm_scaling_law",
            "claim": "We demonstrate how these Hessian structures inform both convergence dynamics and the "
            "empirical scaling laws governing large-model performance.",
            "source": f"{BEYOND}; Abstract (no scaling-law fit appears in the paper)",
            "rule": "the validation loss of the grid follows L(N, D) = E + A N^-alpha + B D^-beta with both "
            "exponents' bootstrap 95% intervals above 0 and below the fit's bound of 4 (an exponent at the bound is "
            "no power law; N non-embedding parameters, D training tokens)",
            "measured": measured,
            "verdict": verdict(holds),
            "evidence": evidence,
        }
    )
    st = sc["stationarity"]
    sides = (st["stationary"], st["before"])
    holds_st = None if any(x["cells"] == 0 for x in sides) else all(x["holds"] >= 2 * x["cells"] / 3 for x in sides)
    rows.append(
        {
            "id": "lm_data_to_model_scaling",
            "claim": "switching from data scaling to model scaling near curvature stationarity",
            "source": f"{BEYOND}; Discussion, read as a prediction (sample size determination, Fig. 1)",
            "rule": "on the grid, past stationarity (k* at tolerance lm.tolerance reached within the model's training "
            "set) the next width lowers the validation loss more than the next data size, and before it the next "
            "data size more than the next width, each side in at least 2/3 of its cells with both neighbours (not "
            "testable without cells on both sides)",
            "measured": f"tolerance {fmt(s.tolerance)}: past stationarity {st['stationary']['holds']}/"
            f"{st['stationary']['cells']} cells as predicted, before it {st['before']['holds']}/{st['before']['cells']}",
            "verdict": verdict(holds_st),
            "evidence": evidence,
        }
    )
    return rows


def landscape2d_rows(l2: Mapping[str, Any], evidence: str) -> list[dict[str, Any]]:
    """The loss against the quadratic model on the plane of the top two Hessian eigenvectors (rule
    lm_landscape2d): within ``lm.curvature.landscape.near`` of the grid's radius, the largest
    ``|L - Q|`` is at most ``tolerance`` times the largest ``|Q - L0|`` there."""
    n = l2["near"]
    tol = float(l2["tolerance"])
    rel = n.get("rel_gap")
    holds = None if rel is None else rel <= tol
    lam = l2["eigenvalues"]
    measured = (
        f"whole training set ({l2['sequences']:,} sequences, P = {l2['P']:,}), top eigenvalues {fmt(lam[0])}, "
        f"{fmt(lam[1])}; {n['points']} grid points within {fmt(n['disc_radius'])} of w*: max |L - Q| = "
        + (f"{fmt(n['max_gap'])}, max |Q - L0| = {fmt(n['max_change'])}, ratio {fmt(rel)}" if rel is not None
           else "n/a (no grid point in the disc, or Q = L0 there)")
        + f" (tolerance {fmt(tol)}); over the whole grid (radius {fmt(l2['radius'])}) max |L - Q| = {fmt(n['max_gap_all'])}"
    )  # fmt: skip
    return [
        {
            "id": "lm_quadratic_model_near_wstar",
            "claim": "near w* the loss is its second-order Taylor expansion, the model behind Theorem 7's "
            "curvature term M ||w - w*||^2 (paraphrase)",
            "source": f"{BEYOND}; Sec. 4.3 (Theorem 7)",
            "rule": "on the plane of the top two Hessian eigenvectors u1, u2 of the whole training set's mean loss, "
            "the grid points within lm.curvature.landscape.near of its radius (w* left out): max |L - Q| <= "
            "lm.curvature.landscape.tolerance x max |Q - L0|, Q = L0 + a g.u1 + b g.u2 + (lambda1 a^2 + lambda2 b^2)/2",
            "measured": measured,
            "verdict": verdict(holds),
            "evidence": evidence,
        }
    ]


def lm_claim_rows(h, ls, sc, s, evidence: str, l2=None, evidence2d: str = "") -> list[dict[str, Any]]:
    """Every row of the study (:func:`hessian_rows`, :func:`landscape_rows`, :func:`scaling_rows`
    when the grid ran, :func:`landscape2d_rows` with the 2-D landscape ``l2``)."""
    rows = hessian_rows(h, evidence) + landscape_rows(ls, h, evidence)
    if sc is not None:
        rows += scaling_rows(sc, s, evidence)
    if l2 is not None:
        rows += landscape2d_rows(l2, evidence2d or evidence)
    return rows
