"""Configuration: schema validation with defaults, cross-key checks, and a stable hash.

The Snakefile validates at parse time through :func:`validate_config`, so a bad config stops
the run before any job starts, with a message that names the offending key.
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

from .config_architectures import config_errors as architecture_errors
from .errors import ConfigError  # noqa: F401  (re-exported: the class lives in errors.py)

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


def load_schema(path: str | Path = SCHEMA_PATH) -> dict:
    """The config's JSON schema (``transformer_hessian/schema/config.schema.yaml``), parsed."""
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


#: A config file is refused when its YAML aliases expand to more values than this, or when it nests deeper.
MAX_CONFIG_VALUES = 100_000
MAX_CONFIG_DEPTH = 64
_STR_TAG = "tag:yaml.org,2002:str"


def _check_size(root, path) -> None:
    """Refuse a node graph nested deeper than :data:`MAX_CONFIG_DEPTH` or whose aliases expand to
    more than :data:`MAX_CONFIG_VALUES` values. Each node is visited once (aliases share nodes), so
    this is linear in the file's size, whatever the aliases would expand to."""
    order, depth, stack = [], {id(root): 1}, [root]
    while stack:  # iterative: no recursion limit; each distinct node once
        node = stack.pop()
        order.append(node)
        if depth[id(node)] > MAX_CONFIG_DEPTH:
            raise ConfigError(
                f"config file {path}: nested more than {MAX_CONFIG_DEPTH} levels deep (line "
                f"{node.start_mark.line + 1}); a config is a few levels of keys"
            )
        children = [c for kv in node.value for c in kv] if isinstance(node, yaml.MappingNode) else []
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        for child in children:
            if id(child) not in depth:
                depth[id(child)] = depth[id(node)] + 1
                stack.append(child)
    size: dict = {}
    for node in reversed(order):  # children before parents (a DAG: aliases only point backwards)
        children = [c for kv in node.value for c in kv] if isinstance(node, yaml.MappingNode) else []
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        size[id(node)] = 1 + sum(size.get(id(c), 1) for c in children)
        if size[id(node)] > MAX_CONFIG_VALUES:
            raise ConfigError(
                f"config file {path}: its YAML aliases (*name) expand to more than {MAX_CONFIG_VALUES:,} "
                f"values (line {node.start_mark.line + 1}); write the values out instead of nesting aliases"
            )


def _check_nesting_text(text: str, path) -> None:
    """Refuse text nested deeper than :data:`MAX_CONFIG_DEPTH` before YAML's parser sees it (its time
    grows with the square of the nesting): brackets ``[ {`` open minus closed, and indentation."""
    depth = 0
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if (len(line) - len(stripped)) // 2 > MAX_CONFIG_DEPTH and stripped and not stripped.startswith("#"):
            break
        for ch in stripped:
            depth += (ch in "[{") - (ch in "]}")
            if depth > MAX_CONFIG_DEPTH:
                break
        else:
            continue
        break
    else:
        return
    raise ConfigError(
        f"config file {path}: nested more than {MAX_CONFIG_DEPTH} levels deep; a config is a few levels of keys"
    )


