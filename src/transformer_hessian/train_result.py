"""The ``train`` rule's result files, as path templates with Snakemake wildcards (``{exp}``: the
experiment): the one place these paths are typed. ``workflow/rules/train.smk`` takes its ``output:``
from :data:`OUTPUTS` (``produced("train")``, ``workflow/rules/common.smk``) and the figure registry
names them as ``Output("train", "metrics", exp="{hexp}")``
(:mod:`transformer_hessian.registry.outputs` collects this mapping with every study's).

The layout inside the experiment's folder (``checkpoints/init.pt``, ``checkpoints/final.pt``,
``metrics.json``, the epoch checkpoints) is the one :func:`transformer_hessian.train.train` writes
(see :mod:`transformer_hessian.train.loop`). Standard library only: the Snakefile imports it
without torch.
"""

from __future__ import annotations

__all__ = ["OUTPUTS"]

#: rule -> output key -> path template (the order of the keys is the order of the rule's outputs).
OUTPUTS: dict[str, dict[str, str]] = {
    "train": {
        "init": "results/{exp}/checkpoints/init.pt",
        "final": "results/{exp}/checkpoints/final.pt",
        "metrics": "results/{exp}/metrics.json",
    },
}
