"""The registry's entries (data): :data:`FIGURES`, one :class:`~transformer_hessian.studies.entry.Figure`
per figure the pipeline regenerates, and :data:`OTHER_ARTEFACTS` for ``paper/README.md``; plus the
lookups over them. The pipeline's own figures are listed here, a study's in its
``studies/<name>/registry.py`` (collected by :func:`transformer_hessian.studies.study_parts`).
Add a figure there or here (see the package docstring, "How to add a figure")."""

from __future__ import annotations

from typing import Any

from ..studies import study_parts
from ..studies.entry import Figure, Output

__all__ = ["FIGURES", "OTHER_ARTEFACTS", "by_id", "enabled", "figure_ids", "groups", "notebook_tables", "paper_order"]

_CORE_FIGURES: list[Figure] = [
    Figure(
        id="fig2",
        paper="Figure 2",
        label="fig:transformer",
        notebook="fig2_architecture.ipynb",
        inputs={
            "metrics_hessian": Output("train", "metrics", exp="{hexp}"),
            "metrics_landscape": Output("train", "metrics", exp="{lexp}"),
        },
        caption="Figure 2. Transformer architecture of the experiments, drawn from the sizes of the "
        "models that ran: a post-norm ViT (patch embedding, N x [Self-Attention, Add, "
        "LayerNorm, FeedForward, Add, LayerNorm], mean over tokens, linear head). Left: the "
        "model of Figures 3-5 ({hessian_data}); right: the model of Figure 6 ({landscape_data}); one "
        "panel, titled with both experiments, when they use the same model.",
        shows="the post-norm ViT of both experiments with the sizes that ran",
        functions="`architecture_diagram.architecture_figure`, `architecture_diagram.draw_architecture`",
    ),
]

#: The artefacts of the pipeline's own rules (see :data:`OTHER_ARTEFACTS`).
_CORE_ARTEFACTS: list[tuple[str, str, str, str, str]] = [
    (
        "tables/run_summary.{csv,tex,md}",
        "data set, sizes, parameter counts, epochs, accuracies, wall times",
        "`transformer-hessian tables`",
        "`tables`",
        "`pipeline.report.run_summary_table`",
    ),
    (
        "claims.{md,json}",
        "one verdict per empirical claim of the paper, computed from the results",
        "`transformer-hessian claims`",
        "`claims`",
        "`claims.collect_claims`",
    ),
    (
        "summary.json",
        "every number above, the claims, per-figure provenance (notebook, rule, sha256 of inputs), config hash, git commit, package versions, device",
        "`transformer-hessian summary`",
        "`summary`",
        "`pipeline.report.build_summary`, `registry.provenance`, every study's section",
    ),
    (
        "report.html",
        "Snakemake report with the registry's captions",
        "`snakemake --report paper/report.html`",
        "-",
        "captions from `registry.FIGURES`",
    ),
]


def paper_order(figs: list[Figure]) -> list[Figure]:
    """``figs`` in the paper's order: its figures by number (``paper="Figure 3"``), then the figures
    beyond the paper in the order given (a stable sort, so a new study's figures need no rank)."""

    def rank(fig: Figure) -> float:
        words = fig.paper.split()
        return int(words[1]) if len(words) == 2 and words[0] == "Figure" and words[1].isdigit() else float("inf")

    return sorted(figs, key=rank)


#: Every figure: the entries above and those of each study (``FIGURES`` of every
#: ``studies/<name>/registry.py``; a new study edits nothing here), in :func:`paper_order`.
FIGURES: list[Figure] = paper_order(
    [*_CORE_FIGURES, *(fig for study in study_parts("registry") for fig in study.FIGURES)]
)

#: Artefacts that are not notebook figures (for ``paper/README.md`` only): (path, what it shows,
#: command, rule, package function); the studies' own (their ``ARTEFACTS``) first.
OTHER_ARTEFACTS: list[tuple[str, str, str, str, str]] = [
    *(art for study in study_parts("registry") for art in getattr(study, "ARTEFACTS", ())),
    *_CORE_ARTEFACTS,
]


def by_id(fig_id: str) -> Figure:
    """The registry entry of ``fig_id``; ``KeyError`` naming the known ids otherwise."""
    for fig in FIGURES:
        if fig.id == fig_id:
            return fig
    raise KeyError(f"no figure {fig_id!r} in the registry; known: {figure_ids()}")


def enabled(fig: Figure, config: dict | None) -> bool:
    """Whether ``config`` switches ``fig`` on (always when it has no ``enabled_by`` or no config is given)."""
    if fig.enabled_by is None or config is None:
        return True
    return all(_switch(config, dotted) for dotted in fig.enabled_by.split(" and "))


def _switch(config: dict, dotted: str) -> bool:
    """The boolean at the dotted key ``dotted`` of ``config`` (False where it is absent)."""
    node: Any = config
    for key in dotted.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return bool(node)


def figure_ids(config: dict | None = None) -> list[str]:
    """The ids of :data:`FIGURES`, in order; with ``config``, only those it switches on (:func:`enabled`)."""
    return [fig.id for fig in FIGURES if enabled(fig, config)]


def notebook_tables() -> list[str]:
    """Stems of the tables that figure notebooks write (``paper/tables/<stem>.{csv,tex,md}``)."""
    return [stem for fig in FIGURES for stem in fig.tables]


def groups() -> dict[str, list[Figure]]:
    """The registry's entries by rule name, in registry order (a group shares one notebook run)."""
    out: dict[str, list[Figure]] = {}
    for fig in FIGURES:
        out.setdefault(fig.rule, []).append(fig)
    for name, figs in out.items():
        first = figs[0]
        for fig in figs[1:]:
            if (fig.notebook, fig.inputs, fig.params) != (first.notebook, first.inputs, first.params):
                raise ValueError(
                    f"registry group {name!r}: {fig.id} differs from {first.id} in notebook, "
                    "inputs or params (a group is one notebook run)"
                )
    return out
