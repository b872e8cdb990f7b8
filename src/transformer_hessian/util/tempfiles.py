"""Temporary files of atomic writes, and removal of those that killed processes left behind.

Kept free of heavy imports (no torch / numpy): the run guard of ``make reproduce`` uses it.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from pathlib import Path

log = logging.getLogger("transformer_hessian")


def host_tag() -> str:
    """This machine's short host name, safe inside a file name (no dots)."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname().split(".")[0]) or "host"


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine (owned by anyone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


#: Temporary files of :func:`atomic_path`: ``.<name>.<host>.<pid>.<random><suffix>``.
_TEMP_RE = re.compile(r"^\.(?P<name>.+)\.(?P<host>[A-Za-z0-9_-]+)\.(?P<pid>\d+)\.[A-Za-z0-9_]{8}(?P<suffix>.*)$")
#: Temporary files of earlier versions (no host / pid): ``.<name>.<random><suffix>``.
_LEGACY_TEMP_AGE_S = 3600.0


def stale_temp_files(
    folder: str | Path, name: str | None = None, legacy_age_s: float = _LEGACY_TEMP_AGE_S
) -> list[Path]:
    """Temporary files that an interrupted :func:`atomic_path` (e.g. a killed job) left in ``folder``.

    A temp file is stale when it was made on this host by a process that no longer runs, or,
    for temp files without a host/pid tag (older versions), when it is older than
    ``legacy_age_s`` seconds. Temp files of live processes or of other hosts (shared file
    systems) are never returned. ``name`` restricts the search to temp files of one target.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    host, now, out = host_tag(), time.time(), []
    pattern = f".{name}.*" if name else ".*"
    rx = (
        _TEMP_RE
        if name is None
        else re.compile(
            rf"^\.{re.escape(name)}\.(?P<host>[A-Za-z0-9_-]+)\.(?P<pid>\d+)\.[A-Za-z0-9_]{{8}}(?P<suffix>.*)$"
        )
    )
    for p in folder.glob(pattern):
        if not p.is_file() or p.is_symlink():
            continue
        m = rx.match(p.name)
        if m:
            if m["host"] == host and not pid_alive(int(m["pid"])):
                out.append(p)
        elif name is not None and re.fullmatch(rf"\.{re.escape(name)}\.[A-Za-z0-9_]{{8}}(\..*)?", p.name):
            try:
                if now - p.stat().st_mtime > legacy_age_s:
                    out.append(p)
            except OSError:
                pass
    return out


def remove_stale_temp_files(folder: str | Path, name: str | None = None, recursive: bool = False) -> list[Path]:
    """Delete :func:`stale_temp_files` of ``folder`` (and its subfolders if ``recursive``); return them."""
    folders = [Path(folder)]
    if recursive and Path(folder).is_dir():
        folders += [Path(d) for d, _, _ in os.walk(folder) if Path(d) != Path(folder)]
    removed = []
    for f in folders:
        for p in stale_temp_files(f, name):
            try:
                p.unlink()
            except OSError:
                continue
            log.info("removed %s, a temporary file left by an interrupted run", p)
            removed.append(p)
    return removed
