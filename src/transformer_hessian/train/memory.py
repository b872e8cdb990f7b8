"""Memory estimate of training, checked before anything is allocated: parameters counted on the
``meta`` device, bytes of weights, gradients, AdamW moments and kept activations, compared with
what the device has (:mod:`transformer_hessian.util.resources`)."""

from __future__ import annotations

import torch

from ..core.model import ModelConfig, ViT, count_parameters
from ..errors import ConfigError


def estimate_training_bytes(model_cfg: ModelConfig, batch_size: int) -> tuple[int, int]:
    """``(parameters, bytes)``: a lower estimate of what training allocates, without allocating.

    Parameters are counted on the ``meta`` device. Bytes = 16 per parameter (float32 weights,
    gradients and AdamW's two moments) + float32 activations kept for the backward pass, about
    ``batch * depth * (6 L d + 2 L d_ff + 2 L^2)`` numbers.
    """
    with torch.device("meta"):
        n = count_parameters(ViT(model_cfg))
    L, c = model_cfg.num_tokens, model_cfg
    acts = batch_size * c.depth * (6 * L * c.width + 2 * L * c.d_ff + 2 * L * L)
    return n, 16 * n + 4 * acts


def check_training_memory(name: str, model_cfg: ModelConfig, batch_size: int, dev) -> None:
    """ConfigError naming ``experiments.<name>`` and what to lower when training needs more memory
    (:func:`estimate_training_bytes`) than ``dev`` has available; nothing where that is unknown."""
    from ..util.resources import available_bytes, format_bytes

    n, need = estimate_training_bytes(model_cfg, batch_size)
    have = available_bytes(dev)
    if have is not None and need > have:
        raise ConfigError(
            f"experiments.{name}.model: training needs about {format_bytes(need)} ({n:,} parameters, batch "
            f"{batch_size}) but only {format_bytes(have)} is available on {dev}; lower "
            f"experiments.{name}.model.width / d_ff / d_k / depth or experiments.{name}.train.batch_size"
        )
