"""Fault injection (issue 8): the pipeline as a careless or hostile user would run it.

* bad configs: generated from the schema (every key: wrong type, float for an integer, nan/inf,
  out of range, not an enum value, unknown key, missing key) plus cross-key and file-level faults
  (duplicate keys); each must stop ``snakemake -n`` before any job, naming the key;
* hostile strings (shell metacharacters, quotes, ``$(...)``, backticks, newlines, spaces) in every
  string key of the schema: the marker file they try to create must never appear, and the values
  that reach a shell command arrive there as one intact argument;
* download faults against a local server on 127.0.0.1, each with a bounded time;
* a damaged checkpoint at every position (latest, middle, init, final);
* expected errors of the command line: one message, no traceback;
* a kill (SIGKILL of the whole process group) at a random moment of each rule of the tiny
  workflow, each followed by ``make reproduce``, which must finish without any flag typed by hand,
  plus the refusal of a second concurrent run.

Counts are printed as ``FAULTS <name>: <handled> of <total>`` lines (``pytest -s`` shows them).
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import hashlib
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_spec
from test_workflow import TINY

from transformer_hessian.config.validate import ConfigError, load_schema, validate_config
from transformer_hessian.core.model import ModelConfig, ViT, count_parameters
from transformer_hessian.data import DataError, download
from transformer_hessian.train import load_model, train

# Modules added by the fix are imported inside the tests, so that this file also runs (and fails
# where it should) against the code before the fix.

ROOT = Path(__file__).resolve().parents[1]


def _count(name: str, handled: int, total: int) -> None:
    print(f"\nFAULTS {name}: {handled} of {total}")


def _no_traceback(text: str) -> bool:
    return "Traceback (most recent call last)" not in text


# ============================================================================ schema walk


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


def _violating_string(leaf: dict) -> str | None:
    for cand in ("not a url {x}", "{}", "", "\u00e9\u00e9-not-valid", "x" * 300):
        if "enum" in leaf and cand not in leaf["enum"]:
            return cand
        if "pattern" in leaf and not re.search(leaf["pattern"], cand):
            return cand
        if "minLength" in leaf and len(cand) < leaf["minLength"]:
            return cand
    return None


def bad_values(leaf: dict) -> list[tuple[str, object]]:
    """Values that ``leaf`` must reject, derived from its type and bounds only."""
    types = leaf.get("type", [])
    types = [types] if isinstance(types, str) else list(types)
    out: list[tuple[str, object]] = []
    numeric = "integer" in types or "number" in types
    if "integer" in types:
        base = leaf.get("minimum", leaf.get("exclusiveMinimum", 0)) + 2
        out.append(("float", float(base)))
    if "number" in types:
        out += [("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf)]
    if numeric:
        if "minimum" in leaf:
            out.append(("below minimum", leaf["minimum"] - 1))
        if "exclusiveMinimum" in leaf:
            out.append(("at exclusive minimum", leaf["exclusiveMinimum"]))
        if "maximum" in leaf:
            out.append(("above maximum", leaf["maximum"] + 1))
        if "exclusiveMaximum" in leaf:
            out.append(("at exclusive maximum", leaf["exclusiveMaximum"]))
        out.append(("string", "12"))
    if "string" in types:
        bad = _violating_string(leaf)
        if bad is not None:
            out.append(("invalid string", bad))
        if not numeric:
            out.append(("number for a string", 12))
    if "boolean" in types:
        out.append(("string for a bool", "yes"))
    if "null" not in types and "enum" not in leaf:
        out.append(("null", None))
    return out


def tiny_config() -> dict:
    return validate_config(copy.deepcopy(TINY))


def generated_bad_configs() -> list[tuple[str, str, dict | str]]:
    """``(case id, key that must be named, config dict or YAML text)``."""
    base = tiny_config()
    schema = load_schema()
    cases = []
    for path, leaf in schema_leaves(schema, base):
        dotted = ".".join(path)
        for label, value in bad_values(leaf):
            cfg = copy.deepcopy(base)
            _set(cfg, path, value)
            cases.append((f"{dotted}={label}", dotted, cfg))
    # unknown keys in every object section, and a missing required key
    for section in ("data", "hessian", "landscape", "resources", "theory"):
        cfg = copy.deepcopy(base)
        cfg[section]["colour"] = "red"
        cases.append((f"{section}.colour=unknown", f"{section}.colour", cfg))
    cfg = copy.deepcopy(base)
    cfg["experiments"]["hessian_tiny"]["train"]["learning_rate"] = 0.1
    cases.append(("train.learning_rate=unknown", "experiments.hessian_tiny.train.learning_rate", cfg))
    cfg = copy.deepcopy(base)
    del cfg["experiments"]["hessian_tiny"]["model"]["d_k"]
    cases.append(("model.d_k=missing", "d_k", cfg))
    return cases


def issue_bad_configs() -> list[tuple[str, str, dict | str]]:
    """The faults reported in issue 8 and the cross-key rules, one by one."""
    base = tiny_config()
    h, lnd = "experiments.hessian_tiny", "experiments.landscape_tiny"
    edits = [
        ("width 16.0", f"{h}.model.width", f"{h}.model.width", 16.0),
        ("epochs 2.0", f"{h}.train.epochs", f"{h}.train.epochs", 2.0),
        ("lr .nan", f"{h}.train.lr", f"{h}.train.lr", math.nan),
        ("lr .inf", f"{h}.train.lr", f"{h}.train.lr", math.inf),
        ("weight_decay .inf", f"{h}.train.weight_decay", f"{h}.train.weight_decay", math.inf),
        ("ln_eps .inf", f"{h}.model.ln_eps", f"{h}.model.ln_eps", math.inf),
        ("mirror not a url", "data.mirror", "data.mirror", "not a url"),
        ("mirror ftp", "data.mirror", "data.mirror", "ftp://127.0.0.1/x/"),
        ("mirror injection", "data.mirror", "data.mirror", "http://127.0.0.1:18101/$(touch SOMEFILE)"),
        ("root with braces", "data.root", "data.root", "results/{dataset}"),
        ("hessian.experiment 2 blocks", "hessian.experiment", "hessian.experiment", "landscape_tiny"),
        ("hessian.experiment undefined", "hessian.experiment", "hessian.experiment", "nope"),
        ("landscape.experiment undefined", "landscape.experiment", "landscape.experiment", "nope"),
        ("hessian.block beyond depth", "hessian.block", "hessian.block", 1),
        ("patch does not divide 8", f"{h}.model.patch_size", f"{h}.model.patch_size", 3),
        ("width 10^6 (training memory)", f"{lnd}.model", f"{lnd}.model.width", 10**6),
        ("width 10^6 (dense Hessian)", "hessian.experiment", f"{h}.model.width", 10**6),
        ("newline in a string", "data.root", "data.root", "results/data\ntouch SOMEFILE"),
        ("device tpu", "device", "device", "tpu"),
        ("dataset imagenet", f"{h}.dataset", f"{h}.dataset", "imagenet"),
    ]
    cases = []
    for cid, named, key, value in edits:
        cfg = copy.deepcopy(base)
        _set(cfg, key.split("."), value)
        cases.append((cid, named, cfg))
    # a 180k-parameter dense Hessian (d=128, d_k=128, d_ff=512): 180,224^2 float64
    cfg = copy.deepcopy(base)
    cfg["experiments"]["hessian_tiny"]["model"].update(width=128, d_k=128, d_ff=512)
    assert 128 * (2 * 128 + 128 + 2 * 512) == 180_224
    cases.append(("180k-parameter dense Hessian", "hessian.experiment", cfg))
    cfg = copy.deepcopy(base)
    cfg["experiments"]["bad name; touch SOMEFILE"] = cfg["experiments"]["hessian_tiny"]
    cases.append(("hostile experiment name", "experiments", cfg))
    # file-level faults: duplicate keys (top level and nested), not a mapping
    text = yaml.safe_dump(TINY, sort_keys=False)
    cases.append(("duplicate top-level key", "device", text + "device: cuda\n"))
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.strip().startswith("lr:"))
    dup = "\n".join([*lines[: i + 1], lines[i].replace(lines[i].strip(), "lr: 0.5"), *lines[i + 1 :]]) + "\n"
    cases.append(("duplicate nested key", "experiments.hessian_tiny.train.lr", dup))
    return cases


# ============================================================================ dry runs


def _write_config(cfg, path: Path) -> Path:
    if isinstance(cfg, str):
        path.write_text(cfg)
    else:
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def dry_run_in_process(configfile: Path, workdir: Path) -> tuple[bool, str]:
    """``snakemake -n`` through snakemake's API in this process: ``(DAG built, message)``."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    try:
        with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
            wf = api.workflow(
                resource_settings=ResourceSettings(cores=1),
                config_settings=ConfigSettings(configfiles=[configfile]),
                snakefile=ROOT / "Snakefile",
                workdir=workdir,
            )
            wf.dag().execute_workflow(executor="dryrun")
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


