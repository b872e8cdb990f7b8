"""The typed, frozen configuration: one dataclass per config section, built once.

The YAML config is validated first (:func:`.config.validate_config`, which fills in every default
from the schema ``schema/config.schema.yaml``); :meth:`Config.from_dict` then turns the validated
dict into frozen dataclasses, and every consumer reads typed attributes (``spec.train.lr``)
instead of ``dict.get(key, default)``. The dataclasses hold NO defaults: the schema is the one
place where a default lives. A key the dataclass does not know, or one it needs that is missing,
raises :class:`.config.ConfigError` naming the dotted key. ``to_dict()`` gives back the exact
validated dict (tuples as lists), so a section can be passed on as JSON and read back unchanged:
``Section.from_dict(json.loads(json.dumps(s.to_dict()))) == s``.

A command of the pipeline receives one section as JSON (``--spec``, ``--hessian``, ...) and parses
it once, e.g. ``Experiment.from_dict(json.loads(text))``. :meth:`Section.with_defaults` builds a
section from a partial dict by validating it against the schema's node for that section
(defaults filled in there), for callers outside the workflow (tests, notebooks).

This module imports no torch or numpy (``transformer-hessian --help`` stays fast).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .architectures import ArchKeys
from .lm import Lm, LmCurvature, LmLandscape2d, LmScaling, LmTrain
from .section import AdamWTrain, Section

__all__ = [
    "Model",
    "AdamWTrain",
    "Train",
    "Experiment",
    "Data",
    "Resources",
    "Hessian",
    "Theory",
    "Bounds",
    "Landscape",
    "Probe",
    "Spectrum",
    "Dynamics",
    "ScalingTrain",
    "Scaling",
    "Lm",
    "LmCurvature",
    "LmLandscape2d",
    "LmScaling",
    "LmTrain",
    "ArchitecturesTrain",
    "ArchitecturesBase",
    "Architectures",
    "Config",
    "load_settings",
]


@dataclass(frozen=True)
class Model(Section):
    """The ViT's shape (``experiments.<name>.model``): patch size, width d, depth (blocks),
    attention key size d_k, feed-forward width d_ff, whether the FFN has biases, LayerNorm eps."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("definitions", "model")

    patch_size: int
    width: int
    depth: int
    d_k: int
    d_ff: int
    ffn_bias: bool
    ln_eps: float


@dataclass(frozen=True)
class Train(AdamWTrain):
    """How one experiment is trained (``experiments.<name>.train``): AdamW epochs, batch size,
    learning rate and weight decay, the data split (seed, validation fraction, sample caps),
    bf16 autocast, torch.compile, warm-up and schedule, and data augmentation."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("definitions", "train")

    val_fraction: float
    max_train: int | None
    max_val: int | None
    amp: str | None
    compile: bool
    warmup_epochs: float
    schedule: str
    augment: str | None
    crop_padding: int


@dataclass(frozen=True)
class Experiment(Section):
    """One experiment (``experiments.<name>``): the data set, the model's shape and its training."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("definitions", "experiment")

    dataset: str
    model: Model
    train: Train


@dataclass(frozen=True)
class Data(Section):
    """Where the data sets live (``data.root``), an optional download mirror, the seconds one
    file's download may take and a folder of files a user already has (``data.local``)."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "data")

    root: str
    mirror: str | None
    deadline: float
    local: str | None


@dataclass(frozen=True)
class Resources(Section):
    """What each training / curvature job asks of the scheduler or machine: GPUs, memory (MiB),
    runtime (minutes)."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "resources")

    gpu: int
    mem_mb: int
    runtime: int


@dataclass(frozen=True)
class Hessian(Section):
    """The dense five-group Hessian (rules hessian, theory): which experiment and block, the fixed
    batch (size, seed) and the method that computes it."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "hessian")

    experiment: str
    block: int
    batch_size: int
    seed: int
    method: str


@dataclass(frozen=True)
class Theory(Section):
    """The check of the saved Hessian against curvlinops products: the largest relative error that
    passes and the random probe vectors per group."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "theory")

    tolerance: float
    probes: int


@dataclass(frozen=True)
class Bounds(Section):
    """The bound evaluation (rule bounds) on the Hessian experiment's batch: samples and delta."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "bounds")

    n_samples: int | None
    delta: float


@dataclass(frozen=True)
class Landscape(Section):
    """The loss-landscape analysis at w* (rule landscape): D_k over ``n_orderings`` orderings of the
    per-sample (or per-batch) losses, the EMA factor, the fit range (k >= k_min), the bootstrap
    of the slope, the seed and an optional cap on the samples."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "landscape")

    experiment: str
    n_orderings: int
    ema_factor: float
    k_min: int
    n_bootstrap: int
    seed: int
    max_samples: int | None
    granularity: str
    batch_size: int


