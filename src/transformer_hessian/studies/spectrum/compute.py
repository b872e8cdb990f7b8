"""Matrix-free curvature of models too large for a dense Hessian (rule ``spectrum_compute``).

Everything concerns the Hessian ``H = d^2 L / dw^2`` of the mean cross-entropy ``L`` on one
fixed training batch (``hessian.fixed_batch``), restricted to a parameter subset ``S``:
``H_S = R_S^T H R_S`` (a principal submatrix). Two subsets are used: the five groups
``[W_Q, W_K, W_V, W_1, W_2]`` of one transformer block (``hessian.loss_of_groups``, the
groups of Figures 3-5 of arXiv 2510.16927) and all parameters of the model
(``krylov.FlatModel``). ``H_S`` is never formed: every estimator only applies ``v -> H_S v``,
forward-over-reverse Hessian-vector products (``krylov.hvp_operator``) vectorised with
``torch.func.vmap``.

The estimators are the library's (:mod:`transformer_hessian.core.spectral`: Lanczos with the whole
tridiagonal, top eigenvalues, Hutchinson traces, SLQ densities, pair spectral norms); this module runs
them on every block and on the whole model (:func:`run_spectrum`) and writes the study's summary.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ... import GROUPS
from ...core.hessian import group_layout, loss_of_groups
from ...core.krylov import FlatModel
from ...core.spectral import (
    Matvec,
    batched_hvp,
    broadened_density,
    density_grid,
    hutchinson_trace,
    lanczos_runs,
    pair_spectral_norms,
    slq_density,
    top_eigenvalues,
)
from ...util.progress import Progress

if TYPE_CHECKING:
    from ...config.settings import Spectrum


def _operator_summary(matvec: Matvec, w: torch.Tensor, s: Spectrum, seed: int) -> dict[str, Any]:
    """Top-k eigenvalues, Hutchinson trace and, when ``slq_probes > 0``, the SLQ density; the
    top-k and the density come from the same ``max(1, slq_probes)`` Lanczos runs."""
    t0 = time.perf_counter()
    out: dict[str, Any] = {"n_params": int(w.numel())}
    runs = lanczos_runs(matvec, w, max(1, int(s.slq_probes)), s.lanczos_steps, seed)
    out["top"] = top_eigenvalues(matvec, w, s.n_eigenvalues, s.lanczos_steps, seed, runs=runs)
    out["trace"] = hutchinson_trace(matvec, w, s.n_probes, seed)
    if s.slq_probes:
        q = slq_density(matvec, w, s.slq_probes, s.lanczos_steps, seed, runs=runs)
        out["density"] = {
            "nodes": q["nodes"].tolist(),
            "weights": q["weights"].tolist(),
            "mean": float((q["nodes"] * q["weights"]).sum() / len(q["nodes"])),
        }
    out["seconds"] = time.perf_counter() - t0
    return out


def _broaden(entries: list[dict], s: dict) -> None:
    """Add ``grid``, ``density`` and ``sigma`` to every entry's SLQ ``density``: one grid and one
    broadening ``sigma = density_sigma x`` (range of all Ritz nodes) shared by all entries."""
    dens = [e["density"] for e in entries if "density" in e]
    if not dens:
        return
    grid, sigma = density_grid(np.concatenate([np.ravel(d["nodes"]) for d in dens]), s.density_points, s.density_sigma)
    for d in dens:
        d.update(
            grid=grid.tolist(), sigma=sigma, density=broadened_density(d["nodes"], d["weights"], grid, sigma).tolist()
        )


def run_spectrum(model, images: torch.Tensor, labels: torch.Tensor, settings: Spectrum) -> dict[str, Any]:
    """Every estimator on every block's five-group Hessian and top eigenvalues and trace of the
    whole model's Hessian, all on the mean cross-entropy of ``(images, labels)`` in float64.

    Per block ``k`` (``blocks[k]``): ``top``, ``trace``, ``density`` (see
    :func:`_operator_summary`; broadened on one grid for all blocks) and ``pair_norms`` (5 x 5, GROUPS order). ``whole_model``: ``top``
    and ``trace`` over all parameters. ``interlacing``: the whole model's top Ritz value against
    each block's (a principal submatrix has ``lambda_max <= lambda_max`` of the whole Hessian;
    the Ritz values are lower bounds, so a violation means Lanczos has not converged there).
    """
    s = settings
    n_pairs = len(GROUPS) * (len(GROUPS) + 1) // 2
    lanczos = max(1, int(s.slq_probes)) * int(s.lanczos_steps)
    total = len(model.blocks) * (lanczos + int(s.n_probes) + 2 * n_pairs * int(s.pair_steps))
    total += int(s.lanczos_steps) + int(s.n_probes)  # the whole model
    with Progress("spectrum", total=total, unit="Hessian-vector product") as prog:
        return _run_spectrum(model, images, labels, s, prog)


def _counted(matvec: Matvec, prog: Progress, note: str) -> Matvec:
    """``matvec`` that advances ``prog`` by the number of vectors of each call."""

    def counted(V: torch.Tensor) -> torch.Tensor:
        out = matvec(V)
        prog.advance(int(V.shape[0]), note)
        return out

    return counted


def _run_spectrum(model, images: torch.Tensor, labels: torch.Tensor, s: Spectrum, prog: Progress) -> dict[str, Any]:
    t_start = time.perf_counter()
    model = model.to(torch.float64).eval()
    x, y = images.to(torch.float64), labels
    seed, chunk = int(s.seed), int(s.chunk)
    blocks = []
    for k in range(len(model.blocks)):
        f, w = loss_of_groups(model, k, x, y)
        mv = _counted(batched_hvp(f, w, chunk), prog, f"block {k}")
        entry = _operator_summary(mv, w, s, seed + 1000 * (k + 1))
        t0 = time.perf_counter()
        _, _, off = group_layout(model, k)
        entry["pair_norms"] = pair_spectral_norms(mv, w, off, s.pair_steps, seed + 1000 * (k + 1)).tolist()
        entry["pair_seconds"] = time.perf_counter() - t0
        entry["block"] = k
        blocks.append(entry)
    _broaden(blocks, s)
    fm = FlatModel.of(model)
    mv = _counted(batched_hvp(lambda p: fm.mean_loss(p, x, y), fm.w0, chunk), prog, "whole model")
    whole = _operator_summary(mv, fm.w0, dataclasses.replace(s, slq_probes=0), seed)
    lam = whole["top"]["eigenvalues"][0]
    gaps = [lam - b["top"]["eigenvalues"][0] for b in blocks]
    return {
        "settings": s.to_dict(),
        "groups": list(GROUPS),
        "batch_size": int(len(x)),
        "blocks": blocks,
        "whole_model": whole,
        "interlacing": {
            "holds": bool(all(g >= -1e-9 * abs(lam) for g in gaps)),
            "gap": gaps,
            "rule": "lambda_max(H) >= lambda_max(H_block) for every block (Cauchy interlacing)",
        },
        "seconds": time.perf_counter() - t_start,
    }


def summary_section(result: dict[str, Any]) -> dict[str, Any]:
    """The numbers of ``paper/summary.json``'s ``spectrum`` section (no densities)."""
    return {
        "experiment": result.get("experiment"),
        "dataset": result.get("dataset"),
        "batch_size": result["batch_size"],
        "groups": result["groups"],
        "whole_model": {
            "n_params": result["whole_model"]["n_params"],
            "top_eigenvalues": result["whole_model"]["top"]["eigenvalues"],
            "trace": result["whole_model"]["trace"],
        },
        "blocks": [
            {
                "block": b["block"],
                "n_params": b["n_params"],
                "top_eigenvalues": b["top"]["eigenvalues"],
                "smallest_ritz": b["top"]["smallest"],
                "trace": b["trace"],
                "pair_norms": b["pair_norms"],
            }
            for b in result["blocks"]
        ],
        "interlacing": result["interlacing"],
        "seconds": result["seconds"],
    }
