"""Scaling study: the Figure 6 protocol, curvature and a sample size over a sweep of models.

The paper (arXiv 2510.16927) promises "a sample size determination framework" (Figure 1
caption) and says its Hessian structures inform "the empirical scaling laws" (abstract) but
fits none. This module runs that study over the ``scaling:`` config section.

Sweep. Models are the union of ``(w, fixed_depth)`` for ``w`` in ``widths`` and
``(fixed_width, N)`` for ``N`` in ``depths`` (duplicates once), each trained on every data-set
size in ``train_sizes`` (a seeded random subset of the training split, ``null`` = all of it);
``d_K = round(d_k_ratio * d)``, ``d_ff = round(d_ff_ratio * d)``. Model id ``w<d>_d<N>_n<size>``.

Per model (:func:`analyse_model`; training by :func:`transformer_hessian.train.train`):

* ``D_k = |L_{k+1}(w*) - L_k(w*)|`` over the model's own training samples, mean over
  ``n_orderings`` random orderings (:func:`transformer_hessian.core.theorem7.loss_differences`);
  the fit ``D_k ~ prefactor * k^slope`` by least squares on log-log over ``k >= k_min``
  (:func:`~transformer_hessian.core.stats.fit_loglog_slope`), the slope's bootstrap 95%
  interval over orderings (:func:`~transformer_hessian.core.stats.bootstrap_slope_ci`).
* ``k*`` for ``tolerance``: **measured** = the smallest ``k`` from which on the mean curve
  stays at or below the tolerance (:func:`k_star_measured`; None when the last ``k`` is above
  it), **fitted** = the smallest integer ``k`` with ``prefactor * k^slope <= tolerance``
  (:func:`k_star_fitted`, may extrapolate past the data set).
* ``lambda_max``: top eigenvalue of the Hessian of the mean loss over all parameters at ``w*``
  on the first ``hessian_samples`` training samples, float64, Lanczos on Hessian-vector products
  (:func:`transformer_hessian.core.krylov.top_eigenpair`).
* Block norms of the dense nine-group Hessian of the model's **last** block at ``w*`` on the
  same samples, in closed form (:func:`transformer_hessian.core.hessian_groups.hessian_all_groups`,
  method ``closed_form``: the block that feeds the mean-pool and head; block 0 of a one-block
  model). Its cost is one forward pass through the blocks before it plus the closed form, so it
  grows gently with depth; block 0 of a deeper model would need every column as a Hessian-vector
  product through all blocks (1052 s for a two-block MNIST model). None, with the reason, when
  that block has more than ``dense_max_params`` parameters.

Across models (:func:`aggregate`): ``y = a * P^b`` (``P`` = parameter count) for the decay rate
``-slope``, the prefactor, both ``k*`` and ``lambda_max``, per data-set size, by least squares on
log-log with a pairs-bootstrap interval over models (:func:`fit_power_law`).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.stats import (  # noqa: F401  (k_star_*, fit_power_law: moved to core.stats, used here)
    RTOL,
    bootstrap_slope_ci,
    fit_loglog_slope,
    fit_power_law,
    k_star_fitted,
    k_star_measured,
    log_binned_median,
    thin_indices,
)
from ...core.theorem7 import loss_differences

if TYPE_CHECKING:
    from ...config.settings import Scaling

#: Quantities fitted against the parameter count: result key -> label.
QUANTITIES = {
    "decay_rate": "-slope of D_k",
    "prefactor": "prefactor of D_k",
    "k_star_measured": "k* (measured)",
    "k_star_fitted": "k* (fitted curve)",
    "top_eigenvalue": "lambda_max",
}
#: Keys that change no single model's result (they choose which models run, or how).
_SWEEP_ONLY = ("enabled", "widths", "depths", "fixed_width", "fixed_depth", "train_sizes", "jobs")


def sweep_models(scaling: Scaling) -> list[dict]:
    """The sweep's models, in order: ``{"id", "width", "depth", "train_size"}`` (see module doc)."""
    arch = [(w, scaling.fixed_depth) for w in scaling.widths]
    arch += [(scaling.fixed_width, n) for n in scaling.depths]
    arch = sorted(set(arch), key=arch.index)
    return [
        {"id": f"w{w}_d{n}_n{size or 'all'}", "width": w, "depth": n, "train_size": size}
        for size in scaling.train_sizes
        for w, n in arch
    ]


