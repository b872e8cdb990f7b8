"""The landscape study's entry in the figure registry (:mod:`transformer_hessian.registry` collects
it): Figure 6, drawn by ``notebooks/fig6_landscape.ipynb``."""

from __future__ import annotations

from ..entry import Figure, Output

__all__ = ["FIGURES"]

FIGURES: list[Figure] = [
    Figure(
        id="fig6",
        paper="Figure 6",
        label="fig:loss_landscape_convergence",
        notebook="fig6_landscape.ipynb",
        inputs={
            "landscape": Output("landscape", "json", exp="{lexp}"),
            "metrics": Output("train", "metrics", exp="{lexp}"),
        },
        caption="Figure 6. |L_(k+1)(w*) - L_k(w*)| against the number of training samples k, log-log, "
        "for the trained model on {landscape_data}, data added {granularity}, mean over random "
        "orderings; dots: median in log-spaced bins of k; red: fitted power law with its "
        "bootstrap 95% interval; dotted: 1/k; dashed: Theorem 7's bound at w*. The paper's EMA "
        "over k is not drawn: on log axes it lags (flat up to k ~ 100) and lies above the data.",
        shows="\\|L_{k+1}(w*) - L_k(w*)\\| vs k (per sample or per batch), binned medians, 1/k line, fitted slope (95% CI), Theorem 7 bound",
        functions="`studies.landscape.plot.landscape_figure`; `core.landscape.analyse_landscape`, `train.per_sample_losses`",
    ),
]
