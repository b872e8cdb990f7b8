"""Build ``.carry/`` for the GPU machine (docs/gpu.md): what ``scripts/gpu_check.py`` needs there
and the machine lacks (``make gpu-carry``).

    python scripts/gpu_carry.py [--mnist DIR] [--no-wheels] [--out .carry]

- ``.carry/mnist/*.gz``: the four MNIST IDX files gzip-compressed from ``--mnist`` (a folder with
  the raw or .gz files; a folder outside the checkout does not travel to the device), checked by decompressing
  them again and comparing the bytes with the source.
- ``.carry/COMMIT``: the checkout's commit (``-dirty`` when tracked files differ), which
  gpu_check.py reports where the tree has no ``.git`` (the device's copy).
- ``.carry/wheels/*.whl``: wheels for CPython 3.12 on manylinux x86_64 (the device's python),
  without dependencies, at the versions of ``requirements.lock``: jsonschema and its dependencies
  (``transformer_hessian.config.validate`` imports it, so the training code needs it) and curvlinops with
  its dependencies (optional: the ``hessian5_curvlinops`` section). Fetched with ``pip download``
  from the package index. On the device they are unpacked (a wheel is a zip) into a folder on
  ``PYTHONPATH``; nothing is installed into the machine's python.

``.carry/`` is ignored by git; the device tool's ``carry`` option takes it along (64 MiB at most
with the working tree: about 13 MiB).
"""

from __future__ import annotations

import argparse
import gzip
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
#: Distributions to carry as wheels (versions from requirements.lock). torch, numpy, scipy, tqdm,
#: pyyaml and typing_extensions are on the device already.
WHEELS = (
    "jsonschema",
    "jsonschema-specifications",
    "referencing",
    "rpds-py",
    "attrs",
    "curvlinops-for-pytorch",
    "einconv",
    "einops",
    "linear_operator",
    "opt_einsum",
)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(names=WHEELS, lock: Path = ROOT / "requirements.lock") -> list[str]:
    """``name==version`` of every name from the lock file; ValueError names a missing one."""
    versions = {}
    for line in lock.read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            n, v = line.split("==", 1)
            versions[_norm(n)] = v.strip()
    missing = [n for n in names if _norm(n) not in versions]
    if missing:
        raise ValueError(f"{lock}: no pinned version of {missing}")
    return [f"{n}=={versions[_norm(n)]}" for n in names]


def carry_mnist(src: Path, dest: Path) -> list[Path]:
    """gzip the four IDX files of ``src`` (raw or already .gz) into ``dest``, verified."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for name in MNIST_FILES:
        raw, gz = src / name, src / f"{name}.gz"
        if raw.exists():
            data = raw.read_bytes()
        elif gz.exists():
            data = gzip.decompress(gz.read_bytes())
        else:
            raise FileNotFoundError(f"--mnist {src}: neither {name} nor {name}.gz is there")
        target = dest / f"{name}.gz"
        target.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
        if gzip.decompress(target.read_bytes()) != data:
            raise RuntimeError(f"{target}: does not decompress to the bytes of its source")
        print(f"{target}: {len(data):,} -> {target.stat().st_size:,} bytes", flush=True)
        out.append(target)
    return out


def carry_wheels(dest: Path) -> list[Path]:
    """``pip download`` the pinned WHEELS for cp312 manylinux x86_64 into ``dest`` (no deps)."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", "3.12", "--implementation", "cp", "--dest", str(dest)]
    cmd += ["--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64", "--platform", "any"]
    subprocess.run(cmd + pinned(), check=True)
    wheels = sorted(dest.glob("*.whl"))
    print("\n".join(f"{w}: {w.stat().st_size:,} bytes" for w in wheels), flush=True)
    return wheels


def main(argv=None) -> None:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mnist", default=None, help="folder with the four MNIST IDX files (raw or .gz); none: no MNIST")
    p.add_argument("--no-wheels", action="store_true", help="do not download the wheels")
    p.add_argument("--out", default=str(ROOT / ".carry"), help="the carry folder (default .carry)")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "src"))
    from transformer_hessian.util.env import git_commit

    # the device's copy of the tree has no .git: gpu_check.py reports this commit there
    (out / "COMMIT").write_text(git_commit() + "\n")
    if a.mnist:
        carry_mnist(Path(a.mnist), out / "mnist")
    if not a.no_wheels:
        shutil.rmtree(out / "wheels", ignore_errors=True)
        carry_wheels(out / "wheels")
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"{out}: {total / 2**20:.1f} MiB in all (the device tool carries 64 MiB with the working tree)")


if __name__ == "__main__":
    main()
