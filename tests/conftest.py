import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw their inputs from a fixed seed per test by default ("repeatable"), so that
# `make test` gives the same verdict on the same commit here and in CI: a draw that exposes a bug
# fails every run, not one run in ten. HYPOTHESIS_PROFILE=explore (`make test-explore`) draws
# fresh inputs on every run, to search further; a failure it finds is printed with the
# @reproduce_failure line that replays it.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

ROOT = Path(__file__).resolve().parents[1]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Put the tests that read the session's tiny run last (in their order): the run starts at
    collection (:class:`_EarlyTinyRun`) and much of it is waiting on SLURM's status checks, which the
    tests before its first reader fill. Under xdist, order the modules for the workers (:func:`_order`)."""
    if _WORKER is not None:
        items.sort(key=_order)  # under xdist: every worker sorts alike, or xdist stops the run
    elif _tiny_run_early():
        items.sort(key=_reads_the_tiny_run)  # stable: False (the others) first


#: this process's pytest-xdist worker id (``make test`` runs two), None without xdist
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER is not None:  # no more torch threads, all workers together, than the cores there are
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))


#: the modules whose tests need the private SLURM cluster or the session's tiny run: one worker runs
#: them all (the cluster holds fixed ports, one per machine; the tiny run is one per session)
SLURM_MODULES = ("tests/test_slurm.py", "tests/test_workflow.py")
#: the worker that runs :data:`SLURM_MODULES`: it starts the tiny run in the background when it has
#: collected (:class:`_EarlyTinyRun`), runs other modules while the run waits on SLURM (most of its
#: 8 minutes under make test: one core's worth of tests is free to run beside it), and gets the
#: SLURM unit last
SLURM_WORKER = "gw0"
#: the modules that take minutes: handed out first (``--no-loadscope-reorder`` keeps this order), so
#: that no worker starts one at the end
LONG_MODULES = (
    "tests/pipeline/test_errors_and_interrupts.py", "tests/test_shell_quoting.py", "tests/config/test_config_faults.py",
)  # fmt: skip


def pytest_itemcollected(item):
    """A test that needs the SLURM cluster must be in :data:`SLURM_MODULES` (under xdist it would
    otherwise start a second cluster in another worker, and wait on the first's lock)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is not None and "slurm_cluster" in info.names_closure and _module(item.nodeid) not in SLURM_MODULES:
        raise pytest.UsageError(f"{item.nodeid} needs the SLURM cluster: add its module to SLURM_MODULES (conftest)")


def _module(nodeid: str) -> str:
    return "tests/" + nodeid.split("::")[0].removeprefix("tests/")


@pytest.hookimpl(optionalhook=True)  # pytest -p no:xdist has no such hook
def pytest_xdist_make_scheduler(config, log):
    """``make test``'s two workers: whole modules to a worker (their module fixtures built once),
    the modules of :data:`SLURM_MODULES` as one unit."""
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            module = _module(nodeid)
            return "slurm" if module in SLURM_MODULES else module

        def _assign_work_unit(self, node):
            """The SLURM unit (last in the queue, :func:`_order`) only to :data:`SLURM_WORKER`, once
            the others are handed out; a worker with nothing left then stops."""
            if not self.workqueue:  # handed out already (the initial round of a one-unit session)
                return None
            if next(iter(self.workqueue)) != "slurm":
                return super()._assign_work_unit(node)
            if node.gateway.id != SLURM_WORKER and any(n.gateway.id == SLURM_WORKER for n in self.nodes):
                return None
            super()._assign_work_unit(node)
            for other in self.nodes:  # the queue is empty now: idle workers get no more events
                if other is not node and not other.shutting_down and not self._pending_of(self.assigned_work[other]):
                    other.shutdown()
            return None

    return Scheduling(config, log)


def _order(item) -> int:
    module = _module(item.nodeid)
    return 2 if module in SLURM_MODULES else 0 if module in LONG_MODULES else 1


def _tiny_run_early() -> bool:
    """Start the tiny run at collection: without xdist, or in the worker that gets the SLURM unit
    (:data:`SLURM_WORKER`); ``TH_TINY_RUN_EARLY=0``: when the first test asks for it."""
    return os.environ.get("TH_TINY_RUN_EARLY", "1") != "0" and _WORKER in (None, SLURM_WORKER)


BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def _subprocess_env() -> dict:
    e = dict(os.environ)
    e["PATH"] = f"{BIN}{os.pathsep}{e.get('PATH', '')}"
    e.setdefault("MPLBACKEND", "Agg")
    return e


@pytest.fixture(scope="session")
def env() -> dict:
    """Environment for subprocesses: the venv's commands first on PATH."""
    return _subprocess_env()


class _EarlyTinyRun:
    """The session's tiny workflow run, started in a background thread as soon as collection shows
    that a test will read it, so that its jobs (and, on SLURM, the waits between status checks,
    about half of its 4-5 min) overlap the tests that come before the first reader; the fixture
    ``tiny_run`` waits for it. The cluster is started here, in the main thread (its SIGTERM handler
    needs it). ``TH_TINY_RUN_EARLY=0`` starts both when the first test asks, as before."""

    cluster = None
    thread = None
    result = None
    error: BaseException | None = None

    @classmethod
    def start(cls, config) -> None:
        import threading

        from slurm_cluster import run_tiny_workflow, start_cluster

        env = _subprocess_env()
        cls.cluster = start_cluster(ROOT, env)
        work = config._tmp_path_factory.mktemp("workflow")

        def run():
            try:
                cls.result = run_tiny_workflow(ROOT, env, work, cls.cluster)
            except BaseException as exc:  # re-raised in the fixture, in the test that reads the run
                cls.error = exc

        cls.thread = threading.Thread(target=run, name="tiny-workflow", daemon=True)
        cls.thread.start()

    @classmethod
    def wait(cls):
        cls.thread.join()
        if cls.error is not None:
            raise cls.error
        return cls.result


def pytest_collection_finish(session):
    """Start the tiny run early (:class:`_EarlyTinyRun`) when a selected test reads it."""
    if not _tiny_run_early() or session.config.option.collectonly:
        return
    if any(_reads_the_tiny_run(item) for item in session.items):
        _EarlyTinyRun.start(session.config)


def _reads_the_tiny_run(item) -> bool:
    """Whether ``item`` uses this file's ``tiny_run`` (some test modules define their own of that name)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.get("tiny_run") if info is not None else None
    return bool(defs) and getattr(defs[-1].func, "__module__", None) == __name__


def tiny_spec(**train):
    """A tiny digits experiment as the typed section (settings.Experiment); ``train`` keys override."""
    from transformer_hessian.config.settings import Experiment

    spec = {
        "dataset": "digits",
        "model": {"patch_size": 4, "width": 6, "depth": 1, "d_k": 4, "d_ff": 10, "ffn_bias": False, "ln_eps": 1e-5},
        "train": {
            "epochs": 4,
            "batch_size": 32,
            "lr": 3e-3,
            "weight_decay": 0.01,
            "seed": 0,
            "val_fraction": 0.2,
            "max_train": 160,
            "max_val": 60,
        },
    }
    spec["train"].update(train)
    return Experiment.with_defaults(spec)


def train_section(**keys):
    """A typed ``train`` section (settings.Train): ``keys`` over epochs 1, batch_size 32, lr 3e-3;
    every other key from the schema's defaults."""
    from transformer_hessian.config.settings import Train

    return Train.with_defaults({"epochs": 1, "batch_size": 32, "lr": 3e-3, **keys})


def tiny_vit(width, d_k, d_ff, depth, bias, seed):
    """A seeded float64 ViT on 4x4 one-channel images (patch 2, 4 tokens, 3 classes)."""
    import torch

    from transformer_hessian.core.model import ModelConfig, ViT

    torch.manual_seed(seed)
    cfg = ModelConfig(
        image_size=4,
        channels=1,
        num_classes=3,
        patch_size=2,
        width=width,
        depth=depth,
        d_k=d_k,
        d_ff=d_ff,
        ffn_bias=bias,
    )
    return ViT(cfg).double()


def func_hessian(model, images, labels):
    """Reference five-group Hessian of the mean cross-entropy of a one-block ``model``:
    ``torch.func.hessian`` over [W_Q, W_K, W_V, W_1, W_2] of block 0, as one dense matrix.

    (No LayerNorm weight is differentiated, so torch 2.14.1's layer_norm mixed-derivative bug
    does not apply.)"""
    import torch
    from torch.func import functional_call, hessian

    from transformer_hessian import GROUPS

    names = [f"blocks.0.{n}" for n in GROUPS]
    W = {n: model.get_parameter(n).detach() for n in names}

    def loss(w):
        return torch.nn.functional.cross_entropy(functional_call(model, w, (images,)), labels)

    H = hessian(loss)(W)
    return torch.cat([torch.cat([H[a][b].reshape(W[a].numel(), W[b].numel()) for b in names], 1) for a in names], 0)


def unfold_terminal(text: str) -> str:
    """snakemake's output with the lines that transformer_hessian.pipeline.terminal folded joined
    again: a shell command's `` \\`` continuations, and a job's file list (``    input: a, b,`` then
    lines indented to the first item) back on one line each, as snakemake printed them."""
    import re

    text = re.sub(r" \\\n\s+", " ", text)
    out: list[str] = []
    cont = None  # the indentation of a folded item's continuation lines
    for line in text.split("\n"):
        lead = len(line) - len(line.lstrip(" "))
        if cont is not None and line.strip() and lead == cont:
            out[-1] += " " + line.strip()
            continue
        m = re.match(r"^(\s*)(\w[\w ]*: )", line)
        cont = len(m.group(1)) + len(m.group(2)) if m else None
        out.append(line)
    return "\n".join(out)


def snakemake_dry_run(root, workdir, env, *args, timeout=180):
    """``snakemake -n`` of this repository's Snakefile in ``workdir`` (completed process, output captured)."""
    import subprocess
    import sys

    return subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            "--snakefile",
            str(root / "Snakefile"),
            "--directory",
            str(workdir),
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def slurm_cluster(root, env):
    """The private one-node SLURM cluster (tests/slurm_cluster.py), or the reason there is none;
    stopped at the end of the session."""
    from slurm_cluster import start_cluster

    cluster = _EarlyTinyRun.cluster or start_cluster(root, env)
    yield cluster
    if _EarlyTinyRun.thread is not None:
        _EarlyTinyRun.thread.join()  # never stop the cluster under a running workflow
    cluster.stop()


@pytest.fixture(scope="session")
def tiny_run(root, env, slurm_cluster, tmp_path_factory):
    """The one tiny workflow run of the session (tests/slurm_cluster.py): on the SLURM cluster when
    it is up, else local. Every test of a finished run reads it; none runs a second one. Started
    in the background after collection (:class:`_EarlyTinyRun`) unless ``TH_TINY_RUN_EARLY=0``."""
    from slurm_cluster import run_tiny_workflow

    if _EarlyTinyRun.thread is not None:
        return _EarlyTinyRun.wait()
    return run_tiny_workflow(root, env, tmp_path_factory.mktemp("workflow"), slurm_cluster)


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    """A 4-epoch tiny run, uninterrupted: the weights every recovery must reproduce bit for bit
    (tests/train/test_checkpoint_recovery.py; tests/pipeline/test_errors_and_interrupts.py damages
    copies of its checkpoints). Module scope: one run per test module that asks for it."""
    from transformer_hessian.train import train

    root = tmp_path_factory.mktemp("ref")
    spec = tiny_spec(epochs=4)
    train("tiny", spec, root / "data", root / "run", device="cpu")
    return root, spec
