"""The base of every typed config section (:class:`Section`): exact-key parsing of a validated dict
into a frozen dataclass, the way back (:meth:`Section.to_dict`) and a section from a partial dict
with the schema's defaults (:meth:`Section.with_defaults`). The sections themselves are
:mod:`.settings`'.

A field's type says how its JSON value is parsed (:func:`from_value`): a nested section, a
``dict[str, Section]`` per key, a tuple from a JSON list; :func:`to_value` is the inverse. A key
the dataclass does not know, or one it needs that is missing, raises :class:`.errors.ConfigError`
naming the dotted key. This module imports no torch or numpy.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from ..errors import ConfigError

__all__ = ["AdamWTrain", "Section", "from_value", "to_value"]

S = TypeVar("S", bound="Section")


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, Section)


def from_value(tp: Any, value: Any, where: str) -> Any:
    """``value`` (a validated JSON value) as the field type ``tp``: nested sections parsed,
    ``dict[str, Section]`` parsed per key, JSON lists made tuples (frozen)."""
    if _is_section(tp):
        return tp.from_dict(value, where)
    origin = typing.get_origin(tp)
    if origin is dict:
        _, val_tp = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return {k: from_value(val_tp, v, f"{where}.{k}") for k, v in value.items()}
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return tuple(value)
    return value


def to_value(value: Any) -> Any:
    """The JSON form of a field value (inverse of :func:`from_value`)."""
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: to_value(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [to_value(v) for v in value]
    return value


class Section:
    """Base of every config section: exact-key parsing from a validated dict and back.

    ``SECTION`` is the dotted name used in error messages, ``SCHEMA_NODE`` the path of the
    section's node in the schema (for :meth:`with_defaults`).
    """

    SECTION: ClassVar[str] = ""
    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ()
    #: Error keys start with ``where`` (``hessian.block``); the whole config names them from the top.
    KEYS_FROM_TOP: ClassVar[bool] = False
    #: What a missing key's message tells the caller to do.
    MISSING_HINT: ClassVar[str] = (
        "build sections from a config validated by "
        "transformer_hessian.config.validate_config (it fills in the schema's defaults)"
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """``SECTION`` follows from ``SCHEMA_NODE``: the property names along its path
        (``("properties", "scaling", "properties", "train")`` -> ``scaling.train``)."""
        super().__init_subclass__(**kwargs)
        if "SECTION" not in cls.__dict__:
            cls.SECTION = ".".join(cls.SCHEMA_NODE[1::2])

    @classmethod
    def from_dict(cls: type[S], data: Any, where: str | None = None) -> S:
        """The section from the validated dict ``data``; every field's key must be present and
        no other key may be: :class:`ConfigError` naming ``<where>.<key>`` otherwise."""
        where = where or cls.SECTION
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a mapping of keys, got {data!r}")
        prefix = "" if cls.KEYS_FROM_TOP else f"{where}."
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = [k for k in data if k not in names]
        if unknown:
            raise ConfigError(f"{prefix}{unknown[0]}: unknown key (known: {', '.join(names)})")
        missing = [n for n in names if n not in data]
        if missing:
            raise ConfigError(f"{prefix}{missing[0]}: missing; {cls.MISSING_HINT}")
        return cls(**{n: from_value(hints[n], data[n], f"{prefix}{n}") for n in names})

    def to_dict(self) -> dict[str, Any]:
        """The validated dict this section was built from (tuples back to lists)."""
        return {f.name: to_value(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def with_defaults(cls: type[S], data: dict) -> S:
        """The section from a partial dict: validated against the schema's node of this section
        with its defaults filled in (a copy; ``data`` is not changed), then :meth:`from_dict`."""
        import copy

        import jsonschema

        from .validate import _key_path, _with_defaults, load_schema

        schema = load_schema()
        node: Any = schema
        for part in cls.SCHEMA_NODE:
            node = node[part]
        sub = {**node, "definitions": schema["definitions"]}
        data = copy.deepcopy(dict(data))
        validator = _with_defaults(jsonschema.validators.validator_for(schema))(sub)
        errors = list(validator.iter_errors(data))
        if errors:
            lines = [f"  {cls.SECTION}.{_key_path(e)}: {e.message}" for e in errors]
            raise ConfigError("invalid configuration:\n" + "\n".join(lines))
        return cls.from_dict(data)


@dataclass(frozen=True)
class AdamWTrain(Section):
    """The keys every training section starts with (``experiments.<name>.train``, ``scaling.train``,
    ``architectures.train``): AdamW epochs, batch size, learning rate, weight decay and the seed.
    Not a section of its own: the three below add their keys and their schema node."""

    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    seed: int
