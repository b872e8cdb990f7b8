"""Configuration: schema validation with defaults, cross-key checks, and a stable hash.

The Snakefile validates at parse time through :func:`validate_config`, so a bad config stops
the run before any job starts, with a message that names the offending key.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import jsonschema
import yaml

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """A configuration value is missing, of the wrong type, or inconsistent."""


def _with_defaults(validator_class):
    """A jsonschema validator that also fills in ``default`` values (as snakemake does)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = json.loads(json.dumps(sub["default"]))
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _key_path(error: jsonschema.ValidationError) -> str:
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "additionalProperties":
        # The offending key is not in the path: name it.
        extra = [k for k in error.instance if k not in error.schema.get("properties", {})]
        path = ".".join(filter(None, [path, *extra[:1]]))
    return path or "<top level>"


def load_schema(path: str | Path = SCHEMA_PATH) -> dict:
    with open(path) as fh:
        return yaml.safe_load(fh)


_INT = re.compile(r"[+-]?[0-9]+")
_NULL = {"null", "Null", "NULL", "~"}
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}


def _from_text(text: str, types: list[str]):
    """``text`` as the first of the JSON-schema ``types`` it spells exactly; ``text`` otherwise."""
    for t in types:
        if t == "integer" and _INT.fullmatch(text.strip()):
            return int(text)
        if t == "number":
            try:
                value = float(text)
            except ValueError:
                continue
            if math.isfinite(value):
                return int(text) if _INT.fullmatch(text.strip()) else value
        if t == "boolean" and text in _BOOL:
            return _BOOL[text]
        if t == "null" and text in _NULL:
            return None
    return text


def coerce_cli_strings(config, schema: dict, node: dict | None = None):
    """Convert strings to the integer / number / boolean / null that ``schema`` asks for, in place.

    ``snakemake --config 'resources={gpu: 0}'`` reads nested values with YAML's BaseLoader, so
    every scalar arrives as a string ('0'), which the schema then rejects ("'0' is not of type
    'integer'"). A string is converted only where the schema node does not allow a string and the
    text spells a value of an allowed type exactly, and "null" / "~" become None where the schema
    allows null; anything else is left for the validator to report. Returns the (possibly
    replaced) value.
    """
    node = schema if node is None else node
    while "$ref" in node:  # local references "#/definitions/<name>" only
        node = schema["definitions"][node["$ref"].rsplit("/", 1)[-1]]
    if isinstance(config, dict):
        props = node.get("properties", {})
        extra = node.get("additionalProperties")
        for key, value in config.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                config[key] = coerce_cli_strings(value, schema, sub)
        return config
    if isinstance(config, list) and isinstance(node.get("items"), dict):
        return [coerce_cli_strings(v, schema, node["items"]) for v in config]
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else list(types)
    if isinstance(config, str) and "null" in types and config in _NULL:
        return None  # `data={mirror: null}` means no mirror, not a mirror called "null"
    if isinstance(config, str) and types and "string" not in types:
        return _from_text(config, types)
    return config


def validate_config(config: dict, schema_path: str | Path = SCHEMA_PATH) -> dict:
    """Validate ``config`` in place (defaults filled in) and return it.

    Strings from ``--config`` overrides are first converted to the schema's types
    (:func:`coerce_cli_strings`). Raises :class:`ConfigError` whose message starts with the
    dotted key that is wrong.
    """
    schema = load_schema(schema_path)
    coerce_cli_strings(config, schema)
    validator = _with_defaults(jsonschema.validators.validator_for(schema))(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  {_key_path(e)}: {e.message}" for e in errors]
        raise ConfigError("invalid configuration:\n" + "\n".join(lines))
    experiments = config["experiments"]
    for section in ("hessian", "landscape"):
        name = config[section]["experiment"]
        if name not in experiments:
            raise ConfigError(
                f"invalid configuration:\n  {section}.experiment: {name!r} is not one of the "
                f"experiments defined under 'experiments' ({', '.join(experiments)})"
            )
    hexp = experiments[config["hessian"]["experiment"]]
    if config["hessian"]["block"] >= hexp["model"]["depth"]:
        raise ConfigError(
            f"invalid configuration:\n  hessian.block: {config['hessian']['block']} but experiment "
            f"{config['hessian']['experiment']!r} has only {hexp['model']['depth']} block(s) (0-based index)"
        )
    return config


def load_config(path: str | Path) -> dict:
    with open(path) as fh:
        cfg = yaml.safe_load(fh) or {}
    return validate_config(cfg)


def config_hash(config: dict) -> str:
    """SHA-256 (first 16 hex digits) of the canonical JSON of a validated config."""
    blob = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
