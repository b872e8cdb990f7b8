"""Integration on a real SLURM cluster: the session's tiny run (tests/slurm_cluster.py), which goes
through `snakemake --profile workflow/profiles/slurm` on a private one-node cluster where one can be
started (root, apt-get, the Debian mirror); here, that its jobs ran on SLURM and completed, that the
GPU request it overrides is refused, and that a rerun through the profile does nothing.

The config asks for one GPU per training / curvature job, as config/paper.yaml does, and the run
switches it off with the documented `--config 'resources={gpu: 0}'` (this cluster has no GPUs:
without the override sbatch refuses those jobs).

The output checks (tiny_workflow.RUN_CHECKS) are collected once, in test_workflow.py, on the same run:
there is no second workflow run.
"""

import collections
import re
import subprocess

import pytest
from conftest import snakemake_dry_run
from slurm_cluster import SLURM_CONFIG_ARGS, STATE_DIR

# Rules that run on the submit host (localrules, or rules without a shell command).
LOCAL_RULES = {"download", "all"}
# Bounds, not expectations: from nothing (apt-get install included) the run takes about 5-8 min
# on a loaded 2-core machine; the first test's limit also covers the cluster and workflow setup.
pytestmark = [pytest.mark.timeout(1800), pytest.mark.workflow]


@pytest.fixture(scope="module")
def cluster(slurm_cluster):
    """Environment (SLURM_CONF set) of the running private one-node cluster; skip without one."""
    if slurm_cluster.env is None:
        pytest.skip(slurm_cluster.reason)
    print(f"\nSLURM cluster up (install if needed + daemons) in {slurm_cluster.up_s:.1f} s")
    return slurm_cluster.env


@pytest.fixture(scope="module")
def run(cluster, tiny_run):
    """Folder of the tiny workflow, run through the slurm profile on the private cluster."""
    assert tiny_run.on_slurm, "the cluster is up but the session's tiny run did not use it"
    return tiny_run.work


@pytest.fixture(scope="module")
def slurm_jobs(run):
    """{slurm job id: (rule, state)} of the run: rules from the plugin's per-job logs, states from
    the cluster's job-completion log."""
    rules = {}
    for log in (run / ".snakemake/slurm_logs").glob("rule_*/**/*.log"):
        rules[log.stem] = log.relative_to(run / ".snakemake/slurm_logs").parts[0].removeprefix("rule_")
    states = {}
    for line in (STATE_DIR / "log/jobcomp.log").read_text().splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if fields.get("WorkDir") == str(run):
            states[fields["JobId"]] = fields["JobState"]
    return {jid: (rules.get(jid), states.get(jid)) for jid in rules.keys() | states.keys()}


def test_every_job_ran_on_slurm_and_completed(run, slurm_jobs):
    out = (run / "run_output.txt").read_text()
    # every job snakemake started, by rule: "rule X:" is submitted, "localrule X:" runs here
    remote = collections.Counter(re.findall(r"^rule (\w+):$", out, flags=re.M))
    local = collections.Counter(re.findall(r"^localrule (\w+):$", out, flags=re.M))
    on_slurm = collections.Counter(rule for rule, _ in slurm_jobs.values())
    states = collections.Counter(state for _, state in slurm_jobs.values())
    print(f"\n{len(slurm_jobs)} SLURM jobs: {dict(on_slurm)}; states {dict(states)}; local: {dict(local)}")
    assert {"train", "hessian", "theory", "landscape", "tables", "summary"} <= remote.keys()
    assert on_slurm == remote, (on_slurm, remote)
    assert states == {"COMPLETED": sum(remote.values())}, slurm_jobs
    # download is a local rule (compute nodes often have no internet); nothing local went to SLURM
    assert local["download"] == 1 and set(local) <= LOCAL_RULES and not (set(local) & set(on_slurm))


def test_gpu_request_is_refused_on_this_gpu_less_cluster(cluster, tmp_path):
    # Why the run above needs `--config 'resources={gpu: 0}'`: the request it removes fails here.
    proc = subprocess.run(
        ["sbatch", "--gpus=1", "--wrap", "true"], capture_output=True, text=True, env=cluster, cwd=tmp_path, timeout=60
    )
    assert proc.returncode != 0
    assert "Invalid generic resource" in proc.stderr


def test_rerun_on_slurm_does_nothing(run, root, cluster):
    proc = snakemake_dry_run(
        root,
        run,
        cluster,
        "--configfile",
        str(run / "tiny.yaml"),
        "--profile",
        str(root / "workflow/profiles/slurm"),
        *SLURM_CONFIG_ARGS,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Nothing to be done" in proc.stdout + proc.stderr
