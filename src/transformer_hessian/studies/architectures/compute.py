"""The computation of the architecture study: per architecture, a patch-embedding model around a
torch encoder (:class:`PatchEncoder`), trained with cross-entropy in float32, and the exact dense
Hessian of the encoder's parameters (:func:`transformer_hessian.encoder.exact_hessian`, float64)
on one fixed batch at initialisation and after training, measured by :mod:`.metrics`."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...config.architectures import Arch
from . import metrics

__all__ = ["PatchEncoder", "hessian_stage", "run_architecture", "train_model"]


class PatchEncoder(nn.Module):
    """images -> non-overlapping patches -> linear embedding (+ learned positions) -> torch encoder
    (batch_first, dropout 0; one ``nn.TransformerEncoderLayer`` or an ``nn.TransformerEncoder``
    stack without final norm) -> mean over tokens -> ``nn.Linear`` head."""

    def __init__(self, arch: Arch, settings: Mapping[str, Any], image_size: int, channels: int, classes: int):
        super().__init__()
        p, d = int(settings["patch_size"]), int(settings["d_model"])
        self.patch = p
        self.embed = nn.Linear(channels * p * p, d)
        n_tokens = (image_size // p) ** 2
        self.pos = nn.Parameter(0.02 * torch.randn(1, n_tokens, d)) if settings["positions"] else None
        layer = nn.TransformerEncoderLayer(
            d,
            arch.nhead,
            int(settings["dim_feedforward"]),
            dropout=0.0,
            activation=arch.activation,
            layer_norm_eps=float(settings["layer_norm_eps"]),
            batch_first=True,
            norm_first=arch.norm_first,
            bias=bool(settings["bias"]),
        )
        if arch.num_layers == 1:
            self.encoder: nn.Module = layer
        else:
            self.encoder = nn.TransformerEncoder(layer, arch.num_layers, enable_nested_tensor=False)
            for sub in self.encoder.layers:  # torch deep-copies the layer: give each layer its own draw
                sub.self_attn._reset_parameters()
                sub.linear1.reset_parameters()
                sub.linear2.reset_parameters()
        self.head = nn.Linear(d, classes)

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, S, S) images -> (B, T, d) embedded patches (+ positions)."""
        B, C, S, _ = x.shape
        p = self.patch
        patches = x.reshape(B, C, S // p, p, S // p, p).permute(0, 2, 4, 1, 3, 5).reshape(B, (S // p) ** 2, C * p * p)
        t = self.embed(patches)
        return t + self.pos if self.pos is not None else t

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, S, S) images -> (B, classes) logits."""
        return self.head(self.encoder(self.tokens(x)).mean(1))


def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(1) == y).double().mean())


def train_model(model: PatchEncoder, data: Mapping[str, Any], train: Mapping[str, Any]) -> dict[str, Any]:
    """AdamW with cross-entropy in float32 (``train``: epochs, batch_size, lr, weight_decay, seed);
    returns the final train loss and the train and validation accuracy."""
    x, y = data["train_x"], data["train_y"]
    gen = torch.Generator().manual_seed(int(train["seed"]))
    opt = torch.optim.AdamW(model.parameters(), lr=float(train["lr"]), weight_decay=float(train["weight_decay"]))
    model.train()
    for _ in range(int(train["epochs"])):
        order = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), int(train["batch_size"])):
            idx = order[i : i + int(train["batch_size"])]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        train_loss = float(F.cross_entropy(model(x), y))
    if not math.isfinite(train_loss):
        raise RuntimeError(f"architectures: training diverged (train loss {train_loss}); lower architectures.train.lr")
    return {
        "train_loss": train_loss,
        "train_acc": _accuracy(model, x, y),
        "val_acc": _accuracy(model, data["val_x"], data["val_y"]),
    }


def _hvp_check(model: PatchEncoder, tokens: torch.Tensor, labels: torch.Tensor, H: torch.Tensor, seed: int) -> float:
    """Relative error of ``H v`` against reverse-over-reverse autograd (math attention) for one
    random ``v``: an independent check of every Hessian the study uses."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    params = list(model.encoder.parameters())
    v = torch.randn(H.shape[0], generator=torch.Generator().manual_seed(seed), dtype=H.dtype)
    with sdpa_kernel(SDPBackend.MATH), torch.enable_grad():
        model.encoder.train()  # the slow path (the fused eval path has no double backward); dropout is 0
        loss = F.cross_entropy(model.head(model.encoder(tokens).mean(1)), labels)
        grads = torch.autograd.grad(loss, params, create_graph=True)
        flat = torch.cat([g.reshape(-1) for g in grads])
        hv = torch.autograd.grad(flat @ v, params)
        model.encoder.eval()
    ref = torch.cat([g.reshape(-1) for g in hv])
    return float((H @ v - ref).norm() / ref.norm().clamp_min(1e-300))


