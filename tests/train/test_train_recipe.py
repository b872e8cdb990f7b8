"""The optional training keys (train.amp, compile, warmup_epochs, schedule, augment): their
defaults leave training exactly as before, and each piece matches an independent computation."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_spec, train_section

from transformer_hessian.core.model import ModelConfig, ViT
from transformer_hessian.train import (
    crop_flip,
    epoch_augmentation,
    epoch_permutation,
    lr_factor,
    make_optimizer,
    train,
    train_epoch,
)


def _tiny_model(seed=0):
    torch.manual_seed(seed)
    return ViT(ModelConfig(image_size=8, channels=3, num_classes=5, patch_size=4, width=6, depth=1, d_k=4, d_ff=10))


def test_lr_factor_default_is_constant_and_schedules_follow_their_formulas():
    t = train_section(epochs=10)
    assert lr_factor(0, 7, t) is None
    assert lr_factor(0, 7, train_section(epochs=10, schedule="constant", warmup_epochs=0)) is None
    tw = train_section(epochs=10, warmup_epochs=2, schedule="cosine")
    W, T = 14, 70
    got = [lr_factor(s, 7, tw) for s in range(T)]
    want = [(s + 1) / W if s < W else 0.5 * (1 + math.cos(math.pi * (s - W) / (T - W))) for s in range(T)]
    assert got == pytest.approx(want, abs=1e-15)
    assert got[W - 1] == 1.0 and got[W] == 1.0 and 0 < got[-1] < 1e-2
    assert all(a >= b for a, b in zip(got[W:], got[W + 1 :]))  # cosine decays monotonically
    tc = train_section(epochs=3, warmup_epochs=0.5, schedule="constant")
    assert [lr_factor(s, 4, tc) for s in range(4)] == [0.5, 1.0, 1.0, 1.0]


def test_crop_flip_matches_a_per_sample_loop():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(7, 3, 5, 6, generator=g)
    pad = 2
    shifts = torch.randint(0, 2 * pad + 1, (7, 2), generator=g)
    flips = torch.rand(7, generator=g) < 0.5
    out = crop_flip(x, shifts, flips, pad)
    for b in range(7):
        padded = torch.zeros(3, 5 + 2 * pad, 6 + 2 * pad)
        padded[:, pad : pad + 5, pad : pad + 6] = x[b]
        dy, dx = shifts[b].tolist()
        ref = padded[:, dy : dy + 5, dx : dx + 6]
        if flips[b]:
            ref = torch.flip(ref, dims=[2])
        assert torch.equal(out[b], ref)
    # zero shift = identity crop; no flip keeps the image
    same = crop_flip(x, torch.full((7, 2), pad), torch.zeros(7, dtype=torch.bool), pad)
    assert torch.equal(same, x)


def test_epoch_augmentation_is_seeded_and_off_by_default():
    assert epoch_augmentation(10, 0, 1, train_section(), "cpu") is None
    t = train_section(augment="crop_flip", crop_padding=3)
    a, b = epoch_augmentation(50, 0, 2, t, "cpu"), epoch_augmentation(50, 0, 2, t, "cpu")
    c = epoch_augmentation(50, 0, 3, t, "cpu")
    assert torch.equal(a["shifts"], b["shifts"]) and torch.equal(a["flips"], b["flips"])
    assert not torch.equal(a["shifts"], c["shifts"])
    assert a["shifts"].min() >= 0 and a["shifts"].max() <= 6 and a["pad"] == 3


def _plain_epoch(model, opt, x, y, seed, epoch, bs):
    """The training epoch as it was before the optional keys: an independent re-statement."""
    perm = epoch_permutation(len(x), seed, epoch)
    for s in range(math.ceil(len(x) / bs)):
        idx = perm[s * bs : (s + 1) * bs]
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def test_default_keys_train_bit_identically_to_the_plain_loop():
    spec = tiny_spec()
    t = dataclasses.replace(spec.train, amp=None, compile=False, warmup_epochs=0, schedule="constant", augment=None)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(45, 3, 8, 8, generator=g), torch.randint(0, 5, (45,), generator=g)
    m1, m2 = _tiny_model(), _tiny_model()
    o1, o2 = make_optimizer(m1, spec), make_optimizer(m2, spec)
    for epoch in (1, 2):
        train_epoch(m1, o1, x, y, seed=0, epoch=epoch, batch_size=16, train_cfg=t)
        _plain_epoch(m2, o2, x, y, 0, epoch, 16)
    for (k, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), k


def test_schedule_sets_the_rate_of_every_step():
    t = train_section(epochs=2, lr=1e-2, weight_decay=0.0, warmup_epochs=1, schedule="cosine")
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(30, 3, 8, 8, generator=g), torch.randint(0, 5, (30,), generator=g)
    model = _tiny_model()
    opt = make_optimizer(model, dataclasses.replace(tiny_spec(), train=t))
    seen = []
    train_epoch(
        model,
        opt,
        x,
        y,
        seed=0,
        epoch=2,
        batch_size=10,
        train_cfg=t,
        on_step=lambda s, m, loss: seen.append(opt.param_groups[0]["lr"]),
    )
    # epoch 2 = steps 3..5 of 6, after a 3-step warm-up: cosine over the last 3 steps
    assert seen == pytest.approx([1e-2 * 0.5 * (1 + math.cos(math.pi * k / 3)) for k in range(3)], rel=1e-14)


def test_augmented_bf16_training_runs_and_resumes_identically(tmp_path):
    spec = tiny_spec(epochs=2, augment="crop_flip", crop_padding=1, amp="bf16", warmup_epochs=1, schedule="cosine")
    m = train("tiny", spec, tmp_path / "data", tmp_path / "a", device="cpu")
    assert all(math.isfinite(h["train_loss"]) for h in m["history"])
    m2 = train("tiny", spec, tmp_path / "data", tmp_path / "b", device="cpu")
    assert m["history"][-1]["train_loss"] == m2["history"][-1]["train_loss"]
    # augmentation changes the training (the draws are used), the default does not
    plain = train(
        "tiny",
        tiny_spec(epochs=2, amp="bf16", warmup_epochs=1, schedule="cosine"),
        tmp_path / "data",
        tmp_path / "c",
        device="cpu",
    )
    assert plain["history"][-1]["train_loss"] != m["history"][-1]["train_loss"]
