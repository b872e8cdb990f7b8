"""The probe study's entries in the figure registry (:mod:`transformer_hessian.registry` collects
them): Figure 1, Theorem 7 off w* and Figure 12 with the Assumption 1 table, drawn by one run of
``notebooks/probe_figures.ipynb``."""

from __future__ import annotations

from ..entry import Figure, Output

__all__ = ["FIGURES"]

#: Inputs of the probe figures (group probe_figures).
_PROBE_INPUTS = {"probe": Output("probe", "json", exp="{lexp}"), "metrics": Output("train", "metrics", exp="{lexp}")}

FIGURES: list[Figure] = [
    Figure(
        id="fig1",
        paper="Figure 1",
        label="fig:introduction",
        notebook="probe_figures.ipynb",
        group="probe_figures",
        inputs=dict(_PROBE_INPUTS),
        caption="Figure 1. (a) Measured empirical losses L_k and L_(k+1) of the trained model on "
        "{landscape_data} along w* + t d, for the top Hessian eigenvector u and a random unit "
        "direction, at a small and a large k (first ordering of the samples), with the gap "
        "|L_(k+1) - L_k| on log axes (mean over orderings): the paper draws this panel by hand. "
        "(b) The post-norm block (self-attention, LayerNorm, feed-forward, LayerNorm, residuals) "
        "drawn by code.",
        shows="measured L_k, L_{k+1} along the top Hessian eigenvector and a random direction; the block stack",
        functions="`studies.probe.plot.fig1_figure`, `diagrams.draw_block_stack`; `studies.probe.compute.run_probe`",
    ),
    Figure(
        id="theorem7",
        paper="beyond the paper (Theorem 7)",
        label="thm:convergence",
        notebook="probe_figures.ipynb",
        group="probe_figures",
        inputs=dict(_PROBE_INPUTS),
        caption="Theorem 7 off w*, trained model on {landscape_data}: |L_(k+1)(w) - L_k(w)| at "
        "w = w* + t d (top Hessian eigenvector and random unit directions, several t) against "
        "the printed bound 2L/(k+1) + M t^2/(k+1): curves, the ratio to the bound (violations "
        "above 1 marked) and the relative error of the second-order Taylor model of L_k, which "
        "locates where the quadratic model breaks.",
        shows="Theorem 7's bound off w*, its ratio to the measured gap, where the Taylor model breaks",
        functions="`studies.probe.plot.theorem7_figure`; `studies.probe.compute.run_probe`, `theorem7.landscape_bound`",
    ),
    Figure(
        id="fig12",
        paper="Figure 12",
        label="fig:ass_1_validation",
        notebook="probe_figures.ipynb",
        group="probe_figures",
        inputs=dict(_PROBE_INPUTS),
        tables={
            "assumption1": "Assumption 1 (Figure 12): gradient norms of L_k at w* over random "
            "orderings and minimiser shifts"
        },
        caption="Figure 12 (Assumption 1), trained model on {landscape_data}: ||grad L_k(w*)|| and "
        "||grad L_(k-1)(w*)|| against k (mean, median and 10-90% band over random orderings, "
        "the sampling reference and the same at initialisation), with the fitted log-log slope "
        "and its bootstrap 95% interval, and the minimiser shift ||w*_k - w*_(k+1)|| from short "
        "gradient-descent fine-tunes started at w*.",
        shows="gradient norms of L_k at w* against k, fitted slope, minimiser shifts (Assumption 1)",
        functions="`studies.probe.plot.fig12_figure`, `studies.probe.verdicts.assumption1_table`; "
        "`studies.probe.compute.run_probe`",
    ),
]
