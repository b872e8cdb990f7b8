"""The dynamics study's entries in the figure registry (:mod:`transformer_hessian.registry` collects
them): Figures 7-11, drawn by one run of ``notebooks/fig7_fig11_dynamics.ipynb``."""

from __future__ import annotations

from ..entry import HESSIAN_CHECKED, Figure, Output

__all__ = ["FIGURES"]

#: Inputs of the five figures (group fig7_fig11).
_DYN = {
    "dynamics_npz": Output("dynamics", "npz", exp="{hexp}"),
    "dynamics_json": Output("dynamics", "json", exp="{hexp}"),
}

#: Panels of Figures 7-9 (one attention weight each).
_DYN_PANELS = (
    "entries at a few steps, log10 |H_{g}{g}| of the Hessian diagonal block on the fixed Hessian batch, the "
    "spectral and Frobenius norms of {w} and the spectral norms of the Hessian blocks H_({g},g) against the step."
)


def _dynamics_figure(n: int, key: str, title: str, what: str, panels: str, shows: str) -> Figure:
    """Figure ``n`` of App. A.1 (Figures 7-11): one group family over the first training steps; all
    five are drawn by one run of the dynamics notebook (group ``fig7_fig11``)."""
    return Figure(
        id=f"fig{n}",
        paper=f"Figure {n}",
        label=f"fig:hessian_entries_{key}",
        notebook="fig7_fig11_dynamics.ipynb",
        group="fig7_fig11",
        inputs=_DYN,
        gate=HESSIAN_CHECKED,
        caption=f'Figure {n} (App. A.1, "{title} entries visualization"). {what} of the one-block ViT on '
        "{hessian_data} during the first training steps (replayed from the init checkpoint): " + panels,
        shows=shows,
        functions="`studies.dynamics.plot.dynamics_figure`; `studies.dynamics.compute.record_dynamics`, "
        "`hessian_groups.hessian_all_groups`",
    )


FIGURES: list[Figure] = [
    _dynamics_figure(n, key, title, what, panels, shows)
    for n, key, title, what, panels, shows in (
        (
            7,
            "queries",
            "Queries",
            "W_Q",
            _DYN_PANELS.format(g="Q", w="W_Q"),
            "W_Q entries, H_QQ, norms of W_Q and of its Hessian blocks over the first steps",
        ),
        (
            8,
            "keys",
            "Keys",
            "W_K",
            _DYN_PANELS.format(g="K", w="W_K"),
            "W_K entries, H_KK, norms of W_K and of its Hessian blocks over the first steps",
        ),
        (
            9,
            "values",
            "Values",
            "W_V",
            _DYN_PANELS.format(g="V", w="W_V"),
            "W_V entries, H_VV, norms of W_V and of its Hessian blocks over the first steps",
        ),
        (
            10,
            "layernorm",
            "LayerNorm",
            "gamma1, beta1, gamma2, beta2",
            "entries against the step, log10 |H| of "
            "the LayerNorm-LayerNorm Hessian block at a few steps, their norms and the spectral norms of the "
            "Hessian blocks H_(g,h) (g a LayerNorm group) against the step.",
            "LayerNorm gamma/beta entries, their Hessian blocks and norms over the first steps",
        ),
        (
            11,
            "feedforward",
            "FeedForward",
            "W_1 and W_2",
            "entries at a few steps, log10 |H| of the diagonal "
            "Hessian blocks, their norms and the spectral norms of the Hessian blocks H_(g,h) against the step.",
            "W_1, W_2 entries, Hessian blocks and norms over the first steps",
        ),
    )
]