def test_bad_configs_stop_before_the_first_job(tmp_path):
    cases = generated_bad_configs() + issue_bad_configs()
    failures, rejected = [], 0
    cwd = os.getcwd()
    try:
        for i, (cid, key, cfg) in enumerate(cases):
            work = tmp_path / f"c{i}"
            work.mkdir()
            ok, msg = dry_run_in_process(_write_config(cfg, work / "bad.yaml"), work)
            clean = not ok and not msg.startswith("UNCLEAN") and _names_key(msg, key) and _no_traceback(msg)
            rejected += clean
            if not clean:
                failures.append(f"{cid}: accepted={ok} message={msg[:300]!r}")
            assert not (work / "results").exists() and not (work / "logs").exists(), cid
    finally:
        os.chdir(cwd)
    _count("bad configs rejected before the first job (snakemake -n, in process)", rejected, len(cases))
    assert len(cases) >= 40
    assert not failures, "\n".join(failures)


def test_good_configs_still_pass(tmp_path):
    cwd = os.getcwd()
    try:
        for name in ("config.yaml", "paper.yaml"):
            work = tmp_path / name
            work.mkdir()
            ok, msg = dry_run_in_process(ROOT / "config" / name, work)
            assert ok, msg
        ok, msg = dry_run_in_process(_write_config(TINY, tmp_path / "tiny.yaml"), tmp_path)
        assert ok, msg
    finally:
        os.chdir(cwd)


