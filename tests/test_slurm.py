"""Integration on a real SLURM cluster: the tiny config of test_workflow.py (tiny_workflow.TINY) through
`snakemake --profile workflow/profiles/slurm`.

.ci/slurm_cluster.sh installs Debian's slurm-wlm and munge (apt-get) where they are missing and
starts a private one-node cluster on 127.0.0.1 (its own slurm.conf, munge key and ports under
STATE_DIR; /etc/slurm is never touched); the daemons are stopped by PID at the end, also when a
test fails. Skips, with the reason, where that cannot work: not root, no apt-get, no way to the
Debian mirror, daemons that do not start.

The config asks for one GPU per training / curvature job, as config/paper.yaml does, and the run
switches it off with the documented `--config 'resources={gpu: 0}'` (this cluster has no GPUs:
without the override sbatch refuses those jobs).

The output checks are those test_workflow.py runs (tiny_workflow.RUN_CHECKS): they are collected
here a second time and receive this module's `run`, the SLURM run.
"""

import atexit
import collections
import copy
import fcntl
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import snakemake_dry_run
from tiny_workflow import RUN_CHECKS, TINY

STATE_DIR = Path("/var/tmp/transformer-hessian-slurm-ci")
LOCK = Path("/var/tmp/transformer-hessian-slurm-ci.lock")
SKIP = 77
# Rules that run on the submit host (localrules, or rules without a shell command).
LOCAL_RULES = {"download", "all"}
# Bounds, not expectations: from nothing (apt-get install included) the run takes about 5-8 min
# on a loaded 2-core machine; the first test's limit also covers the cluster and workflow setup.
pytestmark = [pytest.mark.timeout(1800), pytest.mark.workflow]
WORKFLOW_TIMEOUT_S = 1200
TINY_SLURM = copy.deepcopy(TINY)
TINY_SLURM["resources"] = {"gpu": 1, "mem_mb": 2000, "runtime": 15}


def _script(root, action, timeout):
    return subprocess.run(
        ["bash", str(root / ".ci/slurm_cluster.sh"), action, str(STATE_DIR)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def cluster(root, env):
    """Environment (SLURM_CONF set) of a running private one-node cluster; stopped afterwards."""
    if sys.platform != "linux":
        pytest.skip(f"SLURM integration: needs Linux (this is {sys.platform})")
    if os.geteuid() != 0:
        pytest.skip(
            "SLURM integration: needs root to install and start slurm-wlm and munge (run `make test-slurm` as root)"
        )
    lock = open(LOCK, "w")
    deadline = time.monotonic() + 900
    while True:  # one cluster per machine at a time (fixed ports)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                pytest.skip(f"SLURM integration: another run has held {LOCK} for 15 min")
            time.sleep(5)

    stopped = []

    def down():
        if not stopped:
            stopped.append(True)
            proc = _script(root, "down", 120)
            sys.stderr.write(proc.stderr)

    # Also stop the daemons when pytest exits on SIGTERM (e.g. a CI timeout) rather than normally.
    atexit.register(down)
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        t0 = time.monotonic()
        proc = _script(root, "up", 600)
        up_s = time.monotonic() - t0
        if proc.returncode == SKIP:
            reason = [ln for ln in proc.stderr.splitlines() if ln.startswith("SKIP:")] or [proc.stderr[-500:]]
            sys.stderr.write(proc.stderr[-3000:])
            pytest.skip(f"SLURM integration: {reason[-1].removeprefix('SKIP: ')}")
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        print(f"\nSLURM cluster up (install if needed + daemons) in {up_s:.1f} s")
        cenv = dict(env, SLURM_CONF=str(STATE_DIR / "slurm.conf"))
        yield cenv
    finally:
        down()
        atexit.unregister(down)
        signal.signal(signal.SIGTERM, previous)
        lock.close()


@pytest.fixture(scope="module")
def run(root, cluster, tmp_path_factory):
    """Folder of the tiny workflow, run through the slurm profile on the private cluster."""
    work = tmp_path_factory.mktemp("slurm_workflow")
    (work / "tiny.yaml").write_text(yaml.safe_dump(TINY_SLURM))
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--snakefile",
            str(root / "Snakefile"),
            "--directory",
            str(work),
            "--configfile",
            str(work / "tiny.yaml"),
            "--profile",
            str(root / "workflow/profiles/slurm"),
            "--config",
            "resources={gpu: 0}",
            "--slurm-init-seconds-before-status-checks",
            "5",
            "--slurm-keep-successful-logs",
            # the private cluster's node has os.cpu_count() CPUs; train, dynamics and spectrum ask
            # for 4 threads (cpus_per_task), which would stay pending (PartitionConfig) on 2
            "--max-threads",
            str(os.cpu_count() or 1),
        ],
        capture_output=True,
        text=True,
        env=cluster,
        timeout=WORKFLOW_TIMEOUT_S,
    )
    # the same file as test_workflow.py's `run` writes: its reused tests read it
    (work / "run_output.txt").write_text(proc.stdout + proc.stderr)
    (work / "run_stdout.txt").write_text(proc.stdout)  # the recap check reads stdout alone
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    print(f"\nworkflow on SLURM: {time.monotonic() - t0:.1f} s")
    return work


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
        "--config",
        "resources={gpu: 0}",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Nothing to be done" in proc.stdout + proc.stderr


# test_workflow.py's checks of the outputs (tiny_workflow.RUN_CHECKS), run on the SLURM run's folder.
# Not among them: test_workflow.py's rerun/report test, which runs snakemake locally without the gpu
# override, which changes the config hash (a summary parameter): test_rerun_on_slurm_does_nothing
# above is its counterpart; and the Chromium test, which reads the report that the rerun/report test
# writes, so without it here it could only skip (it did, in every `make test`, with "the report was
# not built"); both run in test_workflow.py.
globals().update(RUN_CHECKS)
