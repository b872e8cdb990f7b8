"""Facts typed once: the parameter count, the group layout, the JSON encoding and Theorem 7's
right-hand side each have one home; the callers agree with it and with an independent computation."""

import json
import random

import numpy as np
import pytest
import torch

from transformer_hessian import ALL_GROUPS, GROUPS
from transformer_hessian.core.model import ModelConfig, ViT, count_parameters


def _random_model(rng):
    side, channels, classes = rng.choice([(8, 1, 10), (28, 1, 10), (32, 3, 100), (6, 2, 3)])
    m = {
        "patch_size": rng.choice([q for q in (1, 2, 3, 4, 7, 8) if side % q == 0]),
        "width": rng.randint(1, 9),
        "depth": rng.randint(1, 3),
        "d_k": rng.randint(1, 7),
        "d_ff": rng.randint(1, 11),
        "ffn_bias": rng.random() < 0.5,
    }
    model = ViT(ModelConfig(image_size=side, channels=channels, num_classes=classes, **m))
    return m, (side, channels, classes), model


def test_parameter_count_counts_the_real_model():
    from transformer_hessian.util.resources import hessian_group_size, parameter_count

    rng = random.Random(17)
    for _ in range(15):
        m, image, model = _random_model(rng)
        blk = model.blocks[0]
        assert parameter_count(m, "weights") == sum(getattr(blk, n).numel() for n in GROUPS)
        assert parameter_count(m, "groups") == sum(getattr(blk, n).numel() for n in ALL_GROUPS)
        assert parameter_count(m, "block") == sum(p.numel() for p in blk.parameters())
        assert parameter_count(m, "model", image=image) == count_parameters(model)
        assert hessian_group_size(m["width"], m["d_k"], m["d_ff"]) == parameter_count(m, "weights")
    with pytest.raises(ValueError, match="part 'model'"):
        parameter_count(m, "model")  # the whole model needs the image


def test_one_group_layout_for_every_hessian():
    from transformer_hessian.core.hessian import group_layout
    from transformer_hessian.theory.layout import group_offsets

    rng = random.Random(3)
    for _ in range(5):
        _, _, model = _random_model(rng)
        for block in range(model.cfg.depth):
            names, shapes, off = group_layout(model, block)
            names2, shapes2, off2 = group_layout(model, block, GROUPS)
            assert (names, shapes) == (names2, shapes2) and np.array_equal(off, off2) and off.dtype == np.int64
            # against the parameters themselves: each slice of a flat vector is its group
            flat = torch.cat([getattr(model.blocks[block], n).detach().reshape(-1) for n in ALL_GROUPS])
            n9, s9, o9 = group_layout(model, block, ALL_GROUPS)
            for i, n in enumerate(n9):
                got = flat[o9[i] : o9[i + 1]].reshape(s9[i])
                assert torch.equal(got, getattr(model.blocks[block], n).detach())
            sl = group_offsets(dict(zip(names, shapes)))
            assert [(s.start, s.stop) for s in sl.values()] == list(zip(off[:-1].tolist(), off[1:].tolist()))
            assert all(type(s.start) is int for s in sl.values())


def test_one_json_encoding(tmp_path):
    from transformer_hessian.util import files as utils
    from transformer_hessian.util import io

    obj = {"a": np.float32(0.5), "b": np.arange(3), "c": torch.tensor([1.5, 2.0]), "d": [1, "x", None]}
    io.write_json(obj, tmp_path / "plain.json", sealed=False)
    io.write_json(obj, tmp_path / "sealed.json")
    assert (tmp_path / "plain.json").read_bytes() == (tmp_path / "sealed.json").read_bytes()
    assert (tmp_path / "sealed.json.sha256").is_file() and not (tmp_path / "plain.json.sha256").exists()
    assert (
        io.load_json(tmp_path / "sealed.json")
        == utils.read_json(tmp_path / "plain.json")
        == json.loads('{"a": 0.5, "b": [0, 1, 2], "c": [1.5, 2.0], "d": [1, "x", null]}')
    )
    with pytest.raises(ValueError):
        io.write_json({"x": float("nan")}, tmp_path / "nan.json", sealed=False)


def test_one_theorem7_right_hand_side():
    from transformer_hessian.core.landscape import analyse_landscape
    from transformer_hessian.core.theorem7 import landscape_bound, theorem7_rhs

    rng = np.random.default_rng(7)
    k = np.arange(1, 40.0)
    d2 = rng.random(k.size)
    assert np.array_equal(landscape_bound(k, 1.3, 0.7, d2), (2 * 1.3 + 0.7 * d2) / (k + 1))
    assert np.array_equal(theorem7_rhs(k, 1.3, 0.7, d2), landscape_bound(k, 1.3, 0.7, d2))
    losses = rng.gamma(2.0, 1.0, 120)
    r = analyse_landscape(losses, n_orderings=4, seed=1, n_bootstrap=10, k_min=3, batch_size=10)
    L = losses.max()
    assert np.array_equal(r["theorem7_bound_2L"], 2 * L / (np.asarray(r["k"], float) + 1))
    assert np.array_equal(r["batch"]["theorem7_bound_2L"], 2 * L / (np.asarray(r["batch"]["j"], float) + 1))


