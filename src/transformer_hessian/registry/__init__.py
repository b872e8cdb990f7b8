"""The one registry of the paper's figures: id -> notebook, inputs, caption, paper label.

Everything else is generated from :data:`FIGURES`:

* the Snakemake rules: ``workflow/rules/figures.smk`` loops over :func:`rule_specs` and
  defines one rule per entry (``name:`` inside ``rule:``), which runs the entry's notebook with
  ``transformer-hessian notebook`` (in one process, with papermill's ``-p`` parameters:
  :mod:`transformer_hessian.pipeline.notebooks`), passing each input path as a notebook parameter of the same name, the entry's
  literal ``params`` and ``out`` (``paper/figures/<id>`` without suffix);
* ``paper/README.md`` (committed): :func:`render_paper_readme`, written by
  ``transformer-hessian registry --write-readme`` and compared by the tests;
* the per-figure provenance in ``paper/summary.json`` (``figure_provenance``): notebook,
  rule, paper label and the sha256 of every input and output file (:func:`provenance`).

A test fails when the registry, the generated rules, ``paper/README.md`` and the notebooks'
``parameters`` cells disagree (``tests/registry/test_registry.py``).

How to add a figure
-------------------
1. Write ``notebooks/<id>_<topic>.ipynb``: a cell tagged ``parameters`` that defines one
   variable per input (the names of ``inputs`` below), one per literal ``params`` key, and
   ``out``; the other cells only load results and call helpers from the package, then
   ``plotting.save_figure(fig, out)``. Commit it without outputs.
2. Append a :class:`Figure` to ``FIGURES`` of the study's ``studies/<name>/registry.py`` (the
   registry collects every study's; the pipeline's own figures are in ``registry/figures.py``).
   An input names its producer, not a path: ``Output(rule, key, **wildcards)``, the output ``key``
   of rule ``rule`` (its path template is typed once, in the producer's ``OUTPUTS``: the study's
   ``result.py``, or ``train_result.py``; :mod:`.outputs` looks it up). A wildcard value is a
   literal or a placeholder: ``{hexp}`` is ``config["hessian"]["experiment"]``, ``{lexp}`` is
   ``config["landscape"]["experiment"]`` (``{sexp}``: ``config["spectrum"]["experiment"]``, default
   ``{lexp}``); ``{cfg[section][key]}`` reads any other config value.
3. Run ``transformer-hessian registry --write-readme`` and commit ``paper/README.md``.
A figure that only some configs want names its boolean switch in ``enabled_by`` (e.g.
``"scaling.enabled"``): :func:`figure_ids`, :func:`rule_specs` and :func:`provenance` then skip
it when the switch is off, and the rules that compute its inputs are included by the Snakefile
under the same condition.
Nothing else changes: the rule, the ``all`` target, the report entry (caption from here,
through ``workflow/report/figure.rst``) and the summary's provenance follow from the entry.
Figures that other rule files build today (fig1, fig7-fig12, bound and Theorem 7 figures)
move here the same way: their rule's inputs become ``inputs``, the notebook's output
parameter is renamed ``out``.

Modules: :mod:`transformer_hessian.studies.entry` (the :class:`Figure` record, below the studies
so that their registry entries can use it), :mod:`.figures` (the entries and lookups),
:mod:`.outputs` (the result paths of every rule, from their producers, and the resolution of an
``Output``), :mod:`.rules` (inputs, captions, rule specs), :mod:`.readme` (``paper/README.md``),
:mod:`.provenance` (per-figure sha256). Every name is re-exported here, so
``from transformer_hessian.registry import figure_ids, notebook_tables`` (the Snakefile) and
``registry.FIGURES`` keep working.
"""

from __future__ import annotations

from ..studies.entry import Figure, Output
from .figures import FIGURES, OTHER_ARTEFACTS, by_id, enabled, figure_ids, groups, notebook_tables
from .outputs import placeholder_path, produced, resolve, template, templates
from .provenance import file_sha256, provenance, provenance_json
from .readme import README_HEADER, render_paper_readme
from .rules import caption, output_parameters, resolve_inputs, rule_specs

__all__ = [
    "FIGURES",
    "OTHER_ARTEFACTS",
    "README_HEADER",
    "Figure",
    "Output",
    "by_id",
    "caption",
    "enabled",
    "file_sha256",
    "figure_ids",
    "groups",
    "notebook_tables",
    "output_parameters",
    "placeholder_path",
    "produced",
    "provenance",
    "provenance_json",
    "render_paper_readme",
    "resolve",
    "resolve_inputs",
    "rule_specs",
    "template",
    "templates",
]
