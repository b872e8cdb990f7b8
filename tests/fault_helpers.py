"""Helpers of the fault-injection tests: not a test module, so that the tests of each
fault (tests/config/test_config_faults.py, tests/config/test_yaml_file_faults.py, tests/test_shell_quoting.py,
tests/data/test_download_faults.py, tests/data/test_crafted_dataset_files.py, tests/train/test_checkpoint_recovery.py,
tests/pipeline/test_errors_and_interrupts.py, tests/util/test_result_file_faults.py) share them without
importing one another. The tiny run whose checkpoints they damage is the ``reference_run`` fixture of
tests/conftest.py.

Counts are printed as ``FAULTS <name>: <handled> of <total>`` lines (``pytest -s`` shows them).

Modules added by the fix are imported inside the tests, so that the test files also run (and fail where
they should) against the code before the fix.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import yaml
from tiny_workflow import TINY

from transformer_hessian.config.validate import validate_config

ROOT = Path(__file__).resolve().parents[1]


def _count(name: str, handled: int, total: int) -> None:
    print(f"\nFAULTS {name}: {handled} of {total}")


def _no_traceback(text: str) -> bool:
    return "Traceback (most recent call last)" not in text


def _resolve(schema: dict, node: dict) -> dict:
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    while isinstance(node, dict) and "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    return node


def schema_leaves(schema: dict, cfg: dict):
    """``(path, leaf schema)`` for every non-object key of the schema, instantiated on ``cfg``
    (map-valued sections such as ``experiments`` are expanded over the keys ``cfg`` has)."""

    def walk(node, path, value):
        node = _resolve(schema, node)
        types = node.get("type")
        if "properties" in node or types == "object" or "additionalProperties" in node:
            props = node.get("properties", {})
            for k, sub in props.items():
                yield from walk(sub, [*path, k], value.get(k) if isinstance(value, dict) else None)
            extra = node.get("additionalProperties")
            if isinstance(extra, dict) and isinstance(value, dict):
                for k in value:
                    if k not in props:
                        yield from walk(extra, [*path, k], value[k])
        else:
            yield path, node

    yield from walk(schema, [], cfg)


def _set(cfg: dict, path, value) -> None:
    node = cfg
    for k in path[:-1]:
        node = node.setdefault(k, {})
    if value is KeyError:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value


def tiny_config() -> dict:
    return validate_config(copy.deepcopy(TINY))


def _write_config(cfg, path: Path) -> Path:
    if isinstance(cfg, str):
        path.write_text(cfg)
    else:
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def dry_run_shell_commands(configfile: Path, workdir: Path) -> list[str]:
    """``snakemake -n -p`` through snakemake's API in this process: the shell command of each job of
    the DAG, as snakemake formats it for the job (raises what snakemake raises on a bad config)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
        wf = api.workflow(
            resource_settings=ResourceSettings(cores=1),
            config_settings=ConfigSettings(configfiles=[configfile]),
            snakefile=ROOT / "Snakefile",
            workdir=workdir,
        )
        wf.dag().execute_workflow(executor="dryrun")
        return [job.shellcmd for job in wf._workflow.dag.jobs if job.shellcmd]


def dry_run_in_process(configfile: Path, workdir: Path) -> tuple[bool, str]:
    """``snakemake -n`` through snakemake's API in this process: ``(DAG built, message)``."""
    try:
        dry_run_shell_commands(configfile, workdir)
    except SystemExit as err:
        return False, str(err.code)
    except Exception as err:  # noqa: BLE001 - reported, and counted as "not a clean rejection"
        return False, f"UNCLEAN {type(err).__name__}: {err}"
    return True, ""


def _snakemake(args, cwd: Path, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(cwd), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def _names_key(message: str, key: str) -> bool:
    if key in message:
        return True
    *parent, leaf = key.split(".")
    return bool(parent) and ".".join(parent) in message and leaf in message


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _dead_pid() -> int:
    p = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    return int(p.stdout)


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))
