"""The ``architectures:`` config section (the architecture study, ``studies/architectures/``): the base architecture, its one-factor variants and the
cross-key checks (each error names the key to change). No torch here: the config check imports it.

Every default lives in the schema (``src/transformer_hessian/schema/config.schema.yaml``); this
module only reads a validated section."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ARCH_KEYS", "Arch", "architectures", "config_errors", "encoder_params"]

#: The keys an architecture is made of (``architectures.base``; a variant overrides some of them).
ARCH_KEYS = ("norm_first", "nhead", "activation", "num_layers")


@dataclass(frozen=True)
class Arch:
    """One architecture of the study: ``name`` (``base`` or the variant's key), post-norm
    (``norm_first`` false) or pre-norm, heads, ``relu``/``gelu``, layers, and what it changes
    relative to the base (``changes``: key -> value, empty for the base)."""

    name: str
    norm_first: bool
    nhead: int
    activation: str
    num_layers: int
    changes: tuple[tuple[str, Any], ...] = ()

    def label(self) -> str:
        """Short text: ``base`` or ``name (key=value)``."""
        if not self.changes:
            return self.name
        return f"{self.name} (" + ", ".join(f"{k}={v}" for k, v in self.changes) + ")"


def architectures(section: Mapping[str, Any]) -> list[Arch]:
    """The base and every variant of a validated ``architectures`` section, base first."""
    base = dict(section["base"])
    out = [Arch("base", **{k: base[k] for k in ARCH_KEYS})]
    for name, over in (section.get("variants") or {}).items():
        merged = {**base, **over}
        changes = tuple((k, over[k]) for k in ARCH_KEYS if k in over and over[k] != base[k])
        out.append(Arch(name, **{k: merged[k] for k in ARCH_KEYS}, changes=changes))
    return out


def encoder_params(d_model: int, d_ff: int, num_layers: int, bias: bool) -> int:
    """Parameters of ``num_layers`` torch encoder layers (no final norm): in_proj 3 d^2, out_proj
    d^2, linear1 d d_ff, linear2 d_ff d, two LayerNorm weights 2 d; with ``bias`` also 3 d + d +
    d_ff + d and the LayerNorm biases 2 d (torch's ``bias=False`` drops all of them)."""
    per = 4 * d_model * d_model + 2 * d_model * d_ff + 2 * d_model
    if bias:
        per += 3 * d_model + d_model + d_ff + d_model + 2 * d_model
    return num_layers * per


def config_errors(config: Mapping[str, Any], dataset_shapes: Mapping[str, tuple]) -> list[str]:
    """Cross-key problems of an enabled ``architectures:`` section (each line names its key);
    ``dataset_shapes``: data set -> (side, ...), :data:`transformer_hessian.config_checks.DATASET_SHAPES`."""
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
        P = encoder_params(d, s["dim_feedforward"], arch.num_layers, s["bias"])
        if P > s["max_params"]:
            out.append(
                f"  {where}: the encoder has P = {P} parameters, more than architectures.max_params = "
                f"{s['max_params']} (the dense Hessian costs about P sweeps and P^2 doubles); lower "
                "architectures.d_model / dim_feedforward / the layers, or raise max_params"
            )
    return out