def experiment_spec(point: dict, scaling: Scaling) -> dict:
    """The experiment section (as under ``experiments:``) that trains sweep model ``point``."""
    d = int(point["width"])
    model = {
        "patch_size": scaling.patch_size,
        "width": d,
        "depth": int(point["depth"]),
        "d_k": max(1, round(scaling.d_k_ratio * d)),
        "d_ff": max(1, round(scaling.d_ff_ratio * d)),
        "ffn_bias": scaling.ffn_bias,
        "ln_eps": scaling.ln_eps,
    }
    return {
        "dataset": scaling.dataset,
        "model": model,
        "train": {**scaling.train.to_dict(), "max_train": point["train_size"]},
    }


def model_key(point: dict, scaling: Scaling) -> str:
    """Hash of everything that determines one model's result (its cache key)."""
    from ...config.validate import config_hash

    rest = {k: v for k, v in scaling.to_dict().items() if k not in _SWEEP_ONLY}
    return config_hash({"spec": experiment_spec(point, scaling), "analysis": rest})


def dk_curve(losses: Any, scaling: Scaling) -> dict[str, Any]:
    """The D_k analysis of one model's per-sample losses at ``w*`` (JSON-ready; see module doc)."""
    r, seed, k_min = scaling.n_orderings, scaling.seed, scaling.k_min
    diffs = loss_differences(losses, r, seed)  # (R, n-1), column k-1 holds D_k
    n = diffs.shape[1] + 1
    k = np.arange(1, n, dtype=np.float64)
    d_mean = diffs.mean(axis=0)
    slope, intercept = fit_loglog_slope(k, d_mean, k_min=k_min)
    lo, hi, _ = bootstrap_slope_ci(diffs, k, k_min=k_min, n_bootstrap=scaling.n_bootstrap, seed=seed)
    prefactor = math.exp(intercept)
    tol = scaling.tolerance
    keep = thin_indices(n - 1, max_points=400)
    bk, bd = log_binned_median(k, d_mean)
    return {
        "n_samples": int(n),
        "k": [int(v) for v in k[keep]],
        "D_mean": d_mean[keep].tolist(),
        "D_binned_k": bk.tolist(),
        "D_binned": bd.tolist(),
        "slope": slope,
        "slope_ci95": [lo, hi],
        "intercept": intercept,
        "prefactor": prefactor,
        "fit_k_min": int(k_min),
        "tolerance": tol,
        "k_star_measured": k_star_measured(k, d_mean, tol),
        "k_star_fitted": k_star_fitted(prefactor, slope, tol),
    }


def top_hessian_eigenvalue(model, x, y, n_iter: int, seed: int = 0) -> tuple[float, float]:
    """``(lambda_max, residual)`` of the Hessian of the mean cross-entropy over ``(x, y)`` w.r.t.
    all parameters of ``model`` at its weights (float64 Lanczos, ``krylov.top_eigenpair``)."""
    import torch

    from ...core.krylov import FlatModel, top_eigenpair

    model = model.to(torch.float64).eval()
    fm = FlatModel.of(model)
    lam, _, resid = top_eigenpair(fm, x.to(fm.w0.device, torch.float64), y.to(fm.w0.device), n_iter, seed=seed)
    return lam, resid


