"""Seeded, resumable training of the ViT with AdamW and cross-entropy, one concept per module:

- :mod:`.loading`: an experiment's data split and model config, a trained model from a verified
  checkpoint (:func:`load_model`), losses of a model on a split (:func:`evaluate`,
  :func:`per_sample_losses`);
- :mod:`.recipe`: epoch order, learning-rate schedule, augmentation, batches, autocast, AdamW;
- :mod:`.resume`: discovery of the newest valid epoch checkpoint to resume from;
- :mod:`.memory`: the memory estimate checked before training allocates anything;
- :mod:`.loop`: the optimiser step, the epoch and :func:`train` (checkpoint layout, metrics).

Every public name is re-exported here, so ``from transformer_hessian.train import X`` keeps
working; a test that monkeypatches a name must patch the module that uses it.
"""

from .loading import (
    check_hessian_memory,
    check_model_matches,
    evaluate,
    hessian_inputs,
    load_experiment_data,
    load_model,
    model_config_for,
    per_sample_losses,
)
from .loop import KILL_ENV, TrainingError, train, train_epoch, train_step
from .memory import estimate_training_bytes
from .recipe import (
    AUGMENTATIONS,
    autocast_context,
    crop_flip,
    epoch_augmentation,
    epoch_permutation,
    lr_factor,
    make_batch,
    make_optimizer,
)

__all__ = [
    "AUGMENTATIONS",
    "KILL_ENV",
    "TrainingError",
    "autocast_context",
    "check_hessian_memory",
    "check_model_matches",
    "crop_flip",
    "epoch_augmentation",
    "epoch_permutation",
    "estimate_training_bytes",
    "evaluate",
    "hessian_inputs",
    "load_experiment_data",
    "load_model",
    "lr_factor",
    "make_batch",
    "make_optimizer",
    "model_config_for",
    "per_sample_losses",
    "train",
    "train_epoch",
    "train_step",
]
