"""The bounds study's entries in the figure registry (:mod:`transformer_hessian.registry` collects
them): its figure, drawn by ``notebooks/bounds.ipynb``, and its table (rule ``bounds_table``)."""

from __future__ import annotations

from ..entry import Figure, Output

__all__ = ["ARTEFACTS", "FIGURES"]

FIGURES: list[Figure] = [
    Figure(
        id="bounds",
        paper="beyond the paper (Theorems 1 and 6)",
        label="thm:self_attention_bound",
        notebook="bounds.ipynb",
        group="bounds_figure",  # the rule `bounds` computes the bounds
        inputs={
            "results_init": Output("bounds", "json", exp="{hexp}", stage="init"),
            "results_trained": Output("bounds", "json", exp="{hexp}", stage="trained"),
        },
        caption="Hessian spectral norms against bounds per block pair (log scale), one-block ViT on "
        "{hessian_data}, at initialisation and after training: measured norm, the project's "
        "proven bound and the paper's bounds (Theorem 1 for the attention layer, Theorem 6 with "
        "Lemma 4 for the block), for the per-sample MSE loss of the theory and for the "
        "cross-entropy Hessian of Figures 3-5. The last column rescales W_Q by 1/delta and W_K "
        "by delta (attention scores unchanged, target F(X)): the printed Theorem 1 bound stays "
        "constant while the Hessian grows like 1/delta^2. Red crosses mark a bound below the "
        "measured norm.",
        shows="measured Hessian block norms vs the project's and the paper's bounds; Theorem 1 counter-example",
        functions="`studies.bounds.plot`; `studies.bounds.pipeline`, `studies.bounds.attention`, `studies.bounds.block`",
    ),
]

#: The table of rule ``bounds_table`` (for ``paper/README.md``): (path, what it shows, command,
#: rule, package function).
ARTEFACTS: list[tuple[str, str, str, str, str]] = [
    (
        "tables/bounds.{csv,tex,md}",
        "per stage, setting (MSE theory / CE experiment) and block pair: measured "
        "spectral norm, the project's bound, the paper's bounds (both forms), ratios, held or not",
        "`transformer-hessian bounds table`",
        "`bounds_table` (after `bounds`)",
        "`studies.bounds.table`, `studies.bounds.step`",
    ),
]
