"""Reproduction pipeline for "Closing the Curvature Gap: Full Transformer Hessians"."""

__version__ = "0.1.0"

#: Order of the parameter groups of one block in every Hessian of the project.
GROUPS = ("W_Q", "W_K", "W_V", "W_1", "W_2")
