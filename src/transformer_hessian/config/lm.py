"""The typed ``lm`` section (the language-model study, :mod:`transformer_hessian.studies.lm`): the
study's settings, its training and its scaling grid, parsed from the validated config like every
section of :mod:`.settings` (which re-exports them); their defaults live in the schema only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .section import AdamWTrain, Section

__all__ = ["Lm", "LmCurvature", "LmLandscape2d", "LmScaling", "LmTrain"]


@dataclass(frozen=True)
class LmTrain(AdamWTrain):
    """How the language study's main model is trained (``lm.train``): AdamW on the causal LM loss."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "lm", "properties", "train")

    sequences: int | None


@dataclass(frozen=True)
class LmScaling(Section):
    """The language study's grid of model sizes and training-set sizes (``lm.scaling``)."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "lm", "properties", "scaling")

    enabled: bool
    widths: tuple[int, ...]
    depths: tuple[int, ...]
    train_sequences: tuple[int, ...]
    steps: int
    eval_every: int
    batch_size: int
    lr: float
    lanczos_iters: int
    jobs: int


@dataclass(frozen=True)
class LmLandscape2d(Section):
    """The grid of the loss on the plane of the top two Hessian eigenvectors (``lm.curvature.landscape``)."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "lm", "properties", "curvature", "properties", "landscape")

    points: int
    radius: float
    near: float
    tolerance: float


@dataclass(frozen=True)
class LmCurvature(Section):
    """The trained decoder's curvature over its whole training set (``lm.curvature``): the package's
    ``curvature`` command under ``processes`` processes, and the 2-D landscape on its top eigenvectors."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "lm", "properties", "curvature")

    enabled: bool
    processes: int
    batch_size: int
    top_k: int
    lanczos_steps: int
    probes: int
    slq_probes: int
    blocks: tuple[str, ...]
    landscape: LmLandscape2d


@dataclass(frozen=True)
class Lm(Section):
    """The causal language-model study (:mod:`.studies.lm`, off unless ``enabled``): corpus, model,
    training, the Hessian batch, the D_k analysis, the scaling grid and the approximations."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "lm")

    enabled: bool
    corpus: str
    local: str | None
    url: str | None
    context: int
    val_fraction: float
    val_sequences: int
    width: int
    depth: int
    heads: int
    train: LmTrain
    hessian_sequences: int
    seed: int
    n_orderings: int
    k_min: int
    n_bootstrap: int
    batch_size: int
    gram_sequences: int
    tolerance: float
    approximations: bool
    scaling: LmScaling
    curvature: LmCurvature
