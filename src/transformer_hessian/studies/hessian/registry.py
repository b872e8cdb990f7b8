"""The Hessian study's entries in the figure registry (:mod:`transformer_hessian.registry` collects
them): Figures 3 and 4 (one run of ``notebooks/fig3_fig4_hessian_heatmaps.ipynb``) and Figure 5,
each drawn only after the ``theory`` rule has checked the Hessians (``gate``)."""

from __future__ import annotations

from ..entry import HESSIAN_CHECKED, Figure, Output

__all__ = ["ARTEFACTS", "FIGURES"]

#: Inputs of the two figures drawn by one notebook run (group fig3_fig4).
_HEATMAP_INPUTS = {
    "hessian_init": Output("hessian", "npz", exp="{hexp}", stage="init"),
    "hessian_trained": Output("hessian", "npz", exp="{hexp}", stage="trained"),
    "metrics": Output("train", "metrics", exp="{hexp}"),
}

FIGURES: list[Figure] = [
    Figure(
        id="fig3",
        paper="Figure 3",
        label="fig:hessian_entries",
        notebook="fig3_fig4_hessian_heatmaps.ipynb",
        inputs=dict(_HEATMAP_INPUTS),
        group="fig3_fig4",
        caption="Figure 3. log10 |H_ij| of the exact loss Hessian w.r.t. W_Q, W_K, W_V, W_1, W_2 of "
        "the one-block ViT at initialisation, on one fixed training batch of {hessian_data}. "
        "Colour range: the 0.5% and 99.95% quantiles of the nonzero entries of Figures 3 and 4 "
        "together (arrows: clipped). Exact zeros (rows and columns of ReLU units inactive on the "
        "whole batch) have a colour of their own; their share is given below the map.",
        shows="log10 \\|H\\| at initialisation, blocks W_Q, W_K, W_V, W_1, W_2; exact zeros in their own colour",
        functions="`plotting.hessian_heatmap`, `plotting.robust_log_range`; Hessian from `hessian.compute_hessian`",
        gate=HESSIAN_CHECKED,
    ),
    Figure(
        id="fig4",
        paper="Figure 4",
        label="fig:hessian_entries_trained",
        notebook="fig3_fig4_hessian_heatmaps.ipynb",
        inputs=dict(_HEATMAP_INPUTS),
        group="fig3_fig4",
        caption="Figure 4. The same as Figure 3 after training, on Figure 3's colour scale "
        "({hessian_data}). Exact zeros, if any, have a colour of their own.",
        shows="the same after training, on fig3's colour scale",
        functions="same as fig3",
        gate=HESSIAN_CHECKED,
    ),
    Figure(
        id="fig5",
        paper="Figure 5",
        label="fig:norm",
        notebook="fig5_norms.ipynb",
        inputs={
            "norms_init": Output("hessian", "norms", exp="{hexp}", stage="init"),
            "norms_trained": Output("hessian", "norms", exp="{hexp}", stage="trained"),
            "metrics": Output("train", "metrics", exp="{hexp}"),
        },
        caption="Figure 5. Parameter block norms and Hessian block norms on one fixed training batch of "
        "{hessian_data}, at initialisation and after training: (a) spectral and Frobenius norms "
        "of W_Q, W_K, W_V, W_1, W_2; (b) of the diagonal Hessian blocks H_ii; (c, d) log10 of "
        "the spectral norm of every block H_ij, one colour scale for both panels.",
        shows="weight-matrix norms and Hessian block norms, init vs trained",
        functions="`plotting.norms_figure`; `hessian.block_norms`, `hessian.weight_norms`",
        gate=HESSIAN_CHECKED,
    ),
]

#: The study's tables for ``paper/README.md``: file, what it shows, command, rule, functions.
ARTEFACTS: list[tuple[str, str, str, str, str]] = [
    (
        "tables/block_norms.{csv,tex,md}",
        "Frobenius, spectral, max \\|entry\\| of all 25 block pairs, init and trained",
        "`transformer-hessian hessian-report`",
        "`hessian_report`",
        "`studies.hessian.report.block_norm_table`",
    ),
    (
        "tables/closed_form_check.{csv,tex,md}",
        "closed form vs curvlinops per block pair; functional vs outer-product share",
        "`transformer-hessian hessian-report`",
        "`hessian_report` (after `theory`)",
        "`core.checks.saved_hessian_check`, `studies.hessian.report.closed_form_table`",
    ),
]
