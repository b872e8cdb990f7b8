"""Problem shapes of the Hessian benchmark (``bench hessian`` and ``--paper-shape``)."""

from __future__ import annotations

#: Problem shapes of the benchmark: image side, patch side (L = (image / patch)^2 tokens),
#: channels and classes; d_k = d and d_ff = 4 d for every width d.
SHAPES = {
    "default": {"image_size": 8, "patch_size": 2, "channels": 1, "num_classes": 10},
    # the paper's Hessian experiment: MNIST 28x28, patch 4 -> 49 tokens (arXiv 2510.16927, Sec. 5)
    "paper": {"image_size": 28, "patch_size": 4, "channels": 1, "num_classes": 10},
}


def shape_description(shape: str) -> str:
    """'28x28 images, patch 4, L=49, 10 classes' for a SHAPES key."""
    sh = SHAPES[shape]
    L = (sh["image_size"] // sh["patch_size"]) ** 2
    return f"{sh['image_size']}x{sh['image_size']} images, patch {sh['patch_size']}, L={L}, {sh['num_classes']} classes"
