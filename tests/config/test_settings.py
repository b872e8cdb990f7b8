"""The typed, frozen config (transformer_hessian.config.settings): built once from the validated dict,
no defaults outside the schema, exact keys, and an exact round trip through JSON."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import subprocess
import sys
import typing

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_hessian.config import settings as S
from transformer_hessian.config.section import Section
from transformer_hessian.config.validate import ConfigError, load_config, load_schema, validate_config
from transformer_hessian.core.landscape import analyse_landscape

# AdamWTrain is the keys the three training sections share (a base, not a section of the schema)
SECTIONS = [
    c for c in vars(S).values() if isinstance(c, type) and issubclass(c, Section) and c not in (Section, S.AdamWTrain)
]


def _node(cls):
    schema = load_schema()
    node = schema
    for part in cls.SCHEMA_NODE:
        node = node[part]
    return node


@pytest.fixture()
def default(root):
    return yaml.safe_load((root / "config/config.yaml").read_text())


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_shipped_configs_round_trip_exactly(root, name):
    d = load_config(root / "config" / name)
    cfg = S.Config.from_dict(d)
    assert cfg.to_dict() == d
    # through JSON, as the rules pass each section on the command line
    again = S.Config.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg and json.dumps(again.to_dict(), sort_keys=True) == json.dumps(d, sort_keys=True)
    for exp_name, exp in cfg.experiments.items():
        assert S.Experiment.from_dict(json.loads(json.dumps(exp.to_dict()))) == exp
        assert exp.to_dict() == d["experiments"][exp_name]
    for section in ("hessian", "landscape", "probe", "spectrum", "dynamics", "scaling", "theory", "bounds"):
        typed = getattr(cfg, section)
        assert typed.to_dict() == d[section]
        assert type(typed).from_dict(json.loads(json.dumps(typed.to_dict()))) == typed
    assert cfg == S.load_settings(str(root / "config" / name))


@pytest.mark.parametrize("cls", SECTIONS, ids=lambda c: c.__name__)
def test_fields_are_the_schema_keys_typed_and_without_defaults(cls):
    """One dataclass field per schema key (same names, same order); no field has a default (the
    schema is the one place defaults live); every class says what its section controls."""
    names = [f.name for f in dataclasses.fields(cls)]
    assert names == list(_node(cls)["properties"])
    assert all(
        f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING for f in dataclasses.fields(cls)
    )
    assert cls.__dataclass_params__.frozen
    assert cls.__doc__ and len(cls.__doc__.split()) >= 8
    hints = typing.get_type_hints(cls)  # inherited fields too (AdamWTrain's)
    assert all(n in hints for n in names)


def test_sections_are_frozen(default):
    cfg = S.Config.from_dict(validate_config(copy.deepcopy(default)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.hessian.block = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        next(iter(cfg.experiments.values())).model.width = 3
    assert isinstance(cfg.probe.shift_ks, tuple) and isinstance(cfg.probe.to_dict()["shift_ks"], list)


@pytest.mark.parametrize(
    "path, named",
    [
        (("hessian", "blok"), "hessian.blok: unknown key"),
        (("landscape", "n_ordering"), "landscape.n_ordering: unknown key"),
        (("experiments", "hessian_digits", "model", "widht"), "experiments.hessian_digits.model.widht: unknown key"),
        (("scaling", "train", "epoch"), "scaling.train.epoch: unknown key"),
        (("colour",), "colour: unknown key"),
    ],
)
def test_unknown_key_names_the_key(default, path, named):
    d = validate_config(copy.deepcopy(default))
    node = d
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = 1
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        S.Config.from_dict(d)


@pytest.mark.parametrize(
    "path",
    [("hessian", "block"), ("probe", "shift_ks"), ("experiments", "landscape_digits", "train", "lr"), ("device",)],
)
def test_missing_key_names_the_key(default, path):
    d = validate_config(copy.deepcopy(default))
    node = d
    for p in path[:-1]:
        node = node[p]
    del node[path[-1]]
    with pytest.raises(ConfigError, match=r"^" + r"\.".join(path) + ": missing"):
        S.Config.from_dict(d)


def test_with_defaults_fills_from_the_schema_and_rejects_bad_values():
    h = S.Hessian.with_defaults({"experiment": "e"})
    schema = _node(S.Hessian)["properties"]
    assert h.to_dict() == {"experiment": "e", **{k: v["default"] for k, v in schema.items() if "default" in v}}
    with pytest.raises(ConfigError, match=r"hessian\.block"):
        S.Hessian.with_defaults({"experiment": "e", "block": -1})
    with pytest.raises(ConfigError, match=r"hessian\.colour"):
        S.Hessian.with_defaults({"experiment": "e", "colour": 1})


@pytest.mark.slow  # about 7 s
@settings(max_examples=15, deadline=None)
@given(
    width=st.integers(1, 20),  # the dense Hessian must fit resources.mem_mb
    lr=st.floats(1e-6, 1.0, allow_nan=False),
    seed=st.integers(0, 2**31),
    shift_ks=st.lists(st.integers(1, 500), min_size=0, max_size=5),
    max_samples=st.one_of(st.none(), st.integers(2, 10_000)),
    mirror=st.one_of(st.none(), st.just("https://example.org/data")),
)
def test_round_trip_on_generated_configs(width, lr, seed, shift_ks, max_samples, mirror):
    """from_dict(validated).to_dict() returns the validated dict unchanged, through JSON too."""
    d = {
        "experiments": {
            "e": {
                "dataset": "digits",
                "model": {"patch_size": 2, "width": width, "depth": 1, "d_k": width, "d_ff": 2 * width},
                "train": {"epochs": 1, "batch_size": 8, "lr": lr, "seed": seed},
            }
        },
        "hessian": {"experiment": "e"},
        "landscape": {"experiment": "e", "max_samples": max_samples},
        "probe": {"shift_ks": shift_ks},
        "data": {"mirror": mirror},
    }
    v = validate_config(d)
    cfg = S.Config.from_dict(v)
    assert cfg.to_dict() == v
    assert S.Config.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert cfg.experiments["e"].train.lr == lr and cfg.probe.shift_ks == tuple(shift_ks)
    assert cfg.landscape.max_samples == max_samples and cfg.data.mirror == mirror


def test_landscape_function_defaults_agree_with_the_schema():
    """analyse_landscape keeps keyword defaults for direct calls; they must be the schema's (the
    pipeline always passes the config's values). It once had n_orderings=20 against the schema's 50."""
    schema = _node(S.Landscape)["properties"]
    params = inspect.signature(analyse_landscape).parameters
    for key in ("n_orderings", "seed", "ema_factor", "k_min", "n_bootstrap", "granularity"):
        assert params[key].default == schema[key]["default"], key


def test_import_is_light():
    """settings imports no torch, numpy or pandas (``--help`` and the Snakefile stay fast)."""
    code = "import sys, transformer_hessian.config.settings; print([m for m in ('torch', 'numpy', 'pandas') if m in sys.modules])"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
