"""The scaling study's entry in the figure registry (:mod:`transformer_hessian.registry` collects
it): its figure, on only with ``scaling.enabled``."""

from __future__ import annotations

from ..entry import Figure, Output

__all__ = ["FIGURES"]

FIGURES: list[Figure] = [
    Figure(
        id="scaling",
        paper="beyond the paper (Figure 1's sample size determination, Theorem 7)",
        label="fig:introduction",
        notebook="scaling.ipynb",
        group="scaling_figure",  # the rule `scaling` computes the fits
        inputs={"scaling": Output("scaling", "json")},
        enabled_by="scaling.enabled",
        caption="Scaling study of post-norm ViTs on {scaling_data} (widths at fixed depth, depths at fixed "
        "width; one colour per training-set size n). (a) D_k = |L_(k+1)(w*) - L_k(w*)| against k (mean over "
        "random orderings, medians in log-spaced bins; dotted: the tolerance; markers: measured k*). "
        "(b) decay rate -slope of the log-log fit of D_k (bootstrap 95% interval over orderings; dotted: "
        "Theorem 7's 1/k rate), (c) its prefactor, (d) the sample size k*: measured = smallest k from which "
        "the mean D_k stays at or below the tolerance (filled), fitted = smallest k with prefactor * k^slope "
        "at or below it (open), (e) the top Hessian eigenvalue of the training loss at w* (Lanczos), "
        "(f) the largest spectral norm of the diagonal blocks of the last block's Hessian (where it is "
        "formed), each against the parameter count P on log axes, with fitted power laws a P^b "
        "(exponent b in the legend) and their pairs-bootstrap 95% bands over models.",
        shows="D_k curves, D_k slope and prefactor, sample size k* and top Hessian eigenvalue against the parameter count, with fitted power laws",
        functions="`studies.scaling.plot.scaling_figure`; `studies.scaling.compute.run_models`, "
        "`studies.scaling.compute.aggregate`",
    ),
]
