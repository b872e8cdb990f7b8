"""The private one-node SLURM cluster of the integration tests, and the one tiny workflow run they
share: not a test module. tests/conftest.py turns both into session fixtures (``slurm_cluster``,
``tiny_run``).

.ci/slurm_cluster.sh installs Debian's slurm-wlm and munge (apt-get) where they are missing and
starts the cluster on 127.0.0.1 (its own slurm.conf, munge key and ports under STATE_DIR; an
existing /etc/slurm/slurm.conf is never touched); the daemons are stopped by PID at the end, also
when a test fails. Where that cannot work (not root, no apt-get, no way to the Debian mirror,
daemons that do not start) the cluster is None with the reason, and the tiny run is a local one.

The tiny workflow (tiny_workflow.TINY) runs once per session: through
``snakemake --profile workflow/profiles/slurm`` on the cluster when there is one (the config asks
for one GPU per training / curvature job, as config/paper.yaml does, and the run switches it off
with the documented ``--config 'resources={gpu: 0}'``), else with ``snakemake --cores 2``. Every
test of a finished run reads that one run (tests/test_workflow.py collects the output checks of
tiny_workflow.RUN_CHECKS on it; tests/test_slurm.py checks that its jobs ran on SLURM).
"""

from __future__ import annotations

import atexit
import copy
import fcntl
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from tiny_workflow import TINY

STATE_DIR = Path("/var/tmp/transformer-hessian-slurm-ci")
LOCK = Path("/var/tmp/transformer-hessian-slurm-ci.lock")
SKIP = 77
# Bounds, not expectations: from nothing (apt-get install included) the SLURM run takes about 5-8
# min on a loaded 2-core machine, the local run 1-2 min.
WORKFLOW_TIMEOUT_S = 1200
TINY_SLURM = copy.deepcopy(TINY)
TINY_SLURM["resources"] = {"gpu": 1, "mem_mb": 2000, "runtime": 15}
# the override of the SLURM run (this cluster has no GPUs: without it sbatch refuses those jobs)
SLURM_CONFIG_ARGS = ["--config", "resources={gpu: 0}"]


@dataclass
class Cluster:
    """A running cluster (``env``: the environment with SLURM_CONF set) or the reason there is none."""

    env: dict | None = None
    reason: str = ""
    up_s: float = 0.0
    _down: list = field(default_factory=list)

    def stop(self) -> None:
        for fn in self._down:
            fn()
        self._down.clear()


def _script(root: Path, action: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(root / ".ci/slurm_cluster.sh"), action, str(STATE_DIR)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_cluster(root: Path, env: dict) -> Cluster:
    """Start the private cluster (one per machine at a time: a file lock); :meth:`Cluster.stop`
    stops it, as does pytest's exit on SIGTERM (e.g. a CI timeout)."""
    if sys.platform != "linux":
        return Cluster(reason=f"SLURM integration: needs Linux (this is {sys.platform})")
    if os.geteuid() != 0:
        return Cluster(
            reason="SLURM integration: needs root to install and start slurm-wlm and munge (run `make test-slurm` as root)"
        )
    lock = open(LOCK, "w")
    deadline = time.monotonic() + 900
    while True:  # fixed ports
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                lock.close()
                return Cluster(reason=f"SLURM integration: another run has held {LOCK} for 15 min")
            time.sleep(5)
    stopped = []
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    def down():
        if not stopped:
            stopped.append(True)
            proc = _script(root, "down", 120)
            sys.stderr.write(proc.stderr)
            atexit.unregister(down)
            signal.signal(signal.SIGTERM, previous)
            lock.close()

    atexit.register(down)
    t0 = time.monotonic()
    try:
        proc = _script(root, "up", 600)
    except BaseException:
        down()
        raise
    if proc.returncode == SKIP:
        down()
        reason = [ln for ln in proc.stderr.splitlines() if ln.startswith("SKIP:")] or [proc.stderr[-500:]]
        sys.stderr.write(proc.stderr[-3000:])
        return Cluster(reason=f"SLURM integration: {reason[-1].removeprefix('SKIP: ')}")
    if proc.returncode != 0:
        down()
        raise AssertionError(proc.stdout[-2000:] + proc.stderr[-4000:])
    return Cluster(env=dict(env, SLURM_CONF=str(STATE_DIR / "slurm.conf")), up_s=time.monotonic() - t0, _down=[down])


@dataclass
class TinyRun:
    """The finished tiny run: its folder, whether it ran on SLURM, and the arguments that a later
    snakemake call in that folder needs to see the same config (``--configfile``, ``--config``)."""

    work: Path
    on_slurm: bool
    config_args: list[str]
    seconds: float


def run_tiny_workflow(root: Path, env: dict, work: Path, cluster: Cluster) -> TinyRun:
    """Run the tiny workflow in ``work``: on ``cluster`` when it is up, else locally. Writes the
    output to ``run_output.txt`` (stdout and stderr) and ``run_stdout.txt`` (the recap check)."""
    on_slurm = cluster.env is not None
    (work / "tiny.yaml").write_text(yaml.safe_dump(TINY_SLURM if on_slurm else TINY))
    config_args = ["--configfile", str(work / "tiny.yaml"), *(SLURM_CONFIG_ARGS if on_slurm else [])]
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(root / "Snakefile"), "--directory", str(work)]
    if on_slurm:
        cmd += [
            *config_args,
            "--profile",
            str(root / "workflow/profiles/slurm"),
            "--slurm-init-seconds-before-status-checks",
            "5",
            "--slurm-keep-successful-logs",
            # the private cluster's node has os.cpu_count() CPUs; train, dynamics and spectrum ask
            # for 4 threads (cpus_per_task), which would stay pending (PartitionConfig) on 2
            "--max-threads",
            str(os.cpu_count() or 1),
        ]
    else:
        cmd += [*config_args, "--cores", "2"]
    t0 = time.monotonic()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=cluster.env if on_slurm else env, timeout=WORKFLOW_TIMEOUT_S
    )
    (work / "run_output.txt").write_text(proc.stdout + proc.stderr)
    (work / "run_stdout.txt").write_text(proc.stdout)  # the recap check reads stdout alone
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    seconds = time.monotonic() - t0
    print(f"\ntiny workflow {'on SLURM' if on_slurm else 'locally'}: {seconds:.1f} s")
    return TinyRun(work, on_slurm, config_args, seconds)