def _duplicate_keys(node, path: str = "", seen_nodes: set | None = None) -> list[str]:
    """``dotted.key (lines a and b)`` for every key that occurs twice in one YAML mapping, and
    ``dotted.key: not a string`` for a key YAML reads as a number, boolean or null (``1:``,
    ``yes:``). Each node is walked once, however many aliases point at it."""
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:
        return []
    seen_nodes.add(id(node))
    out = []
    if isinstance(node, yaml.MappingNode):
        seen: dict = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            dotted = f"{path}.{key}" if path else str(key)
            if key is not None and key != "<<" and key_node.tag != _STR_TAG:
                out.append(
                    f"{dotted} (line {key_node.start_mark.line + 1}): YAML reads this key as "
                    f"{key_node.tag.rsplit(':', 1)[-1]}, not text; quote it ('{key}':)"
                )
            if key is not None and key != "<<":
                if key in seen:
                    out.append(f"{dotted} (lines {seen[key] + 1} and {key_node.start_mark.line + 1}): duplicate key")
                else:
                    seen[key] = key_node.start_mark.line
            out += _duplicate_keys(value_node, dotted, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out += _duplicate_keys(item, f"{path}[{i}]", seen_nodes)
    return out


def load_yaml(path: str | Path) -> dict:
    """Read a YAML (or JSON) config file; :class:`ConfigError` (one message naming the file) on a
    duplicate or non-text key, bad syntax, a file that is missing, a folder, not UTF-8 text,
    nested too deeply, or whose aliases expand too far (an alias bomb).

    ``yaml.safe_load`` (and snakemake's loader) silently keep the last of two equal keys; here
    the file is rejected with the dotted key and both line numbers. Parsing is linear in the
    file's size: aliases are counted, never expanded (:func:`_check_size`).
    """
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file {path} does not exist; check the --configfile path")
    if p.is_dir():
        raise ConfigError(f"config file {path} is a folder, not a file; pass the YAML file inside it")
    try:
        raw = p.read_bytes()
    except OSError as err:
        raise ConfigError(f"config file {path} cannot be read: {err.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {err.start}); save it as UTF-8 (a YAML text file)"
        ) from None
    if "\x00" in text:
        raise ConfigError(f"config file {path} holds NUL bytes: not a text file; pass a YAML text file")
    _check_nesting_text(text, path)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None:
            _check_size(node, path)
        dups = _duplicate_keys(node)
        if dups:
            raise ConfigError(
                f"invalid configuration in {path}:\n"
                + "\n".join(f"  {d}" for d in dups)
                + "\n(each key may appear once, as text; YAML would silently keep the last value)"
            )
        data = yaml.load(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path} is not valid YAML: {err}") from None
    except RecursionError:
        raise ConfigError(
            f"config file {path}: nested too deeply to read (more than {MAX_CONFIG_DEPTH} levels)"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of keys at the top level")
    return data


def check_config_files(paths) -> None:
    """Run :func:`load_yaml` on every config file (the Snakefile calls it for ``--configfile``)."""
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


#: Image side, channels and classes of each data set (for cross-key checks made before any data is read).
DATASET_SHAPES = {"digits": (8, 1, 10), "mnist": (28, 1, 10), "cifar100": (32, 3, 100)}


def training_bytes_estimate(exp: dict) -> int | None:
    """Lower bound of training memory: 16 bytes (weights, gradients, two AdamW moments) per parameter.

    Parameters: ``resources.parameter_count`` of the whole model. ``None`` for an unknown data set.
    """
    from .resources import parameter_count

    if exp.get("dataset") not in DATASET_SHAPES:
        return None
    return 16 * parameter_count(exp["model"], "model", image=DATASET_SHAPES[exp["dataset"]])


#: Training images of each data set before ``max_train`` (digits: all 1,797, split by ``val_fraction``).
DATASET_TRAIN = {"digits": 1797, "mnist": 60000, "cifar100": 50000}


def train_samples(exp: dict, name: str) -> tuple[int | None, str, list[str]]:
    """``(n, keys, errors)``: the number of training samples experiment ``name`` will have (before any
    data is read), the config keys that set it (for messages), and the errors of its split."""
    t, ds = exp["train"], exp["dataset"]
    if ds not in DATASET_TRAIN:
        return None, "", []
    errors, keys = [], f"experiments.{name}.dataset"
    n = DATASET_TRAIN[ds]
    if ds == "digits":  # sklearn's stratified split: ceil(val_fraction * 1797) validation images
        n_val = math.ceil(t["val_fraction"] * n)
        classes = DATASET_SHAPES[ds][2]
        if min(n_val, n - n_val) < classes:
            errors.append(
                f"  experiments.{name}.train.val_fraction: {t['val_fraction']:g} of the {n} digits images leaves "
                f"{n_val} for validation and {n - n_val} for training; the stratified split needs at least "
                f"{classes} in each (one per class): use a value in [{classes / n:.4f}, {1 - classes / n:.4f}]"
            )
        n -= n_val
        keys = f"experiments.{name}.train.val_fraction"
    if t.get("max_train") is not None and t["max_train"] < n:
        n, keys = t["max_train"], f"experiments.{name}.train.max_train"
    if n < 2 and not errors:
        errors.append(f"  {keys}: leaves {n} training sample(s); at least 2 are needed")
    return n, keys, errors


def _sample_count_errors(config: dict) -> list[str]:
    """Sizes and k values against the number of samples they draw from (refused, never clamped)."""
    out, experiments, counts = [], config["experiments"], {}
    for name, exp in experiments.items():
        n, keys, errors = train_samples(exp, name)
        counts[name] = (n, keys)
        out += errors
    for name, exp in experiments.items():
        n, keys = counts[name]
        bs = exp["train"]["batch_size"]
        if n is not None and n >= 2 and bs > n:
            out.append(
                f"  experiments.{name}.train.batch_size: {bs} is more than the {n} training samples (set by "
                f"{keys}); lower it to at most {n}"
            )
    hname = config["hessian"]["experiment"]
    n, keys = counts.get(hname, (None, ""))
    bs = config["hessian"]["batch_size"]
    if n is not None and n >= 2 and bs > n:
        out.append(
            f"  hessian.batch_size: {bs} is more than the {n} training samples of experiment {hname!r} "
            f"(set by {keys}); lower hessian.batch_size to at most {n}"
        )
    lname = config["landscape"]["experiment"]
    n, keys = counts.get(lname, (None, ""))
    if n is not None and n >= 2:
        land = config["landscape"]
        n_l, lkeys = n, keys
        if land.get("max_samples") is not None and land["max_samples"] < n:
            n_l, lkeys = land["max_samples"], "landscape.max_samples"
        if land["k_min"] > n_l - 2:
            out.append(
                f"  landscape.k_min: {land['k_min']} leaves fewer than 2 values of k to fit among the {n_l} samples "
                f"(set by {lkeys}); use landscape.k_min <= {max(n_l - 2, 1)}"
            )
        probe = config.get("probe") or {}
        if probe:
            n_p, pkeys = n, keys
            if probe.get("max_samples") is not None and probe["max_samples"] < n:
                n_p, pkeys = probe["max_samples"], "probe.max_samples"
            if probe["k_small"] > n_p - 1:
                out.append(
                    f"  probe.k_small: {probe['k_small']} but the probes use {n_p} samples (set by {pkeys}); "
                    f"k_small must be at most {n_p - 1} (it is compared with k = {n_p - 1})"
                )
            big = [k for k in probe["shift_ks"] if k > n_p - 1]
            if big:
                out.append(
                    f"  probe.shift_ks: {big} exceed the {n_p - 1} the probes' {n_p} samples allow (set by "
                    f"{pkeys}); each k must be at most {n_p - 1}"
                )
    return out


def _cross_key_errors(config: dict) -> list[str]:
    """Checks that involve several keys; each message names the key to change."""
    from .resources import dense_hessian_bytes, format_bytes, hessian_group_size

    out = []
    experiments = config["experiments"]
    root = config.get("data", {}).get("root", "")
    long_parts = [part for part in Path(root).parts if len(part.encode()) > 255]
    if long_parts:
        out.append(f"  data.root: a folder name of {len(long_parts[0].encode())} bytes; at most 255 per name")
    out += _sample_count_errors(config)
    for name, exp in experiments.items():
        m = exp["model"]
        side = DATASET_SHAPES.get(exp["dataset"], (None,))[0]
        if side is not None and side % m["patch_size"]:
            out.append(
                f"  experiments.{name}.model.patch_size: {m['patch_size']} does not divide the "
                f"{side}x{side} images of {exp['dataset']!r}"
            )
        need = training_bytes_estimate(exp)
        mem_mb = config.get("resources", {}).get("mem_mb")
        if need is not None and mem_mb and need > mem_mb * 2**20:
            out.append(
                f"  experiments.{name}.model: training needs at least {format_bytes(need)} (16 bytes per "
                f"parameter: weights, gradients, AdamW moments), more than resources.mem_mb = {mem_mb} MiB; "
                f"lower experiments.{name}.model.width / d_ff / d_k / depth or raise resources.mem_mb"
            )
    hname = config["hessian"]["experiment"]
    hexp = experiments[hname]
    depth = hexp["model"]["depth"]
    if config["hessian"]["block"] >= depth:
        out.append(
            f"  hessian.block: {config['hessian']['block']} but experiment {hname!r} has only {depth} "
            "block(s) (0-based index)"
        )
    if depth != 1:
        out.append(
            f"  hessian.experiment: {hname!r} has model.depth {depth}, but the closed-form check (rule "
            f"theory) needs a single-block model: point hessian.experiment at an experiment with "
            f"model.depth: 1 (or set experiments.{hname}.model.depth: 1)"
        )
    m = hexp["model"]
    need = dense_hessian_bytes(m["width"], m["d_k"], m["d_ff"])
    mem_mb = config.get("resources", {}).get("mem_mb")
    if mem_mb and need > mem_mb * 2**20:
        p = hessian_group_size(m["width"], m["d_k"], m["d_ff"])
        out.append(
            f"  hessian.experiment: the dense Hessian of {hname!r} has {p:,} x {p:,} float64 entries and its "
            f"jobs need about {format_bytes(need)}, more than resources.mem_mb = {mem_mb} MiB; lower "
            f"experiments.{hname}.model.width / d_k / d_ff or raise resources.mem_mb"
        )
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
    cross = _cross_key_errors(config)
    cross += scaling_errors(config)
    cross += architecture_errors(config, DATASET_SHAPES)
    if cross:
        raise ConfigError("invalid configuration:\n" + "\n".join(cross))
    return config


def scaling_errors(config: dict) -> list[str]:
    """Cross-key problems of an enabled ``scaling:`` section (each names the key to change)."""
    from .resources import format_bytes

    s = config.get("scaling") or {}
    if not s.get("enabled"):
        return []
    out = []
    side = DATASET_SHAPES[s["dataset"]][0]
    if side % s["patch_size"]:
        out.append(
            f"  scaling.patch_size: {s['patch_size']} does not divide the {side}x{side} images of {s['dataset']!r}"
        )
    for key in ("widths", "depths", "train_sizes"):
        if len(set(map(str, s[key]))) != len(s[key]):
            out.append(f"  scaling.{key}: {s[key]} lists a value twice")
    n_arch = len({(w, s["fixed_depth"]) for w in s["widths"]} | {(s["fixed_width"], n) for n in s["depths"]})
    if n_arch < 2:
        out.append(f"  scaling: the sweep has {n_arch} architecture; a power law in P needs 2 (add widths or depths)")
    for size in s["train_sizes"]:
        if size is not None and size < s["k_min"] + 2:
            out.append(f"  scaling.train_sizes: {size} leaves fewer than 2 k >= scaling.k_min = {s['k_min']} to fit")
    mem_mb = (config.get("resources") or {}).get("mem_mb")
    archs = [("scaling.widths", w, s["fixed_depth"]) for w in s["widths"]]
    archs += [("scaling.depths", s["fixed_width"], n) for n in s["depths"]]
    for key, w, depth in archs:
        model = {
            "patch_size": s["patch_size"],
            "width": w,
            "depth": depth,
            "d_k": max(1, round(s["d_k_ratio"] * w)),
            "d_ff": max(1, round(s["d_ff_ratio"] * w)),
            "ffn_bias": s["ffn_bias"],
        }
        need = training_bytes_estimate({"dataset": s["dataset"], "model": model})
        if mem_mb and need is not None and need > mem_mb * 2**20:
            out.append(
                f"  {key}: the model of width {w} and depth {depth} needs at least {format_bytes(need)} to train "
                f"(16 bytes per parameter), more than resources.mem_mb = {mem_mb} MiB; lower {key}"
            )
            break
    n_models = n_arch * len(s["train_sizes"])
    if s["jobs"] > n_models:
        out.append(f"  scaling.jobs: {s['jobs']} jobs for {n_models} models; at most one job per model")
    return out


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
    """Read ``path`` with :func:`load_yaml` (duplicate keys rejected) and validate it."""
    return validate_config(load_yaml(path))


def config_hash(config: dict) -> str:
    """SHA-256 (first 16 hex digits) of the canonical JSON of a validated config."""
    blob = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
