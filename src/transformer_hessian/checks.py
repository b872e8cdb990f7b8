"""Pipeline-level checks of the closed-form Hessian against curvlinops on the trained model."""

from __future__ import annotations

import time

import numpy as np
import torch

from .hessian import block_pairs, group_layout, hessian_curvlinops
from .model import ViT


def closed_form_check(model: ViT, images, labels, tolerance: float = 1e-8) -> dict:
    """Compare ``theory.model_loss_hessian`` with ``curvlinops.HessianLinearOperator``.

    Per block pair: max absolute error and relative error (max|diff| / max|exact| over the
    whole Hessian, so tiny blocks are not inflated), plus per block the Frobenius norms of
    the outer-product (Gauss-Newton) and functional parts and the functional share
    ||H_f||_F / (||H_o||_F + ||H_f||_F).
    """
    from .theory import model_loss_hessian_parts

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
        err = float((cf - ref).abs().max())
        ref_max = float(ref.abs().max())
        fo = float(torch.linalg.matrix_norm(outer_b, "fro"))
        ff = float(torch.linalg.matrix_norm(func_b, "fro"))
        rows.append({
            "row": ri, "col": cj, "max_abs_error": err,
            "rel_error": err / scale if scale > 0 else err,
            "block_rel_error": err / ref_max if ref_max > 0 else err,
            "fro_exact": float(torch.linalg.matrix_norm(ref, "fro")),
            "fro_outer": fo, "fro_functional": ff,
            "functional_share": ff / (fo + ff) if fo + ff > 0 else 0.0,
        })
    max_rel = max(r["rel_error"] for r in rows)
    return {
        "blocks": rows, "max_rel_error": max_rel, "tolerance": tolerance,
        "passed": bool(max_rel <= tolerance and np.isfinite(max_rel)),
        "seconds_curvlinops": t_ref, "seconds_closed_form": t_cf,
        "n_params": int(off[-1]), "batch_size": int(len(images)),
    }
