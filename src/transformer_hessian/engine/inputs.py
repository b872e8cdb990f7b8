"""A model call's inputs: the positional and keyword arguments of the call, their checks, and the
leaves the capture's placeholders take (in pytree order)."""

from __future__ import annotations

import inspect

import torch
from torch import nn
from torch.utils import _pytree as pytree


def model_inputs(model: nn.Module, inputs) -> tuple[tuple, dict]:
    """(args, kwargs) of the model call: a tensor, a tuple/list of positional inputs, or a dict of
    keyword inputs (Hugging Face's ``input_ids``, ``attention_mask``, ...); ``use_cache=False`` is
    added where the model takes it (a cache in the output stops the capture)."""
    if isinstance(inputs, torch.Tensor):
        args, kwargs = (inputs,), {}
    elif isinstance(inputs, (tuple, list)):
        args, kwargs = tuple(inputs), {}
    elif isinstance(inputs, dict):
        args, kwargs = (), dict(inputs)
    else:
        raise TypeError(
            f"inputs: expected a tensor, a tuple of inputs or a dict of keyword inputs, got {type(inputs).__name__}"
        )
    try:
        takes_cache = "use_cache" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        takes_cache = False
    if takes_cache and "use_cache" not in kwargs:
        kwargs["use_cache"] = False
    return args, kwargs


def check_inputs(inputs) -> None:
    """ValueError naming the input that is empty, on the meta device, or holds nan (or inf outside a mask)."""
    leaves = (
        list(inputs.values())
        if isinstance(inputs, dict)
        else list(inputs)
        if isinstance(inputs, (tuple, list))
        else [inputs]
    )
    for i, x in enumerate(leaves):
        if not isinstance(x, torch.Tensor):
            continue
        where = (
            f"inputs[{list(inputs)[i]!r}]"
            if isinstance(inputs, dict)
            else ("inputs" if len(leaves) == 1 else f"inputs[{i}]")
        )
        if x.device.type == "meta":
            raise ValueError(f"{where}: on the meta device (it has no values)")
        if x.dim() > 0 and x.shape[0] == 0:
            raise ValueError(f"{where}: empty (shape {tuple(x.shape)}); the loss of no samples is undefined")
        if x.dim() > 1 and x.shape[1] == 0:
            raise ValueError(f"{where}: no tokens (shape {tuple(x.shape)})")
        if x.numel() == 0:
            raise ValueError(f"{where}: empty (shape {tuple(x.shape)})")
        if x.is_floating_point() and torch.isnan(x).any():
            raise ValueError(f"{where}: has nan entries")
        if x.is_floating_point() and "mask" not in where and torch.isinf(x).any():
            raise ValueError(f"{where}: has infinite entries")


def user_leaves(model: nn.Module, inputs, targets) -> list:
    """The leaves of a call's inputs and targets, in the order of the capture's user placeholders."""
    args, kwargs = model_inputs(model, inputs)
    return pytree.tree_leaves(((args, kwargs, targets), {}))


def torch_encoder(model) -> bool:
    """Whether ``model`` is torch's ``nn.TransformerEncoderLayer`` or ``nn.TransformerEncoder``."""
    from torch import nn

    return isinstance(model, (nn.TransformerEncoderLayer, nn.TransformerEncoder))


def encoder_call(model, inputs, mask, is_causal, src_key_padding_mask) -> dict:
    """A torch encoder module's keyword inputs for the graph engine (with its key-padding mask)."""
    from torch import nn

    key = "src_mask" if isinstance(model, nn.TransformerEncoderLayer) else "mask"
    kpm = src_key_padding_mask
    if kpm is not None and (not isinstance(kpm, torch.Tensor) or tuple(kpm.shape) != tuple(inputs.shape[:2])):
        shape = tuple(kpm.shape) if isinstance(kpm, torch.Tensor) else type(kpm).__name__
        raise ValueError(f"src_key_padding_mask: expected {tuple(inputs.shape[:2])} (B, T), got {shape}")
    inputs = {"src": inputs, key: mask, "src_key_padding_mask": kpm, "is_causal": bool(is_causal)}
    if mask is None and is_causal:
        T = inputs["src"].shape[1]
        inputs[key] = torch.nn.Transformer.generate_square_subsequent_mask(T, dtype=inputs["src"].dtype)
    return inputs
