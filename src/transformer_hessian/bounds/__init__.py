"""Bounds on the spectral norm of the self-attention and Transformer-block Hessians
(arXiv 2510.16927, Theorems 1 and 6, Lemma 4) next to the project's own proven bounds, and
Theorem 7's right-hand side (``landscape``).
See docs/theory.md ("Theorem 1", "Theorem 6", "Lemma 4")."""

from .attention import attention_bound, attention_bound_paper
from .block import block_bound, block_bound_ce, block_bound_from_loss_derivatives, block_bound_paper, lemma4_bounds
from .landscape import landscape_bound, landscape_bound_tight

__all__ = [
    "attention_bound",
    "attention_bound_paper",
    "block_bound",
    "block_bound_ce",
    "block_bound_from_loss_derivatives",
    "block_bound_paper",
    "landscape_bound",
    "landscape_bound_tight",
    "lemma4_bounds",
]
