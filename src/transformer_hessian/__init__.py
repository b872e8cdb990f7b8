"""Exact Hessians of Transformers, and the reproduction pipeline of "Closing the Curvature Gap: Full
Transformer Hessians and Their Implications for Scaling Laws" (arXiv 2510.16927).

The names in ``__all__`` are the library's stable face, grouped below and documented with an
example each in docs/api.md; everything else in the package may move between releases (an old
module path that moved keeps importing, with a ``DeprecationWarning`` naming its new home).
They are loaded on first use, so ``import transformer_hessian`` does not import torch.
"""

from __future__ import annotations

from . import _moved
from .util.lazy import lazy_getattr

__version__ = "0.1.0"

#: Order of the parameter groups of one block in every Hessian of the project.
GROUPS = ("W_Q", "W_K", "W_V", "W_1", "W_2")
#: The self-attention groups among them (Theorem 1 of arXiv 2510.16927).
ATTENTION_GROUPS = ("W_Q", "W_K", "W_V")
#: LayerNorm scales and shifts of one block (Appendix A.1, Figure 10).
LN_GROUPS = ("gamma1", "beta1", "gamma2", "beta2")
#: The nine groups of one block, matrix groups first (same order as GROUPS), then LN_GROUPS.
ALL_GROUPS = GROUPS + LN_GROUPS

#: The public API by group: group -> {name: the module (relative to this package) that defines it}.
API: dict[str, dict[str, str]] = {
    "exact Hessians of any torch model": {
        "exact_hessian": "engine.api",
        "hessian_blocks": "engine.api",
        "hvp": "engine.api",
        "HessianOperator": "engine.api",
        "split_heads": "encoder",
    },
    "the paper's model": {
        "ViT": "core.model",
        "ModelConfig": "core.model",
        "count_parameters": "core.model",
    },
    "dense Hessians of one block's parameter groups": {
        "compute_hessian": "core.hessian",
        "hessian_all_groups": "core.hessian",
        "block_norms": "core.hessian",
    },
    "closed forms of the paper's block (Theorems 1-5, Lemma 1)": {
        "model_loss_hessian": "theory",
        "block_loss_hessian": "theory",
        "block_output_hessian": "theory",
        "attention_loss_hessian": "theory",
        "layernorm_hessian": "theory",
        "ffn_second_derivatives": "theory",
        "softmax_row_hessian": "theory",
    },
    "matrix-free curvature (Krylov)": {
        "FlatModel": "core.krylov",
        "hvp_operator": "core.krylov",
        "lanczos": "core.krylov",
        "top_eigenpair": "core.krylov",
        "batched_hvp": "core.spectral",
        "lanczos_tridiagonal": "core.spectral",
        "top_eigenvalues": "core.spectral",
        "hutchinson_trace": "core.spectral",
        "slq_density": "core.spectral",
    },
    "bounds (Theorems 1 and 6, Lemma 4, and the project's own)": {
        "attention_bound": "studies.bounds.attention",
        "attention_bound_paper": "studies.bounds.attention",
        "block_bound": "studies.bounds.block",
        "block_bound_ce": "studies.bounds.block",
        "block_bound_paper": "studies.bounds.block",
        "lemma4_bounds": "studies.bounds.block",
    },
}
_OWNER = {name: module for names in API.values() for name, module in names.items()}

__all__ = ["ALL_GROUPS", "ATTENTION_GROUPS", "GROUPS", "LN_GROUPS", *_OWNER]

_moved.install()


# A public name is imported from the module that defines it on first use (no torch import before).
__getattr__ = lazy_getattr(__name__, {name: f".{module}" for name, module in _OWNER.items()})


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_OWNER))
