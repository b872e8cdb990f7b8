"""Loading what training wrote: an experiment's data split, its model config, a trained model
from a verified checkpoint (checked against the experiment's model sizes), and the losses of a
model on a split (:func:`evaluate` over a whole split, :func:`per_sample_losses` per sample)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from ..core.model import ModelConfig, ViT
from ..data import load_dataset
from ..errors import ConfigError
from .checkpoints import CheckpointError, load_checkpoint

if TYPE_CHECKING:
    from ..config.settings import Experiment


def model_config_for(spec: Experiment, data: dict) -> ModelConfig:
    """The ModelConfig of an experiment for the loaded data (image size, channels, classes)."""
    return ModelConfig(
        image_size=data["image_size"],
        channels=data["channels"],
        num_classes=data["num_classes"],
        **spec.model.to_dict(),
    )


def load_experiment_data(spec: Experiment, data_root: str | Path) -> dict:
    """The experiment's data set as tensors: train/val split from the config's seed."""
    t = spec.train
    return load_dataset(
        spec.dataset,
        data_root,
        val_fraction=t.val_fraction,
        seed=t.seed,
        max_train=t.max_train,
        max_val=t.max_val,
    )


def check_model_matches(model_config: dict, spec: Experiment, experiment: str, path: str | Path) -> None:
    """The model sizes travel twice (the JSON spec and the checkpoint): raise :class:`ConfigError`
    naming ``experiments.<experiment>.model.<key>`` when a key of ``spec.model`` differs from the
    checkpoint's ``model_config`` (e.g. the config's width was changed after training)."""
    for key, want in spec.model.to_dict().items():
        if key in model_config and model_config[key] != want:
            raise ConfigError(
                f"experiments.{experiment}.model.{key}: the config says {want!r} but the checkpoint {path} "
                f"was trained with {model_config[key]!r}; run the train rule again (or restore the config)"
            )


def load_model(
    path: str | Path,
    device: str | torch.device = "cpu",
    dtype=torch.float32,
    spec: Experiment | None = None,
    experiment: str = "<experiment>",
) -> ViT:
    """Rebuild a ViT from any checkpoint written by :func:`train` (verified first).

    Raises :class:`~transformer_hessian.train.checkpoints.CheckpointError` naming the file when the
    checkpoint is damaged, unreadable, holds pickled code, or does not match its model config.
    With ``spec`` (the experiment ``experiment`` the caller believes it holds), the checkpoint's
    model sizes must equal ``spec.model`` (:func:`check_model_matches`).
    """
    ckpt = load_checkpoint(path, map_location="cpu")
    if spec is not None:
        check_model_matches(ckpt["model_config"], spec, experiment, path)
    try:
        model = ViT(ModelConfig(**ckpt["model_config"]))
        model.load_state_dict(ckpt["model"])
    except (TypeError, ValueError, RuntimeError, KeyError) as err:
        raise CheckpointError(
            f"checkpoint {path} does not fit its own model config ({type(err).__name__}); "
            "delete it and run the workflow again"
        ) from None
    return model.to(device=device, dtype=dtype).eval()


@torch.no_grad()
def evaluate(model: ViT, x: torch.Tensor, y: torch.Tensor, batch_size: int = 512) -> tuple[float, float]:
    """Mean cross-entropy and accuracy over a whole split."""
    model.eval()
    total_loss, correct = 0.0, 0
    for i in range(0, len(x), batch_size):
        logits = model(x[i : i + batch_size])
        total_loss += F.cross_entropy(logits, y[i : i + batch_size], reduction="sum").item()
        correct += (logits.argmax(-1) == y[i : i + batch_size]).sum().item()
    return total_loss / len(x), correct / len(x)


@torch.no_grad()
def per_sample_losses(model: ViT, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024):
    """Cross-entropy of every sample at the model's weights (numpy float64, one per sample)."""
    model.eval()
    device = next(model.parameters()).device
    out = []
    for i in range(0, len(x), batch_size):
        logits = model(x[i : i + batch_size].to(device))
        out.append(F.cross_entropy(logits, y[i : i + batch_size].to(device), reduction="none").double().cpu())
    return torch.cat(out).numpy()
