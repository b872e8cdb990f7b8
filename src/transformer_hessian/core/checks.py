"""Pipeline-level checks of the closed-form Hessian against curvlinops on the trained model."""

from __future__ import annotations

import time

import numpy as np
import torch

from .hessian import block_pairs, group_layout, hessian_curvlinops
from .model import ViT


def _error_row(row: str, col: str, diff, ref, scale: float, block, outer, functional) -> dict:
    """One block pair of a Hessian check: errors of ``diff`` (checked minus reference) relative to
    the whole Hessian's ``scale`` and to the block's ``ref``, and the Frobenius norms of the block and
    of its outer-product and functional parts."""
    err = float(diff.abs().max())
    ref_max = float(ref.abs().max())
    fo = float(torch.linalg.matrix_norm(outer, "fro"))
    ff = float(torch.linalg.matrix_norm(functional, "fro"))
    return {
        "row": row,
        "col": col,
        "max_abs_error": err,
        "rel_error": err / scale if scale > 0 else err,
        "block_rel_error": err / ref_max if ref_max > 0 else err,
        "fro_exact": float(torch.linalg.matrix_norm(block, "fro")),
        "fro_outer": fo,
        "fro_functional": ff,
        "functional_share": ff / (fo + ff) if fo + ff > 0 else 0.0,
    }


def closed_form_check(model: ViT, images, labels, tolerance: float) -> dict:
    """Compare ``theory.model_loss_hessian`` with ``curvlinops.HessianLinearOperator``.

    Per block pair: max absolute error and relative error (max|diff| / max|exact| over the
    whole Hessian, so tiny blocks are not inflated), plus per block the Frobenius norms of
    the outer-product (Gauss-Newton) and functional parts and the functional share
    ||H_f||_F / (||H_o||_F + ||H_f||_F).
    """
    from ..theory import model_loss_hessian_parts

    model = model.to(torch.float64)
    images = images.to(torch.float64)
    t0 = time.perf_counter()
    H_ref = hessian_curvlinops(model, 0, images, labels)
    t_ref = time.perf_counter() - t0
    t0 = time.perf_counter()
    outer, func = model_loss_hessian_parts(model, images, labels, block=0)
    H_outer, H_func = outer.dense, func.dense
    t_cf = time.perf_counter() - t0
    H_cf = H_outer + H_func
    _, _, off = group_layout(model, 0)
    scale = float(H_ref.abs().max())
    rows = []
    pairs = zip(block_pairs(H_ref, off), block_pairs(H_cf, off), block_pairs(H_outer, off), block_pairs(H_func, off))
    for (ri, cj, ref), (_, _, cf), (_, _, outer_b), (_, _, func_b) in pairs:
        rows.append(_error_row(ri, cj, cf - ref, ref, scale, ref, outer_b, func_b))
    max_rel = max(r["rel_error"] for r in rows)
    return {
        "blocks": rows,
        "max_rel_error": max_rel,
        "tolerance": tolerance,
        "passed": bool(max_rel <= tolerance and np.isfinite(max_rel)),
        "seconds_curvlinops": t_ref,
        "seconds_closed_form": t_cf,
        "n_params": int(off[-1]),
        "batch_size": int(len(images)),
    }


def logit_jacobian(model: ViT, block: int, images, groups=None) -> torch.Tensor:
    """J (B, C, P): d logits_b / d w for the flat vector w of ``groups`` of ``block`` (default
    the five GROUPS), by ``torch.func.jacrev`` (reverse mode, independent of the closed form)."""
    from torch.func import functional_call, jacrev, vmap

    from .. import GROUPS

    groups = GROUPS if groups is None else groups
    names = [f"blocks.{block}.{n}" for n in groups]
    shapes = [model.get_parameter(n).shape for n in names]
    sizes = [s.numel() for s in shapes]
    fixed = {k: v.detach() for k, v in model.named_parameters() if k not in names}

    def logits_one(flat, image):
        parts = torch.split(flat, sizes)
        params = {**fixed, **{n: p.reshape(s) for n, p, s in zip(names, parts, shapes)}}
        return functional_call(model, params, (image.unsqueeze(0),))[0]

    w = torch.cat([model.get_parameter(n).detach().reshape(-1) for n in names])
    # Per sample: the logits of sample b depend only on image b, so J_b is the Jacobian of a
    # one-image forward pass (C reverse passes on one image instead of on the whole batch).
    return vmap(jacrev(logits_one), in_dims=(None, 0))(w, images)


