"""The SLURM profile and the resource overrides, checked without a cluster (dry runs).

The run on a real cluster is tests/test_slurm.py.
"""

import copy
import re

import pytest
import yaml
from conftest import snakemake_dry_run, unfold_terminal
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_hessian.config.validate import ConfigError, coerce_cli_strings, load_schema, validate_config

GPU_RULES = {"train", "hessian", "theory", "landscape"}


def _dry_run(root, workdir, env, *args):
    proc = snakemake_dry_run(root, workdir, env, *args, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def _job_resources(out):
    """[(rule, {resource: value})] for every job of a dry run's listing."""
    jobs, rule = [], None
    for line in unfold_terminal(out).splitlines():
        m = re.match(r"^(?:local)?rule (\w+):$", line)
        if m:
            rule = m.group(1)
        m = re.match(r"^\s+resources: (.*)$", line)
        if m and rule:
            jobs.append((rule, dict(kv.split("=", 1) for kv in m.group(1).split(", "))))
            rule = None
    return jobs


@pytest.fixture(scope="module")
def paper(root):
    return yaml.safe_load((root / "config/paper.yaml").read_text())


@pytest.mark.slow  # about 10 s
def test_slurm_profile_dry_run_builds_the_default_dag(root, tmp_path, env):
    out = _dry_run(
        root,
        tmp_path,
        env,
        "--profile",
        str(root / "workflow/profiles/slurm"),
        "--configfile",
        str(root / "config/config.yaml"),
    )
    jobs = _job_resources(out)
    rules = {r for r, _ in jobs}
    assert {"download", "train", "hessian", "theory", "landscape", "tables", "summary"} <= rules
    for rule, res in jobs:
        if rule in GPU_RULES:
            # the embedded default asks for no GPU; cpus_per_task follows the rule's threads
            assert res["gpu"] == "0" and int(res["cpus_per_task"]) >= 1, (rule, res)


@pytest.mark.slow  # about 17 s
def test_paper_config_asks_every_gpu_rule_for_a_gpu_and_the_override_removes_it(root, tmp_path, env, paper):
    profile = ("--profile", str(root / "workflow/profiles/slurm"), "--configfile", str(root / "config/paper.yaml"))
    asked = _job_resources(_dry_run(root, tmp_path, env, *profile))
    gpu_jobs = [(r, res) for r, res in asked if r in GPU_RULES]
    # train x2, hessian x2, theory x2, landscape x1 in the paper's DAG
    assert {r for r, _ in gpu_jobs} == GPU_RULES and len(gpu_jobs) == 7
    assert all(res["gpu"] == str(paper["resources"]["gpu"]) == "1" for _, res in gpu_jobs)
    # The documented override for GPU-less clusters: only gpu changes, mem_mb/runtime are kept.
    off = _job_resources(_dry_run(root, tmp_path, env, *profile, "--config", "resources={gpu: 0}"))
    off_gpu = [(r, res) for r, res in off if r in GPU_RULES]
    assert len(off_gpu) == 7
    for _, res in off_gpu:
        assert res["gpu"] == "0"
        assert res["mem_mb"] == str(paper["resources"]["mem_mb"]) and res["runtime"] == str(
            paper["resources"]["runtime"]
        )


@pytest.mark.slow  # about 7 s
def test_dotted_config_key_is_refused_by_snakemake_itself(root, tmp_path, env):
    # Why the README documents the nested form: snakemake rejects `resources.gpu=0` before the
    # Snakefile is read.
    proc = snakemake_dry_run(root, tmp_path, env, "--config", "resources.gpu=0", timeout=120)
    assert proc.returncode != 0
    assert "valid identifier" in proc.stdout + proc.stderr


@pytest.mark.slow  # about 50 s
@settings(max_examples=40, deadline=None)
@given(
    gpu=st.integers(0, 64),
    mem=st.integers(100, 10**7),
    runtime=st.integers(1, 43200),
    ema=st.floats(0, 1, exclude_max=True),
    seed=st.integers(0, 2**31),
)
def test_cli_strings_become_the_schema_types(gpu, mem, runtime, ema, seed):
    # what snakemake's --config hands over for resources={gpu: .., ...}: every scalar a string
    schema = load_schema()
    base = yaml.safe_load(
        "experiments: {e: {dataset: digits, model: {patch_size: 2, width: 4, depth: 1, d_k: 2, d_ff: 4},"
        " train: {epochs: 1, batch_size: 8, lr: 0.001}}}\n"
        "hessian: {experiment: e}\nlandscape: {experiment: e}\n"
    )
    cfg = copy.deepcopy(base)
    cfg["resources"] = {"gpu": str(gpu), "mem_mb": str(mem), "runtime": str(runtime)}
    cfg["landscape"].update({"ema_factor": repr(ema), "seed": str(seed)})
    cfg["data"] = {"mirror": "null"}
    cfg["experiments"]["e"]["model"]["ffn_bias"] = "true"
    cfg["experiments"]["e"]["train"]["max_train"] = "~"
    overrides = {
        "resources": dict(cfg["resources"]),
        "landscape": {"ema_factor": repr(ema), "seed": str(seed)},
        "data": {"mirror": "null"},
        "experiments": {"e": {"model": {"ffn_bias": "true"}, "train": {"max_train": "~"}}},
    }
    # in a config file the same text is a string, and a string is no integer
    with pytest.raises(ConfigError, match="resources.gpu"):
        validate_config(copy.deepcopy(cfg))
    out = validate_config(cfg, cli_overrides=overrides)
    assert out["resources"] == {"gpu": gpu, "mem_mb": mem, "runtime": runtime}
    assert all(type(v) is int for v in out["resources"].values())
    assert out["landscape"]["ema_factor"] == ema and out["landscape"]["seed"] == seed
    assert out["data"]["mirror"] is None and out["experiments"]["e"]["model"]["ffn_bias"] is True
    assert out["experiments"]["e"]["train"]["max_train"] is None
    # strings stay strings where the schema allows a string (a mirror URL, an experiment name)
    kept = coerce_cli_strings({"data": {"mirror": "0"}, "hessian": {"experiment": "12"}}, schema)
    assert kept == {"data": {"mirror": "0"}, "hessian": {"experiment": "12"}}


@pytest.mark.parametrize("key,text", [("gpu", "one"), ("gpu", "1.5"), ("mem_mb", "4e3"), ("runtime", "")])
def test_a_string_that_is_no_integer_is_still_reported(root, key, text):
    cfg = yaml.safe_load((root / "config/config.yaml").read_text())
    cfg["resources"][key] = text
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, cli_overrides={"resources": {key: text}})
    assert f"resources.{key}" in str(err.value)
