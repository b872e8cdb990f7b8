"""The curvature command: its numbers against the dense Hessian of the whole data set, a killed run
resumed to the same numbers, two processes equal to one, and a Hugging Face model with a token file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer_hessian import exact_hessian

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import factory  # noqa: E402

ARGS = ["--factory", "factory:build", "--top-k", "3", "--lanczos-steps", "24", "--probes", "6", "--slq-probes", "2"]


def _env(**extra) -> dict:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        **extra,
    }


def _command(out: Path, *more: str) -> list[str]:
    return [sys.executable, "-m", "transformer_hessian", "--threads", "1", "curvature", *ARGS, "--out", str(out), *more]


def _run(out: Path, *more: str) -> dict:
    p = subprocess.run(_command(out, *more), env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads((out / "curvature.json").read_text())


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """One uninterrupted run with eigenvectors and two blocks, and the dense Hessian of the data set."""
    out = tmp_path_factory.mktemp("whole")
    res = _run(out, "--eigenvectors", "--blocks", "blocks.0.attn.qkv.*", "ln_f.*", "--block-steps", "40")
    model, batches = factory.build()
    H = exact_hessian(model, data=batches, loss="causal_lm", progress=False)
    return out, res, H, model, batches


def _dense_trace(H, n):
    from transformer_hessian.core.spectral import hutchinson_trace

    return hutchinson_trace(lambda Z: Z @ H, torch.zeros(H.shape[0], dtype=H.dtype), n_probes=n, seed=0)


@pytest.mark.slow  # runs the command (a subprocess, seconds)
def test_numbers_are_the_dense_hessians(whole):
    out, res, H, model, batches = whole
    ev = torch.linalg.eigvalsh(H)
    assert res["P"] == H.shape[0] and res["processes"] == 1 and res["batches"] == 6
    assert res["n_terms"] == sum(t[:, 1:].numel() for _, t in batches)
    # Ritz values are lower bounds of the top eigenvalues; the converged one (small residual) equals it
    for lam, r, true in zip(res["eigenvalues"], res["residuals"], ev.flip(0)[:3], strict=True):
        assert lam <= float(true) + 1e-9
        if r < 1e-8:
            assert abs(lam - float(true)) <= 1e-7 * float(ev.abs().max())
    assert res["residuals"][0] < 1e-6
    # Hutchinson's estimate is the dense Hessian's on the same seeded probes
    assert abs(res["trace"]["mean"] - _dense_trace(H, 6)["mean"]) <= 1e-9 * float(H.abs().max())
    # the SLQ weights are a distribution per probe; its mean estimates tr(H) / P
    w = np.asarray(res["slq"]["weights"])
    assert np.allclose(w.sum(1), 1.0)
    # eigenvectors: unit rows with H u = lambda u for the converged top one
    saved = torch.load(out / "eigenvectors.pt", weights_only=False)
    U = saved["vectors"]
    assert U.shape == (3, H.shape[0]) and torch.allclose(U.norm(dim=1), torch.ones(3, dtype=U.dtype))
    assert float((H @ U[0] - res["eigenvalues"][0] * U[0]).norm()) <= 1e-6
    assert saved["names"] == [n for n, _ in model.named_parameters()]
    # each block's norm and trace against its own dense block
    named = dict(model.named_parameters())
    offsets, off = {}, 0
    for n, p in named.items():
        offsets[n] = slice(off, off + p.numel())
        off += p.numel()
    for glob, b in res["blocks"].items():
        idx = torch.cat([torch.arange(offsets[n].start, offsets[n].stop) for n in b["params"]])
        Hb = H[idx][:, idx]
        assert b["P"] == len(idx)
        assert abs(b["spectral_norm"] - float(torch.linalg.matrix_norm(Hb, 2))) <= 1e-7 * float(Hb.abs().max()), glob
        est = _dense_trace(Hb, 8)
        assert abs(b["trace"]["mean"] - est["mean"]) <= 1e-9 * float(Hb.abs().max()), glob
        assert abs(b["trace"]["stderr"] - est["stderr"]) <= 1e-9 * float(Hb.abs().max()), glob
    assert (out / "curvature.png").stat().st_size > 10_000


@pytest.mark.slow  # runs the command (a subprocess, seconds)
def test_a_killed_run_resumes_to_the_same_numbers(whole, tmp_path):
    _, res, *_ = whole
    out = tmp_path / "killed"
    more = [
        "--eigenvectors",
        "--blocks",
        "blocks.0.attn.qkv.*",
        "ln_f.*",
        "--block-steps",
        "40",
        "--checkpoint-every",
        "1",
    ]
    more += ["--keep", "no"]
    p = subprocess.Popen(_command(out, *more), env=_env(), stderr=subprocess.PIPE, text=True)
    state = out / "curvature.state.pt"
    t0 = time.time()
    try:
        while time.time() - t0 < 240 and p.poll() is None:
            if state.exists():
                saved = torch.load(state, weights_only=False)
                st = saved["stages"].get("lanczos", {}).get("state")
                if st is not None and st["j"] >= 3:
                    break
            time.sleep(0.02)
        assert p.poll() is None, "the run ended before it could be killed"
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == -signal.SIGKILL
    assert not (out / "curvature.json").exists()
    again = subprocess.run(_command(out, *more), env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from" in again.stderr
    got = json.loads((out / "curvature.json").read_text())
    assert got["resumed"] and got["products_this_run"] < got["products"]
    for key in ("eigenvalues", "residuals", "trace", "slq", "P", "n_terms"):
        assert got[key] == res[key], key
    for glob in res["blocks"]:
        assert got["blocks"][glob] == res["blocks"][glob]


@pytest.mark.slow  # runs the command (a subprocess, seconds)
def test_two_processes_give_one_processs_numbers(whole, tmp_path):
    _, res, *_ = whole
    from ranks import run_ranks

    out = tmp_path / "two"
    script = tmp_path / "launch.py"
    script.write_text(
        f"import sys\nfrom transformer_hessian.pipeline.cli import main\nsys.exit(main({_command(out)[3:]!r}))\n"
    )
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = _env()["PYTHONPATH"]
    try:
        run_ranks(script, 2, [])
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old
    got = json.loads((out / "curvature.json").read_text())
    assert got["processes"] == 2 and got["n_terms"] == res["n_terms"] and got["batches"] == res["batches"]
    for a, b in zip(got["eigenvalues"], res["eigenvalues"], strict=True):
        assert abs(a - b) <= 1e-8 * abs(b)
    assert abs(got["trace"]["mean"] - res["trace"]["mean"]) <= 1e-10 * abs(res["trace"]["mean"])


@pytest.mark.slow  # runs the command (a subprocess, seconds)
def test_a_hugging_face_config_and_a_token_file(tmp_path):
    from transformer_hessian.pipeline.cli import main

    cfg = {"model_type": "gpt2", "vocab_size": 13, "n_positions": 8, "n_embd": 8, "n_layer": 1, "n_head": 2}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    np.arange(100, dtype=np.uint16).__mod__(13).astype(np.uint16).tofile(tmp_path / "tokens.bin")
    out = tmp_path / "out"
    rc = main([
        "curvature", "--hf-model", str(tmp_path / "config.json"), "--tokens", str(tmp_path / "tokens.bin"),
        "--seq-len", "8", "--batch-size", "5", "--dtype", "float64", "--lanczos-steps", "6", "--probes", "2",
        "--slq-probes", "1", "--params", "transformer.h.0.attn.*", "--out", str(out),
    ])  # fmt: skip
    assert rc == 0
    res = json.loads((out / "curvature.json").read_text())
    # 100 tokens: 12 sequences of 8 in batches of 5, 5, 2; 7 next-token terms each
    assert res["batches"] == 3 and res["n_terms"] == 12 * 7 and res["dtype"] == "float64"
    assert res["P"] == 8 * 24 + 24 + 8 * 8 + 8 and np.isfinite(res["eigenvalues"]).all()
    assert main(["curvature", "--hf-model", str(tmp_path), "--out", str(out)]) == 1  # no --tokens: one line


def test_srun_tasks_map_onto_torch_distributed_variables():
    from transformer_hessian.scale.command import first_host, launch_env

    assert launch_env({"RANK": "0", "WORLD_SIZE": "2", "SLURM_PROCID": "1", "SLURM_NTASKS": "2"}) == {}
    assert launch_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) == {}
    env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_STEP_NODELIST": "gpu[07-08]"}
    env["SLURM_JOB_ID"] = "123"
    assert launch_env(env) == {
        "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "gpu07", "MASTER_PORT": "20123",
    }  # fmt: skip
    assert first_host("node03,node04") == "node03"
    assert first_host("a[1,3-5],b2") == "a1"
    assert first_host("localhost") == "localhost"
