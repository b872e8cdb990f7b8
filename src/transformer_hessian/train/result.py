"""The ``train`` rule's result files, as path templates with Snakemake wildcards (``{exp}``: the
experiment): the one place these paths are typed. ``workflow/rules/train.smk`` takes its ``output:``
from :data:`OUTPUTS` (``produced("train")``, ``workflow/rules/common.smk``) and the figure registry
names them as ``Output("train", "metrics", exp="{hexp}")``
(:mod:`transformer_hessian.registry.outputs` collects this mapping with every study's).

The layout inside the experiment's folder (``checkpoints/init.pt``, ``checkpoints/final.pt``,
``metrics.json``) is typed here once, as :data:`CHECKPOINT_DIR`, :data:`INIT`, :data:`FINAL` and
:data:`METRICS`: :func:`transformer_hessian.train.train` writes those names (see
:mod:`transformer_hessian.train.loop`, which adds the epoch checkpoints) and :data:`OUTPUTS` is built
from them. Standard library only: the Snakefile imports it without torch.
"""

from __future__ import annotations

__all__ = ["CHECKPOINT_DIR", "FINAL", "INIT", "METRICS", "OUTPUTS"]

#: the layout inside an experiment's folder, which :func:`transformer_hessian.train.train` writes
CHECKPOINT_DIR = "checkpoints"
INIT = "init.pt"
FINAL = "final.pt"
METRICS = "metrics.json"

#: rule -> output key -> path template (the order of the keys is the order of the rule's outputs).
OUTPUTS: dict[str, dict[str, str]] = {
    "train": {
        "init": f"results/{{exp}}/{CHECKPOINT_DIR}/{INIT}",
        "final": f"results/{{exp}}/{CHECKPOINT_DIR}/{FINAL}",
        "metrics": f"results/{{exp}}/{METRICS}",
    },
}