def test_one_table_of_data_sets(root):
    """Every data-set fact lives in ``datanames.DATA_SETS``: the schema's enums, the Snakefile's
    wildcard, the readers, the class counts and shapes agree with it, no module types a data set's
    display name again, and every derived wording is the one the figures, tables and claims print."""
    import re

    import yaml

    from transformer_hessian.config.checks import DATASET_SHAPES, DATASET_TRAIN
    from transformer_hessian.data.datasets import READERS
    from transformer_hessian.data.sources import DATASETS, NUM_CLASSES
    from transformer_hessian.plotting.style import CIFAR_RUN_NAMES as probe_names
    from transformer_hessian.plotting.style import DATASET_NAMES as style_names
    from transformer_hessian.registry.rules import _DATASET
    from transformer_hessian.studies.bounds.plot import DATASET_NAMES as bounds_names
    from transformer_hessian.studies.dynamics.plot import DATASETS as dynamics_names
    from transformer_hessian.studies.probe.plot import run_label
    from transformer_hessian.studies.table1.compute import DATASET_NAMES as table1_names
    from transformer_hessian.studies.table1.compute import IMAGE_SIZES
    from transformer_hessian.util import datanames

    names = list(datanames.DATA_SETS)
    assert names[:3] == ["digits", "mnist", "cifar100"] and list(DATASETS) == names and list(READERS) == names
    schema = (root / "src/transformer_hessian/config/schema/config.schema.yaml").read_text()
    enums = [yaml.safe_load(m) for m in re.findall(r"dataset: (\{type: string, enum: \[[^\]]*\][^}]*\})", schema)]
    assert len(enums) == 2 and all(e["enum"] == names for e in enums)
    assert 'dataset="|".join(DATA_SETS)' in (root / "Snakefile").read_text()

    def first3(d):  # the three data sets of the paper's runs (a data set added later leaves these pins alone)
        assert list(d) == names
        return {k: d[k] for k in names[:3]}

    assert first3(NUM_CLASSES) == {"digits": 10, "mnist": 10, "cifar100": 100}
    assert first3(DATASET_SHAPES) == {"digits": (8, 1, 10), "mnist": (28, 1, 10), "cifar100": (32, 3, 100)}
    assert first3(DATASET_TRAIN) == {"digits": 1797, "mnist": 60000, "cifar100": 50000}
    assert first3(IMAGE_SIZES) == {"digits": 8, "mnist": 28, "cifar100": 32}
    # the wordings as they were typed before the table; cifar100 in the MNIST experiments'
    # figures (bounds, dynamics) now says it stands in, as every other text does
    # the claim rows name a data set with datanames.described (the paper's names)
    assert first3(datanames.PAPER_NAMES) == {"digits": "8x8 digits", "mnist": "MNIST", "cifar100": "CIFAR-100"}
    assert first3(style_names) == {"digits": "8x8 digits (scikit-learn)", "mnist": "MNIST", "cifar100": "CIFAR-100"}
    assert first3(_DATASET) == {"digits": "scikit-learn's 8x8 digits", "mnist": "MNIST", "cifar100": "CIFAR-100"}
    assert first3(table1_names) == {"digits": "digits 8x8 (stand-in)", "mnist": "MNIST", "cifar100": "CIFAR-100"}
    assert first3(probe_names) == {
        "digits": "8x8 digits (scikit-learn; stand-in for the paper's CIFAR-100)",
        "mnist": "MNIST (stand-in for the paper's CIFAR-100)",
        "cifar100": "CIFAR-100",
    }
    assert first3(dynamics_names) == {
        "digits": "8x8 digits (stand-in for MNIST)",
        "mnist": "MNIST",
        "cifar100": "CIFAR-100 (stand-in for MNIST)",
    }
    assert first3(bounds_names) == {
        "digits": "scikit-learn 8x8 digits (stand-in for MNIST)",
        "mnist": "MNIST",
        "cifar100": "CIFAR-100 (stand-in for MNIST)",
    }
    assert datanames.named("digits", "MNIST / CIFAR-100") == "8x8 digits (scikit-learn; stand-in for MNIST / CIFAR-100)"
    assert datanames.named("mnist", "CIFAR-100") == "MNIST (stand-in for CIFAR-100)"
    assert datanames.named("svhn") == "svhn"
    assert run_label({"dataset": "digits"}) == probe_names["digits"] and run_label({}) == "?"
    # no module types a data set's display name again (a dict keyed by config name with a paper name)
    typed = re.compile(r'"(digits|mnist|cifar100)": "(8x8|MNIST|CIFAR|scikit|digits 8x8)')
    again = [
        f"{p.relative_to(root)}:{i}"
        for p in (root / "src/transformer_hessian").rglob("*.py")
        if p.name != "datanames.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if typed.search(line)
    ]
    assert not again, again
