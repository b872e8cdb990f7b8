"""Reproduction pipeline for "Closing the Curvature Gap: Full Transformer Hessians"."""

__version__ = "0.1.0"

#: Order of the parameter groups of one block in every Hessian of the project.
GROUPS = ("W_Q", "W_K", "W_V", "W_1", "W_2")
#: The self-attention groups among them (Theorem 1 of arXiv 2510.16927).
ATTENTION_GROUPS = ("W_Q", "W_K", "W_V")
#: LayerNorm scales and shifts of one block (Appendix A.1, Figure 10).
LN_GROUPS = ("gamma1", "beta1", "gamma2", "beta2")
#: The nine groups of one block, matrix groups first (same order as GROUPS), then LN_GROUPS.
ALL_GROUPS = GROUPS + LN_GROUPS

# The names live here, free of torch, so that plotting code can use them without importing it.


def __getattr__(name: str):
    """``from transformer_hessian import exact_hessian`` without importing torch for the names above."""
    if name in ("exact_hessian", "hessian_blocks", "split_heads"):
        from . import encoder

        return getattr(encoder, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
