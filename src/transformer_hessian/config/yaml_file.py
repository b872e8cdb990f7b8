"""The config file as text: a strict YAML reader (:func:`load_yaml`) that refuses duplicate or non-text
keys, files that are not UTF-8 text, nesting deeper than :data:`MAX_CONFIG_DEPTH` and alias bombs,
each with one :class:`.errors.ConfigError` that names the file (and the key and lines where it can).

Schema validation of what it reads is :mod:`.config`'s.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ..errors import ConfigError

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
