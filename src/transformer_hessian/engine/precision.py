"""The precision a Hessian is computed in.

A float64 model may still compute parts of itself in float32: Hugging Face's Llama, Gemma 3, OLMo 2,
Granite, GLM and Phi-3 upcast-then-downcast RMSNorm, softmax and rotary tables with ``.float()`` and
``dtype=torch.float32``. Such casts make the model's function float32-accurate in those places,
and which ones the engine's answer inherits would depend on ``params=``: an operation on the way
from a selected parameter keeps float64 through a cast (its rule computes at the input's
precision), one that depends on no selected parameter is evaluated by torch as written. So by
default (``precision="float64"``) a float64 model is captured under :class:`Float64Throughout`,
every float32 it asks for is float64, and the Hessian is that of the model computed in float64
throughout: independent of ``params=`` (a block is the full Hessian's sub-block to rounding).
``precision="model"`` keeps the casts as written.

A float32 or bfloat16 model's Hessian is computed in its dtype, with one warning of the relative
error to expect against float64 (measured by ``transformer-hessian bench precision``, a table in
docs/timings.md).
"""

from __future__ import annotations

import warnings

import torch
from torch.overrides import TorchFunctionMode

#: what ``precision=`` takes
CHOICES = ("float64", "model")

#: the relative error of a data-set product against the same model in float64, by the model's dtype
#: (``transformer-hessian bench precision``, docs/timings.md)
EXPECTED_ERROR = {torch.float32: "2e-7", torch.bfloat16: "7e-3", torch.float16: "1e-3"}


class Float64Throughout(TorchFunctionMode):
    """Inside it, every float32 a torch call asks for is float64 (a ``dtype=`` argument, ``.to``,
    ``.float()``): a float64 model that upcasts to float32 computes in float64 throughout. Enter it
    around a reference computation (``torch.autograd.functional.hessian``) to compare it with the
    engine's default on such a model."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        args = tuple(torch.float64 if a is torch.float32 else a for a in args)
        kwargs = {k: torch.float64 if v is torch.float32 else v for k, v in kwargs.items()}
        if getattr(func, "__name__", "") == "float" and args and isinstance(args[0], torch.Tensor):
            return args[0].to(torch.float64)
        return func(*args, **kwargs)


def check_choice(precision) -> None:
    """ValueError unless ``precision`` is one of :data:`CHOICES`."""
    if precision not in CHOICES:
        raise ValueError(f"precision: 'float64' or 'model', got {precision!r}")


def capture_mode(precision: str, dtype: torch.dtype):
    """The mode the model is exported under: :class:`Float64Throughout` for a float64 model at the
    default precision, None otherwise (and a warning for a model in a lower precision)."""
    check_choice(precision)
    if dtype == torch.float64:
        return Float64Throughout() if precision == "float64" else None
    err = EXPECTED_ERROR.get(dtype, "its dtype's rounding")
    warnings.warn(
        f"exact Hessian of a {dtype} model: computed in {dtype}, expect a relative error near {err} against "
        "the same model in float64 (model.double() for float64; accumulate=torch.float64 sums a data set's "
        "batches in float64)",
        stacklevel=3,
    )
    return None
