"""What one registry entry is: :class:`Figure` (id, paper label, notebook, inputs, caption, ...),
whose inputs name their producer: :class:`Output` (a rule's output, not a path)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["HESSIAN_CHECKED", "Figure", "Output"]


@dataclass(frozen=True, init=False)
class Output:
    """The output ``key`` of rule ``rule``, with these wildcard values: ``Output("theory", "json",
    exp="{hexp}", stage="init")``.

    The path itself is typed once, by its producer: the ``OUTPUTS`` mapping (rule -> output key ->
    path template with Snakemake wildcards) of the study's ``result`` module, or of
    :mod:`transformer_hessian.train.result` for the ``train`` rule; the rule files take their
    ``output:`` from it too. A wildcard value is a literal (``stage="init"``) or one of the
    registry's placeholders ``{hexp}``, ``{lexp}``, ``{sexp}`` (the experiments of the config),
    ``{cfg[section][key]}``. :func:`transformer_hessian.registry.outputs.resolve` turns it into a
    path for a config, :func:`~transformer_hessian.registry.outputs.placeholder_path` into the
    template ``paper/README.md`` shows (``results/{hexp}/theory/init.json``).
    """

    rule: str
    key: str
    #: (wildcard, value) pairs, sorted by wildcard name.
    wildcards: tuple[tuple[str, str], ...]

    def __init__(self, rule: str, key: str, **wildcards: str) -> None:
        object.__setattr__(self, "rule", rule)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "wildcards", tuple(sorted(wildcards.items())))


#: The theory rule's check of the saved Hessians: the figures of a Hessian wait for it as their
#: ``gate`` (a failed check stops them).
HESSIAN_CHECKED = (
    Output("theory", "json", exp="{hexp}", stage="init"),
    Output("theory", "json", exp="{hexp}", stage="trained"),
)


@dataclass(frozen=True)
class Figure:
    """One figure of the paper as the pipeline regenerates it.

    ``id`` is the public file name (``paper/figures/<id>.{pdf,png}``) and the rule name;
    ``paper`` the paper's number ("Figure 3") and ``label`` its LaTeX label; ``notebook`` the
    file under ``notebooks/``; ``inputs`` maps notebook parameter -> :class:`Output` (the
    producing rule's output; the registry resolves it to a path); ``params`` are literal notebook parameters; ``caption`` is a format
    string with ``{hessian_data}``, ``{landscape_data}`` (data set names of the two
    experiments, with what they stand in for), ``{granularity}``; ``shows`` is the one-line
    description in ``paper/README.md`` and ``functions`` the package functions behind it.
    """

    id: str
    paper: str
    label: str
    notebook: str
    inputs: dict[str, Output]
    caption: str
    shows: str
    functions: str
    params: dict[str, Any] = field(default_factory=dict)
    #: Name of the rule (and notebook run) that draws the figure; entries that share a ``group``
    #: are drawn by one run of one notebook (same ``notebook``, ``inputs`` and ``params``), which
    #: then takes one output parameter ``out_<id>`` per figure instead of ``out``.
    group: str | None = None
    #: Tables the notebook run writes besides the figure: stem -> caption; each is passed as the
    #: notebook parameter ``table_<stem>`` (``paper/tables/<stem>`` without suffix).
    tables: dict[str, str] = field(default_factory=dict)
    #: Outputs the rule waits for without passing them to the notebook: a figure of a
    #: Hessian is drawn only after the ``theory`` rule has checked that Hessian.
    gate: tuple[Output, ...] = ()
    #: Dotted config key of a boolean switch (e.g. ``"scaling.enabled"``; several joined by ``" and "``
    #: must all be true): when it is false the
    #: figure has no rule, is not in ``all`` or the provenance (:func:`enabled`), and
    #: ``paper/README.md`` lists it as optional. None: always drawn.
    enabled_by: str | None = None

    @property
    def rule(self) -> str:
        """Name of the Snakemake rule that draws the figure (``group``, else ``id``)."""
        return self.group or self.id

    @property
    def out(self) -> str:
        """Output path without suffix (the notebook parameter ``out``)."""
        return f"paper/figures/{self.id}"

    @property
    def executed(self) -> str:
        """Where the figure rule writes the executed notebook."""
        return f"results/notebooks/{self.rule}.ipynb"
