"""How good are the curvature approximations on a Transformer: the generalized Gauss-Newton, K-FAC
and EK-FAC as curvlinops computes them, and the layer-block-diagonal Hessian, against the exact
Hessian of the causal LM loss (:func:`.compute.hessian_stage`), on the decoder's weight matrices.

curvlinops sees the decoder through ``engine.ops.losses.NextTokenLogits`` (logits of the
predicted positions, ``(B (T-1), V)``) and ``nn.CrossEntropyLoss`` against the next tokens: the mean over the counted
positions, the causal LM loss of the engine. K-FAC and EK-FAC use the type-2 Fisher (the exact
GGN's factors, no Monte Carlo) with the ``expand`` approximation of weight sharing across tokens;
they take ``nn.Linear`` layers only, so the tied token embedding is outside this comparison.
curvlinops runs inside ``sdpa_kernel(SDPBackend.MATH)``: its GGN takes forward-mode derivatives,
which torch's fused attention kernels do not have.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from ...engine.ops.losses import NextTokenLogits
from ...util.files import log

__all__ = ["METHODS", "approximation_errors", "approximations", "dense_curvatures", "layers_of"]

#: The approximations compared, in the order of the table.
METHODS = ("GGN", "K-FAC", "EK-FAC", "block-diagonal")


def weight_names(depth: int) -> list[str]:
    """The decoder's linear weight matrices, in the Hessian's row order (:func:`.compute.hessian_params` without ``tok.weight``)."""
    from .compute import hessian_params

    return hessian_params(depth)[1:]


def dense_curvatures(module: nn.Module, params: list, data: list, kfac_approx: str) -> dict[str, torch.Tensor]:
    """Dense GGN, K-FAC and EK-FAC (curvlinops; type-2 Fisher, ``kfac_approx`` for weights shared
    over tokens) of the mean cross-entropy of ``module`` on ``data`` w.r.t. ``params``, in their
    order, each an identity of P columns through the operator. Inside ``sdpa_kernel(MATH)``: torch
    has no forward AD through its fused attention kernels."""
    from curvlinops import EKFACLinearOperator, GGNLinearOperator, KFACLinearOperator
    from torch.nn.attention import SDPBackend, sdpa_kernel

    P = sum(p.numel() for p in params)
    eye = torch.eye(P, dtype=torch.float64, device=params[0].device)
    kfac = {"fisher_type": "type-2", "kfac_approx": kfac_approx}
    out = {}
    for name, cls, kw in (
        ("GGN", GGNLinearOperator, {}),
        ("K-FAC", KFACLinearOperator, kfac),
        ("EK-FAC", EKFACLinearOperator, kfac),
    ):
        with sdpa_kernel(SDPBackend.MATH):
            op = cls(module, nn.CrossEntropyLoss(), params, data, check_deterministic=False, **kw)
            out[name] = (op @ eye).detach()
    return out


def approximations(model, batch: torch.Tensor, depth: int) -> dict[str, torch.Tensor]:
    """Dense GGN, K-FAC and EK-FAC (curvlinops, ``expand``: a loss per token) of the causal LM loss
    on ``batch`` w.r.t. :func:`weight_names`, float64."""
    flat = NextTokenLogits(model.double())
    named = dict(model.named_parameters())
    params = [named[n] for n in weight_names(depth)]
    return dense_curvatures(flat, params, [(batch, batch[:, 1:].reshape(-1))], "expand")


def _rel(A: torch.Tensor, H: torch.Tensor) -> tuple[float, float]:
    """(Frobenius, spectral) norm of ``A - H`` relative to ``H``'s."""
    D = A - H
    fro = float(torch.linalg.matrix_norm(D, "fro") / torch.linalg.matrix_norm(H, "fro"))
    spec = float(torch.linalg.eigvalsh(D).abs().max() / torch.linalg.eigvalsh(H).abs().max())
    return fro, spec


def layers_of(depth: int) -> list[int]:
    """The layer of each of the decoder's weight matrices (:func:`weight_names`)."""
    return np.repeat(np.arange(depth), len(weight_names(depth)) // depth).tolist()


def approximation_errors(
    H_weights: torch.Tensor, approx: dict[str, torch.Tensor], names: list[str], sizes: list[int], layers: list[int]
) -> dict[str, Any]:
    """Relative errors of each approximation: of the whole matrix over the weights and of each
    diagonal weight block ``names[i]`` of ``sizes[i]`` rows (``blocks``: name -> method -> {"fro",
    "spectral"}); the layer-block-diagonal Hessian keeps the blocks of one layer (``layers[i]``, in
    contiguous runs) together (``off_layer_share``: the Frobenius share of the exact Hessian outside
    them; 0 for one layer); ``whole[m]["norm_ratio"]`` is ``||A||_F / ||H||_F``."""
    offs = np.concatenate([[0], np.cumsum(sizes)])
    layer_of = np.asarray(layers)
    mask = torch.zeros_like(H_weights, dtype=torch.bool)
    for la in np.unique(layer_of):
        idx = np.flatnonzero(layer_of == la)
        a0, a1 = offs[idx[0]], offs[idx[-1] + 1]
        mask[a0:a1, a0:a1] = True
    mats = dict(approx)
    mats["block-diagonal"] = torch.where(mask, H_weights, torch.zeros_like(H_weights))
    whole = {m: dict(zip(("fro", "spectral"), _rel(A, H_weights))) for m, A in mats.items()}
    for m, A in mats.items():  # how much of the Hessian's size the approximation has
        whole[m]["norm_ratio"] = float(torch.linalg.matrix_norm(A) / torch.linalg.matrix_norm(H_weights))
    blocks: dict[str, dict[str, dict[str, float]]] = {}
    for i, n in enumerate(names):
        sl = slice(int(offs[i]), int(offs[i + 1]))
        Hb = H_weights[sl, sl]
        blocks[n] = {m: dict(zip(("fro", "spectral"), _rel(A[sl, sl], Hb))) for m, A in mats.items()}
    off_share = float(torch.linalg.matrix_norm(torch.where(mask, 0.0, H_weights)) / torch.linalg.matrix_norm(H_weights))
    for m in whole:
        log.info(
            "lm approximations: %s relative error %.3g (Frobenius), %.3g (spectral)",
            m,
            whole[m]["fro"],
            whole[m]["spectral"],
        )
    return {
        "methods": [m for m in METHODS if m in mats],
        "whole": whole,
        "blocks": blocks,
        "off_layer_share": off_share,
        "layers": layer_of.tolist(),
    }
