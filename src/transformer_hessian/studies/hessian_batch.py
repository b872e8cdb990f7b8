"""The batch the Hessian study's rules and the bounds study evaluate: the checkpoint's model in float64
and the fixed Hessian batch (:func:`hessian_inputs`), after the memory check of the dense Hessian
(:func:`check_hessian_memory`). Shared by two studies, so it sits beside them, not in either folder."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..config.settings import Experiment, Hessian

__all__ = ["check_hessian_memory", "hessian_inputs"]


def check_hessian_memory(spec: Experiment, hessian: Hessian, dev) -> None:
    """Stop before the dense P x P float64 Hessian is allocated when it cannot fit; name the keys."""
    from ..util.resources import available_bytes, dense_hessian_bytes, format_bytes, hessian_group_size

    m = spec.model
    need = dense_hessian_bytes(m.width, m.d_k, m.d_ff)
    have = available_bytes(dev)
    if have is not None and need > have:
        exp = hessian.experiment
        p = hessian_group_size(m.width, m.d_k, m.d_ff)
        raise ConfigError(
            f"hessian.experiment: the dense Hessian of {exp!r} is {p:,} x {p:,} float64 and this job needs about "
            f"{format_bytes(need)}, but only {format_bytes(have)} is available on {dev}; lower "
            f"experiments.{exp}.model.width / d_k / d_ff (or run on a machine with more memory)"
        )


def hessian_inputs(checkpoint: str, spec: Experiment, hessian: Hessian, data_root: str, device: str):
    """``(model, images, labels)``: the checkpoint's model in float64 and the fixed Hessian batch
    (:func:`transformer_hessian.core.hessian.fixed_batch`) on ``device``, after :func:`check_hessian_memory`: what the
    Hessian study's rules and the bounds study load. The batch is
    ``hessian.batch_size`` samples drawn with ``hessian.seed``, the same for every stage. The
    checkpoint's model sizes must equal ``spec.model`` (:class:`transformer_hessian.errors.ConfigError` naming
    ``experiments.<hessian.experiment>.model.<key>`` otherwise)."""
    from ..core.hessian import fixed_batch
    from ..train import load_experiment_data, load_model
    from ..util.env import resolve_device

    dev = resolve_device(device)
    check_hessian_memory(spec, hessian, dev)
    data = load_experiment_data(spec, data_root)
    images, labels = fixed_batch(data["train_x"], data["train_y"], hessian.batch_size, hessian.seed)
    model = load_model(checkpoint, device=dev, dtype=torch.float64, spec=spec, experiment=hessian.experiment)
    return model, images.to(device=dev, dtype=torch.float64), labels.to(dev)
