"""The parameters a call selects: names or glob patterns over the model's (and a head's)
named parameters, a tied weight once."""

from __future__ import annotations

import fnmatch

from torch import nn


def parameter_names(model: nn.Module, head: nn.Module | None) -> dict[str, nn.Parameter]:
    """The model's parameters by name (a tied weight once, under its first name), then the head's
    as ``head.<name>``."""
    named = dict(model.named_parameters())
    if head is not None:
        named.update({f"head.{n}": p for n, p in head.named_parameters()})
    return named


def select(named: dict[str, nn.Parameter], params, default: list[str] | None = None) -> list[str]:
    """The selected names, in the order asked: names or glob patterns (``"transformer.h.0.attn.*"``);
    a single string is one name or pattern; None selects ``default`` (every name)."""
    if params is None:
        return list(named) if default is None else list(default)
    if isinstance(params, str):
        params = [params]
    try:
        items = list(params)
    except TypeError:
        raise TypeError(f"params: expected names or glob patterns, got {type(params).__name__}") from None
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"params: expected names or glob patterns (str), got {item!r}")
        hits = [item] if item in named else [n for n in named if fnmatch.fnmatchcase(n, item)]
        if not hits:
            raise KeyError(f"params: {item!r} matches no parameter; known: {list(named)}")
        for n in hits:
            if n in out:
                raise ValueError(f"params: {n!r} is selected twice (by {item!r})")
            out.append(n)
    if not out:
        raise ValueError("params: selects no parameter (an empty list); name at least one, or None for every one")
    return out
