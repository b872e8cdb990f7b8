"""Configuration: schema validation with defaults, ``--config`` string coercion, and a stable hash.

The Snakefile validates at parse time through :func:`validate_config`, so a bad config stops
the run before any job starts, with a message that names the offending key. The file is read by
:mod:`.config_yaml` (:func:`load_yaml`, strict YAML) and the checks that involve several keys are
:mod:`.config_checks`' (:func:`validate_config` runs them after the schema).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from pathlib import Path

import jsonschema
import yaml

from ..errors import ConfigError  # noqa: F401  (re-exported: the class lives in errors.py)
from .checks import cross_key_errors
from .yaml_file import load_yaml

#: The config's JSON schema, shipped inside the package (package data): the one place every default lives.
SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "config.schema.yaml"


def _is_integer(checker, instance) -> bool:
    # jsonschema's own "integer" also takes 16.0; a float never counts as an integer here.
    return isinstance(instance, int) and not isinstance(instance, bool)


def _is_number(checker, instance) -> bool:
    # jsonschema's own "number" also takes nan and inf; every number here must be finite.
    if isinstance(instance, bool) or not isinstance(instance, (int, float)):
        return False
    return math.isfinite(instance)


def _with_defaults(validator_class):
    """A jsonschema validator that also fills in ``default`` values (as snakemake does).

    Its ``integer`` type rejects floats (``16.0``) and its ``number`` type rejects nan and
    +-inf, for every key of the schema.
    """
    validate_properties = validator_class.VALIDATORS["properties"]
    type_checker = validator_class.TYPE_CHECKER.redefine_many({"integer": _is_integer, "number": _is_number})

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = json.loads(json.dumps(sub["default"]))
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults}, type_checker=type_checker)


def _key_path(error: jsonschema.ValidationError) -> str:
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "additionalProperties":
        # The offending key is not in the path: name it.
        extra = [k for k in error.instance if k not in error.schema.get("properties", {})]
        path = ".".join(filter(None, [path, *extra[:1]]))
    return path or "<top level>"


#: parsed schemas by (path, mtime, size): parsing the YAML took ~50 ms of each validation
_SCHEMAS: dict[tuple[str, int, int], dict] = {}


def load_schema(path: str | Path = SCHEMA_PATH) -> dict:
    """The config's JSON schema (``transformer_hessian/config/schema/config.schema.yaml``), parsed
    once per version of the file; each call gets its own copy."""
    st = Path(path).stat()
    key = (str(Path(path).resolve()), st.st_mtime_ns, st.st_size)
    if key not in _SCHEMAS:
        with open(path) as fh:
            _SCHEMAS[key] = yaml.safe_load(fh)
    return copy.deepcopy(_SCHEMAS[key])


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


def check_config_files(paths) -> None:
    """Run :func:`.config_yaml.load_yaml` on every config file (the Snakefile calls it for ``--configfile``)."""
    for path in paths:
        load_yaml(path)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _value_errors(node, path: str = "") -> list[str]:
    """Generic checks on every value, whatever the schema: finite numbers, no control
    characters (newlines, NUL, escapes) in strings or key names."""
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            dotted = f"{path}.{k}" if path else str(k)
            if not isinstance(k, str):
                out.append(f"  {dotted}: the key {k!r} is not text (YAML reads 1, yes, null as values); quote it")
                continue
            if _CONTROL.search(k):
                out.append(f"  {dotted!r}: a key name may not contain control characters (newline, tab, NUL)")
            out += _value_errors(v, dotted)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _value_errors(v, f"{path}[{i}]")
    elif isinstance(node, float) and not math.isfinite(node):
        out.append(f"  {path or '<top level>'}: {node!r} is not a finite number")
    elif isinstance(node, str) and _CONTROL.search(node):
        out.append(f"  {path or '<top level>'}: {node!r} contains a control character (newline, tab, NUL, ...)")
    return out


def _apply_coerced(config: dict, coerced: dict) -> None:
    """Write the values of ``coerced`` (a nested subset of ``config``'s keys) into ``config``."""
    for key, value in coerced.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            _apply_coerced(config[key], value)
        else:
            config[key] = value


def validate_config(config: dict, schema_path: str | Path = SCHEMA_PATH, cli_overrides: dict | None = None) -> dict:
    """Validate ``config`` in place (defaults filled in) and return it.

    ``cli_overrides`` are the ``--config`` values snakemake merged into ``config``: only those
    strings are converted to the schema's types first (:func:`coerce_cli_strings`; snakemake
    reads nested ``--config`` values as text). A string in a config file stays a string and is
    rejected where the schema wants a number. Raises :class:`ConfigError` whose message starts
    with the dotted key that is wrong.
    """
    if not isinstance(config, dict):
        raise ConfigError("invalid configuration: the config must be a mapping of keys")
    bad_values = _value_errors(config)
    if bad_values:
        raise ConfigError("invalid configuration:\n" + "\n".join(bad_values))
    schema = load_schema(schema_path)
    if cli_overrides:
        _apply_coerced(config, coerce_cli_strings(copy.deepcopy(dict(cli_overrides)), schema))
    validator = _with_defaults(jsonschema.validators.validator_for(schema))(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        lines = [f"  {_key_path(e)}: {e.message}" for e in errors]
        raise ConfigError("invalid configuration:\n" + "\n".join(lines))
    experiments = config["experiments"]
    for section in ("hessian", "landscape", "spectrum"):
        name = config.get(section, {}).get("experiment")
        if section == "spectrum" and name is None:  # null: the landscape experiment
            continue
        if name not in experiments:
            raise ConfigError(
                f"invalid configuration:\n  {section}.experiment: {name!r} is not one of the "
                f"experiments defined under 'experiments' ({', '.join(experiments)})"
            )
    cross = cross_key_errors(config)
    if cross:
        raise ConfigError("invalid configuration:\n" + "\n".join(cross))
    return config


def unexpected_config_error(err: BaseException, log_dir: str | Path = ".snakemake/log") -> str:
    """One line for an error no config check foresaw; its traceback goes to a file in ``log_dir``."""
    import traceback

    where = Path(log_dir) / "transformer-hessian-config-error.txt"
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text("".join(traceback.format_exception(err)))
        saved = f"traceback in {where}"
    except OSError:
        saved = "no traceback saved"
    return (
        f"transformer-hessian: the config could not be checked ({type(err).__name__}: {str(err)[:200]}); "
        f"check the config files and --config values ({saved})"
    )


def load_config(path: str | Path) -> dict:
    """Read ``path`` with :func:`.config_yaml.load_yaml` (duplicate keys rejected) and validate it."""
    return validate_config(load_yaml(path))


def config_hash(config: dict) -> str:
    """SHA-256 (first 16 hex digits) of the canonical JSON of a validated config."""
    blob = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
