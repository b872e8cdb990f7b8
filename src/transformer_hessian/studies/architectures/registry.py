"""The architecture study's entries in the figure registry (:mod:`transformer_hessian.registry`
collects them): its figure and its table."""

from __future__ import annotations

from ..entry import Figure, Output

__all__ = ["ARTEFACTS", "FIGURES"]

FIGURES: list[Figure] = [
    Figure(
        id="architectures",
        paper="beyond the paper (Figures 3-5 on torch encoder architectures)",
        label="fig:norm",
        notebook="architectures.ipynb",
        group="architectures_figure",  # the rule `architectures` computes the Hessians
        inputs={"result": Output("architectures", "json", exp="{hexp}")},
        enabled_by="architectures.enabled",
        caption="Architecture study (beyond the paper): exact cross-entropy Hessian of all parameters of torch "
        "encoders (patch embedding, nn.TransformerEncoderLayer or a stack, mean over tokens, linear head) trained on "
        "{hessian_data}, one factor changed from the post-norm, 1-head, ReLU, 1-layer base at a time. (a) spectral "
        "norm and (b) RMS entry of the diagonal blocks W_Q, W_K, W_V (split out of the packed in_proj), W_O, W_1, "
        "W_2 after training, per layer; (c) JS0, the mean Jensen-Shannon distance between the diagonal blocks' "
        "eigenvalue densities, and (d) the spread log10(max/min) of their spectral norms, at init and after "
        "training; (e) for stacks, the share of ||H||_F^2 between different layers (what a layer-block-diagonal "
        "approximation drops).",
        shows="diagonal Hessian blocks, block heterogeneity (JS0, norm spread) and the off-layer share per architecture",
        functions="`studies.architectures.plot.architectures_figure`; `studies.architectures.compute`",
    ),
]

#: Artefacts that are not notebook figures (``paper/README.md``): (path, what it shows, command,
#: rule, package functions).
ARTEFACTS: list[tuple[str, str, str, str, str]] = [
    (
        "tables/architectures.{csv,tex,md}",
        "architecture study (beyond the paper; when architectures.enabled): per architecture the largest "
        "Hessian block by RMS entry, Frobenius and spectral norm, the top-2 diagonal blocks, spread, JS0, off-layer share",
        "`transformer-hessian architectures report`",
        "`architectures_report` (after `architectures`)",
        "`studies.architectures.report`, `studies.architectures.step`",
    ),
]
