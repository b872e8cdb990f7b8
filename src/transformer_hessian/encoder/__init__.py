"""Exact Hessians of any ``torch.nn.TransformerEncoderLayer`` / ``TransformerEncoder`` by curvature propagation.

:func:`exact_hessian` (dense), :func:`hessian_blocks` (named blocks), :func:`split_heads`
(per-head W_Q, W_K, W_V blocks of the packed in_proj). Derivation: docs/theory.md, section
"Curvature propagation through torch encoder layers".
"""

from .api import exact_hessian, hessian_blocks, split_heads

__all__ = ["exact_hessian", "hessian_blocks", "split_heads"]
