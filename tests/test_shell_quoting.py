"""Hostile strings never reach a shell (fault injection): shell metacharacters, quotes,
``$(...)``, backticks, newlines and spaces in every string key of the schema. The marker file they try to
create must never appear, the values that reach a rule's shell command arrive there as one intact
argument, and every placeholder of every rule's shell command is quoted (``:q``).
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from fault_helpers import (
    _count,
    _names_key,
    _set,
    _snakemake,
    _write_config,
    dry_run_shell_commands,
    schema_leaves,
    tiny_config,
)

from transformer_hessian.config.validate import ConfigError, load_schema, validate_config

ROOT = Path(__file__).resolve().parents[1]


# A stand-in for each command the rules run: appends its name and arguments to $STUB_LOG, each NUL-
# terminated, the record ended by RS NUL (a bash script: it runs once for every rule of every accepted
# case, about a thousand times, and a Python start each took a quarter of the test's time)
STUB = """#!/usr/bin/env bash
{ printf '%s\\0' "${0##*/}" "$@"; printf '\\036\\0'; } >> "$STUB_LOG"
"""


def _stub_argv(log: Path) -> list[str]:
    """Every argument the stubs logged, in order (their names included)."""
    if not log.exists():
        return []
    records = log.read_bytes().split(b"\x1e\x00")
    return [f.decode() for r in records for f in r.split(b"\x00")[:-1]]


def hostile_strings(marker: Path) -> list[str]:
    m = str(marker)
    plain = [
        f"$(touch {m})",
        f"`touch {m}`",
        f"x; touch {m}",
        f"x' ; touch {m} ; echo '",
        f'x" ; touch {m} ; echo "',
        f"x | touch {m}",
        f"x && touch {m} #",
        f"dir with spaces/$(touch {m})/it's",
        f"x\ntouch {m}",
        f"x > {m}",
        f"$'\\x41' ${{IFS}}; touch {m}",
    ]
    urlish = [
        f"http://127.0.0.1:9/$(touch${{IFS}}{m})",
        f"http://127.0.0.1:9/;touch${{IFS}}{m};",
        f"http://127.0.0.1:9/'$(touch${{IFS}}{m})'",
        f"http://127.0.0.1:9/`touch${{IFS}}{m}`",
        f'http://127.0.0.1:9/"&&touch${{IFS}}{m}&&"',
        f"http://127.0.0.1:9/a|touch${{IFS}}{m}",
    ]
    return plain + urlish


def _run_with_stubs(cmd: str, sandbox: Path, stubs: Path, env: dict) -> None:
    for target in re.findall(r"[0-9]?>\s*(logs/\S+)", cmd):  # the rules' log files
        (sandbox / target).parent.mkdir(parents=True, exist_ok=True)
    e = dict(env, PATH=f"{stubs}{os.pathsep}{env['PATH']}", STUB_LOG=str(sandbox / "stub.log"))
    subprocess.run(["bash", "-c", cmd], cwd=sandbox, env=e, capture_output=True, timeout=60, check=False)


@pytest.mark.slow  # about 90 s
def test_hostile_strings_in_every_string_key_never_reach_a_shell(tmp_path, env):
    marker = tmp_path / "MARKER"
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name in ("transformer-hessian", "papermill", "torchrun"):  # torchrun: rule lm_curvature (processes > 1)
        (stubs / name).write_text(STUB)
        (stubs / name).chmod(0o755)
    base = tiny_config()
    # lm.local and lm.url travel only in the language study's settings file (results/settings/lm-*.json,
    # `--lm @FILE`), never on a command line; its rules still run below with every other hostile value
    # (data.root reaches them as --data-root). Left out of the loop to keep make test in its budget.
    keys = [
        (p, leaf)
        for p, leaf in schema_leaves(load_schema(), base)
        if "string" in ([leaf.get("type")] if isinstance(leaf.get("type"), str) else leaf.get("type", []))
        and p[0] != "lm"
    ]
    assert {"data.root", "data.mirror", "device", "hessian.experiment"} <= {".".join(p) for p, _ in keys}
    accepted, rejected, total = [], 0, 0
    for path, _leaf in keys:
        for value in hostile_strings(marker):
            total += 1
            cfg = copy.deepcopy(base)
            _set(cfg, path, value)
            try:
                validate_config(copy.deepcopy(cfg))
            except ConfigError as err:
                assert _names_key(str(err), ".".join(path)), (path, value, str(err))
                rejected += 1
                continue
            accepted.append((".".join(path), value, cfg))
    # hostile experiment names (map keys) are rejected by name
    for value in hostile_strings(marker)[:4]:
        total += 1
        cfg = copy.deepcopy(base)
        cfg["experiments"][value] = cfg["experiments"].pop("landscape_tiny")
        cfg["landscape"]["experiment"] = value
        with pytest.raises(ConfigError, match="experiments"):
            validate_config(cfg)
        rejected += 1

    # `snakemake -n -p` through snakemake's API in this process (its start was most of a case's 4 s):
    # the shell command of every job of the DAG, as snakemake formats it for the job and prints it
    commands = []
    cwd = os.getcwd()
    try:
        for i, (key, value, cfg) in enumerate(accepted):
            sandbox = tmp_path / f"h{i}"
            sandbox.mkdir()
            try:
                cmds = dry_run_shell_commands(_write_config(cfg, sandbox / "hostile.yaml"), sandbox)
            except (SystemExit, Exception) as err:  # SystemExit: snakemake refusing the config
                pytest.fail(f"{key}={value!r}: snakemake -n failed: {err}")
            assert len(cmds) >= 10, (key, value)
            commands.append((sandbox, cmds))
    finally:
        os.chdir(cwd)

    def one(i_case):
        i, (key, value, _cfg) = i_case
        sandbox, cmds = commands[i]
        for cmd in cmds:
            _run_with_stubs(cmd, sandbox, stubs, env)
        return key, value, _stub_argv(sandbox / "stub.log")

    reached = 0
    with cf.ThreadPoolExecutor(2) as pool:
        for key, value, argv in pool.map(one, enumerate(accepted)):
            assert not marker.exists(), (key, value)
            intact = any(value in a or json.dumps(value)[1:-1] in a for a in argv)
            reached += intact
            if key in ("data.root", "data.mirror"):
                assert intact, (key, value, argv[:20])
    assert not marker.exists()
    _count("hostile strings rejected by validation", rejected, total)
    _count(
        "hostile strings accepted, run through every rule's shell command (stubbed), marker absent",
        len(accepted),
        total - rejected,
    )
    _count("accepted hostile strings that reached a command as one intact argument", reached, len(accepted))
    assert len(accepted) >= 10  # paths with spaces, quotes and $(...) are legal data roots and mirrors


@pytest.mark.workflow
def test_hostile_root_and_mirror_real_download_job(tmp_path, env):
    """The real download rule (no stubs) with a hostile data root and mirror: no marker, job succeeds."""
    marker = tmp_path / "MARKER"
    cfg = tiny_config()
    cfg["data"]["root"] = f"data dir/$(touch {marker})/it's `touch {marker}`"
    cfg["data"]["mirror"] = f"http://127.0.0.1:9/$(touch${{IFS}}{marker})'\"`;touch${{IFS}}{marker}`"
    _write_config(cfg, tmp_path / "hostile.yaml")
    target = f"{cfg['data']['root']}/digits/manifest.json"
    proc = _snakemake(
        ["--cores", "1", target, "--configfile", str(tmp_path / "hostile.yaml")], tmp_path, env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not marker.exists()
    assert json.loads((tmp_path / target).read_text())["dataset"] == "digits"


def test_every_shell_placeholder_is_quoted():
    """Static guard over every rule file: params, wildcards, input, output and log go through :q."""
    unquoted = []
    for smk in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        text = smk.read_text()
        for block in re.findall(r"shell:\s*\n((?:\s+(?:r|f)?\"[^\n]*\n)+)", text):
            for ph in re.findall(r"(?<!\{)\{([A-Za-z_][\w.\[\]'\"]*)(:[^}]*)?\}(?!\})", block):
                name, fmt = ph
                if name.split(".")[0] in ("threads", "resources") or fmt == ":q":
                    continue
                if name.startswith("params.") and name.endswith("_args"):
                    continue  # a prebuilt list of options, each value shlex.quote'd in the rule
                unquoted.append(f"{smk.name}: {{{name}{fmt}}}")
    assert not unquoted, unquoted
