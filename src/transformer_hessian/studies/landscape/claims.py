"""The landscape study's claim rows (Figure 6 and Theorem 7 at w*): :func:`landscape_claim_rows`
from the ``landscape`` rule's result. The claims rule
(:func:`transformer_hessian.pipeline.report_steps.claims_step`) collects them with the other studies' rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...util.claim_schema import verdict
from ...util.datanames import described
from ...util.numfmt import fmt, fmt_interval
from .result import PAPER_GRANULARITY, verdict_curve

__all__ = ["landscape_claim_rows"]


def landscape_claim_rows(
    landscape: Mapping[str, Any], metrics: Mapping[str, Any], evidence: str
) -> list[dict[str, Any]]:
    """Figure 6 slope and Theorem 7 at w*, on the curve the result's ``granularity`` names.

    * ``fig6_slope``: the bootstrap 95 % interval of the fitted log-log slope contains -1.
    * ``theorem7_bound_at_wstar``: ``D_k <= 2L/(k+1)`` (``2L/(j+1)`` per batch) on every
      ordering and every k, ``L`` the largest per-sample loss (``bound_holds``).
    """
    note = described(metrics["dataset"], "CIFAR-100")
    granularity, cur = verdict_curve(landscape)
    what = f"batch-by-batch (b = {cur['batch_size']})" if granularity == "batch" else "sample-by-sample"
    lo, hi = cur["slope_ci95"]
    curves = []
    for name, c in (("batch", landscape.get("batch")), ("sample", landscape)):
        if not c:
            continue
        label = f"batch-by-batch (b = {c['batch_size']})" if name == "batch" else "sample-by-sample"
        tags = [
            t
            for t, on in (("the paper's definition", name == PAPER_GRANULARITY), ("decides the verdict", c is cur))
            if on
        ]
        ref = c.get("rate_reference_slope")
        curves.append(
            f"{label}{' (' + ', '.join(tags) + ')' if tags else ''}: slope {fmt(c['slope'], avoid=-1)} "
            f"{fmt_interval(*c['slope_ci95'], reference=-1)} over k in [{int(c['fit_k_min'])}, {int(c['fit_k_max'])}]"
            + (
                f" (the rate 2L/({'j' if name == 'batch' else 'k'}+1) itself: {fmt(ref, avoid=-1)})"
                if ref is not None
                else ""
            )
        )
    if granularity != PAPER_GRANULARITY:
        paper = (
            "the paper adds data batch by batch and plots against the number of samples (Sec. 5, steps 1-3; "
            "Fig. 6 caption); this run's verdict uses the sample-by-sample curve (landscape.granularity = sample)"
        )
    else:
        paper = (
            "the paper's definition: data added batch by batch, plotted against the number of samples k = j b "
            "(Sec. 5, steps 1-3; Fig. 6 caption)"
        )
    rows = [
        {
            "id": "fig6_slope",
            "claim": "The log–log trend in Figure~\\ref{fig:loss_landscape_convergence} follows this prediction, "
            "supporting the claim that increasing data size stabilizes the local geometry of the "
            "Transformer objective.",
            "source": "Discussion; Fig. 6; Theorem 7 (O(1/k))",
            "rule": "the bootstrap 95% interval (over orderings) of the fitted log-log slope of |L_(k+1) - L_k| "
            "against k, on the curve Figure 6 draws (landscape.granularity), contains -1",
            "measured": f"{note}, {landscape['n_orderings']} orderings; {paper}; " + "; ".join(curves),
            "verdict": verdict(lo <= -1.0 <= hi),
            "evidence": evidence,
        }
    ]
    ratio = cur.get("bound_max_ratio")
    rows.append(
        {
            "id": "theorem7_bound_at_wstar",
            "claim": "\\left| \\mathcal{L}_{k+1}(\\mathbf{w}) - \\mathcal{L}_k(\\mathbf{w}) \\right| \\leqslant "
            "\\dfrac{2L}{k+1} + \\dfrac{M \\left\\| \\mathbf{w} - \\mathbf{w}^* \\right\\|_2^2}{(k+1)}",
            "source": "Sec. 4.3, Theorem 7 at w = w*",
            "rule": "D_k <= 2L/(k+1) (2L/(j+1) per batch) on every ordering and every k, L = max per-sample loss",
            "measured": f"{note}, data added {what}: L = {fmt(landscape['loss_max'])}; largest D_k (k+1)/(2L) = "
            + (fmt(ratio) if ratio is not None else "n/a (L = 0)"),
            "verdict": verdict(bool(cur["bound_holds"])),
            "evidence": evidence,
        }
    )
    return rows