SAMPLE = [
    "width 16.0",
    "lr .nan",
    "duplicate nested key",
    "hessian.experiment 2 blocks",
    "mirror not a url",
    "180k-parameter dense Hessian",
    "width 10^6 (training memory)",
]


def test_bad_configs_through_the_snakemake_command(tmp_path, env):
    """The same rejection through the real ``snakemake -n`` command line (a sample, in parallel)."""
    cases = [c for c in issue_bad_configs() if c[0] in SAMPLE]
    assert len(cases) == len(SAMPLE)

    def one(i_case):
        i, (cid, key, cfg) = i_case
        work = tmp_path / f"s{i}"
        work.mkdir()
        proc = _snakemake(["-n", "--configfile", str(_write_config(cfg, work / "bad.yaml"))], work, env)
        return cid, key, work, proc

    with cf.ThreadPoolExecutor(2) as pool:
        for cid, key, work, proc in pool.map(one, enumerate(cases)):
            out = proc.stdout + proc.stderr
            assert proc.returncode != 0, cid
            assert _names_key(out, key), (cid, out[-2000:])
            assert _no_traceback(out) and 'File "' not in out, (cid, out[-2000:])
            assert "rule train" not in out and not (work / "results").exists(), cid


@pytest.mark.parametrize("case", issue_bad_configs(), ids=lambda c: c[0])
def test_issue_config_fault_rejected(case, tmp_path):
    """Issue 8 items 1, 3, 4, 6, 7 (sizes) and 8, one dry run each."""
    cid, key, cfg = case
    cwd = os.getcwd()
    try:
        ok, msg = dry_run_in_process(_write_config(cfg, tmp_path / "bad.yaml"), tmp_path)
    finally:
        os.chdir(cwd)
    assert not ok and not msg.startswith("UNCLEAN") and _no_traceback(msg), (cid, msg[:500])
    assert _names_key(msg, key), (cid, msg[:500])


def test_yaml_loader_rejects_duplicates_and_names_lines(tmp_path):
    from transformer_hessian.config.yaml_file import load_yaml

    p = tmp_path / "c.yaml"
    p.write_text("a:\n  b: 1\n  c: 2\n  b: 3\n")
    with pytest.raises(ConfigError, match=r"a\.b \(lines 2 and 4\): duplicate key"):
        load_yaml(p)
    p.write_text("a:\n  b: 1\n")
    assert load_yaml(p) == {"a": {"b": 1}}


def test_training_memory_estimate_counts_parameters_exactly():
    """The parse-time estimate (no torch) against count_parameters of the real model."""
    from transformer_hessian.config.checks import DATASET_SHAPES, training_bytes_estimate
    from transformer_hessian.util.resources import hessian_group_size

    rng = random.Random(8)
    for _ in range(12):
        ds = rng.choice(sorted(DATASET_SHAPES))
        side, channels, classes = DATASET_SHAPES[ds]
        p = rng.choice([q for q in (1, 2, 4, 7, 8) if side % q == 0])
        m = {
            "patch_size": p,
            "width": rng.randint(1, 9),
            "depth": rng.randint(1, 3),
            "d_k": rng.randint(1, 7),
            "d_ff": rng.randint(1, 11),
            "ffn_bias": rng.random() < 0.5,
        }
        n = count_parameters(ViT(ModelConfig(image_size=side, channels=channels, num_classes=classes, **m)))
        assert training_bytes_estimate({"dataset": ds, "model": m}) == 16 * n
        blk = ViT(ModelConfig(image_size=side, channels=channels, num_classes=classes, **m)).group_params(0)
        assert hessian_group_size(m["width"], m["d_k"], m["d_ff"]) == sum(w.numel() for w in blk.values())


