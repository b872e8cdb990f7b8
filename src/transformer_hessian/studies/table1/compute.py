"""Table 1 of the paper (ViT hyperparameters), generated from the active config and the runs.

The paper's Table 1 (arXiv 2510.16927, Sec. 5, ``table:vit``) lists only data set, patch size,
hidden dim, ff dim and number of blocks:

    MNIST     | patch 4 | hidden 16  | ff 64  | 1 block
    CIFAR-100 | patch 4 | hidden 128 | ff 512 | 8 blocks

:func:`table1` puts, for each of the two experiments (``hessian.experiment``: Figures 3-5 and
7-11; ``landscape.experiment``: Figure 6), the paper's row next to this run's row, adds what a
reader needs and the paper does not state (tokens, d_k, parameters, epochs, optimiser,
learning rate, batch size, validation accuracy reached) and names the columns in which this run
differs from the paper.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from ...config.settings import Experiment
from ...util.datanames import DATA_SETS, table_name

NOT_STATED = "not stated"

#: The paper's Table 1, plus what Sec. 5 says around it (image sizes give the token counts).
PAPER = {
    "hessian": {
        "dataset": "MNIST",
        "image_size": 28,
        "patch size": 4,
        "hidden dim": 16,
        "ff dim": 64,
        "blocks": 1,
        "val acc": ">50% (Sec. 5)",
    },
    "landscape": {
        "dataset": "CIFAR-100",
        "image_size": 32,
        "patch size": 4,
        "hidden dim": 128,
        "ff dim": 512,
        "blocks": 8,
        "val acc": ">50% (Sec. 5)",
    },
}

ROLES = {"hessian": "Figs. 3-5, 7-11", "landscape": "Fig. 6"}
DATASET_NAMES = {name: table_name(name) for name in DATA_SETS}
IMAGE_SIZES = {name: d.side for name, d in DATA_SETS.items()}
COMPARED = ("dataset", "patch size", "hidden dim", "ff dim", "blocks")


def _dataset_name(dataset: str, paper_data: str) -> str:
    """The run's data set; MNIST in a CIFAR-100 experiment is "MNIST (stand-in for CIFAR-100)" (a data
    set the paper never used already says "(stand-in)" in its :func:`.datanames.table_name`)."""
    from ...util.datanames import stands_in

    name = DATASET_NAMES[dataset]
    return (
        f"{name} (stand-in for {paper_data})"
        if not DATA_SETS[dataset].stands_in_for and stands_in(dataset, paper_data)
        else name
    )


def table1(experiments: Mapping[str, Experiment], roles: Mapping[str, str], metrics: dict[str, dict]) -> pd.DataFrame:
    """Rows (paper, this run) per role; ``experiments`` are the typed ``experiments`` sections,
    ``roles`` maps "hessian" and "landscape" to the experiment each runs (``hessian.experiment``,
    ``landscape.experiment``); ``metrics`` maps experiment name -> its metrics.json.

    tokens = (image size / patch size)^2; "differs from paper" lists the COMPARED columns whose
    values differ (the data set counts as different unless it is the paper's)."""
    rows = []
    for role in ("hessian", "landscape"):
        paper = PAPER[role]
        rows.append(
            {
                "figures": ROLES[role],
                "source": "paper",
                "dataset": paper["dataset"],
                "patch size": paper["patch size"],
                "hidden dim": paper["hidden dim"],
                "ff dim": paper["ff dim"],
                "blocks": paper["blocks"],
                "d_k": NOT_STATED,
                "tokens": (paper["image_size"] // paper["patch size"]) ** 2,
                "parameters": NOT_STATED,
                "epochs": NOT_STATED,
                "optimiser": NOT_STATED,
                "lr": NOT_STATED,
                "batch size": NOT_STATED,
                "val acc": paper["val acc"],
                "differs from paper": "",
            }
        )
        name = roles[role]
        spec = experiments[name]
        mdl, tr = spec.model, spec.train
        m = metrics.get(name)
        if m is None:
            raise ValueError(f"table1: no metrics.json for experiment {name!r} (have {sorted(metrics)})")
        image = m["model"]["image_size"] if "model" in m else IMAGE_SIZES[spec.dataset]
        run = {
            "figures": ROLES[role],
            "source": f"this run ({name})",
            "dataset": _dataset_name(spec.dataset, paper["dataset"]),
            "patch size": mdl.patch_size,
            "hidden dim": mdl.width,
            "ff dim": mdl.d_ff,
            "blocks": mdl.depth,
            "d_k": mdl.d_k,
            "tokens": (image // mdl.patch_size) ** 2,
            "parameters": m["n_parameters"],
            "epochs": tr.epochs,
            "optimiser": f"AdamW (wd {tr.weight_decay:g})",
            "lr": f"{tr.lr:g}",
            "batch size": tr.batch_size,
            "val acc": f"{100 * m['final']['val_acc']:.1f}%",
        }
        run["differs from paper"] = ", ".join(c for c in COMPARED if str(run[c]) != str(paper[c])) or "none"
        rows.append(run)
    df = pd.DataFrame(rows)
    # Mixed columns ("not stated" next to numbers) are written as text.
    return df.astype({c: str for c in df.columns if df[c].dtype == object})
