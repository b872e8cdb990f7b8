"""One function per Snakemake rule: read the rule's inputs, run the computation, write its results.

Layering (``docs/architecture.md``): ``cli.py`` only parses arguments and calls one function
here; each function here loads its inputs (through :mod:`.io`, :mod:`.train`), calls the
package's computation (:mod:`.hessian`, :mod:`.checks`, ...),
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

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .utils import log

if TYPE_CHECKING:
    from .settings import Experiment, Hessian

__all__ = [
    "download_dataset",
    "check_hessian_memory",
    "hessian_inputs",
    "hessian_step",
    "theory_step",
    "table1_step",
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


def table1_step(
    experiments: Mapping[str, Experiment], roles: Mapping[str, str], metrics: Sequence[str], out_dir: str
) -> None:
    """Rule table1: ``out_dir/table1.{csv,tex,md}`` from the experiments' sections, the experiment
    of each role (``{"hessian": ..., "landscape": ...}``) and the runs' metrics."""
    from .io import load_metrics_by_experiment
    from .report import write_table
    from .table1 import table1

    df = table1(experiments, roles, load_metrics_by_experiment(metrics))
    write_table(
        df,
        Path(out_dir) / "table1",
        "Table 1: ViT hyperparameters of both experiments, this run next to the paper's values",
    )
