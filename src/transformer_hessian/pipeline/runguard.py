"""Start snakemake after an interrupted run without the user typing --unlock.

``python -m transformer_hessian.pipeline.runguard SNAKEMAKE_COMMAND...`` (what ``make reproduce`` runs):

1. takes an exclusive ``flock`` on ``<workdir>/.snakemake/runguard.lock`` for the whole run
   (the lock is held by the exec'd snakemake and released by the kernel when it exits or is
   killed), so a second guarded run in the same folder is refused at once;
2. if snakemake's lock folder ``.snakemake/locks`` holds locks but **no** snakemake process is
   running on this folder, the locks are stale (a killed run) and are removed (as
   ``snakemake --unlock`` would); a lock held by a live snakemake is left alone, so a concurrent run is
   still refused by snakemake itself;
3. removes temp files of atomic writes (``.<name>.<host>.<pid>.*``) that killed jobs left under
   ``results/`` and ``paper/``;
4. replaces itself with the snakemake command (incomplete outputs are handled by
   ``--rerun-incomplete``, which the Makefile passes).
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

#: Folders (relative to the work directory) swept for stale temp files.
SWEEP = ("results", "paper")

#: Seconds to wait for the guard's lock before a run is refused as concurrent.
WAIT_S = 3.0


def _option(argv: list[str], *names: str) -> str | None:
    for i, a in enumerate(argv):
        for n in names:
            if a == n and i + 1 < len(argv):
                return argv[i + 1]
            if n.startswith("--") and a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


def missing_configfiles(argv: list[str]) -> list[str]:
    """The words after ``--configfile``/``--configfiles`` (up to the next option or ``--``) that
    name no file: snakemake reads every such word as a config file, so a target written after
    ``--configfile X`` ends in a bare FileNotFoundError from snakemake itself."""
    return [a for a in configfiles(argv) if not os.path.exists(a)]


def _is_snakemake(cmdline: list[str]) -> bool:
    for i, a in enumerate(cmdline[:4]):
        if os.path.basename(a) == "snakemake" or (a == "-m" and i + 1 < len(cmdline) and cmdline[i + 1] == "snakemake"):
            return True
    return False


def other_snakemakes(workdir: Path) -> list[int]:
    """Pids of snakemake processes (other than this one and its ancestors) working in ``workdir``."""
    import psutil

    me = psutil.Process()
    skip = {me.pid, *(p.pid for p in me.parents())}
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = proc.info["cmdline"] or []
            if proc.pid in skip or not _is_snakemake(cmd) or "--unlock" in cmd:
                continue
            d = _option(cmd, "--directory", "-d")
            cwd = Path(proc.cwd())
            where = (cwd / d) if d else cwd
            if where.resolve() == workdir.resolve():
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def configfiles(argv: list[str]) -> list[str]:
    """The files given to ``--configfile`` / ``--configfiles`` (each takes one or more values)."""
    out, taking = [], False
    for a in argv:
        if a in ("--configfile", "--configfiles"):
            taking = True
        elif a.startswith(("--configfile=", "--configfiles=")):
            out.append(a.split("=", 1)[1])
            taking = False
        elif taking and not a.startswith("-"):
            out.append(a)
        else:
            taking = False
    return out


def main(argv: list[str] | None = None) -> int:
    """Run a snakemake command under the run guard (one run per folder; stale locks and temp files removed)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: python -m transformer_hessian.pipeline.runguard SNAKEMAKE_COMMAND [ARGS...]", file=sys.stderr)
        return 2
    missing = missing_configfiles(argv)
    if missing:
        print(
            f"transformer-hessian: config file {', '.join(map(repr, missing))} does not exist: snakemake reads "
            "every word after --configfile as a config file; if it is a target, put targets before "
            "--configfile, or end its files with -- (--configfile config/paper.yaml -- TARGET)",
            file=sys.stderr,
        )
        return 1
    # snakemake reads (and expands the aliases of) every --configfile before the Snakefile's own
    # checks run: a missing, binary or non-UTF-8 file would end in its traceback, an alias bomb would
    # hang it. The project's loader (linear in the file's size) reads them first.
    from ..config.validate import ConfigError, check_config_files

    try:
        check_config_files(configfiles(argv))
    except ConfigError as err:
        print(f"transformer-hessian: {err}", file=sys.stderr)
        return 1
    workdir = Path(_option(argv, "--directory", "-d") or ".").resolve()
    meta = workdir / ".snakemake"
    meta.mkdir(parents=True, exist_ok=True)
    fd = os.open(meta / "runguard.lock", os.O_RDWR | os.O_CREAT, 0o644)
    # A run that was just killed may take a moment to release the lock; a live one keeps it.
    for _ in range(int(WAIT_S / 0.25) + 1):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            time.sleep(0.25)
    else:
        print(
            f"runguard: another guarded run (make reproduce) is working in {workdir}; wait for it to finish",
            file=sys.stderr,
        )
        return 1
    os.set_inheritable(fd, True)  # held by snakemake after exec, released when it ends

    locks = meta / "locks"
    if locks.is_dir() and any(locks.iterdir()):
        others = other_snakemakes(workdir)
        if others:
            print(
                f"runguard: snakemake is already running in {workdir} (pid {', '.join(map(str, others))}); "
                "not touching its lock",
                file=sys.stderr,
            )
        else:
            # What `snakemake --unlock` does (its file-based lock), without a second start-up.
            print(f"runguard: removing the stale lock of an interrupted run in {workdir}", file=sys.stderr)
            for f in locks.iterdir():
                if f.is_file() and f.name.endswith(".lock"):
                    f.unlink(missing_ok=True)

    from ..util.tempfiles import remove_stale_temp_files

    for sub in SWEEP:
        remove_stale_temp_files(workdir / sub, recursive=True)
    os.execvp(argv[0], argv)
    return 1  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
