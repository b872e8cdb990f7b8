"""One function per Snakemake rule: read the rule's inputs, run the computation, write its results.

Layering (``docs/architecture.md``): ``cli.py`` only parses arguments and calls one function
here; each function here loads its inputs (through :mod:`.io`, :mod:`.train`), calls the
package's computation (:mod:`.data`, :mod:`.landscape`, ...; a study's steps are in its ``step`` module),
applies the rule's gate (pass/fail against a tolerance), logs one line and writes its outputs
through :mod:`.io`. The computation modules therefore never touch argument parsing or file
formats, :mod:`.io` owns the formats, and these functions can be called (and tested) from Python
with plain arguments. Heavy modules (torch) are imported inside each function so that importing
this module, like ``transformer-hessian --help``, stays cheap.

Config sections arrive typed and frozen (:mod:`.settings`, parsed once by the command line from
the validated config's JSON): ``spec`` = one ``experiments.<name>`` section
(:class:`.settings.Experiment`), ``hessian`` = the ``hessian`` section (:class:`.settings.Hessian`),
...; every default was filled in from the schema before, so none is repeated here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .utils import log

if TYPE_CHECKING:
    from .settings import Experiment, Landscape

__all__ = [
    "download_dataset",
    "landscape_step",
]


def download_dataset(
    dataset: str,
    manifest_path: str,
    root: str | None = None,
    mirror: str | None = None,
    deadline: float = 3600.0,
    local: str | None = None,
) -> None:
    """Rule download: fetch and verify ``dataset`` under ``root/dataset`` (default root: two levels
    above ``manifest_path``; ``local``: a folder that holds the files already), then write its manifest."""
    from .data import download
    from .io import save_manifest

    root = root or Path(manifest_path).resolve().parent.parent
    manifest = download(dataset, root, mirror=mirror or None, deadline=deadline, local=local or None)
    save_manifest(manifest_path, manifest)
    log.info("%s ready under %s", dataset, Path(root) / dataset)


def landscape_step(
    checkpoint: str,
    spec: Experiment,
    landscape: Landscape,
    data_root: str,
    out: str,
    device: str = "auto",
) -> dict[str, Any]:
    """Rule landscape: per-sample losses at w* on the first ``landscape.max_samples`` training samples
    (all when unset), D_k over orderings and the fitted slope (:func:`.landscape.analyse_landscape`);
    written with :func:`.io.save_landscape`. Warns when the slope's 95% interval excludes -1."""
    from .io import save_landscape
    from .landscape import analyse_landscape
    from .train import load_experiment_data, load_model, per_sample_losses
    from .utils import resolve_device

    data = load_experiment_data(spec, data_root)
    model = load_model(checkpoint, device=resolve_device(device), spec=spec, experiment=landscape.experiment)
    x, y = data["train_x"], data["train_y"]
    if landscape.max_samples:
        x, y = x[: landscape.max_samples], y[: landscape.max_samples]
    losses = per_sample_losses(model, x, y)
    L = landscape
    result = analyse_landscape(
        losses,
        n_orderings=L.n_orderings,
        seed=L.seed,
        ema_factor=L.ema_factor,
        k_min=L.k_min,
        n_bootstrap=L.n_bootstrap,
        granularity=L.granularity,
        batch_size=L.batch_size,
    )
    result["experiment"] = L.experiment
    save_landscape(out, result)
    _log_landscape(result)
    return result


def _log_landscape(result: dict[str, Any]) -> None:
    """Log both Figure 6 curves (slope, 95% interval) and name the one behind the ``fig6_slope``
    verdict (``landscape.granularity``); warn when that curve's interval excludes -1."""
    from .landscape import PAPER_GRANULARITY, verdict_curve
    from .numfmt import fmt, fmt_interval

    granularity, cur = verdict_curve(result)
    curves = {"sample": result, "batch": result.get("batch")}
    for name, c in curves.items():
        if not c:
            continue
        what = "sample-by-sample" if name == "sample" else f"batch-by-batch (b = {c['batch_size']})"
        log.info(
            "landscape: %s curve%s: slope %s, 95%% CI %s over k in [%d, %d]%s",
            what,
            " (the paper's definition)" if name == PAPER_GRANULARITY else "",
            fmt(c["slope"], avoid=-1),
            fmt_interval(*c["slope_ci95"], reference=-1),
            int(c["fit_k_min"]),
            int(c["fit_k_max"]),
            "; the fig6_slope verdict uses this curve (landscape.granularity)" if c is cur else "",
        )
    if not (cur["slope_ci95"][0] <= -1.0 <= cur["slope_ci95"][1]):
        log.warning(
            "landscape: the 95%% interval %s of the %s curve's fitted slope excludes -1, the paper's "
            "O(1/k) rate (Theorem 7's bound itself %s)",
            fmt_interval(*cur["slope_ci95"], reference=-1),
            granularity,
            "holds" if cur["bound_holds"] else "is violated",
        )