def gauss_newton(model: ViT, block: int, images, labels) -> torch.Tensor:
    """Outer-product (Gauss-Newton) part of the mean cross-entropy Hessian over the five groups:

        G = (1/B) sum_b J_b^T (diag p_b - p_b p_b^T) J_b,   p_b = softmax(logits_b),

    the rest H - G being the functional part sum_b (p_b - e_y)^T d^2 logits_b / dw^2 / B."""
    with torch.no_grad():
        p = torch.softmax(model(images), -1)
    J = logit_jacobian(model, block, images)
    lam = torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)
    B, C, P = J.shape
    G = J.reshape(B * C, P).T @ torch.bmm(lam, J).reshape(B * C, P) / B
    return 0.5 * (G + G.T)


def saved_hessian_check(
    H, model: ViT, images, labels, probes: int, tolerance: float, seed: int = 0, block: int = 0
) -> dict:
    """Check a saved dense Hessian H (five GROUPS, float64) against curvlinops HVPs on probes.

    For each group j, ``probes`` standard normal vectors supported on group j form V (P x 5
    probes); R = curvlinops.HessianLinearOperator @ V is the reference. For the block pair
    (i, j): max_abs_error = max |(H V - R)[rows of i, probes of j]| = max |H_ij v - (H v)_i|,
    rel_error = max_abs_error / max |R| (whole check), block_rel_error = max_abs_error /
    max |R[rows of i, probes of j]|. If H differs from the true Hessian in any entry of block
    (i, j), the error is nonzero with probability 1. The gate: max rel_error <= tolerance.

    The Gauss-Newton part G (:func:`gauss_newton`, autograd) splits each block:
    fro_outer = ||G_ij||_F, fro_functional = ||H_ij - G_ij||_F, functional_share =
    fro_functional / (fro_outer + fro_functional); fro_exact = ||H_ij||_F.
    """
    from curvlinops import HessianLinearOperator

    model = model.to(torch.float64)
    images = images.to(torch.float64)
    H = torch.as_tensor(H, dtype=torch.float64, device=images.device)
    _, _, off = group_layout(model, block)
    P, n = int(off[-1]), len(off) - 1
    if H.shape != (P, P):
        raise ValueError(f"saved Hessian has shape {tuple(H.shape)}, the model's groups need ({P}, {P})")
    gen = torch.Generator().manual_seed(seed)
    V = torch.zeros(P, n * probes, dtype=torch.float64)
    for j in range(n):
        V[off[j] : off[j + 1], j * probes : (j + 1) * probes] = torch.randn(
            int(off[j + 1] - off[j]), probes, generator=gen, dtype=torch.float64
        )
    V = V.to(images.device)
    params = [p for _, p in model.group_params(block).items()]
    for p in model.parameters():
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    t0 = time.perf_counter()
    op = HessianLinearOperator(
        model, torch.nn.CrossEntropyLoss(), params, [(images, labels)], check_deterministic=False
    )
    R = op @ V
    t_ref = time.perf_counter() - t0
    HV = H @ V
    t0 = time.perf_counter()
    G = gauss_newton(model, block, images, labels)
    t_gn = time.perf_counter() - t0
    scale = float(R.abs().max())
    rows = []
    names = list(model.group_params(block))
    for (ri, cj, Hb), (_, _, Gb) in zip(block_pairs(H, off, names), block_pairs(G, off, names)):
        i, j = names.index(ri), names.index(cj)
        cols = slice(j * probes, (j + 1) * probes)
        ref = R[off[i] : off[i + 1], cols]
        rows.append(_error_row(ri, cj, HV[off[i] : off[i + 1], cols] - ref, ref, scale, Hb, Gb, Hb - Gb))
    max_rel = max(r["rel_error"] for r in rows)
    return {
        "check": "probes",
        "blocks": rows,
        "max_rel_error": max_rel,
        "tolerance": tolerance,
        "passed": bool(max_rel <= tolerance and np.isfinite(max_rel)),
        "n_probes": int(n * probes),
        "probes_per_group": int(probes),
        "probe_seed": int(seed),
        "seconds_curvlinops": t_ref,
        "seconds_gauss_newton": t_gn,
        "n_params": P,
        "batch_size": int(len(images)),
    }
