"""Closed-form Jacobians and Hessians of the post-norm Transformer block.

One module per concept: ``vec`` (vec_r, Kronecker and commutation algebra, softmax rows),
``layernorm`` (Theorems 2-3), ``ffn`` (Lemma 1), ``attention`` (Theorem 1's derivatives),
``layout`` (parameter-group offsets), ``reference`` (the block's materialised Theorems 4-5),
``factored`` (the same numbers through the per-token factorisation), ``packed`` (sums over
tokens as gemms, packed symmetric index pairs), ``reduced`` (the scores' W_QK = W_Q W_K^T and
its expansion to W_Q, W_K), ``loss`` (Gauss-Newton
split for any loss of the block output, MSE) and ``model_loss`` (the pipeline's cross-entropy).

Paper conventions throughout: row-wise vectorisation vec_r (``W.reshape(-1)``), numerator
layout, stacked second derivatives d^2N/(dW_i dW_j) of shape (n d * p_i q_i) x (p_j q_j),
parameter groups in the order ``transformer_hessian.GROUPS``. Nothing here uses autograd;
every function gives the same numbers under ``torch.no_grad()``. Derivations: docs/theory.md.
"""

from .. import GROUPS
from .attention import (
    attention_forward,
    attention_hessian_from_loss_derivatives,
    attention_jacobians,
    attention_loss_hessian,
    attention_loss_hessian_parts,
    attention_outer_kron,
    attention_score_jacobians,
    attention_second_derivatives,
)

# Public name of the factored path's per-token factors (used by bounds/block.py).
from .factored import _token_factors as token_factors
from .ffn import ffn_forward, ffn_jacobians, ffn_second_derivatives
from .layernorm import (
    layernorm_forward,
    layernorm_hessian,
    layernorm_hessian_contract,
    layernorm_jacobian,
)
from .layout import HessianResult, blocks_to_dense, dense_to_blocks, detached_block_params, group_offsets, group_shapes
from .loss import block_hessian_from_loss_derivatives, block_loss_hessian, block_loss_hessian_parts
from .model_loss import model_loss_hessian, model_loss_hessian_all_groups, model_loss_hessian_parts
from .reference import block_forward, block_jacobians, block_output_hessian
from .vec import (
    commutation_matrix,
    kron,
    softmax_row_hessian,
    softmax_row_jacobian,
    unvec_r,
    vec_r,
)

__all__ = [
    "GROUPS",
    "HessianResult",
    "attention_forward",
    "attention_hessian_from_loss_derivatives",
    "attention_jacobians",
    "attention_loss_hessian",
    "attention_loss_hessian_parts",
    "attention_outer_kron",
    "attention_score_jacobians",
    "attention_second_derivatives",
    "block_forward",
    "block_hessian_from_loss_derivatives",
    "block_jacobians",
    "block_loss_hessian",
    "block_loss_hessian_parts",
    "block_output_hessian",
    "blocks_to_dense",
    "commutation_matrix",
    "dense_to_blocks",
    "detached_block_params",
    "ffn_forward",
    "ffn_jacobians",
    "ffn_second_derivatives",
    "group_offsets",
    "group_shapes",
    "kron",
    "layernorm_forward",
    "layernorm_hessian",
    "layernorm_hessian_contract",
    "layernorm_jacobian",
    "model_loss_hessian",
    "model_loss_hessian_all_groups",
    "model_loss_hessian_parts",
    "softmax_row_hessian",
    "softmax_row_jacobian",
    "token_factors",
    "unvec_r",
    "vec_r",
]
