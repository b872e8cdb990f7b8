"""The Hessian study's result files, as path templates (:data:`OUTPUTS`): the dense Hessian and its
block norms of the ``hessian`` rule and the check of the ``theory`` rule, per experiment ``{exp}``
and stage ``{stage}`` (``init``, ``trained``), and what the ``hessian_report`` rule writes from them
(claim rows, the two ``paper/summary.json`` sections). Their formats are :mod:`transformer_hessian.util.io`'s
(``save_hessian`` / ``load_hessian``, ``save_norms`` / ``load_norms``, ``save_theory_check`` /
``load_theory_check``), because the bounds and dynamics studies and the report read them too."""

from __future__ import annotations

__all__ = ["OUTPUTS"]

#: rule -> output key -> path template with Snakemake wildcards (the one place these paths are
#: typed; the rule file and the registry take them from here through
#: :mod:`transformer_hessian.registry.outputs`).
OUTPUTS: dict[str, dict[str, str]] = {
    "hessian": {
        "npz": "results/{exp}/hessian/{stage}.npz",
        "norms": "results/{exp}/hessian/{stage}_norms.json",
    },
    "theory": {"json": "results/{exp}/theory/{stage}.json"},
    "hessian_report": {
        "claims": "results/{exp}/hessian/claim_rows.json",
        "hessian_section": "results/{exp}/hessian/summary_section.json",
        "theory_section": "results/{exp}/theory/summary_section.json",
    },
}
