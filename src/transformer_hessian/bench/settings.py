"""Settings of ``bench hessian``: :class:`BenchSettings`, the ``--paper-shape`` defaults and
the argparse glue (:func:`settings_from_args`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..util.sandbox import MIB
from .methods import LABELS, METHODS, TOLERANCE


@dataclass
class BenchSettings:
    """Settings of one ``bench hessian`` run (the command's options plus test hooks)."""

    widths: list[int] = field(default_factory=lambda: [8, 16, 32])
    batch_size: int = 64
    repeats: int = 3
    memory_cap_gib: float = 8.0
    timeout: float = 600.0
    out_dir: str = "results/bench"
    seed: int = 0
    threads: int | None = None
    tolerance: float = TOLERANCE
    #: labels to run (subset of a-e, run in a-e order); None = all
    methods: list[str] | None = None
    #: per-label memory cap in MiB above the baseline, overriding memory_cap_gib (test hook)
    cap_overrides_mib: dict[str, float] = field(default_factory=dict)
    #: problem shape: "default" (8x8 images, patch 2, L = 16) or "paper" (28x28, patch 4, L = 49)
    shape: str = "default"
    #: torch device of the model, data and Hessian ("cpu", "cuda", "cuda:1", ...)
    device: str = "cpu"
    #: timed runs of the reference (a)/(a') (None: ``repeats``) and whether it gets a warm-up
    reference_repeats: int | None = None
    reference_warmup: bool = True
    #: folder caching the reference Hessian and its row per problem (None: no cache)
    reference_cache: str | None = None

    def labels(self) -> list[str]:
        """The method labels to run, in a-e order; ValueError names unknown ones."""
        chosen = list(LABELS) if self.methods is None else list(self.methods)
        unknown = [m for m in chosen if m not in LABELS]
        if unknown:
            raise ValueError(f"bench hessian: unknown method label(s) {unknown}; choose from {list(LABELS)}")
        return [label for label, _, _ in METHODS if label in chosen]

    def cap_bytes(self, label: str) -> int:
        """Memory cap of method ``label`` above its baseline, in bytes."""
        if label in self.cap_overrides_mib:
            return int(self.cap_overrides_mib[label] * MIB)
        return int(self.memory_cap_gib * 2**30)


def n_group_params(width: int) -> int:
    """P of the five groups for d = width, d_k = d, d_ff = 4 d."""
    d, d_k, d_ff = width, width, 4 * width
    return 2 * d * d_k + d * d + 2 * d * d_ff


#: ``--paper-shape`` defaults: the paper's Hessian problem (MNIST shape, d = 16, batch 128),
#: curvlinops (a) once without warm-up (about 200 s on 2 cores) against the closed form (c).
PAPER_DEFAULTS = {
    "widths": [16],
    "batch_size": 128,
    "methods": ["a", "c"],
    "reference_repeats": 1,
    "reference_warmup": False,
    "timeout": 3600.0,
    "memory_cap_gib": 16.0,
    "tolerance": 1e-12,
}


def settings_from_args(a) -> BenchSettings:
    """BenchSettings from the parsed ``bench hessian`` options (None: the default, or with
    ``--paper-shape`` the value in PAPER_DEFAULTS)."""
    paper = bool(getattr(a, "paper_shape", False))
    base = BenchSettings()
    defaults = {
        "widths": base.widths,
        "batch_size": base.batch_size,
        "methods": None,
        "reference_repeats": None,
        "reference_warmup": True,
        "timeout": base.timeout,
        "memory_cap_gib": base.memory_cap_gib,
        "tolerance": base.tolerance,
    }
    if paper:
        defaults.update(PAPER_DEFAULTS)

    def pick(name: str):
        v = getattr(a, name, None)
        return defaults[name] if v is None else v

    return BenchSettings(
        widths=list(pick("widths")),
        batch_size=pick("batch_size"),
        repeats=a.repeats,
        memory_cap_gib=pick("memory_cap_gib"),
        timeout=pick("timeout"),
        out_dir=a.out_dir,
        threads=getattr(a, "threads", None),
        methods=pick("methods"),
        shape="paper" if paper else "default",
        device=_resolve_device(getattr(a, "device", None) or "cpu"),
        reference_repeats=pick("reference_repeats"),
        reference_warmup=defaults["reference_warmup"],
        reference_cache=getattr(a, "reference_cache", None),
        tolerance=defaults["tolerance"],
    )


def _resolve_device(name: str) -> str:
    """``auto`` -> "cuda" when available, else "cpu"; other names unchanged."""
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