# ============================================================================ hostile strings

STUB = """#!{python}
import json, os, sys
with open(os.environ["STUB_LOG"], "a") as fh:
    fh.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")
"""


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


def _shell_commands(text: str) -> list[str]:
    cmds, cur = [], None
    for line in text.splitlines():
        if line.startswith("Shell command: "):
            cur = [line[len("Shell command: ") :]]
            cmds.append(cur)
        elif cur is not None:
            if not line.strip():
                cur = None
            else:
                cur.append(line)
    return ["\n".join(c) for c in cmds]


def _run_with_stubs(cmd: str, sandbox: Path, stubs: Path, env: dict) -> None:
    for target in re.findall(r"[0-9]?>\s*(logs/\S+)", cmd):  # the rules' log files
        (sandbox / target).parent.mkdir(parents=True, exist_ok=True)
    e = dict(env, PATH=f"{stubs}{os.pathsep}{env['PATH']}", STUB_LOG=str(sandbox / "stub.log"))
    subprocess.run(["bash", "-c", cmd], cwd=sandbox, env=e, capture_output=True, timeout=60, check=False)


def test_hostile_strings_in_every_string_key_never_reach_a_shell(tmp_path, env):
    marker = tmp_path / "MARKER"
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name in ("transformer-hessian", "papermill"):
        (stubs / name).write_text(STUB.format(python=sys.executable))
        (stubs / name).chmod(0o755)
    base = tiny_config()
    keys = [
        (p, leaf)
        for p, leaf in schema_leaves(load_schema(), base)
        if "string" in ([leaf.get("type")] if isinstance(leaf.get("type"), str) else leaf.get("type", []))
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

    def one(i_case):
        i, (key, value, cfg) = i_case
        sandbox = tmp_path / f"h{i}"
        sandbox.mkdir()
        proc = _snakemake(["-n", "-p", "--configfile", str(_write_config(cfg, sandbox / "hostile.yaml"))], sandbox, env)
        assert proc.returncode == 0, (key, value, proc.stderr[-2000:])
        cmds = _shell_commands(proc.stdout + proc.stderr)
        assert len(cmds) >= 10, (key, value)
        for cmd in cmds:
            _run_with_stubs(cmd, sandbox, stubs, env)
        log = sandbox / "stub.log"
        argv = [a for line in log.read_text().splitlines() for a in json.loads(line)] if log.exists() else []
        return key, value, argv

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


# ============================================================================ downloads


class _Server:
    """Local HTTP server with misbehaving routes."""

    def __init__(self, body: bytes):
        self.body = body
        self.stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):  # noqa: N802
                route = self.path.strip("/").split("/")[0]
                try:
                    getattr(self, f"r_{route}", self.r_404)()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _head(self, code=200, length=None):
                self.send_response(code)
                self.send_header("Content-Length", str(len(server.body) if length is None else length))
                self.end_headers()

            def r_ok(self):
                self._head()
                self.wfile.write(server.body)

            def r_404(self):
                self._head(404, 0)

            def r_500(self):
                self._head(500, 0)

            def r_truncated(self):
                self._head(length=len(server.body))
                self.wfile.write(server.body[: len(server.body) // 3])
                self.wfile.flush()
                self.close_connection = True

            def r_wrongmd5(self):
                self._head()
                self.wfile.write(bytes(reversed(server.body)))

            def r_hang(self):
                server.stop.wait(30)

            def r_trickle(self):
                self._head()
                for b in server.body:
                    if server.stop.wait(0.25):
                        return
                    self.wfile.write(bytes([b]))
                    self.wfile.flush()

            def r_close(self):
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

            def r_html(self):
                body = b"<html>captive portal</html>"
                self._head(length=len(body))
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def server():
    s = _Server(os.urandom(4000))
    yield s
    s.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dead_pid() -> int:
    p = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    return int(p.stdout)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_download_faults_leave_nothing_and_end_in_bounded_time(server, tmp_path):
    md5 = hashlib.md5(server.body, usedforsecurity=False).hexdigest()
    res = [("blob.bin", md5)]
    faults = {
        "404": f"{server.base}/404/",
        "500": f"{server.base}/500/",
        "truncated": f"{server.base}/truncated/",
        "wrong checksum": f"{server.base}/wrongmd5/",
        "hanging server": f"{server.base}/hang/",
        "one byte every 0.25 s": f"{server.base}/trickle/",
        "connection closed": f"{server.base}/close/",
        "connection refused": f"http://127.0.0.1:{_free_port()}/",
        "html instead of data": f"{server.base}/html/",
    }
    handled = 0
    for i, (label, mirror) in enumerate(faults.items()):
        root = tmp_path / f"r{i}"
        t0 = time.monotonic()
        with pytest.raises(DataError) as err:
            download("mnist", root, mirror=mirror, resources=res, timeout=1.0, deadline=2.0)
        took = time.monotonic() - t0
        msg = str(err.value)
        assert took < 6, (label, took)
        assert mirror.rstrip("/") in msg and str(root / "mnist") in msg and "data.mirror" in msg, (label, msg)
        assert "blob.bin" in msg and md5 in msg, label  # the files to place by hand
        assert _leftovers(root / "mnist") == [], (label, _leftovers(root / "mnist"))
        handled += 1
    # a mirror that is not an http(s) url, named by its config key
    with pytest.raises(DataError, match=r"data\.mirror: 'not a url'"):
        download("mnist", tmp_path / "x", mirror="not a url", resources=res)
    handled += 1
    # the deadline is what stops the trickle (the per-read timeout alone would never fire)
    with pytest.raises(DataError, match="deadline of 1.5 s"):
        download("mnist", tmp_path / "t", mirror=f"{server.base}/trickle/", resources=res, timeout=5, deadline=1.5)
    # a stale 0-byte .part left by a killed run (dead pid on this host) goes; a live one stays
    folder = tmp_path / "stale" / "mnist"
    folder.mkdir(parents=True)
    from transformer_hessian.util.tempfiles import _host_tag

    dead = folder / f".blob.bin.{_host_tag()}.{_dead_pid()}.abcdefgh.part"
    live = folder / f".blob.bin.{_host_tag()}.{os.getpid()}.abcdefgh.part"
    dead.touch()
    live.touch()
    download("mnist", tmp_path / "stale", mirror=f"{server.base}/ok/", resources=res, timeout=2, deadline=5)
    assert not dead.exists() and live.exists() and (folder / "blob.bin").read_bytes() == server.body
    live.unlink()
    handled += 1
    _count("download faults handled", handled, len(faults) + 2)


def test_download_killed_mid_transfer_then_rerun_cleans_up(server, tmp_path, env):
    md5 = hashlib.md5(server.body, usedforsecurity=False).hexdigest()
    code = (
        "from transformer_hessian.data import download\n"
        f"download('mnist', {str(tmp_path)!r}, mirror={server.base + '/trickle/'!r}, "
        f"resources=[('blob.bin', {md5!r})], timeout=5, deadline=60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    folder = tmp_path / "mnist"
    t0 = time.monotonic()
    while not list(folder.glob(".blob.bin.*.part")) and time.monotonic() - t0 < 60:
        time.sleep(0.1)
    time.sleep(0.6)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(list(folder.glob(".blob.bin.*.part"))) == 1  # what a kill leaves behind
    download("mnist", tmp_path, mirror=f"{server.base}/ok/", resources=[("blob.bin", md5)], timeout=2, deadline=5)
    assert _leftovers(folder) == ["blob.bin"]


# ============================================================================ checkpoints


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    """A 4-epoch tiny run, uninterrupted: the weights every recovery must reproduce bit for bit."""
    root = tmp_path_factory.mktemp("ref")
    spec = tiny_spec(epochs=4)
    train("tiny", spec, root / "data", root / "run", device="cpu")
    return root, spec


def _interrupted_copy(ref: Path, dest: Path, after_epoch: int) -> Path:
    """The checkpoint folder as a run killed right after ``after_epoch`` leaves it."""
    shutil.copytree(ref / "run", dest)
    ck = dest / "checkpoints"
    for p in ck.glob("epoch_*.pt"):
        if int(p.stem.split("_")[1]) > after_epoch:
            p.unlink()
            p.with_name(p.name + ".sha256").unlink(missing_ok=True)
    (ck / "final.pt").unlink()
    (dest / "metrics.json").unlink()
    return ck


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _same_weights(a: Path, b: Path) -> bool:
    sa = torch.load(a, weights_only=True)["model"]
    sb = torch.load(b, weights_only=True)["model"]
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("position", ["latest", "middle", "init", "final"])
def test_damaged_checkpoint_is_recovered(reference_run, tmp_path, position, caplog):
    root, spec = reference_run
    ref_ck = root / "run" / "checkpoints"
    if position == "final":
        from transformer_hessian.train.checkpoints import CheckpointError, set_aside_damaged

        # A finished run whose final.pt was damaged afterwards: the workflow sets it aside at start-up
        # (so the train rule runs again) and training rebuilds it from the last epoch checkpoint.
        shutil.copytree(root / "run", tmp_path / "run")
        ck = tmp_path / "run" / "checkpoints"
        _truncate(ck / "final.pt")
        with pytest.raises(CheckpointError, match=r"final\.pt is damaged: sha256 mismatch"):
            load_model(ck / "final.pt")
        assert set_aside_damaged([ck / "final.pt", ck / "init.pt"], recheck_s=0) == [ck / "final.pt"]
        assert (ck / "final.pt.damaged").exists() and not (ck / "final.pt").exists()
    else:
        ck = _interrupted_copy(root, tmp_path / "run", after_epoch=3)
        victim = {"latest": "epoch_003.pt", "middle": "epoch_002.pt", "init": "init.pt"}[position]
        _truncate(ck / victim)
    with caplog.at_level("INFO", logger="transformer_hessian"):
        train("tiny", spec, root / "data", tmp_path / "run", device="cpu")
    from transformer_hessian.train.checkpoints import load_checkpoint

    log = caplog.text
    if position == "latest":
        assert "skipping epoch_003.pt" in log and "resuming from" in log and "epoch_002.pt" in log
    if position == "init":
        assert "rebuilding init.pt" in log
    for name in ("init.pt", "final.pt", "epoch_004.pt"):
        assert _same_weights(ref_ck / name, ck / name), name
        assert load_checkpoint(ck / name)  # verifies against its new sidecar


def test_every_epoch_checkpoint_damaged_starts_afresh(reference_run, tmp_path, caplog):
    root, spec = reference_run
    ck = _interrupted_copy(root, tmp_path / "run", after_epoch=2)
    for p in ck.glob("epoch_*.pt"):
        p.write_bytes(b"")
    with caplog.at_level("INFO", logger="transformer_hessian"):
        train("tiny", spec, root / "data", tmp_path / "run", device="cpu")
    assert "skipping epoch_002.pt" in caplog.text and "skipping epoch_001.pt" in caplog.text
    assert _same_weights(root / "run/checkpoints/final.pt", ck / "final.pt")
    from transformer_hessian.train.checkpoints import load_checkpoint

    assert load_checkpoint(ck / "final.pt")


# ============================================================================ command-line errors


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def test_expected_errors_print_one_message_and_no_traceback(reference_run, tmp_path, env):
    root, spec = reference_run
    final = root / "run/checkpoints/final.pt"
    evil = tmp_path / "evil.pt"
    torch.save({"model_config": {}, "model": _Evil(), "epoch": 0}, evil)
    damaged = tmp_path / "damaged"
    shutil.copytree(root / "run/checkpoints", damaged)
    _truncate(damaged / "final.pt")
    hess = json.dumps({"experiment": "tiny", "block": 0, "batch_size": 8, "seed": 0, "method": "auto"})
    big = tiny_spec().to_dict()
    big["model"].update(width=128, d_k=128, d_ff=512)
    huge = tiny_spec(epochs=1).to_dict()
    huge["model"]["width"] = 10**6
    no_cuda = "cuda" if not torch.cuda.is_available() else f"cuda:{torch.cuda.device_count() + 3}"
    common = ["--data-root", str(root / "data")]

    spec_json = spec.to_dict()

    def hessian(ckpt, spec_=spec_json, device="cpu"):
        return [
            "hessian",
            "--checkpoint",
            str(ckpt),
            "--stage",
            "trained",
            "--spec",
            json.dumps(spec_),
            "--hessian",
            hess,
            *common,
            "--device",
            device,
            "--out-npz",
            str(tmp_path / "h.npz"),
            "--out-norms",
            str(tmp_path / "h.json"),
        ]

    cases = {
        "device cuda without CUDA": (hessian(final, device=no_cuda), ["device"]),
        "train on cuda without CUDA": (
            [
                "train",
                "--experiment",
                "t",
                "--spec",
                json.dumps(spec.to_dict()),
                *common,
                "--out",
                str(tmp_path / "o1"),
                "--device",
                no_cuda,
            ],
            ["device"],
        ),
        "width 10^6": (
            [
                "train",
                "--experiment",
                "huge",
                "--spec",
                json.dumps(huge),
                *common,
                "--out",
                str(tmp_path / "o2"),
                "--device",
                "cpu",
            ],
            ["experiments.huge.model", "width"],
        ),
        "180k-parameter dense Hessian": (hessian(final, spec_=big), ["hessian.experiment", "width"]),
        "pickled code in a checkpoint": (hessian(evil), [str(evil), "cannot be loaded safely"]),
        "truncated checkpoint": (hessian(damaged / "final.pt"), [str(damaged / "final.pt"), "sha256 mismatch"]),
        "missing checkpoint": (hessian(tmp_path / "nope.pt"), [str(tmp_path / "nope.pt"), "missing"]),
        "mirror not a url": (
            [
                "download",
                "--dataset",
                "mnist",
                "--mirror",
                "not a url",
                "--manifest",
                str(tmp_path / "d/mnist/manifest.json"),
            ],
            ["data.mirror"],
        ),
        "mnist not in place, offline": (
            [
                "train",
                "--experiment",
                "m",
                "--spec",
                json.dumps({**spec.to_dict(), "dataset": "mnist"}),
                "--data-root",
                str(tmp_path / "nodata"),
                "--out",
                str(tmp_path / "o3"),
                "--device",
                "cpu",
            ],
            ["mnist", str(tmp_path / "nodata")],
        ),
    }

    def one(item):
        label, (args, needles) = item
        proc = subprocess.run(
            [sys.executable, "-m", "transformer_hessian", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            cwd=tmp_path,
            check=False,
        )
        return label, needles, proc

    clean = 0
    with cf.ThreadPoolExecutor(2) as pool:
        for label, needles, proc in pool.map(one, cases.items()):
            err = proc.stderr
            ok = proc.returncode == 1 and _no_traceback(err) and all(n in err for n in needles)
            ok = ok and len([ln for ln in err.splitlines() if "error:" in ln]) == 1
            clean += ok
            assert ok, (label, proc.returncode, err[-2500:])
    assert not (tmp_path / "PWNED").exists()
    _count("expected command-line errors without a traceback", clean, len(cases))


# ============================================================================ kill at random moments


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the process, its group and every descendant (as a power cut or `kill -9` would)."""
    import psutil

    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for p in family:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait()
    psutil.wait_procs(family, timeout=30)


def _make_reproduce(work: Path, env: dict, extra: str = "", **popen) -> subprocess.Popen:
    venv = Path(sys.executable).parent.parent
    args = (
        f"--snakefile {shlex.quote(str(ROOT / 'Snakefile'))} --directory {shlex.quote(str(work))} {extra} "
        f"--configfile {shlex.quote(str(work / 'tiny.yaml'))}"
    )
    cmd = [
        "make",
        "--no-print-directory",
        "-C",
        str(ROOT),
        "-o",
        str(venv / ".installed"),
        f"VENV={venv}",
        f"BIN={venv / 'bin'}",
        "reproduce",
        f"SNAKEMAKE_ARGS={args}",
    ]
    return subprocess.Popen(cmd, env=env, start_new_session=True, text=True, **popen)


def _rule_names(work: Path, env: dict) -> list[str]:
    proc = _snakemake(["-n", "--configfile", str(work / "tiny.yaml")], work, env)
    assert proc.returncode == 0, proc.stderr
    table = re.search(r"Job stats:\n(.*?)\n\s*\n", proc.stdout + proc.stderr, re.S).group(1)
    names = [ln.split()[0] for ln in table.splitlines()[2:] if ln.split() and ln.split()[0] not in ("all", "total")]
    return names


def _started(logtext: str) -> list[str]:
    return re.findall(r"^(?:local)?rule (\w+):", logtext, re.M)


def _finished_count(logtext: str) -> int:
    return len(re.findall(r"^Finished jobid", logtext, re.M))


@pytest.mark.timeout(1800)  # about 2 minutes on 2 idle cores; generous for shared CI machines
@pytest.mark.skipif(shutil.which("make") is None or not Path("/proc").exists(), reason="needs make and /proc")
@pytest.mark.workflow
def test_kill_at_random_moment_of_each_rule_then_make_reproduce(tmp_path, env):
    work = tmp_path / "w"
    work.mkdir()
    _write_config(TINY, work / "tiny.yaml")
    rules = _rule_names(work, env)
    assert {"download", "train", "hessian", "theory", "landscape", "tables", "summary"} <= set(rules)
    rng = random.Random(int(os.environ.get("FAULT_SEED", "8")))
    killed_during: dict[str, bool] = {}
    started: set[str] = set()  # rules that ran in an earlier run (killed or not)
    runs = 0
    t_start = time.monotonic()
    while len(killed_during) < len(rules) and runs < 2 * len(rules):
        runs += 1
        logf = work / f"run{runs}.log"
        # A short rule can start and finish while another one is the target; run it again so
        # that it is killed in a later run rather than never.
        again = sorted(started - set(killed_during))
        extra = ("--forcerun " + " ".join(again)) if again else ""
        with open(logf, "w") as fh:
            proc = _make_reproduce(work, env, extra=extra, stdout=fh, stderr=subprocess.STDOUT)
            target = None
            while proc.poll() is None:
                text = logf.read_text(errors="replace")
                new = [r for r in _started(text) if r in rules and r not in killed_during]
                if new:
                    target = new[0]
                    break
                time.sleep(0.05)
            if target is None:  # finished on its own: every rule already ran
                break
            time.sleep(rng.uniform(0.0, 1.5))
            text = logf.read_text(errors="replace")
            running = len(_started(text)) > _finished_count(text)
            _kill_tree(proc)
        killed_during[target] = running
        started |= set(_started(text)) & set(rules)
        # a 0-byte temp file as a kill inside save_figure would leave it (made by a dead process)
        if target.startswith("fig"):
            from transformer_hessian.util.tempfiles import _host_tag

            (work / "paper/figures").mkdir(parents=True, exist_ok=True)
            (work / f"paper/figures/.fig3.pdf.{_host_tag()}.{_dead_pid()}.abcdefgh.pdf.tmp").touch()
    # ... and the run that must simply finish. Before it, the landscape experiment's final.pt is
    # damaged and a landscape setting changed, so the landscape job must run again and needs it:
    # the run must set final.pt aside, retrain (resuming from the epoch checkpoints, same weights)
    # and redo the landscape. While it runs, a second `make reproduce` must be refused by the
    # guard's lock, and a plain snakemake by snakemake's own lock (which the guard must not remove
    # while its owner lives).
    final_pt = work / "results/landscape_tiny/checkpoints/final.pt"
    before = torch.load(final_pt, weights_only=True)["model"]
    _truncate(final_pt)
    changed = copy.deepcopy(TINY)
    changed["landscape"]["n_bootstrap"] = 30
    _write_config(changed, work / "tiny.yaml")
    final_log = work / "final.log"
    with open(final_log, "w") as fh:
        proc = _make_reproduce(work, env, stdout=fh, stderr=subprocess.STDOUT)
        t0 = time.monotonic()
        while "rule train" not in final_log.read_text() and proc.poll() is None and time.monotonic() - t0 < 600:
            time.sleep(0.05)
        second = _make_reproduce(work, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        plain = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "snakemake",
                "--snakefile",
                str(ROOT / "Snakefile"),
                "--directory",
                str(work),
                "--cores",
                "1",
                "--configfile",
                str(work / "tiny.yaml"),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        out2 = second.communicate(timeout=300)[0]
        out3 = plain.communicate(timeout=300)[0]
        rc = proc.wait(timeout=900)
    text = final_log.read_text(errors="replace")
    assert rc == 0, text[-4000:]
    assert _no_traceback(text)
    _count("rules killed at a random moment, then `make reproduce` finished", len(killed_during), len(rules))
    _count("kills that landed while a job was running", sum(killed_during.values()), len(killed_during))
    print(f"kill chain: {runs} killed runs + 1 final in {time.monotonic() - t_start:.0f} s; {killed_during}")
    assert set(killed_during) == set(rules)
    s = json.loads((work / "paper/summary.json").read_text())
    assert s["theory"]["trained"]["max_rel_error"] <= 1e-8
    for fig in ("fig3", "fig4", "fig5", "fig6"):
        assert (work / f"paper/figures/{fig}.pdf").read_bytes().startswith(b"%PDF")
    leftovers = [p for d in ("results", "paper") for p in (work / d).rglob(".*") if p.is_file()]
    assert not leftovers, leftovers

    assert "final.pt is damaged" in text
    after = torch.load(final_pt, weights_only=True)["model"]
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert (
        json.loads((work / "results/landscape_tiny/landscape/landscape.json").read_text())["slope"]
        == s["landscape"]["slope"]
    )
    _count("damaged final checkpoint recovered by `make reproduce`", 1, 1)
    assert second.returncode != 0 and "another guarded run" in out2, out2[-2000:]
    assert plain.returncode != 0 and "cannot be locked" in out3, out3[-2000:]
    _count("concurrent runs refused while `make reproduce` runs (make reproduce, plain snakemake)", 2, 2)