@dataclass(frozen=True)
class Probe(Section):
    """The landscape probes at w* of ``landscape.experiment`` (rule probe, :mod:`.probe`): sample
    subset, directions and grid of Theorem 7's check, the Taylor model, Assumption 1 and the
    shifted-minimum experiment."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "probe")

    max_samples: int | None
    seed: int
    n_orderings: int
    n_random_directions: int
    n_t: int
    t_min_frac: float
    n_t_linear: int
    loss_rise: float
    lanczos_iters: int
    hessian_samples: int | None
    curvature_samples: int
    taylor_tolerance: float
    k_small: int
    n_bootstrap: int
    shift_ks: tuple[int, ...]
    shift_steps: int
    shift_orderings: int
    shift_lr_scale: float


@dataclass(frozen=True)
class Spectrum(Section):
    """The matrix-free Hessian spectrum of the deep model (rule spectrum_compute, :mod:`.studies.spectrum`):
    experiment (null: ``landscape.experiment``), batch, Lanczos / Hutchinson / SLQ sizes, density
    grid and width, the HVP chunk, and torch's threads in the rule."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "spectrum")

    experiment: str | None
    batch_size: int
    seed: int
    n_eigenvalues: int
    lanczos_steps: int
    n_probes: int
    slq_probes: int
    pair_steps: int
    density_points: int
    density_sigma: float
    chunk: int
    threads: int


@dataclass(frozen=True)
class Dynamics(Section):
    """The training-dynamics snapshots (Appendix A.1, Figures 7-11): steps replayed, snapshot
    interval and heatmaps drawn."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "dynamics")

    steps: int
    every: int
    heatmaps: int


@dataclass(frozen=True)
class ScalingTrain(AdamWTrain):
    """How every model of the scaling sweep is trained (``scaling.train``)."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "scaling", "properties", "train")

    val_fraction: float


@dataclass(frozen=True)
class Scaling(Section):
    """The scaling study (:mod:`.scaling`, off unless ``enabled``): the sweep of widths, depths and
    training-set sizes, their training, and the measurements fitted as power laws in P."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "scaling")

    enabled: bool
    dataset: str
    patch_size: int
    widths: tuple[int, ...]
    depths: tuple[int, ...]
    fixed_width: int
    fixed_depth: int
    d_k_ratio: float
    d_ff_ratio: float
    ffn_bias: bool
    ln_eps: float
    train_sizes: tuple[int | None, ...]
    train: ScalingTrain
    tolerance: float
    n_orderings: int
    k_min: int
    n_bootstrap: int
    seed: int
    lanczos_iters: int
    hessian_samples: int
    dense_max_params: int
    jobs: int


@dataclass(frozen=True)
class ArchitecturesTrain(AdamWTrain):
    """How every model of the architecture study is trained (``architectures.train``): AdamW, CE."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "architectures", "properties", "train")


@dataclass(frozen=True)
class ArchitecturesBase(Section, ArchKeys):
    """The base architecture of the architecture study (``architectures.base``): the keys of
    :class:`.architectures.ArchKeys` (norm placement, heads, activation and layers of the torch
    encoder), parsed from the validated section."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "architectures", "properties", "base")


@dataclass(frozen=True)
class Architectures(Section):
    """The architecture study (:mod:`.studies.architectures`, off unless ``enabled``): model sizes,
    the Hessian batch, the JS0 grid, training, the base architecture and its variants (each a
    mapping of the base keys it changes)."""

    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ("properties", "architectures")

    enabled: bool
    patch_size: int
    d_model: int
    dim_feedforward: int
    bias: bool
    layer_norm_eps: float
    positions: bool
    hessian_batch_size: int
    seed: int
    max_params: int
    js_points: int
    js_sigma: float
    train: ArchitecturesTrain
    base: ArchitecturesBase
    variants: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Config(Section):
    """The whole validated configuration (config/config.yaml after
    :func:`.config.validate_config`): one typed section per top-level key."""

    SECTION: ClassVar[str] = "config"
    SCHEMA_NODE: ClassVar[tuple[str, ...]] = ()
    KEYS_FROM_TOP: ClassVar[bool] = True  # error keys are named from the top: ``hessian.block``
    MISSING_HINT: ClassVar[str] = "build the config with transformer_hessian.config.validate_config first"

    data: Data
    resources: Resources
    device: str
    experiments: dict[str, Experiment]
    hessian: Hessian
    theory: Theory
    bounds: Bounds
    landscape: Landscape
    probe: Probe
    spectrum: Spectrum
    dynamics: Dynamics
    scaling: Scaling
    architectures: Architectures
    lm: Lm

    @classmethod
    def with_defaults(cls, data: dict) -> Config:
        """The config from a partial dict: :func:`.config.validate_config` on a copy, then
        :meth:`from_dict`."""
        import copy

        from .validate import validate_config

        return cls.from_dict(validate_config(copy.deepcopy(dict(data))))


def load_settings(path: str) -> Config:
    """Read, validate (:func:`.config.load_config`) and type the config file at ``path``."""
    from .validate import load_config

    return Config.from_dict(load_config(path))
