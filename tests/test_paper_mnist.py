"""config/paper_mnist.yaml: the paper's MNIST setting, and "stand-in for CIFAR-100" wherever the
MNIST model runs an experiment that the paper ran on CIFAR-100 (Table 1, claims, captions,
figure labels)."""

from __future__ import annotations

import pytest
from studies.table1_builders import _metrics, _table1

from transformer_hessian.config.validate import load_config
from transformer_hessian.plotting import dataset_model_label
from transformer_hessian.registry import FIGURES
from transformer_hessian.registry.rules import caption
from transformer_hessian.studies.probe.plot import run_label
from transformer_hessian.util.datanames import described, stands_in


@pytest.fixture(scope="module")
def cfg(root):
    return load_config(root / "config/paper_mnist.yaml")


@pytest.mark.parametrize(
    "dataset, paper, expected",
    [
        ("mnist", "MNIST", False),
        ("mnist", "CIFAR-100", True),
        ("cifar100", "CIFAR-100", False),
        ("cifar100", "MNIST", True),
        ("digits", "MNIST", True),
        ("digits", "CIFAR-100", True),
        ("mnist", "MNIST / CIFAR-100", False),
        ("digits", "MNIST / CIFAR-100", True),
        ("mnist", None, False),
    ],
)
def test_stands_in(dataset, paper, expected):
    assert stands_in(dataset, paper) is expected


def test_paper_mnist_is_the_papers_mnist_setting(root, cfg):
    paper = load_config(root / "config/paper.yaml")
    assert cfg["experiments"] == {"hessian_mnist": paper["experiments"]["hessian_mnist"]}
    for key in ("hessian", "theory", "dynamics", "spectrum"):
        assert cfg[key] == paper[key], key
    assert {k: v for k, v in cfg["landscape"].items() if k != "experiment"} == {
        k: v for k, v in paper["landscape"].items() if k != "experiment"
    }
    assert cfg["landscape"]["experiment"] == "hessian_mnist" and cfg["scaling"]["enabled"] is False
    assert cfg["device"] == "cpu" and cfg["data"]["local"] is None


def test_table1_says_stand_in_for_cifar100(cfg):
    df = _table1(cfg, _metrics(cfg))
    runs = df[df["source"] != "paper"].reset_index(drop=True)
    assert list(runs["dataset"]) == ["MNIST", "MNIST (stand-in for CIFAR-100)"]
    assert runs.loc[0, "differs from paper"] == "none"
    assert runs.loc[1, "differs from paper"].startswith("dataset")


def test_claims_captions_and_labels_say_stand_in(cfg):
    assert described("mnist", "CIFAR-100") == "MNIST, stand-in for CIFAR-100"
    assert described("mnist", "MNIST") == "MNIST"
    assert described("digits", "MNIST") == "8x8 digits, stand-in for MNIST"
    caps = {f.id: caption(f, cfg) for f in FIGURES}
    assert "MNIST, stand-in for CIFAR-100" in caps["fig6"]
    assert "stand-in" not in caps["fig3"] and "MNIST" in caps["fig3"]
    metrics = {
        "dataset": "mnist",
        "model": {"image_size": 28, "patch_size": 4, "depth": 1, "width": 16, "d_k": 16, "d_ff": 64},
    }
    assert dataset_model_label(metrics, "CIFAR-100").startswith("MNIST (stand-in for CIFAR-100); ViT, 1 block, 49")
    assert dataset_model_label(metrics, "MNIST").startswith("MNIST; ViT")
    digits = {**metrics, "dataset": "digits"}
    assert "(scikit-learn; stand-in for MNIST)" in dataset_model_label(digits, "MNIST")
    assert run_label({"dataset": "mnist"}) == "MNIST (stand-in for the paper's CIFAR-100)"
