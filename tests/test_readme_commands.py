"""Every shell block of README.md runs as written, from a fresh shell (no venv on PATH).

Each fenced block carries a language tag; each ``sh`` block is preceded by a marker comment:

- ``<!-- readme-test: run -->``: run exactly as written;
- ``<!-- readme-test: dry-run (REASON) -->``: run as written with ``snakemake -n`` / ``make -n``;
- ``<!-- readme-test: skip (REASON) -->``: not run, for the stated reason.

The block runs as one ``bash -e`` script in a copy of the repository's tracked files, whose
``.venv`` is a link to the virtual environment running the tests, with an environment that holds
no venv: ``HOME``, ``LANG``, a system ``PATH`` and ``PYTHONPATH`` (the copy's ``src``, so that the
commands use the code under test and not the venv's editable install).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.executable).parent.parent
MARKER = re.compile(r"<!-- readme-test: (run|dry-run|skip)\b(.*?)-->")
FENCE = re.compile(r"^```(\S*)\s*$")

pytestmark = pytest.mark.workflow  # snakemake dry runs: make test-fast leaves these out


def readme_blocks(text: str) -> list[dict]:
    """The fenced blocks of ``text``: language tag, body, the marker before it, and its line."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        prev = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        mark = MARKER.search(prev)
        blocks.append(
            {
                "line": start + 1,
                "lang": m.group(1),
                "body": "\n".join(lines[start + 1 : j]),
                "mode": mark.group(1) if mark else None,
                "reason": mark.group(2).strip(" ()") if mark else "",
            }
        )
        i = j + 1
    return blocks


def dry(script: str) -> str:
    """``snakemake ...`` -> ``snakemake -n ...`` and ``make X`` -> ``make -n X`` on every line."""
    out = []
    for line in script.splitlines():
        line = re.sub(r"(^|[\s/])snakemake(\s)", r"\1snakemake -n\2", line, count=1)
        line = re.sub(r"^(\s*)make(\s)", r"\1make -n\2", line)
        out.append(line)
    return "\n".join(out)


BLOCKS = [b for b in readme_blocks((ROOT / "README.md").read_text()) if b["lang"] == "sh"]


def test_every_readme_block_is_tagged_and_every_shell_block_marked():
    blocks = readme_blocks((ROOT / "README.md").read_text())
    assert blocks, "README.md has no code blocks?"
    untagged = [b["line"] for b in blocks if not b["lang"]]
    assert not untagged, (
        f"README.md: code blocks without a language tag (sh for commands, text otherwise) at lines {untagged}"
    )
    unmarked = [b["line"] for b in BLOCKS if b["mode"] is None]
    assert not unmarked, f"README.md: sh blocks without a <!-- readme-test: ... --> marker at lines {unmarked}"
    assert all(b["reason"] for b in BLOCKS if b["mode"] == "skip"), "a skipped block states its reason"
    assert sum(b["mode"] != "skip" for b in BLOCKS) >= 3


def test_dry_inserts_the_flag_where_the_command_is():
    assert dry(".venv/bin/snakemake --cores all  # snakemake x") == ".venv/bin/snakemake -n --cores all  # snakemake x"
    assert dry("make test ARGS='-k x'") == "make -n test ARGS='-k x'"
    assert dry("source .venv/bin/activate") == "source .venv/bin/activate"


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory) -> Path:
    if not (VENV / "bin" / "snakemake").exists():
        pytest.skip(f"the tests do not run from the project's venv ({VENV} has no bin/snakemake)")
    work = tmp_path_factory.mktemp("readme") / "project"
    try:
        files = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout.decode()
        names = [n for n in files.split("\0") if n and (ROOT / n).is_file()]
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: cannot tell the tracked files")
    for name in names:
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, work / name)
    (work / ".venv").symlink_to(VENV)
    return work


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if b["mode"] in ("run", "dry-run")], ids=lambda b: f"README.md:{b['line']}"
)
def test_readme_block_runs_as_written_from_a_fresh_shell(block, fresh_copy):
    script = block["body"] if block["mode"] == "run" else dry(block["body"])
    env = {
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": str(fresh_copy / "src"),
        "MPLBACKEND": "Agg",
    }
    proc = subprocess.run(
        ["bash", "-e", "-c", script], cwd=fresh_copy, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, (
        f"README.md line {block['line']} ({block['mode']}):\n{script}\nexit {proc.returncode}\n"
        f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    )
    if "snakemake -n" in script:
        assert "This was a dry-run" in proc.stdout + proc.stderr
