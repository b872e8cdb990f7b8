"""The ``architectures:`` config section (the architecture study, ``studies/architectures/``): the base architecture, its one-factor variants and the
cross-key checks (each error names the key to change). No torch here: the config check imports it.

Every default lives in the schema (``src/transformer_hessian/config/schema/config.schema.yaml``); this
module only reads a validated section."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..util.resources import encoder_parameter_count

__all__ = ["ARCH_KEYS", "Arch", "ArchKeys", "architectures", "config_errors"]


@dataclass(frozen=True)
class ArchKeys:
    """The keys an architecture is made of, the one dataclass of them: post-norm (``norm_first``
    false) or pre-norm, heads, ``relu``/``gelu``, layers. The config section ``architectures.base``
    is this with the schema's parsing (:class:`.settings.ArchitecturesBase`); a study's architecture
    adds its name (:class:`Arch`)."""

    norm_first: bool
    nhead: int
    activation: str
    num_layers: int


#: The keys an architecture is made of (``architectures.base``; a variant overrides some of them).
ARCH_KEYS = tuple(f.name for f in dataclasses.fields(ArchKeys))


@dataclass(frozen=True)
class Arch(ArchKeys):
    """One architecture of the study: the base keys (:class:`ArchKeys`), its ``name`` (``base`` or
    the variant's key) and what it changes relative to the base (``changes``: key -> value, empty
    for the base)."""

    name: str = "base"
    changes: tuple[tuple[str, Any], ...] = ()

    def label(self) -> str:
        """Short text: ``base`` or ``name (key=value)``."""
        if not self.changes:
            return self.name
        return f"{self.name} (" + ", ".join(f"{k}={v}" for k, v in self.changes) + ")"


def architectures(section: Mapping[str, Any]) -> list[Arch]:
    """The base and every variant of a validated ``architectures`` section, base first."""
    base = dict(section["base"])
    out = [Arch(name="base", **{k: base[k] for k in ARCH_KEYS})]
    for name, over in (section.get("variants") or {}).items():
        merged = {**base, **over}
        changes = tuple((k, over[k]) for k in ARCH_KEYS if k in over and over[k] != base[k])
        out.append(Arch(name=name, **{k: merged[k] for k in ARCH_KEYS}, changes=changes))
    return out


def config_errors(config: Mapping[str, Any], dataset_shapes: Mapping[str, tuple]) -> list[str]:
    """Cross-key problems of an enabled ``architectures:`` section (each line names its key);
    ``dataset_shapes``: data set -> (side, ...), :data:`transformer_hessian.config.checks.DATASET_SHAPES`."""
    s = config.get("architectures") or {}
    if not s.get("enabled"):
        return []
    out = []
    d = s["d_model"]
    exp = (config.get("experiments") or {}).get((config.get("hessian") or {}).get("experiment"), {})
    if exp.get("dataset") in dataset_shapes:
        side = dataset_shapes[exp["dataset"]][0]
        if side % s["patch_size"]:
            out.append(
                f"  architectures.patch_size: {s['patch_size']} does not divide the {side}x{side} images of "
                f"{exp['dataset']!r} (the data set of hessian.experiment)"
            )
    if "base" in (s.get("variants") or {}):
        out.append("  architectures.variants.base: 'base' names the base architecture; rename the variant")
    seen = {}
    for arch in architectures(s):
        where = "architectures.base" if arch.name == "base" else f"architectures.variants.{arch.name}"
        if d % arch.nhead:
            out.append(f"  {where}.nhead: {arch.nhead} does not divide architectures.d_model = {d}")
        if arch.name != "base" and not arch.changes:
            out.append(f"  {where}: changes nothing relative to architectures.base; set a key that differs")
        key = tuple(getattr(arch, k) for k in ARCH_KEYS)
        if key in seen:
            out.append(f"  {where}: the same architecture as {seen[key]}; remove one of them")
        seen.setdefault(key, where)
        P = encoder_parameter_count(d, s["dim_feedforward"], arch.num_layers, s["bias"])
        if P > s["max_params"]:
            out.append(
                f"  {where}: the encoder has P = {P} parameters, more than architectures.max_params = "
                f"{s['max_params']} (the dense Hessian costs about P sweeps and P^2 doubles); lower "
                "architectures.d_model / dim_feedforward / the layers, or raise max_params"
            )
    return out