def block_norms(model, x, y, max_params: int) -> tuple[dict | None, str | None]:
    """Spectral and Frobenius norms of the 9 x 9 group blocks of the dense Hessian of the model's
    last block (``block`` in the result; 0 for a one-block model) at its weights on ``(x, y)``,
    in closed form; ``(None, reason)`` when the block exceeds ``max_params``."""
    import torch

    from ...core.hessian import ALL_GROUPS, group_layout, hessian_all_groups, symmetric_block_norms

    block = model.cfg.depth - 1
    names, _, off = group_layout(model, block, ALL_GROUPS)
    if int(off[-1]) > max_params:
        return None, (
            f"block {block} has {int(off[-1]):,} parameters over the nine groups, more than "
            f"scaling.dense_max_params = {max_params:,}: its dense Hessian is not formed"
        )
    H, method = hessian_all_groups(model, block, x.to(torch.float64), y, method="closed_form")
    norms = symmetric_block_norms(H.cpu().numpy(), off, names)
    return {
        "groups": list(ALL_GROUPS),
        "block": block,
        "method": method,
        "n_params": int(off[-1]),
        "fro": norms[0].tolist(),
        "spectral": norms[1].tolist(),
    }, None


def analyse_model(point: dict, scaling: Scaling, data_root: str | Path, model_dir: str | Path, device: str = "auto"):
    """Train sweep model ``point`` (resumable, in ``model_dir``) and measure it at ``w*``."""
    import torch

    from ...config.settings import Experiment
    from ...train import load_experiment_data, load_model, per_sample_losses, train
    from ...util.env import resolve_device

    spec = Experiment.with_defaults(experiment_spec(point, scaling))  # the schema fills the train keys
    times = {}
    t0 = time.perf_counter()
    metrics = train(point["id"], spec, data_root, model_dir, device=device)
    ckdir = Path(model_dir) / "checkpoints"
    for old in sorted(ckdir.glob("epoch_*.pt"))[:-1]:  # the newest one stays: a resume point
        old.unlink()
        old.with_name(old.name + ".sha256").unlink(missing_ok=True)
    times["train"] = time.perf_counter() - t0
    dev = resolve_device(device)
    data = load_experiment_data(spec, data_root)
    model = load_model(ckdir / "final.pt", device=dev)
    t0 = time.perf_counter()
    curve = dk_curve(per_sample_losses(model, data["train_x"], data["train_y"]), scaling)
    times["dk_curve"] = time.perf_counter() - t0
    nh = min(len(data["train_x"]), scaling.hessian_samples)
    x, y = data["train_x"][:nh].to(dev, torch.float64), data["train_y"][:nh].to(dev)
    t0 = time.perf_counter()
    lam, resid = top_hessian_eigenvalue(model, x, y, scaling.lanczos_iters, seed=scaling.seed)
    times["top_eigenvalue"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    blocks, skipped = block_norms(model.to(torch.float64), x, y, scaling.dense_max_params)
    times["block_norms"] = time.perf_counter() - t0
    return {
        **point,
        "dataset": spec.dataset,
        "model": metrics["model"],
        "n_parameters": metrics["n_parameters"],
        "n_train": metrics["n_train"],
        "final": metrics["final"],
        "epochs": metrics["epochs"],
        "curve": curve,
        "top_eigenvalue": lam,
        "top_eigenvalue_residual": resid,
        "hessian_samples": int(nh),
        "block_norms": blocks,
        "block_norms_skipped": skipped,
        "seconds": times,
    }


def run_models(points: list[dict], scaling: Scaling, data_root, cache_dir, device: str = "auto") -> list[dict]:
    """:func:`analyse_model` for each point, cached in ``cache_dir/<id>.json``: a model whose
    file holds the same :func:`model_key` is read back instead of being trained again."""
    from ...util.files import log, read_json
    from ...util.io import write_json

    cache_dir = Path(cache_dir)
    out = []
    for point in points:
        path, key = cache_dir / f"{point['id']}.json", model_key(point, scaling)
        if path.is_file():
            try:
                cached = read_json(path)
            except ValueError:
                cached = {}
            if cached.get("settings_key") == key:
                log.info("scaling: %s already done (%s); skipped", point["id"], path)
                out.append(cached)
                continue
        t0 = time.perf_counter()
        result = analyse_model(point, scaling, data_root, cache_dir / point["id"], device=device)
        result["settings_key"] = key
        write_json(result, path, sealed=False)
        c = result["curve"]
        log.info(
            "scaling: %s (P = %d): slope %.3f, prefactor %.3g, k* %s / %s (fitted), lambda_max %.4g; %.1f s",
            point["id"],
            result["n_parameters"],
            c["slope"],
            c["prefactor"],
            c["k_star_measured"],
            c["k_star_fitted"],
            result["top_eigenvalue"],
            time.perf_counter() - t0,
        )
        out.append(result)
    return out


def model_row(r: dict) -> dict[str, Any]:
    """The numbers of one model's result that the summary keeps (no curves)."""
    c = r["curve"]
    return {
        "id": r["id"],
        "width": r["width"],
        "depth": r["depth"],
        "train_size": r["train_size"],
        "n_train": r["n_train"],
        "n_parameters": r["n_parameters"],
        "val_acc": r["final"]["val_acc"],
        "slope": c["slope"],
        "slope_ci95": c["slope_ci95"],
        "decay_rate": -c["slope"],
        "prefactor": c["prefactor"],
        "k_star_measured": c["k_star_measured"],
        "k_star_fitted": c["k_star_fitted"],
        "top_eigenvalue": r["top_eigenvalue"],
        "block_spectral_max": None if r["block_norms"] is None else max(map(max, r["block_norms"]["spectral"])),
        "block_diag_spectral": None
        if r["block_norms"] is None
        else {g: r["block_norms"]["spectral"][i][i] for i, g in enumerate(r["block_norms"]["groups"])},
    }


def series_of(row: dict, scaling: Scaling) -> list[str]:
    """The sweep directions a model belongs to: ``"width"`` (``widths`` at ``fixed_depth``) and/or
    ``"depth"`` (``depths`` at ``fixed_width``)."""
    out = []
    if row["depth"] == scaling.fixed_depth and row["width"] in scaling.widths:
        out.append("width")
    if row["width"] == scaling.fixed_width and row["depth"] in scaling.depths:
        out.append("depth")
    return out


def aggregate(results: list[dict], scaling: Scaling) -> dict[str, Any]:
    """Power laws of :data:`QUANTITIES` against the parameter count, one per data-set size and
    sweep direction (``fits[<size or "all">][<"width"|"depth">][<quantity>]``; ``{"skipped": reason}``
    when fewer than 2 models give a positive value at distinct P), next to every model's result."""
    results = sorted(results, key=lambda r: (r["train_size"] is None, r["train_size"] or 0, r["n_parameters"]))
    rows = [model_row(r) | {"series": series_of(r, scaling)} for r in results]
    fits: dict[str, dict] = {}
    for size in dict.fromkeys(r["train_size"] for r in rows):
        for series in ("width", "depth"):
            group = [r for r in rows if r["train_size"] == size and series in r["series"]]
            entry = fits.setdefault(str(size or "all"), {}).setdefault(series, {})
            for q in QUANTITIES:
                pts = [(r["n_parameters"], r[q]) for r in group if r[q] is not None and r[q] > 0]
                if len({p for p, _ in pts}) < 2:
                    entry[q] = {"skipped": f"{len(pts)} model(s) with a positive {q}; a power law needs 2 distinct P"}
                    continue
                P, Y = zip(*pts)
                entry[q] = fit_power_law(P, Y, scaling.n_bootstrap, scaling.seed)
    settings = {k: v for k, v in scaling.to_dict().items() if k != "enabled"}
    return {"dataset": scaling.dataset, "settings": settings, "rows": rows, "fits": fits, "models": results}
