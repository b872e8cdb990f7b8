"""Errors and interruptions of the pipeline (fault injection):

* expected errors of the command line: one message, no traceback;
* a full disk (ENOSPC): one line, and the next run recovers;
* a kill (SIGKILL of the whole process group) at a random moment of each rule of the tiny workflow, each
  followed by ``make reproduce``, which must finish without any flag typed by hand, plus the refusal of a
  second concurrent run.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import copy
import errno
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import tiny_spec
from fault_helpers import _count, _dead_pid, _Evil, _no_traceback, _snakemake, _truncate, _write_config
from tiny_workflow import TINY

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # about 36 s
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


def _running(logtext: str) -> set[str]:
    """The rules with a job that started and has not finished (what a kill now lands in)."""
    started = collections.Counter(_started(logtext))
    finished = collections.Counter(re.findall(r"^Finished jobid: \d+ \(Rule: (\w+)\)", logtext, re.M))
    return {rule for rule, n in started.items() if n > finished[rule]}


@pytest.mark.timeout(1800)  # about 4 minutes on 2 idle cores; generous for shared CI machines
@pytest.mark.skipif(shutil.which("make") is None or not Path("/proc").exists(), reason="needs make and /proc")
@pytest.mark.workflow
@pytest.mark.kill_chain  # its own stage of .ci/run (`make test-kill-chain`), after `make test`
def test_kill_at_random_moment_of_each_rule_then_make_reproduce(tmp_path, env):
    work = tmp_path / "w"
    work.mkdir()
    # Without the language study: its eight rules would add a killed run each (about 3 minutes, more
    # than make test's budget allows); they write through the same atomic writers, and its training
    # resumes from epoch checkpoints like the ViT's (tests/train/test_lm.py).
    tiny = {**TINY, "lm": {**TINY["lm"], "enabled": False}}
    _write_config(tiny, work / "tiny.yaml")
    rules = _rule_names(work, env)
    assert {"download", "train", "hessian", "theory", "landscape", "tables", "summary"} <= set(rules)
    rng = random.Random(int(os.environ.get("FAULT_SEED", "8")))
    # Every killed run costs a snakemake start and the redone work of the rules before its target,
    # about 20 s a rule on two cores. The rules whose jobs leave state a later run reads (the
    # download, the trainings and their checkpoints, the Hessians, the summary) are killed on every
    # run of the test; of the others, which all write through the same atomic writers, half are
    # drawn by the seed, and of the figure rules (one code path, `transformer-hessian notebook`),
    # two. FAULT_RULES=all kills every rule (about 8 minutes on two cores).
    every = os.environ.get("FAULT_RULES", "") == "all"
    from snakemake.utils import validate

    from transformer_hessian.config.validate import SCHEMA_PATH
    from transformer_hessian.registry.rules import rule_specs

    filled = copy.deepcopy(tiny)
    validate(filled, str(SCHEMA_PATH))  # the schema's defaults, as the Snakefile fills them in
    notebooks = sorted({spec["name"] for spec in rule_specs(filled)} & set(rules))
    assert len(notebooks) >= 8 and {"fig2", "fig5", "spectrum"} <= set(notebooks), notebooks
    skipped = set() if every else set(notebooks) - set(rng.sample(notebooks, 2))
    stateful = {"download", "train", "hessian", "landscape", "summary", "dynamics", "scaling_models"}
    others = sorted(set(rules) - set(notebooks) - stateful)
    if not every:
        skipped |= set(others) - set(rng.sample(others, len(others) // 2))
    rules = [r for r in rules if r not in skipped]
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
        # the other jobs that were running (the rules run two at a time) were killed at a random
        # moment of theirs too: each counts as its rule's kill, so that no run is spent on it again
        for rule in _running(text) & set(rules):
            killed_during.setdefault(rule, True)
        started |= set(_started(text)) & set(rules)
        # a 0-byte temp file as a kill inside save_figure would leave it (made by a dead process)
        if target in notebooks:
            from transformer_hessian.util.tempfiles import host_tag

            (work / "paper/figures").mkdir(parents=True, exist_ok=True)
            (work / f"paper/figures/.fig3.pdf.{host_tag()}.{_dead_pid()}.abcdefgh.pdf.tmp").touch()
    # ... and the run that must simply finish. Before it, the landscape experiment's final.pt is
    # damaged and a landscape setting changed, so the landscape job must run again and needs it:
    # the run must set final.pt aside, retrain (resuming from the epoch checkpoints, same weights)
    # and redo the landscape. While it runs, a second `make reproduce` must be refused by the
    # guard's lock, and a plain snakemake by snakemake's own lock (which the guard must not remove
    # while its owner lives).
    final_pt = work / "results/landscape_tiny/checkpoints/final.pt"
    before = torch.load(final_pt, weights_only=True)["model"]
    _truncate(final_pt)
    changed = copy.deepcopy(tiny)
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


def test_full_disk_is_one_line_and_the_next_run_recovers(tmp_path, monkeypatch, capsys):
    """ENOSPC (simulated: the rename of every write raises OSError 28) ends in one line; with space
    back, the same command succeeds."""
    from transformer_hessian.pipeline import cli
    from transformer_hessian.util import files as utils

    manifest = tmp_path / "data" / "digits" / "manifest.json"
    argv = ["download", "--dataset", "digits", "--manifest", str(manifest)]

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(manifest))

    monkeypatch.setattr(utils.os, "replace", full)
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert len(lines) == 1 and "disk is full" in lines[0] and "manifest.json" in lines[0], err
    assert _no_traceback(err) and not manifest.exists()
    monkeypatch.undo()
    assert cli.main(argv) == 0 and json.loads(manifest.read_text())["dataset"] == "digits"
