"""``transformer-hessian bench train`` on a tiny config (synthetic tensors): throughput numbers in
range, the FLOP count against an analytic count of the model's matrix products."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch
import yaml

from transformer_hessian.bench.train import DATASET_SHAPES, device_peak_tflops, flops_per_image
from transformer_hessian.core.model import ModelConfig, ViT
from transformer_hessian.pipeline.cli import main


def analytic_train_flops(cfg: ModelConfig) -> int:
    """Matrix-product FLOPs of one forward + backward pass per image, by hand: forward
    F = 2 [L c p^2 d + depth (2 L d d_k + 2 L^2 d + L d^2 + 2 L d d_ff)] + 2 d C (products evaluated
    left to right as in the model); backward twice each product (both operands' gradients),
    except the patch embedding, whose input needs no gradient (once: the weight's)."""
    L, d, k, f = cfg.num_tokens, cfg.width, cfg.d_k, cfg.d_ff
    embed = 2 * L * cfg.patch_dim * d
    block = 2 * (2 * L * d * k + 2 * L * L * d + L * d * d + 2 * L * d * f)
    head = 2 * d * cfg.num_classes
    forward = embed + cfg.depth * block + head
    return 3 * forward - embed


@pytest.mark.parametrize("depth", [1, 2])
def test_flop_count_matches_the_analytic_count(depth):
    cfg = ModelConfig(image_size=8, channels=3, num_classes=7, patch_size=2, width=6, depth=depth, d_k=5, d_ff=9)
    model = ViT(cfg)
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 7, (4,))
    assert flops_per_image(model, x, y, None) == analytic_train_flops(cfg)


def test_no_peak_on_cpu():
    assert device_peak_tflops(torch.device("cpu"), "bf16") is None


def test_bench_train_cli_on_a_tiny_config(tmp_path):
    cfg = yaml.safe_load(open("config/config.yaml"))
    cfg["experiments"] = {
        "tiny_digits": {
            "dataset": "digits",
            "model": {"patch_size": 4, "width": 6, "depth": 1, "d_k": 4, "d_ff": 8, "ffn_bias": False, "ln_eps": 1e-5},
            "train": {"epochs": 1, "batch_size": 16, "lr": 1e-3},
        },
        "tiny_cifar": {
            "dataset": "cifar100",
            "model": {"patch_size": 8, "width": 8, "depth": 2, "d_k": 8, "d_ff": 16, "ffn_bias": False, "ln_eps": 1e-5},
            "train": {
                "epochs": 2,
                "batch_size": 8,
                "lr": 1e-3,
                "augment": "crop_flip",
                "warmup_epochs": 1,
                "schedule": "cosine",
                "amp": "bf16",
            },
        },
    }
    cfg["hessian"]["experiment"] = cfg["landscape"]["experiment"] = "tiny_digits"
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    out = tmp_path / "bench"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(
            [
                "bench",
                "train",
                "--config",
                str(path),
                "--synthetic",
                "--steps",
                "3",
                "--warmup",
                "1",
                "--device",
                "cpu",
                "--out-dir",
                str(out),
            ]
        )
    res = json.loads((out / "train_bench.json").read_text())
    assert [r["experiment"] for r in res["rows"]] == ["tiny_digits", "tiny_cifar"]
    assert len(res["load_average"]) == 3 and "git_commit" in res
    for r in res["rows"]:
        assert r["images_per_s"] > 0 and 0.0 <= r["data_loading_share"] <= 1.0
        assert r["flops_per_image"] > 0 and r["achieved_tflops"] > 0
        assert r["peak_tflops"] is None and r["fraction_of_peak"] is None  # CPU
        assert r["data"].startswith("synthetic")
    cifar = res["rows"][1]
    assert cifar["image_shape"] == [3, 32, 32] and DATASET_SHAPES["cifar100"][:3] == (32, 3, 100)
    assert cifar["augment"] == "crop_flip" and cifar["amp"] == "bf16"
    md = (out / "train_bench.md").read_text()
    assert (
        "| tiny_cifar (cifar100) | synthetic" in md
        and all(r["config"] == str(path) for r in res["rows"])
        and "images/s" in buf.getvalue()
    )