def hessian_stage(
    model: PatchEncoder, images: torch.Tensor, labels: torch.Tensor, settings: Mapping[str, Any], seed: int
) -> dict[str, Any]:
    """The exact Hessian of the CE loss w.r.t. all encoder parameters (float64) on ``images`` and
    its measures: block-pair norms, leaders, diagonal-block spectra, JS0, spreads, the share
    outside the layer-diagonal blocks, and the HVP check against autograd."""
    from ...encoder import exact_hessian

    t0 = time.perf_counter()
    model = model.double().eval()
    with torch.no_grad():
        tokens = model.tokens(images.double())
    H = exact_hessian(model.encoder, tokens, labels, loss="cross_entropy", head=model.head)
    seconds = time.perf_counter() - t0
    hvp_err = _hvp_check(model, tokens, labels, H, seed)
    Hn = H.numpy()
    shapes = [(n, tuple(p.shape)) for n, p in model.encoder.named_parameters()]
    blocks, layer_rows = metrics.block_index(shapes)
    norms = metrics.block_norms(Hn, blocks)
    eig = metrics.diagonal_eigenvalues(Hn, blocks)
    _, dens = metrics.spectral_densities(eig, int(settings["js_points"]), float(settings["js_sigma"]))
    diag = [r for r in norms if r["row"] == r["col"]]
    return {
        "n_params": int(H.shape[0]),
        "hessian_seconds": seconds,
        "hvp_rel_error": hvp_err,
        "fro_total": float(np.linalg.norm(Hn)),
        "spectral_total": float(np.max(np.abs(np.linalg.eigvalsh(Hn)))),
        "blocks": norms,
        "leaders": {f: metrics.leaders(norms, f)[:3] for f in ("rms", "fro", "spectral")},
        "diagonal_leaders": {f: metrics.leaders(norms, f, diagonal=True) for f in ("rms", "fro", "spectral")},
        "spread_decades": {
            "diag_spectral": metrics.spread_decades([r["spectral"] for r in diag]),
            "diag_rms": metrics.spread_decades([r["rms"] for r in diag]),
            "pairs_rms": metrics.spread_decades([r["rms"] for r in norms]),
        },
        "js0": metrics.js0(dens),
        "layer_offdiag": metrics.layer_offdiag_share(Hn, layer_rows),
        "eigenvalues": {k: v.tolist() for k, v in eig.items()},
    }


def run_architecture(
    arch: Arch, settings: Mapping[str, Any], data: Mapping[str, Any], batch: tuple[torch.Tensor, torch.Tensor]
) -> dict[str, Any]:
    """One architecture: seeded init, Hessian at init, training, Hessian after training."""
    torch.manual_seed(int(settings["train"]["seed"]))
    model = PatchEncoder(arch, settings, int(data["image_size"]), int(data["channels"]), int(data["num_classes"]))
    images, labels = batch
    seed = int(settings["train"]["seed"])
    init = hessian_stage(_copy(model), images, labels, settings, seed)
    t0 = time.perf_counter()
    training = train_model(model, data, settings["train"])
    training["train_seconds"] = time.perf_counter() - t0
    trained = hessian_stage(model, images, labels, settings, seed + 1)
    return {
        "name": arch.name,
        "label": arch.label(),
        "arch": _arch_dict(arch),
        "training": training,
        "init": init,
        "trained": trained,
    }


def _copy(model: nn.Module) -> nn.Module:
    import copy

    return copy.deepcopy(model)


def _arch_dict(arch: Arch) -> dict[str, Any]:
    return {
        "norm_first": arch.norm_first,
        "nhead": arch.nhead,
        "activation": arch.activation,
        "num_layers": arch.num_layers,
        "changes": {k: v for k, v in arch.changes},
    }
