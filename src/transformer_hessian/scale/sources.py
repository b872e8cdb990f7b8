"""Where the ``curvature`` command's model and data set come from: a Python factory
(``module:function`` returning the model and its batches) or a Hugging Face model (a folder with
``config.json`` and, where present, its weights; or a bare ``config.json``, random weights) with a
token file; and each process's share of the batches."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import torch

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}


def from_factory(spec: str, kwargs: dict):
    """``(model, batches)`` from ``module:function`` called with ``kwargs``."""
    if ":" not in spec:
        raise ValueError(f"--factory: expected module:function, got {spec!r}")
    mod, _, fn = spec.partition(":")
    try:
        f = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"--factory {spec!r}: {type(err).__name__}: {err}") from None
    out = f(**kwargs)
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and isinstance(out[0], torch.nn.Module)):
        raise ValueError(f"--factory {spec!r}: expected (model, batches) from the call, got {type(out).__name__}")
    model, batches = out
    return model, list(batches)


def read_tokens(path: str | Path) -> torch.Tensor:
    """Token ids from a ``.pt`` tensor, a ``.npy`` array or a ``.bin`` of uint16 (nanoGPT's format),
    as one long 1-D tensor (a 2-D tensor is read row after row)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--tokens: no file {p}")
    if p.suffix == ".pt":
        t = torch.load(p, map_location="cpu", weights_only=True)
    elif p.suffix == ".npy":
        t = torch.from_numpy(np.load(p).astype(np.int64))
    elif p.suffix == ".bin":
        t = torch.from_numpy(np.fromfile(p, dtype=np.uint16).astype(np.int64))
    else:
        raise ValueError(f"--tokens {p}: .pt, .npy or .bin (uint16), got {p.suffix!r}")
    if not isinstance(t, torch.Tensor) or t.is_floating_point():
        raise ValueError(f"--tokens {p}: expected integer token ids")
    return t.reshape(-1).long()


def token_batches(tokens: torch.Tensor, seq_len: int, batch_size: int, max_batches: int | None = None):
    """Consecutive sequences of ``seq_len`` tokens in batches of ``batch_size`` (the last may be
    smaller; a tail shorter than a sequence is left out), as ``(ids, ids)`` pairs."""
    if seq_len < 2 or batch_size < 1:
        raise ValueError(f"--seq-len >= 2 and --batch-size >= 1, got {seq_len} and {batch_size}")
    n = tokens.numel() // seq_len
    if n == 0:
        raise ValueError(f"--tokens: {tokens.numel()} tokens, fewer than one sequence of {seq_len}")
    seqs = tokens[: n * seq_len].reshape(n, seq_len)
    out = [(b, b) for b in seqs.split(batch_size)]
    return out[:max_batches] if max_batches else out


def hugging_face(path: str | Path, seed: int = 0):
    """A causal LM from a folder (``config.json`` and, where present, weights: loaded from the folder,
    nothing downloaded) or from a bare ``config.json`` (random weights, seeded)."""
    import transformers

    p = Path(path)
    cfg_file = p / "config.json" if p.is_dir() else p
    if not cfg_file.is_file():
        raise FileNotFoundError(f"--hf-model: no config.json at {p}")
    weights = p.is_dir() and any(p.glob("*.safetensors")) or p.is_dir() and any(p.glob("pytorch_model*.bin"))
    if weights:
        model = transformers.AutoModelForCausalLM.from_pretrained(p, local_files_only=True)
    else:
        cfg = transformers.AutoConfig.for_model(**json.loads(cfg_file.read_text()))
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return model.eval()


def share(batches: list, rank: int, world: int) -> list:
    """This process's batches: every ``world``-th from ``rank`` on (as ``DistributedSampler`` deals
    samples, here whole batches)."""
    return batches[rank::world]


def to_device(batches: list, device: torch.device) -> list:
    """The batches' tensors on ``device``."""
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, batches)
