"""The environment a run happens in: device choice, provenance (commit, package versions, device), logging
set-up and torch's thread count."""

from __future__ import annotations

import logging
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def resolve_device(spec: str = "auto") -> torch.device:
    """``auto`` -> CUDA when available, else CPU; otherwise the named device."""
    import torch

    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    from ..errors import ConfigError

    try:
        dev = torch.device(spec)
    except RuntimeError as err:
        raise ConfigError(f"device: {spec!r} is not a device ({err}); use auto, cpu or cuda[:N]") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"device: {spec!r} was requested but CUDA is not available on this machine; "
            "set the config key device to auto (CUDA when present) or cpu"
        )
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(
            f"device: {spec!r} but this machine has {torch.cuda.device_count()} CUDA device(s); "
            "set the config key device to auto, cpu or an existing cuda:N"
        )
    return dev


def git_commit() -> str:
    """The checkout's commit hash, with ``-dirty`` when tracked files differ; ``unknown`` outside git."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


PROVENANCE_PACKAGES = (
    "transformer-hessian",
    "torch",
    "torchvision",
    "curvlinops-for-pytorch",
    "snakemake",
    "papermill",
    "numpy",
    "scipy",
    "scikit-learn",
    "seaborn",
    "matplotlib",
)


def package_versions() -> dict[str, str]:
    """Installed versions of Python and the packages whose numbers the results depend on."""
    out = {"python": platform.python_version()}
    for name in PROVENANCE_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def device_description(device: torch.device | None = None) -> str:
    """One line naming the device the numbers came from (GPU model or CPU and core count)."""
    import torch

    device = device or resolve_device("auto")
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def run_environment(threads: int | None = None, device: str = "cpu") -> dict:
    """What a benchmark ran on: package versions, commit, device, CPU count, intra-op threads,
    the load average now and the OpenMP/MKL variables that child processes inherit
    (OMP_WAIT_POLICY=PASSIVE avoids OpenMP's spin-waiting on a loaded machine,
    docs/theory.md section 12)."""
    import torch

    return {
        "packages": package_versions(),
        "git_commit": git_commit(),
        "device": device_description(torch.device(device)),
        "cpu_count": os.cpu_count(),
        "threads": threads or torch.get_num_threads(),
        "load_average": list(os.getloadavg()),
        "omp_env": {
            k: os.environ[k] for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS") if k in os.environ
        },
    }


def setup_logging(verbose: bool = False) -> None:
    """Log to stderr (the rule's log file) with timestamps; DEBUG when ``verbose``."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


#: The thread counts that snakemake sets to a job's ``threads`` (and that OpenMP and the BLAS
#: libraries read when they load).
THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def set_threads(n: int | None) -> None:
    """Limit torch's intra-op threads to ``n`` (the rule's ``threads``, or the torch threads of the
    train and dynamics rules, which reserve fewer cores than that: workflow/rules/common.smk); no-op
    for None. Sets :data:`THREAD_ENV_VARS` to ``n`` first, as snakemake does for a job of ``n``
    threads, so that a library loaded after this call (torch, numpy's BLAS) sees the same count."""
    if n:
        for name in THREAD_ENV_VARS:
            os.environ[name] = str(int(n))
        import torch

        torch.set_num_threads(int(n))
