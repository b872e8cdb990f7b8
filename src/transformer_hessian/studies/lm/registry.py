"""The language study's entries in the figure registry (:mod:`transformer_hessian.registry` collects
them): four figures of one notebook run (``notebooks/lm.ipynb``), the 2-D landscape
(``notebooks/lm_curvature.ipynb``) and the scaling figure (``notebooks/lm_scaling.ipynb``), only with
``lm.enabled`` (and ``lm.curvature.enabled``, ``lm.scaling.enabled``)."""

from __future__ import annotations

from ..entry import Figure, Output

__all__ = ["ARTEFACTS", "FIGURES"]

_INPUTS = {
    "hessian": Output("lm_hessian", "json"),
    "maps": Output("lm_hessian", "maps"),
    "landscape": Output("lm_landscape", "json"),
    "vit_approx": Output("lm_vit_approx", "json"),
}
_MODEL = "a GPT-style decoder (token and position embeddings, pre-norm blocks, causal attention, GELU MLP, tied LM head) on byte tokens of the lm corpus"

FIGURES: list[Figure] = [
    Figure(
        id="lm_hessian",
        paper="beyond the paper: language model (Figures 3 and 4)",
        label="fig:lm_hessian",
        notebook="lm.ipynb",
        inputs=dict(_INPUTS),
        group="lm_figures",
        enabled_by="lm.enabled",
        caption=f"The exact Hessian of the causal LM loss of {_MODEL}, w.r.t. the token embedding E and each "
        "layer's W_Q, W_K, W_V (split by head), W_O, W_1, W_2, on a fixed batch of training sequences, at "
        "initialisation and after training: log10 of the largest |H_ij| in each cell of a print-size grid, one "
        "colour scale for both panels.",
        shows="log10 \\|H\\| of the language model's Hessian at init and trained (blocks E, Q, K, V per head, O, W1, W2)",
        functions="`studies.lm.plot.hessian_maps_figure`; `studies.lm.compute.hessian_stage` (`exact_hessian`, loss causal_lm)",
    ),
    Figure(
        id="lm_norms",
        paper="beyond the paper: language model (Figure 5)",
        label="fig:lm_norms",
        notebook="lm.ipynb",
        inputs=dict(_INPUTS),
        group="lm_figures",
        enabled_by="lm.enabled",
        caption=f"Hessian block norms of {_MODEL}: (a, b) log10 of the RMS entry ||H_ij||_F / sqrt(n_i n_j) of every "
        "pair of blocks at initialisation and after training (one colour scale), (c) spectral norms of the "
        "diagonal blocks at both stages.",
        shows="RMS entry of every block pair and spectral norms of the diagonal blocks, init vs trained",
        functions="`studies.lm.plot.norms_figure`; `studies.lm.compute.group_norms`",
    ),
    Figure(
        id="lm_landscape",
        paper="beyond the paper: language model (Figures 6 and 12)",
        label="fig:lm_landscape",
        notebook="lm.ipynb",
        inputs=dict(_INPUTS),
        group="lm_figures",
        enabled_by="lm.enabled",
        caption=f"Figure 6 and Assumption 1 on {_MODEL}: (a) |L_(k+1)(w*) - L_k(w*)| against the number k of "
        "training sequences, mean over random orderings, sequence by sequence (dots, log-binned medians with the "
        "fitted log-log slope and its bootstrap 95% interval) and batch by batch, with Theorem 7's 2L/(k+1); "
        "(b) ||grad L_k(w*)|| over orderings with the sampling reference sqrt(E||grad L_k||^2) and the floor.",
        shows="D_k on training sequences with Theorem 7's bound; Assumption 1's gradient norms",
        functions="`studies.lm.plot.landscape_figure`; `studies.lm.compute.landscape_analysis`",
    ),
    Figure(
        id="lm_approx",
        paper="beyond the paper: language model (curvature approximations)",
        label="fig:lm_approx",
        notebook="lm.ipynb",
        inputs=dict(_INPUTS),
        group="lm_figures",
        enabled_by="lm.enabled",
        caption=f"How good are the curvature approximations on {_MODEL}: the relative Frobenius error of the "
        "generalized Gauss-Newton, K-FAC and EK-FAC (curvlinops; type-2 Fisher, expand) against the exact Hessian, "
        "per diagonal weight block and over all weight matrices, and of the layer-block-diagonal Hessian (dashed), "
        "at initialisation and after training; right: the same on the paper's ViT (the Hessian study's model, block "
        "and batch). Table lm_approx adds the spectral errors.",
        shows="relative error of GGN, K-FAC, EK-FAC and block-diagonal against the exact Hessian, per block",
        functions="`studies.lm.plot.approx_figure`; `studies.lm.approx.approximation_errors`, `studies.lm.vit.vit_approximations`",
    ),
    Figure(
        id="lm_landscape2d",
        paper="beyond the paper: language model (curvature over the training set)",
        label="fig:lm_landscape2d",
        notebook="lm_curvature.ipynb",
        inputs={"landscape2d": Output("lm_landscape2d", "json"), "curvature": Output("lm_curvature", "json")},
        group="lm_curvature_figures",
        enabled_by="lm.enabled and lm.curvature.enabled",
        caption=f"The loss landscape of {_MODEL} around its trained weights w*, on the plane of the top two "
        "eigenvectors u1, u2 of the Hessian of the whole training set's mean loss (Lanczos, the package's curvature "
        "command under torchrun): (a) the mean training loss L(w* + a u1 + b u2), (b) the quadratic model "
        "L0 + a g.u1 + b g.u2 + (lambda1 a^2 + lambda2 b^2)/2 (g the gradient at w*), on the same contour levels; "
        "the dashed circle is the disc of the claim lm_quadratic_model_near_wstar.",
        shows="the training loss on the plane of the top two Hessian eigenvectors next to the quadratic model",
        functions="`studies.lm.plot.landscape2d_figure`; `studies.lm.curvature.landscape2d`, `studies.lm.curvature.training_set`",
    ),
    Figure(
        id="lm_scaling",
        paper="beyond the paper: language model (scaling law)",
        label="fig:lm_scaling",
        notebook="lm_scaling.ipynb",
        inputs={"scaling": Output("lm_law", "json")},
        enabled_by="lm.enabled and lm.scaling.enabled",
        caption="Scaling grid of GPT-style decoders on byte tokens: (a) validation loss against training tokens D, "
        "one colour per model, with the fitted L(N, D) = E + A N^-alpha + B D^-beta; (b) against the "
        "non-embedding parameters N, one line per D; (c) the sample size k* at which the mean D_k stays below "
        "lm.tolerance, the D_k prefactor and the top Hessian eigenvalue (Lanczos on the exact HVP) against N at "
        "the largest training set, with the fitted exponents b of a N^b.",
        shows="validation loss against N and D with the fitted law; k*, D_k prefactor and top eigenvalue against N",
        functions="`studies.lm.plot.scaling_figure`; `studies.lm.scaling.fit_scaling_law`, `studies.lm.scaling.run_point`",
    ),
]

#: The study's tables for ``paper/README.md``: file, what it shows, command, rule, functions.
ARTEFACTS: list[tuple[str, str, str, str, str]] = [
    (
        "tables/lm_approx.{csv,tex,md}",
        "relative Frobenius and spectral error of GGN, K-FAC, EK-FAC and block-diagonal per block (language model, paper's ViT)",
        "`transformer-hessian lm claims`",
        "`lm_claims`",
        "`studies.lm.plot.approx_table`",
    ),
    (
        "tables/lm_scaling.{csv,tex,md}",
        "every model of the language scaling grid: N, D, validation loss, D_k slope and prefactor, k*, top eigenvalue",
        "`transformer-hessian lm claims`",
        "`lm_claims`",
        "`studies.lm.plot.scaling_table`",
    ),
]
