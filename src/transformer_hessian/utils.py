"""Small shared helpers: atomic writes, device choice, provenance, logging set-up."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from .tempfiles import _host_tag, remove_stale_temp_files, stale_temp_files  # noqa: F401 (re-exported)

log = logging.getLogger("transformer_hessian")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | Path, suffix: str | None = None):
    """Yield a temporary path in the same folder; rename it onto ``path`` on success only.

    The file gets the usual permissions (0666 less the umask; mkstemp would leave 0600). The
    temp file's name carries this host and process id (``.<name>.<host>.<pid>.<random><suffix>``),
    so the next write of the same target removes what a killed run left behind
    (:func:`remove_stale_temp_files`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(path.parent, path.name)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.{_host_tag()}.{os.getpid()}.", suffix=suffix or path.suffix, dir=path.parent
    )
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _json_default(obj):
    import numpy as np

    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    torch = sys.modules.get("torch")  # a tensor can only exist once torch is imported
    if torch is not None and isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dump_json(obj, fh) -> None:
    """The package's one JSON encoding (:func:`write_json` here, ``io.write_json`` with a digest): indented
    by 2, NaN/inf refused (not valid JSON), numpy/torch values as numbers and lists, a newline at the end."""
    json.dump(obj, fh, indent=2, default=_json_default, allow_nan=False)
    fh.write("\n")


def write_json(obj, path: str | Path) -> None:
    """Write ``obj`` as indented JSON atomically (:func:`dump_json`); NaN/inf are refused (not valid JSON)."""
    with atomic_path(path) as tmp:
        with open(tmp, "w") as fh:
            dump_json(obj, fh)


def read_json(path: str | Path):
    """Parse a JSON file (UTF-8); ``io.load_json`` adds the digest check and messages for result files."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """SHA-256 hex digest of the bytes of ``path``."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def write_text(text: str, path: str | Path) -> None:
    """Write ``text`` atomically."""
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)


def torch_save(obj, path: str | Path) -> None:
    """``torch.save`` to a temporary file, then rename into place."""
    import torch

    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def save_npz(path: str | Path, **arrays) -> None:
    """Write ``arrays`` to a compressed ``.npz`` file atomically."""
    import numpy as np

    with atomic_path(path, suffix=".npz") as tmp:
        np.savez_compressed(tmp, **arrays)


def resolve_device(spec: str = "auto") -> torch.device:
    """``auto`` -> CUDA when available, else CPU; otherwise the named device."""
    import torch

    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    from .errors import ConfigError

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


def set_threads(n: int | None) -> None:
    """Limit torch's intra-op threads to ``n`` (the rule's ``threads``); no-op for None."""
    if n:
        import torch

        torch.set_num_threads(int(n))
