"""One function per Snakemake rule: read the rule's inputs, run the computation, write its results.

Layering (``docs/architecture.md``): ``cli.py`` only parses arguments and calls one function
here; each function here loads its inputs (through :mod:`.io`, :mod:`.train`), calls the
package's computation (:mod:`.hessian`, :mod:`.checks`, :mod:`.landscape`, ...),
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
    from .settings import Experiment, Hessian, Landscape

__all__ = [
    "download_dataset",
    "check_hessian_memory",
    "hessian_inputs",
    "hessian_step",
    "theory_step",
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


def check_hessian_memory(spec: Experiment, hessian: Hessian, dev) -> None:
    """Stop before the dense P x P float64 Hessian is allocated when it cannot fit; name the keys."""
    from .errors import ConfigError
    from .resources import available_bytes, dense_hessian_bytes, format_bytes, hessian_group_size

    m = spec.model
    need = dense_hessian_bytes(m.width, m.d_k, m.d_ff)
    have = available_bytes(dev)
    if have is not None and need > have:
        exp = hessian.experiment
        p = hessian_group_size(m.width, m.d_k, m.d_ff)
        raise ConfigError(
            f"hessian.experiment: the dense Hessian of {exp!r} is {p:,} x {p:,} float64 and this job needs about "
            f"{format_bytes(need)}, but only {format_bytes(have)} is available on {dev}; lower "
            f"experiments.{exp}.model.width / d_k / d_ff (or run on a machine with more memory)"
        )


def hessian_inputs(checkpoint: str, spec: Experiment, hessian: Hessian, data_root: str, device: str):
    """``(model, images, labels)``: the checkpoint's model in float64 and the fixed Hessian batch
    (``hessian.batch_size`` samples drawn with ``hessian.seed``, the same for every stage). The
    checkpoint's model sizes must equal ``spec.model`` (:class:`.config.ConfigError` naming
    ``experiments.<hessian.experiment>.model.<key>`` otherwise)."""
    import torch

    from .hessian import fixed_batch
    from .train import load_experiment_data, load_model
    from .utils import resolve_device

    dev = resolve_device(device)
    check_hessian_memory(spec, hessian, dev)
    data = load_experiment_data(spec, data_root)
    images, labels = fixed_batch(data["train_x"], data["train_y"], hessian.batch_size, hessian.seed)
    model = load_model(checkpoint, device=dev, dtype=torch.float64, spec=spec, experiment=hessian.experiment)
    return model, images.to(device=dev, dtype=torch.float64), labels.to(dev)


def hessian_step(
    checkpoint: str,
    stage: str,
    spec: Experiment,
    hessian: Hessian,
    data_root: str,
    out_npz: str,
    out_norms: str,
    device: str = "auto",
) -> dict[str, Any]:
    """Rule hessian: the dense Hessian of one block's five groups (``out_npz``, :func:`.io.save_hessian`)
    and its block and weight norms (``out_norms``, :func:`.io.save_norms`); returns the norms."""
    from .hessian import block_norms, compute_hessian, group_layout, weight_norms
    from .io import save_hessian, save_norms

    model, images, labels = hessian_inputs(checkpoint, spec, hessian, data_root, device)
    block = hessian.block
    H, method, seconds = compute_hessian(model, block, images, labels, hessian.method)
    names, shapes, offsets = group_layout(model, block)
    Hn = H.cpu().numpy()
    save_hessian(out_npz, Hn, names, offsets, shapes)
    norms = {
        "stage": stage,
        "experiment": hessian.experiment,
        "block": block,
        "method": method,
        "seconds": seconds,
        "batch_size": int(len(images)),
        "n_params": int(offsets[-1]),
        "blocks": block_norms(Hn, offsets, names),
        "weights": weight_norms(model, block),
    }
    save_norms(out_norms, norms)
    log.info("hessian %s: %d x %d via %s in %.2f s", stage, Hn.shape[0], Hn.shape[1], method, seconds)
    return norms


def theory_step(
    checkpoint: str,
    stage: str,
    spec: Experiment,
    hessian: Hessian,
    data_root: str,
    hessian_npz: str,
    out: str,
    norms: str | None = None,
    probes: int = 8,
    tolerance: float = 1e-8,
    device: str = "auto",
) -> dict[str, Any]:
    """Rule theory: check the saved Hessian against curvlinops products on ``probes`` random vectors
    per group; write the errors (:func:`.io.save_theory_check`) and raise :class:`ValueError` when the
    largest relative error exceeds ``tolerance`` (the gate of the Hessian figures)."""
    from .checks import saved_hessian_check
    from .io import load_hessian, load_norms, save_theory_check

    model, images, labels = hessian_inputs(checkpoint, spec, hessian, data_root, device)
    H = load_hessian(hessian_npz)["H"]
    result = saved_hessian_check(
        H,
        model,
        images,
        labels,
        probes=probes,
        seed=hessian.seed,
        tolerance=tolerance,
        block=hessian.block,
    )
    result["stage"] = stage
    result["hessian_file"] = hessian_npz
    result["hessian_method"] = load_norms(norms)["method"] if norms else "unknown"
    save_theory_check(out, result)
    worst = max(result["blocks"], key=lambda r: r["rel_error"])
    log.info(
        "saved Hessian (%s) vs curvlinops on %d probes (%s): max relative error %.3e (block %s-%s)",
        result["hessian_method"],
        result["n_probes"],
        stage,
        result["max_rel_error"],
        worst["row"],
        worst["col"],
    )
    if not result["passed"]:
        raise ValueError(
            f"the saved {result['hessian_method']} Hessian {hessian_npz} disagrees with curvlinops at stage "
            f"{stage}: relative error {result['max_rel_error']:.3e} in block ({worst['row']}, {worst['col']}) "
            f"exceeds theory.tolerance={tolerance:g} (details in {out})"
        )
    return result


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
