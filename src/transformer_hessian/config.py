"""Configuration: schema validation with defaults, cross-key checks, and a stable hash.

The Snakefile validates at parse time through :func:`validate_config`, so a bad config stops
the run before any job starts, with a message that names the offending key.
"""

from __future__ import annotations

import hashlib
import json
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


def validate_config(config: dict, schema_path: str | Path = SCHEMA_PATH) -> dict:
    """Validate ``config`` in place (defaults filled in) and return it.

    Raises :class:`ConfigError` whose message starts with the dotted key that is wrong.
    """
    schema = load_schema(schema_path)
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
