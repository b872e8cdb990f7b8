"""The one lookup of result paths: rule -> output key -> path template, collected from their
producers, and the resolution of a registry :class:`~transformer_hessian.studies.entry.Output`.

Every path template is typed once, by whoever produces it: the ``OUTPUTS`` mapping of
:mod:`transformer_hessian.train.result` (the ``train`` rule) and of every study's
``studies/<name>/result.py`` (found by :func:`transformer_hessian.studies.study_parts`). A template
holds Snakemake wildcards (``results/{exp}/theory/{stage}.json``). The rule files take their
``output:`` from :func:`produced` (``workflow/rules/common.smk``); the registry's inputs and gates
are :class:`~transformer_hessian.studies.entry.Output` records, which :func:`resolve` turns into
paths for a config and :func:`placeholder_path` into the template ``paper/README.md`` shows. An
unknown rule, output key or wildcard is a ``KeyError`` that names what is known.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from ..studies import study_parts
from ..studies.entry import Output
from ..train import result as train_result

__all__ = ["fill", "placeholder_path", "produced", "resolve", "template", "templates", "wildcard_names"]

#: A Snakemake wildcard of a template (``{exp}``; the templates use no constraints inside braces).
_WILDCARD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@functools.cache
def _collected() -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for module in [train_result, *study_parts("result")]:
        for rule, keys in getattr(module, "OUTPUTS", {}).items():
            if rule in out:
                raise ValueError(f"rule {rule!r}: its outputs are declared twice (again in {module.__name__}.OUTPUTS)")
            out[rule] = dict(keys)
    return out


def templates() -> dict[str, dict[str, str]]:
    """Every rule's outputs, rule -> output key -> path template (a copy)."""
    return {rule: dict(keys) for rule, keys in _collected().items()}


def _outputs_of(rule: str) -> dict[str, str]:
    known = _collected()
    if rule not in known:
        raise KeyError(
            f"no rule {rule!r} declares its outputs (OUTPUTS of train_result or of a study's result); "
            f"known: {sorted(known)}"
        )
    return known[rule]


def template(rule: str, key: str) -> str:
    """The path template of output ``key`` of rule ``rule``; a ``KeyError`` naming the known rules
    (or the rule's keys) otherwise."""
    outputs = _outputs_of(rule)
    if key not in outputs:
        raise KeyError(f"rule {rule!r} has no output {key!r}; its outputs: {list(outputs)}")
    return outputs[key]


def wildcard_names(path: str) -> list[str]:
    """The Snakemake wildcards of ``path``, in order of appearance (repeated ones once)."""
    return list(dict.fromkeys(_WILDCARD.findall(path)))


def fill(path: str, wildcards: Mapping[str, str]) -> str:
    """``path`` with the given wildcards filled in and the others left as ``{name}``; a ``KeyError``
    for a wildcard the template does not have."""
    unknown = sorted(set(wildcards) - set(wildcard_names(path)))
    if unknown:
        raise KeyError(f"{path!r} has no wildcard {unknown}; its wildcards: {wildcard_names(path)}")
    return _WILDCARD.sub(lambda m: str(wildcards.get(m.group(1), m.group(0))), path)


def produced(rule: str, **wildcards: str) -> dict[str, str]:
    """The outputs of ``rule`` as output key -> path, the given wildcards filled in and the others
    left as ``{name}`` for Snakemake (``produced("dynamics", exp="hessian_digits")``); the rule files'
    ``output:`` (``**produced(...)``, through ``workflow/rules/common.smk``)."""
    outputs = _outputs_of(rule)
    unused = sorted(set(wildcards) - {name for path in outputs.values() for name in wildcard_names(path)})
    if unused:
        raise KeyError(f"rule {rule!r}: no output has the wildcard {unused}; its outputs: {outputs}")
    return {
        key: fill(path, {name: value for name, value in wildcards.items() if name in wildcard_names(path)})
        for key, path in outputs.items()
    }


def placeholder_path(output: Output) -> str:
    """The template of ``output`` with its wildcard values as written (``results/{hexp}/metrics.json``
    for ``Output("train", "metrics", exp="{hexp}")``): what ``paper/README.md`` shows. Every
    wildcard of the template must be given."""
    path = template(output.rule, output.key)
    missing = [name for name in wildcard_names(path) if name not in dict(output.wildcards)]
    if missing:
        raise KeyError(f"{output}: the wildcards {missing} of {path!r} are not given")
    return fill(path, dict(output.wildcards))


def resolve(output: Output, values: Mapping[str, Any]) -> str:
    """The path of ``output`` for a config: :func:`placeholder_path` with the registry's
    placeholders filled in (``values``: ``hexp``, ``lexp``, ``sexp``, ``cfg``)."""
    return placeholder_path(output).format(**values)
