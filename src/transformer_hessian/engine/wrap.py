"""The model as ``torch.export`` sees it: the call with its output picked and its loss, each
tensor of the call once, custom autograd.Functions marked (:mod:`.custom`)."""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.utils import _pytree as pytree

from .custom import ForwardFailed, marked_functions


class Wrapped(nn.Module):
    """The model, the output it returns (:func:`pick_output`), the
    optional head on the token mean, and a callable loss."""

    def __init__(self, model: nn.Module, head: nn.Module | None, loss_fn):
        super().__init__()
        self.model, self.head, self.loss_fn = model, head, loss_fn

    def forward(self, args, kwargs, targets):
        """The model's output (through the head), or the callable loss of it and ``targets``."""
        out = pick_output(self.model(*args, **kwargs))
        if self.head is not None:
            out = self.head(out.mean(1))
        return out if self.loss_fn is None else self.loss_fn(out, targets)


def pick_output(out):
    """A model's output tensor: the tensor itself, ``out.logits`` (Hugging Face), the first field
    of any other Hugging Face output (``last_hidden_state`` of ``BertModel``, ``T5EncoderModel``,
    ``CLIPTextModel``), or the first element of a tuple or list."""
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if callable(getattr(out, "to_tuple", None)):  # a Hugging Face ModelOutput: its fields that are set
        out = out.to_tuple()
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise TypeError(
        "model output: expected a tensor, an object with .logits, a Hugging Face output or a tuple, "
        f"got {type(out).__name__}"
    )


def export(wrapped, call: tuple, mode):
    """``torch.export`` of the wrapped model (under ``mode``, a torch function mode, unless None),
    custom autograd.Functions marked (:mod:`.custom`)."""
    with marked_functions() as failed, mode if mode is not None else contextlib.nullcontext():
        try:
            return torch.export.export(wrapped, call, strict=False)
        except Exception as err:  # torch's own message says what stopped the capture
            what = f"{type(err).__name__}: {err}"
            if failed:
                raise ForwardFailed(f"model: the forward of the autograd.Function {failed[-1]} failed: {what}") from err
            raise RuntimeError(f"model: torch.export could not capture it: {what}") from err


def distinct(tree):
    """``tree`` with every tensor that occurs a second time replaced by a copy."""
    seen: set[int] = set()

    def once(x):
        if isinstance(x, torch.Tensor):
            if id(x) in seen:
                return x.clone()
            seen.add(id(x))
        return x

    return pytree.tree_map(once, tree)
