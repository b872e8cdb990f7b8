"""A verdict on each empirical claim of the paper (arXiv 2510.16927), computed from result files.

One row per claim (the shared schema)::

    {"id", "claim" (verbatim quote), "source" (paper location), "rule" (how the verdict is
     decided), "measured" (the numbers), "verdict", "evidence" (result files)}

``verdict`` is one of :data:`VERDICTS` and is always computed here from the numbers, never
typed. The rows, collected by the ``claims`` rule (:func:`transformer_hessian.pipeline.report_steps.claims_step`)
in this order:

* the Hessian study's (:func:`transformer_hessian.studies.block_claims.hessian_claim_rows`,
  norms JSON of the ``hessian`` rule + the model sizes of the Hessian experiment):
  heterogeneity (Sec. 5), Values blocks larger at initialisation (Fig. 3 caption), every block
  grows with training and the V-V block largest after training (Sec. 5, Fig. 4 caption,
  Discussion), "Keys and Values" highest (Sec. 5 after Fig. 5);
* this module's :func:`training_claim_rows` (``metrics.json``): validation accuracy > 50 %
  (Sec. 5, both experiments);
* the landscape study's (:func:`transformer_hessian.studies.curve_claims.landscape_claim_rows`,
  landscape JSON): the log-log slope of Figure 6 is consistent with -1 (Discussion) and
  Theorem 7's bound holds at w* (Sec. 4.3);
* the rows files of the other studies' rules (below).

Collection point for other modules
----------------------------------
A study's rule writes a JSON list of finished rows and appends its path to ``CLAIM_ROW_FILES``
(in its ``workflow/rules/studies/<name>.smk``); the ``claims`` rule passes each with
``--rows <path>``. :func:`collect_claims` validates every row (schema, verdict word, unique id)
and keeps the order: the rows above, then the files' in ``CLAIM_ROW_FILES`` order.

Modules: :mod:`.schema` (verdict words, row keys, validation), :mod:`.rows` (the pipeline's own
claim rows: training accuracy), :mod:`.collect` (collection), :mod:`.render` (``paper/claims.md``,
the README block). Every name is re-exported here (``claims.collect_claims`` etc. keep working).
"""

from __future__ import annotations

from .collect import collect_claims
from .render import (
    CLAIMS_DOC,
    README_END,
    README_START,
    claims_document,
    readme_section,
    render_markdown,
    render_summary,
    update_readme,
)
from .rows import training_claim_rows
from .schema import NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, ROW_KEYS, VERDICTS, validate_row, verdict

__all__ = [
    "NOT_REPRODUCED",
    "NOT_TESTABLE",
    "README_END",
    "README_START",
    "CLAIMS_DOC",
    "REPRODUCED",
    "ROW_KEYS",
    "VERDICTS",
    "claims_document",
    "collect_claims",
    "readme_section",
    "render_markdown",
    "render_summary",
    "training_claim_rows",
    "update_readme",
    "validate_row",
    "verdict",
]
