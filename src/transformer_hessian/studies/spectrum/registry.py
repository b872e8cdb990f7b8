"""The spectrum study's entry in the figure registry (:mod:`transformer_hessian.registry` collects
it): its figure, drawn with its table by ``notebooks/spectrum.ipynb``."""

from __future__ import annotations

from ..entry import Figure, Output

__all__ = ["FIGURES"]

FIGURES: list[Figure] = [
    Figure(
        id="spectrum",
        paper="beyond the paper (Figure 5 for every block)",
        label="fig:norm",
        notebook="spectrum.ipynb",
        inputs={
            "spectrum": Output("spectrum_compute", "json", exp="{sexp}"),
            "metrics": Output("train", "metrics", exp="{sexp}"),
        },
        tables={
            "spectrum": "Matrix-free Hessian spectrum: top eigenvalue and Hutchinson trace per block and of the whole model"
        },
        caption="Matrix-free Hessian spectrum of the trained deep ViT on {spectrum_data}, cross-entropy on one fixed "
        "training batch, float64: (a) top Lanczos Ritz values of each block's Hessian w.r.t. W_Q, W_K, W_V, W_1, "
        "W_2 and the whole model's largest eigenvalue; (b) Hutchinson trace estimates with +-2 standard errors; "
        "(c) spectral densities by stochastic Lanczos quadrature (Gaussian-broadened, log scale); (d) log10 of the "
        "block-pair spectral norms ||H_ab||_2 of Figure 5 for every block, one colour scale.",
        shows="top Hessian eigenvalues, traces, spectral densities and block-pair norms of every block of the deep model",
        functions="`studies.spectrum.plot.spectrum_figure`, `studies.spectrum.plot.spectrum_table`; "
        "`studies.spectrum.compute.run_spectrum`",
    ),
]
