import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw their inputs from a fixed seed per test by default ("repeatable"), so that
# `make test` gives the same verdict on the same commit here and in CI: a draw that exposes a bug
# fails every run, not one run in ten. HYPOTHESIS_PROFILE=explore (`make test-explore`) draws
# fresh inputs on every run, to search further; a failure it finds is printed with the
# @reproduce_failure line that replays it.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def env() -> dict:
    """Environment for subprocesses: the venv's commands first on PATH."""
    e = dict(os.environ)
    e["PATH"] = f"{BIN}{os.pathsep}{e.get('PATH', '')}"
    e.setdefault("MPLBACKEND", "Agg")
    return e


def tiny_spec(**train):
    """A tiny digits experiment as the typed section (settings.Experiment); ``train`` keys override."""
    from transformer_hessian.settings import Experiment

    spec = {
        "dataset": "digits",
        "model": {"patch_size": 4, "width": 6, "depth": 1, "d_k": 4, "d_ff": 10, "ffn_bias": False, "ln_eps": 1e-5},
        "train": {
            "epochs": 4,
            "batch_size": 32,
            "lr": 3e-3,
            "weight_decay": 0.01,
            "seed": 0,
            "val_fraction": 0.2,
            "max_train": 160,
            "max_val": 60,
        },
    }
    spec["train"].update(train)
    return Experiment.with_defaults(spec)


def train_section(**keys):
    """A typed ``train`` section (settings.Train): ``keys`` over epochs 1, batch_size 32, lr 3e-3;
    every other key from the schema's defaults."""
    from transformer_hessian.settings import Train

    return Train.with_defaults({"epochs": 1, "batch_size": 32, "lr": 3e-3, **keys})


def tiny_vit(width, d_k, d_ff, depth, bias, seed):
    """A seeded float64 ViT on 4x4 one-channel images (patch 2, 4 tokens, 3 classes)."""
    import torch

    from transformer_hessian.model import ModelConfig, ViT

    torch.manual_seed(seed)
    cfg = ModelConfig(
        image_size=4,
        channels=1,
        num_classes=3,
        patch_size=2,
        width=width,
        depth=depth,
        d_k=d_k,
        d_ff=d_ff,
        ffn_bias=bias,
    )
    return ViT(cfg).double()


def func_hessian(model, images, labels):
    """Reference five-group Hessian of the mean cross-entropy of a one-block ``model``:
    ``torch.func.hessian`` over [W_Q, W_K, W_V, W_1, W_2] of block 0, as one dense matrix.

    (No LayerNorm weight is differentiated, so torch 2.14.1's layer_norm mixed-derivative bug
    does not apply.)"""
    import torch
    from torch.func import functional_call, hessian

    from transformer_hessian import GROUPS

    names = [f"blocks.0.{n}" for n in GROUPS]
    W = {n: model.get_parameter(n).detach() for n in names}

    def loss(w):
        return torch.nn.functional.cross_entropy(functional_call(model, w, (images,)), labels)

    H = hessian(loss)(W)
    return torch.cat([torch.cat([H[a][b].reshape(W[a].numel(), W[b].numel()) for b in names], 1) for a in names], 0)


def snakemake_dry_run(root, workdir, env, *args, timeout=180):
    """``snakemake -n`` of this repository's Snakefile in ``workdir`` (completed process, output captured)."""
    import subprocess
    import sys

    return subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            "--snakefile",
            str(root / "Snakefile"),
            "--directory",
            str(workdir),
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
