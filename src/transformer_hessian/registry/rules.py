"""What the Snakemake figure rules are made of, generated from the registry: resolved inputs,
captions for a config, notebook output parameters and one spec per rule (``workflow/rules/figures.smk``
loops over :func:`rule_specs`)."""

from __future__ import annotations

from typing import Any

from ..studies.entry import Figure
from ..util.datanames import DATA_SETS, library_name
from .figures import enabled, groups
from .outputs import resolve

__all__ = ["caption", "output_parameters", "resolve_inputs", "rule_specs"]

#: Data set names in captions, and what the embedded default's digits stand in for.
_DATASET = {name: library_name(name, possessive=True) for name in DATA_SETS}


def _template_values(config: dict) -> dict[str, Any]:
    lexp = config["landscape"]["experiment"]
    sexp = (config.get("spectrum") or {}).get("experiment") or lexp
    return {"hexp": config["hessian"]["experiment"], "lexp": lexp, "sexp": sexp, "cfg": config}


def resolve_inputs(fig: Figure, config: dict) -> dict[str, str]:
    """The input paths of ``fig`` for ``config``: each :class:`~..studies.entry.Output` through its
    producer's path template (:func:`.outputs.resolve`), the placeholders filled in."""
    values = _template_values(config)
    return {name: resolve(output, values) for name, output in fig.inputs.items()}


def _data_name(config: dict, exp: str, stands_in_for: str) -> str:
    dataset = config["experiments"][exp]["dataset"]
    name = _DATASET.get(dataset, dataset)
    from ..util.datanames import stands_in

    return f"{name}, stand-in for {stands_in_for}" if stands_in(dataset, stands_in_for) else name


def caption(fig: Figure, config: dict) -> str:
    """The caption of ``fig`` for the validated ``config`` (data set names and granularity filled in)."""
    land = config["landscape"]
    granularity = (
        "batch-by-batch (batch size {})".format(land["batch_size"])
        if land["granularity"] == "batch"
        else "sample-by-sample"
    )
    scaling_set = config["scaling"]["dataset"]
    return fig.caption.format(
        hessian_data=_data_name(config, config["hessian"]["experiment"], "MNIST"),
        landscape_data=_data_name(config, land["experiment"], "CIFAR-100"),
        spectrum_data=_data_name(config, _template_values(config)["sexp"], "CIFAR-100"),
        granularity=granularity,
        scaling_data=_DATASET.get(scaling_set, scaling_set)
        + (", stand-in for MNIST / CIFAR-100" if DATA_SETS[scaling_set].stands_in_for else ""),
    )


def output_parameters(figs: list[Figure]) -> dict[str, str]:
    """Notebook output parameters of one rule: ``out`` for a lone figure, ``out_<id>`` per figure
    of a group, ``table_<stem>`` per table; values are paths without suffix."""
    outs = {"out": figs[0].out} if len(figs) == 1 else {f"out_{f.id}": f.out for f in figs}
    for fig in figs:
        outs.update({f"table_{stem}": f"paper/tables/{stem}" for stem in fig.tables})
    return outs


def rule_specs(config: dict) -> list[dict[str, Any]]:
    """What ``figures.smk`` needs to define each figure rule, one dict per rule (group).

    Keys: ``name`` (rule), ``notebook`` (file name under notebooks/), ``inputs`` (resolved),
    ``figures`` (ids drawn), ``pdf`` / ``png`` (lists of paths), ``tables`` (table stems),
    ``executed``, ``outs`` (``-p`` output parameters: name -> path without suffix), ``caption``
    (the figures' captions joined), ``literal`` (``-p key value`` of the literal params,
    shell-quoted), ``paper`` and ``label``.
    """
    import shlex

    specs = []
    for name, figs in groups().items():
        figs = [f for f in figs if enabled(f, config)]
        if not figs:
            continue
        first = figs[0]
        literal = " ".join(f"-p {k} {shlex.quote(str(v))}" for k, v in first.params.items())
        specs.append(
            {
                "name": name,
                "notebook": first.notebook,
                "inputs": resolve_inputs(first, config),
                "figures": [f.id for f in figs],
                "pdf": [f"{f.out}.pdf" for f in figs],
                "png": [f"{f.out}.png" for f in figs],
                "tables": [stem for f in figs for stem in f.tables],
                "executed": first.executed,
                "outs": output_parameters(figs),
                "gate": sorted({resolve(t, _template_values(config)) for f in figs for t in f.gate}),
                "caption": " ".join(caption(f, config) for f in figs),
                "literal": literal,
                "paper": ", ".join(f.paper for f in figs),
                "label": ", ".join(f.label for f in figs),
            }
        )
    return specs
