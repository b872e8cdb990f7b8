"""Facts typed once (issue 17): the parameter count, the group layout, the JSON encoding and Theorem 7's
right-hand side each have one home; the callers agree with it and with an independent computation."""

import json
import random

import numpy as np
import pytest
import torch

from transformer_hessian import ALL_GROUPS, GROUPS
from transformer_hessian.model import ModelConfig, ViT, count_parameters


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
    from transformer_hessian.resources import hessian_group_size, parameter_count

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
    from transformer_hessian.hessian import group_layout
    from transformer_hessian.hessian_groups import layout
    from transformer_hessian.theory.layout import group_offsets

    rng = random.Random(3)
    for _ in range(5):
        _, _, model = _random_model(rng)
        for block in range(model.cfg.depth):
            names, shapes, off = group_layout(model, block)
            names2, shapes2, off2 = layout(model, block, GROUPS)
            assert (names, shapes) == (names2, shapes2) and np.array_equal(off, off2) and off.dtype == np.int64
            # against the parameters themselves: each slice of a flat vector is its group
            flat = torch.cat([getattr(model.blocks[block], n).detach().reshape(-1) for n in ALL_GROUPS])
            n9, s9, o9 = layout(model, block, ALL_GROUPS)
            for i, n in enumerate(n9):
                got = flat[o9[i] : o9[i + 1]].reshape(s9[i])
                assert torch.equal(got, getattr(model.blocks[block], n).detach())
            sl = group_offsets(dict(zip(names, shapes)))
            assert [(s.start, s.stop) for s in sl.values()] == list(zip(off[:-1].tolist(), off[1:].tolist()))
            assert all(type(s.start) is int for s in sl.values())


def test_one_json_encoding(tmp_path):
    from transformer_hessian import io, utils

    obj = {"a": np.float32(0.5), "b": np.arange(3), "c": torch.tensor([1.5, 2.0]), "d": [1, "x", None]}
    utils.write_json(obj, tmp_path / "plain.json")
    io.write_json(obj, tmp_path / "sealed.json")
    assert (tmp_path / "plain.json").read_bytes() == (tmp_path / "sealed.json").read_bytes()
    assert (tmp_path / "sealed.json.sha256").is_file() and not (tmp_path / "plain.json.sha256").exists()
    assert (
        io.load_json(tmp_path / "sealed.json")
        == utils.read_json(tmp_path / "plain.json")
        == json.loads('{"a": 0.5, "b": [0, 1, 2], "c": [1.5, 2.0], "d": [1, "x", null]}')
    )
    with pytest.raises(ValueError):
        utils.write_json({"x": float("nan")}, tmp_path / "nan.json")


def test_one_theorem7_right_hand_side():
    from transformer_hessian.studies.landscape.compute import analyse_landscape
    from transformer_hessian.theorem7 import landscape_bound, theorem7_rhs

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
