"""Bounds on the spectral norm of the self-attention and Transformer-block Hessians
(arXiv 2510.16927, Theorems 1 and 6, Lemma 4) next to the project's own proven bounds
(Theorem 7's right-hand side is :mod:`transformer_hessian.theorem7`).
See docs/theory.md ("Theorem 1", "Theorem 6", "Lemma 4")."""

# Imported on first use (PEP 562), so that ``bounds.plot`` can be imported without torch.
_HOME = {
    "attention_bound": "attention",
    "attention_bound_paper": "attention",
    "block_bound": "block",
    "block_bound_ce": "block",
    "block_bound_from_loss_derivatives": "block",
    "block_bound_paper": "block",
    "lemma4_bounds": "block",
}

__all__ = [
    "attention_bound",
    "attention_bound_paper",
    "block_bound",
    "block_bound_ce",
    "block_bound_from_loss_derivatives",
    "block_bound_paper",
    "lemma4_bounds",
]


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
