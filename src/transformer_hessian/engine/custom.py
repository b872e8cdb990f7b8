"""Custom ``torch.autograd.Function``s in a captured model.

The capture traces a Function's ``forward`` like any other code and never calls its ``backward``,
so where the backward is not the derivative of the forward (a straight-through estimator, a
surrogate gradient, a clipped or rescaled backward) the engine's Hessian is the forward's, not
what autograd's double backward would give. Each Function defined outside torch is therefore
marked while the model is exported: the operations its forward records carry the Function's
name and source line (``node.meta["custom"]``), and an operation so marked on the way from a
selected parameter to the loss is refused unless the user asks for the forward to be
differentiated (``custom_functions="forward"``). A forward that cannot be traced (one that calls
numpy) is named the same way.
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager

import torch
import torch.fx.traceback as fx_traceback

#: the key of the mark in a node's ``meta["custom"]``
MARK = "autograd_function"
#: what ``custom_functions=`` takes
CHOICES = ("refuse", "forward")


def check_choice(custom_functions) -> None:
    """ValueError unless ``custom_functions`` is one of :data:`CHOICES`."""
    if custom_functions not in CHOICES:
        raise ValueError(f"custom_functions: 'refuse' or 'forward', got {custom_functions!r}")


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def describe(cls) -> str:
    """'module.Name (file:line)' of a Function class, its forward's line."""
    fwd = cls.__dict__.get("forward")
    fn = getattr(fwd, "__func__", fwd)
    try:
        where = f"{inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        where = "source unknown"
    return f"{cls.__module__}.{cls.__qualname__} ({where})"


class ForwardFailed(RuntimeError):
    """A custom Function's forward could not be traced."""


@contextmanager
def marked_functions():
    """While active: every ``torch.autograd.Function`` subclass defined outside torch has its
    ``forward`` run inside an annotation naming it (read back by :func:`mark_of`), and a forward
    that raises is recorded in the yielded list (the capture names it)."""
    failed: list[str] = []
    saved = {}
    for cls in set(_subclasses(torch.autograd.Function)):
        fwd = cls.__dict__.get("forward")
        if fwd is None or cls.__module__.split(".")[0] == "torch" or not isinstance(fwd, staticmethod):
            continue
        saved[cls] = fwd
        cls.forward = staticmethod(_marked(cls, fwd.__func__, failed))
    try:
        with fx_traceback.preserve_node_meta():
            yield failed
    finally:
        for cls, fwd in saved.items():
            cls.forward = fwd


def _marked(cls, fn, failed):
    name = describe(cls)

    def forward(*args, **kwargs):
        with fx_traceback.annotate({MARK: name}):
            try:
                return fn(*args, **kwargs)
            except Exception:
                failed.append(name)
                raise

    forward.__wrapped__ = fn
    return forward


def mark_of(node) -> str | None:
    """The Function whose forward recorded ``node`` (None: none)."""
    custom = node.meta.get("custom")
    return custom.get(MARK) if isinstance(custom, dict) else None
