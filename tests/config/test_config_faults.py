"""Bad configs (fault injection): each must stop ``snakemake -n`` before any job,
naming the key.

* generated from the schema (every key: wrong type, float for an integer, nan/inf, out of range, not an
  enum value, unknown key, missing key) plus hand-written faults (sizes that cannot fit among them) and the
  cross-key rules;
* values refused at parse time rather than run, clamped or dropped, and an
  upper bound on every numeric key;
* the parse-time training-memory estimate against the real model's parameter count.

The YAML files themselves (duplicate keys, alias bombs, unreadable files) are in test_yaml_file_faults.py.
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import math
import os
import random
import re
from pathlib import Path

import pytest
import yaml
from fault_helpers import (
    _count,
    _names_key,
    _no_traceback,
    _set,
    _snakemake,
    _write_config,
    dry_run_in_process,
    schema_leaves,
    tiny_config,
)
from tiny_workflow import TINY

from transformer_hessian.config.validate import load_schema
from transformer_hessian.core.model import ModelConfig, ViT, count_parameters

ROOT = Path(__file__).resolve().parents[2]


def _violating_string(leaf: dict) -> str | None:
    for cand in ("not a url {x}", "{}", "", "\u00e9\u00e9-not-valid", "x" * 300):
        if "enum" in leaf and cand not in leaf["enum"]:
            return cand
        if "pattern" in leaf and not re.search(leaf["pattern"], cand):
            return cand
        if "minLength" in leaf and len(cand) < leaf["minLength"]:
            return cand
    return None


def bad_values(leaf: dict) -> list[tuple[str, object]]:
    """Values that ``leaf`` must reject, derived from its type and bounds only."""
    types = leaf.get("type", [])
    types = [types] if isinstance(types, str) else list(types)
    out: list[tuple[str, object]] = []
    numeric = "integer" in types or "number" in types
    if "integer" in types:
        base = leaf.get("minimum", leaf.get("exclusiveMinimum", 0)) + 2
        out.append(("float", float(base)))
    if "number" in types:
        out += [("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf)]
    if numeric:
        if "minimum" in leaf:
            out.append(("below minimum", leaf["minimum"] - 1))
        if "exclusiveMinimum" in leaf:
            out.append(("at exclusive minimum", leaf["exclusiveMinimum"]))
        if "maximum" in leaf:
            out.append(("above maximum", leaf["maximum"] + 1))
        if "exclusiveMaximum" in leaf:
            out.append(("at exclusive maximum", leaf["exclusiveMaximum"]))
        out.append(("string", "12"))
    if "string" in types:
        bad = _violating_string(leaf)
        if bad is not None:
            out.append(("invalid string", bad))
        if not numeric:
            out.append(("number for a string", 12))
    if "boolean" in types:
        out.append(("string for a bool", "yes"))
    if "null" not in types and "enum" not in leaf:
        out.append(("null", None))
    return out


def generated_bad_configs() -> list[tuple[str, str, dict | str]]:
    """``(case id, key that must be named, config dict or YAML text)``."""
    base = tiny_config()
    schema = load_schema()
    cases = []
    for path, leaf in schema_leaves(schema, base):
        dotted = ".".join(path)
        for label, value in bad_values(leaf):
            cfg = copy.deepcopy(base)
            _set(cfg, path, value)
            cases.append((f"{dotted}={label}", dotted, cfg))
    # unknown keys in every object section, and a missing required key
    for section in ("data", "hessian", "landscape", "resources", "theory"):
        cfg = copy.deepcopy(base)
        cfg[section]["colour"] = "red"
        cases.append((f"{section}.colour=unknown", f"{section}.colour", cfg))
    cfg = copy.deepcopy(base)
    cfg["experiments"]["hessian_tiny"]["train"]["learning_rate"] = 0.1
    cases.append(("train.learning_rate=unknown", "experiments.hessian_tiny.train.learning_rate", cfg))
    cfg = copy.deepcopy(base)
    del cfg["experiments"]["hessian_tiny"]["model"]["d_k"]
    cases.append(("model.d_k=missing", "d_k", cfg))
    return cases


def written_bad_configs() -> list[tuple[str, str, dict | str]]:
    """The hand-written faults and the cross-key rules, one by one."""
    base = tiny_config()
    h, lnd = "experiments.hessian_tiny", "experiments.landscape_tiny"
    edits = [
        ("width 16.0", f"{h}.model.width", f"{h}.model.width", 16.0),
        ("epochs 2.0", f"{h}.train.epochs", f"{h}.train.epochs", 2.0),
        ("lr .nan", f"{h}.train.lr", f"{h}.train.lr", math.nan),
        ("lr .inf", f"{h}.train.lr", f"{h}.train.lr", math.inf),
        ("weight_decay .inf", f"{h}.train.weight_decay", f"{h}.train.weight_decay", math.inf),
        ("ln_eps .inf", f"{h}.model.ln_eps", f"{h}.model.ln_eps", math.inf),
        ("mirror not a url", "data.mirror", "data.mirror", "not a url"),
        ("mirror ftp", "data.mirror", "data.mirror", "ftp://127.0.0.1/x/"),
        ("mirror injection", "data.mirror", "data.mirror", "http://127.0.0.1:18101/$(touch SOMEFILE)"),
        ("root with braces", "data.root", "data.root", "results/{dataset}"),
        ("hessian.experiment 2 blocks", "hessian.experiment", "hessian.experiment", "landscape_tiny"),
        ("hessian.experiment undefined", "hessian.experiment", "hessian.experiment", "nope"),
        ("landscape.experiment undefined", "landscape.experiment", "landscape.experiment", "nope"),
        ("hessian.block beyond depth", "hessian.block", "hessian.block", 1),
        ("patch does not divide 8", f"{h}.model.patch_size", f"{h}.model.patch_size", 3),
        ("width 10^6 (training memory)", f"{lnd}.model", f"{lnd}.model.width", 10**6),
        ("width 10^6 (dense Hessian)", "hessian.experiment", f"{h}.model.width", 10**6),
        ("newline in a string", "data.root", "data.root", "results/data\ntouch SOMEFILE"),
        ("device tpu", "device", "device", "tpu"),
        ("dataset imagenet", f"{h}.dataset", f"{h}.dataset", "imagenet"),
    ]
    cases = []
    for cid, named, key, value in edits:
        cfg = copy.deepcopy(base)
        _set(cfg, key.split("."), value)
        cases.append((cid, named, cfg))
    # a 180k-parameter dense Hessian (d=128, d_k=128, d_ff=512): 180,224^2 float64
    cfg = copy.deepcopy(base)
    cfg["experiments"]["hessian_tiny"]["model"].update(width=128, d_k=128, d_ff=512)
    assert 128 * (2 * 128 + 128 + 2 * 512) == 180_224
    cases.append(("180k-parameter dense Hessian", "hessian.experiment", cfg))
    cfg = copy.deepcopy(base)
    cfg["experiments"]["bad name; touch SOMEFILE"] = cfg["experiments"]["hessian_tiny"]
    cases.append(("hostile experiment name", "experiments", cfg))
    # file-level faults: duplicate keys (top level and nested), not a mapping
    text = yaml.safe_dump(TINY, sort_keys=False)
    cases.append(("duplicate top-level key", "device", text + "device: cuda\n"))
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.strip().startswith("lr:"))
    dup = "\n".join([*lines[: i + 1], lines[i].replace(lines[i].strip(), "lr: 0.5"), *lines[i + 1 :]]) + "\n"
    cases.append(("duplicate nested key", "experiments.hessian_tiny.train.lr", dup))
    return cases


def _snakefile_checks(configfile: Path) -> tuple[bool, str]:
    """The Snakefile's first step on a config file, called directly (``check_config_files`` is
    ``load_yaml`` on each file; then ``validate_config`` on its contents): ``(accepted, the message
    it would print)``."""
    from transformer_hessian.config.validate import ConfigError, validate_config
    from transformer_hessian.config.yaml_file import load_yaml

    try:
        validate_config(load_yaml(configfile))
    except ConfigError as err:
        return False, f"transformer-hessian: {err}"
    return True, ""


@pytest.mark.slow  # about 231 s
def test_bad_configs_stop_before_the_first_job(tmp_path):
    """Every bad config through the Snakefile's checks called directly; the hand-written faults and a
    seeded 4% of the generated ones (about 40) through ``snakemake -n`` in this process as well (one
    code path for all of them; a dry run in process takes about 0.5 s, and make test runs near its
    15-minute budget)."""
    generated, written = generated_bad_configs(), written_bad_configs()
    cases = generated + written
    rng = random.Random(0)
    via_snakemake = {i for i in range(len(cases)) if i >= len(generated) or rng.random() < 0.04}
    failures, rejected, through = [], 0, 0
    cwd = os.getcwd()
    try:
        for i, (cid, key, cfg) in enumerate(cases):
            work = tmp_path / f"c{i}"
            work.mkdir()
            path = _write_config(cfg, work / "bad.yaml")
            runs = [_snakefile_checks(path)]
            if i in via_snakemake:
                runs.append(dry_run_in_process(path, work))
                through += 1
            for ok, msg in runs:
                clean = not ok and not msg.startswith("UNCLEAN") and _names_key(msg, key) and _no_traceback(msg)
                rejected += clean
                if not clean:
                    failures.append(f"{cid}: accepted={ok} message={msg[:300]!r}")
            assert not (work / "results").exists() and not (work / "logs").exists(), cid
    finally:
        os.chdir(cwd)
    _count(
        "bad configs rejected by the Snakefile's checks, and of those run, by snakemake -n",
        rejected,
        len(cases) + through,
    )
    assert len(cases) >= 40 and through >= len(written) + 25, (len(cases), through)
    assert not failures, "\n".join(failures)


@pytest.mark.slow  # about 3 s
def test_good_configs_still_pass(tmp_path):
    cwd = os.getcwd()
    try:
        for name in ("config.yaml", "paper.yaml"):
            work = tmp_path / name
            work.mkdir()
            ok, msg = dry_run_in_process(ROOT / "config" / name, work)
            assert ok, msg
        ok, msg = dry_run_in_process(_write_config(TINY, tmp_path / "tiny.yaml"), tmp_path)
        assert ok, msg
    finally:
        os.chdir(cwd)


SAMPLE = [
    "width 16.0",
    "lr .nan",
    "duplicate nested key",
    "hessian.experiment 2 blocks",
    "mirror not a url",
    "180k-parameter dense Hessian",
    "width 10^6 (training memory)",
]


@pytest.mark.slow  # about 20 s
def test_bad_configs_through_the_snakemake_command(tmp_path, env):
    """The same rejection through the real ``snakemake -n`` command line (a sample, in parallel)."""
    cases = [c for c in written_bad_configs() if c[0] in SAMPLE]
    assert len(cases) == len(SAMPLE)

    def one(i_case):
        i, (cid, key, cfg) = i_case
        work = tmp_path / f"s{i}"
        work.mkdir()
        proc = _snakemake(["-n", "--configfile", str(_write_config(cfg, work / "bad.yaml"))], work, env)
        return cid, key, work, proc

    with cf.ThreadPoolExecutor(2) as pool:
        for cid, key, work, proc in pool.map(one, enumerate(cases)):
            out = proc.stdout + proc.stderr
            assert proc.returncode != 0, cid
            assert _names_key(out, key), (cid, out[-2000:])
            assert _no_traceback(out) and 'File "' not in out, (cid, out[-2000:])
            assert "rule train" not in out and not (work / "results").exists(), cid


@pytest.mark.parametrize("case", written_bad_configs(), ids=lambda c: c[0])
def test_written_config_fault_rejected(case, tmp_path):
    """Each hand-written fault (sizes among them), one dry run each."""
    cid, key, cfg = case
    cwd = os.getcwd()
    try:
        ok, msg = dry_run_in_process(_write_config(cfg, tmp_path / "bad.yaml"), tmp_path)
    finally:
        os.chdir(cwd)
    assert not ok and not msg.startswith("UNCLEAN") and _no_traceback(msg), (cid, msg[:500])
    assert _names_key(msg, key), (cid, msg[:500])


def test_training_memory_estimate_counts_parameters_exactly():
    """The parse-time estimate (no torch) against count_parameters of the real model."""
    from transformer_hessian.config.checks import DATASET_SHAPES, training_bytes_estimate
    from transformer_hessian.util.resources import hessian_group_size

    rng = random.Random(8)
    for _ in range(12):
        ds = rng.choice(sorted(DATASET_SHAPES))
        side, channels, classes = DATASET_SHAPES[ds]
        p = rng.choice([q for q in (1, 2, 4, 7, 8) if side % q == 0])
        m = {
            "patch_size": p,
            "width": rng.randint(1, 9),
            "depth": rng.randint(1, 3),
            "d_k": rng.randint(1, 7),
            "d_ff": rng.randint(1, 11),
            "ffn_bias": rng.random() < 0.5,
        }
        n = count_parameters(ViT(ModelConfig(image_size=side, channels=channels, num_classes=classes, **m)))
        assert training_bytes_estimate({"dataset": ds, "model": m}) == 16 * n
        blk = ViT(ModelConfig(image_size=side, channels=channels, num_classes=classes, **m)).group_params(0)
        assert hessian_group_size(m["width"], m["d_k"], m["d_ff"]) == sum(w.numel() for w in blk.values())


H = "experiments.hessian_tiny"


def _edited(key: str, value) -> dict:
    cfg = tiny_config()
    _set(cfg, key.split("."), value)
    return cfg


def round2_bad_configs() -> list[tuple[str, str, dict, str]]:
    """``(case id, key that must be named, config, text the message must hold)`` of values refused at parse time
    rather than clamped, dropped or run."""
    cases = [
        ("epochs 1e12", f"{H}.train.epochs", _edited(f"{H}.train.epochs", 10**12), "maximum"),
        ("lanczos_steps 1e6", "spectrum.lanczos_steps", _edited("spectrum.lanczos_steps", 10**6), "maximum"),
        ("dynamics.steps 1e12", "dynamics.steps", _edited("dynamics.steps", 10**12), "maximum"),
        ("train seed 2^32", f"{H}.train.seed", _edited(f"{H}.train.seed", 2**32), "maximum"),
        ("landscape seed 2^32", "landscape.seed", _edited("landscape.seed", 2**32), "maximum"),
        ("k_min 1e6", "landscape.k_min", _edited("landscape.k_min", 10**6), "samples"),
        ("val_fraction 1e-6", f"{H}.train.val_fraction", _edited(f"{H}.train.val_fraction", 1e-6), "validation"),
        ("max_train 1", f"{H}.train.max_train", _edited(f"{H}.train.max_train", 1), "1 training sample"),
        ("n_orderings 1e9", "landscape.n_orderings", _edited("landscape.n_orderings", 10**9), "maximum"),
        ("scaling.widths 1e6", "scaling.widths", _edited("scaling.widths", [10**6, 8]), "maximum"),
        ("hessian.batch_size 1e9", "hessian.batch_size", _edited("hessian.batch_size", 10**9), "training samples"),
        ("train.batch_size 1e9", f"{H}.train.batch_size", _edited(f"{H}.train.batch_size", 10**9), "training samples"),
        ("probe.k_small 1e6", "probe.k_small", _edited("probe.k_small", 10**6), "at most 59"),
        ("probe.shift_ks 1e9", "probe.shift_ks", _edited("probe.shift_ks", [4, 10**9]), "maximum"),
        ("probe.shift_ks 1000", "probe.shift_ks", _edited("probe.shift_ks", [4, 1000]), "at most 59"),
        ("data.root 5000 chars", "data.root", _edited("data.root", "r" * 5000), "data.root"),
        ("data.root 300-char name", "data.root", _edited("data.root", "results/" + "r" * 300), "255"),
    ]
    cfg = _edited("scaling.widths", [5000, 8])
    cfg["scaling"]["enabled"] = True
    cases.append(("scaling.widths 5000", "scaling.widths", cfg, "scaling.widths"))
    cfg = tiny_config()
    cfg["experiments"]["e" * 300] = cfg["experiments"]["hessian_tiny"]
    cases.append(("experiment name 300 chars", "experiments", cfg, "e" * 64))
    return cases


@pytest.mark.parametrize("case", round2_bad_configs(), ids=lambda c: c[0])
def test_bad_value_refused_at_parse_time_naming_the_key(case, tmp_path):
    """A bad value is refused by ``snakemake -n`` before any job (never run, clamped or dropped)."""
    cid, key, cfg, reason = case
    cwd = os.getcwd()
    try:
        ok, msg = dry_run_in_process(_write_config(cfg, tmp_path / "bad.yaml"), tmp_path)
    finally:
        os.chdir(cwd)
    assert not ok and not msg.startswith("UNCLEAN") and _no_traceback(msg), (cid, msg[:500])
    assert key in msg and reason in msg, (cid, msg[:800])
    assert not (tmp_path / "results").exists()


def test_every_numeric_key_has_a_range():
    """Each integer / number of the schema has an upper bound (a maximum, or a cross-key check)."""
    from transformer_hessian.config.validate import load_schema

    schema = load_schema()
    unbounded = []

    def walk(node, path):
        if "$ref" in node:
            ref = schema["definitions"][node["$ref"].rsplit("/", 1)[-1]]
            node = {**ref, **{k: v for k, v in node.items() if k != "$ref"}}
        for name, sub in (node.get("properties") or {}).items():
            walk(sub, f"{path}.{name}" if path else name)
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.<name>")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")
        types = node.get("type", [])
        types = [types] if isinstance(types, str) else types
        bounded = "maximum" in node or "exclusiveMaximum" in node or "cross-key" in node.get("description", "")
        if ("integer" in types or "number" in types) and not bounded:
            unbounded.append(path)

    walk(schema, "")
    assert not unbounded, unbounded
