"""Seeded, resumable training of the ViT with AdamW and cross-entropy, one concept per module:

- :mod:`.loading`: an experiment's data split and model config, a trained model from a verified
  checkpoint (:func:`load_model`), losses of a model on a split (:func:`evaluate`,
  :func:`per_sample_losses`);
- :mod:`.recipe`: epoch order, learning-rate schedule, augmentation, batches, autocast, AdamW;
- :mod:`.resume`: discovery of the newest valid epoch checkpoint to resume from;
- :mod:`.memory`: the memory estimate checked before training allocates anything;
- :mod:`.loop`: the optimiser step, the epoch and :func:`train` (checkpoint layout, metrics);
- :mod:`.lm`: the language-model study's GPT trained the same way (:func:`train_lm`, :func:`load_lm`,
  :func:`evaluate_lm`);
- :mod:`.checkpoints`: atomic, verified checkpoint files; :mod:`.result`: the train rule's result paths
  (standard library only: the Snakefile reads it without torch).

Every public name is re-exported here, lazily (importing :mod:`.result` must not import torch), so
``from transformer_hessian.train import X`` keeps working; a test that monkeypatches a name must patch the module that uses it.
"""

from __future__ import annotations

from ..util.lazy import lazy_getattr

# Public name -> the module of this package that defines it.
_OWNER = {
    "AUGMENTATIONS": ".recipe",
    "KILL_ENV": ".loop",
    "TrainingError": ".loop",
    "autocast_context": ".recipe",
    "check_model_matches": ".loading",
    "crop_flip": ".recipe",
    "epoch_augmentation": ".recipe",
    "epoch_permutation": ".recipe",
    "estimate_training_bytes": ".memory",
    "evaluate": ".loading",
    "evaluate_lm": ".lm",
    "load_experiment_data": ".loading",
    "load_lm": ".lm",
    "load_model": ".loading",
    "lr_factor": ".recipe",
    "make_batch": ".recipe",
    "make_optimizer": ".recipe",
    "model_config_for": ".loading",
    "per_sample_losses": ".loading",
    "train": ".loop",
    "train_epoch": ".loop",
    "train_lm": ".lm",
    "train_step": ".loop",
}

__all__ = sorted(_OWNER)


__getattr__ = lazy_getattr(__name__, _OWNER)
