"""Bad config files (fault injection): the project's YAML loader
(transformer_hessian.config.yaml_file) refuses duplicate keys naming their lines, alias bombs in under a
second, and missing, binary, non-UTF-8, too deep or oddly keyed files with one
message naming the file, also through the run guard of ``make reproduce`` and through ``snakemake -n``.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from fault_helpers import _no_traceback, dry_run_in_process, tiny_config

from transformer_hessian.config.validate import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_yaml_loader_rejects_duplicates_and_names_lines(tmp_path):
    from transformer_hessian.config.yaml_file import load_yaml

    p = tmp_path / "c.yaml"
    p.write_text("a:\n  b: 1\n  c: 2\n  b: 3\n")
    with pytest.raises(ConfigError, match=r"a\.b \(lines 2 and 4\): duplicate key"):
        load_yaml(p)
    p.write_text("a:\n  b: 1\n")
    assert load_yaml(p) == {"a": {"b": 1}}


def _bomb(kind: str, levels: int = 9) -> str:
    """A YAML file of ~1 KB whose aliases expand to 10^levels values (lists or mappings)."""
    if kind == "list":
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    else:
        lines = ["d0: &d0 {a: 1, b: 1, c: 1, d: 1, e: 1, f: 1, g: 1, h: 1, i: 1, j: 1}"]
        lines += [f"d{i}: &d{i} {{" + ", ".join(f"k{j}: *d{i - 1}" for j in range(10)) + "}" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("kind", ["list", "mapping"])
def test_yaml_alias_bomb_refused_in_under_a_second(kind, tmp_path):
    """The project's loader counts aliases instead of expanding them (linear in the file)."""
    from transformer_hessian.config.yaml_file import load_yaml
    from transformer_hessian.errors import ConfigError

    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(kind))
    assert path.stat().st_size < 3000
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"bomb\.yaml.*aliases") as err:
        load_yaml(path)
    assert time.perf_counter() - t0 < 1.0
    assert "\n" not in str(err.value)
    # a config that uses aliases sensibly still loads
    ok = tmp_path / "ok.yaml"
    ok.write_text("a: &m {x: 1, y: [1, 2]}\nb: *m\nc: *m\n")
    assert load_yaml(ok) == {"a": {"x": 1, "y": [1, 2]}, "b": {"x": 1, "y": [1, 2]}, "c": {"x": 1, "y": [1, 2]}}


@pytest.mark.slow
def test_yaml_alias_bomb_through_snakemake_and_make_reproduce(tmp_path, env):
    """Alias bombs end to end: a list bomb reaches the Snakefile's check (snakemake itself keeps list aliases
    shared); a mapping bomb, which snakemake's own config merge would expand, is refused by the run guard
    of ``make reproduce`` before snakemake starts."""
    listbomb = tmp_path / "list.yaml"
    listbomb.write_text(_bomb("list"))
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--snakefile", str(ROOT / "Snakefile"), "-d", str(tmp_path)]
        + ["--configfile", str(listbomb)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "aliases" in out and "list.yaml" in out and _no_traceback(out), out[-2000:]
    assert time.perf_counter() - t0 < 30
    mapbomb = tmp_path / "map.yaml"
    mapbomb.write_text(_bomb("mapping"))
    t0 = time.perf_counter()
    guard = [sys.executable, "-m", "transformer_hessian.pipeline.runguard", sys.executable, "-m", "snakemake", "-n"]
    proc = subprocess.run(
        [*guard, "--snakefile", str(ROOT / "Snakefile"), "-d", str(tmp_path), "--configfile", str(mapbomb)],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "aliases" in out and "map.yaml" in out and _no_traceback(out), out[-2000:]
    assert time.perf_counter() - t0 < 10


def _config_file_faults(tmp_path: Path) -> list[tuple[str, Path, str]]:
    text = yaml.safe_dump(copy.deepcopy(tiny_config()), sort_keys=False)
    out = []
    (tmp_path / "folder.yaml").mkdir(exist_ok=True)
    out.append(("missing", tmp_path / "missing.yaml", "does not exist"))
    out.append(("a folder", tmp_path / "folder.yaml", "folder"))
    (tmp_path / "utf16.yaml").write_bytes(text.encode("utf-16"))
    out.append(("utf-16", tmp_path / "utf16.yaml", "UTF-8"))
    (tmp_path / "binary.yaml").write_bytes(bytes(range(256)) * 8)
    out.append(("binary", tmp_path / "binary.yaml", "UTF-8"))
    (tmp_path / "nul.yaml").write_bytes(b"device: cpu\x00\n")
    out.append(("NUL byte", tmp_path / "nul.yaml", "NUL"))
    (tmp_path / "deep.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    out.append(("5000 levels deep", tmp_path / "deep.yaml", "deep"))
    (tmp_path / "deep2.yaml").write_text("".join("  " * i + f"k{i}:\n" for i in range(1000)) + "  " * 1000 + "v\n")
    out.append(("1000 nested mappings", tmp_path / "deep2.yaml", "deep"))
    (tmp_path / "intkey.yaml").write_text(text + "1: 2\n")
    out.append(("key 1", tmp_path / "intkey.yaml", "1 (line"))
    yes = copy.deepcopy(tiny_config())
    yes["experiments"]["YES_PLACEHOLDER"] = yes["experiments"]["hessian_tiny"]
    (tmp_path / "yes.yaml").write_text(yaml.safe_dump(yes, sort_keys=False).replace("YES_PLACEHOLDER", "yes"))
    out.append(("experiment named yes", tmp_path / "yes.yaml", "experiments.yes"))
    return out


def test_config_file_faults_one_line_each(tmp_path):
    """Each bad --configfile is refused by the project's loader with one message naming it."""
    from transformer_hessian.config.yaml_file import load_yaml
    from transformer_hessian.errors import ConfigError

    for cid, path, reason in _config_file_faults(tmp_path):
        t0 = time.perf_counter()
        with pytest.raises(ConfigError) as err:
            load_yaml(path)
        msg = str(err.value)
        assert reason in msg and path.name in msg, (cid, msg)
        assert time.perf_counter() - t0 < 1.0, cid


@pytest.mark.slow
def test_config_file_faults_through_make_reproduce_and_snakemake(tmp_path, env):
    """The bad config files through the run guard of ``make reproduce`` (every fault) and through a plain
    ``snakemake -n`` for those that snakemake's own loader lets through (non-text keys)."""
    guard = [sys.executable, "-m", "transformer_hessian.pipeline.runguard", sys.executable, "-m", "snakemake", "-n"]
    for cid, path, reason in _config_file_faults(tmp_path):
        proc = subprocess.run(
            [*guard, "--snakefile", str(ROOT / "Snakefile"), "-d", str(tmp_path), "--configfile", str(path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1 and reason in out and _no_traceback(out), (cid, out[-1500:])
        assert len(out.strip().splitlines()) <= 3, (cid, out)
    cwd = os.getcwd()
    try:
        for cid, path, reason in _config_file_faults(tmp_path):
            if cid in ("key 1", "experiment named yes"):
                ok, msg = dry_run_in_process(path, tmp_path)
                assert not ok and not msg.startswith("UNCLEAN") and reason in msg, (cid, msg)
    finally:
        os.chdir(cwd)
    # a non-text key given on the command line (not through a file) is named too
    from transformer_hessian.config.validate import ConfigError, validate_config

    cfg = tiny_config()
    cfg["data"][1] = 2
    with pytest.raises(ConfigError, match=r"data\.1: the key 1 is not text"):
        validate_config(cfg)
