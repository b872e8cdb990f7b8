"""scripts/gpu_check.py at tiny sizes on the CPU: every section present, ok or skipped for a stated
CUDA-only reason, finite numbers, the closed-form Hessians equal to reverse-over-reverse autograd,
the CPU-vs-device agreement field present; the budget, the error capture and MNIST read without
torchvision (which the GPU machine lacks) on their own."""

import gzip
import importlib.util
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import ROOT
from helpers import json_numbers

SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod
    spec.loader.exec_module(mod)
    return mod


def _write_idx(path, arr: np.ndarray) -> None:
    header = (0x0800 | arr.ndim).to_bytes(4, "big") + b"".join(int(n).to_bytes(4, "big") for n in arr.shape)
    with gzip.open(path, "wb") as fh:
        fh.write(header + arr.astype(np.uint8).tobytes())


@pytest.fixture()
def fake_mnist(tmp_path):
    """A small MNIST in its real layout (four gzipped IDX files), random pixels and labels."""
    folder = tmp_path / "data" / "mnist"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(7)
    for n, (images, labels) in (
        (96, ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")),
        (32, ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")),
    ):
        _write_idx(folder / f"{images}.gz", rng.integers(0, 256, (n, 28, 28)))
        _write_idx(folder / f"{labels}.gz", rng.integers(0, 10, n))
    return folder


# About a minute of CPU time; the generous limits are for a machine shared with other jobs.
@pytest.mark.slow  # about 17 s
@pytest.mark.timeout(1800)
def test_gpu_check_tiny_on_cpu(tmp_path, env, fake_mnist):
    out = tmp_path / "out"
    e = dict(env, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), "--tiny", "--device", "cpu", "--mnist", str(fake_mnist)],
        cwd=ROOT,
        env=e,
        capture_output=True,
        text=True,
        timeout=1700,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "gpu_check.json").read_text())
    md = (out / "gpu_check.md").read_text()
    mod = _load_script()
    sections = result["sections"]
    assert list(sections) == list(mod.SECTIONS)
    for name, s in sections.items():
        assert s["status"] in ("ok", "skipped"), (name, s.get("error"), s.get("traceback"))
        assert f"| {name} | {s['status']} |" in md
        if s["status"] == "skipped":
            # on the CPU only the CUDA-only compile rows may be skipped
            assert name in ("train_mnist_compiled", "train_cifar100_compiled"), name
            assert "CUDA only" in s["reason"], s["reason"]
    bad = [(p, v) for p, v in json_numbers(result) if not math.isfinite(v)]
    assert not bad, bad
    assert result["environment"]["bf16_peak_tflops"] == "unknown"  # a CPU has no entry in the table

    for name in ("train_mnist_eager", "train_cifar100_eager"):
        r = sections[name]["result"]
        assert r["images_per_s"] > 0 and r["flops_per_image"] > 0 and r["achieved_tflops"] > 0
        assert 0 < r["data_loading_share"] < 1
        assert r["amp"] == "bf16" and r["augment"] == "crop_flip" and r["compile"] is False
        assert r["peak_tflops"] == "unknown"
    assert sections["train_mnist_eager"]["result"]["data"].startswith("real MNIST from")
    assert sections["train_cifar100_eager"]["result"]["n_parameters"] > 0

    for name in ("hessian5_closed_form", "hessian9_closed_form"):
        r = sections[name]["result"]
        assert "cpu_vs_device_rel" in r and r["cpu_vs_device_rel"] < 1e-12  # the device is the CPU here
    assert sections["hessian9_closed_form"]["result"]["P"] > sections["hessian5_closed_form"]["result"]["P"]
    for name in ("hessian5_reference", "hessian9_reference"):
        r = sections[name]["result"]
        assert r["closed_form_vs_reference_rel"] < 1e-10, (name, r)
        assert r["reference_asymmetry_rel"] < 1e-12
    if importlib.util.find_spec("curvlinops") is not None:
        assert sections["hessian5_curvlinops"]["result"]["closed_form_vs_curvlinops_rel"] < 1e-10

    for name in ("spectrum_block", "spectrum_whole"):
        r = sections[name]["result"]
        top64, top32 = r["float64"]["top"], r["float32"]["top"]
        assert len(top64) == len(top32) == result["sizes"]["n_eigenvalues"]
        assert top64 == sorted(top64, reverse=True)
        assert r["top_eigenvalue_rel_diff"] < 1e-3 and r["trace_rel_diff"] < 1e-3, r
    # the whole model's Hessian has block 0's five groups as a principal submatrix
    assert sections["spectrum_whole"]["result"]["n_params"] > sections["spectrum_block"]["result"]["n_params"]
    lm = sections["exact_hessian_lm"]["result"]
    assert lm["exact_vs_reference_rel"] < 1e-10 and lm["hvp_vs_dense_rel"] < 1e-10, lm
    assert lm["hvp_graphed_vs_dense_rel"] < 1e-10 and lm["cuda_graphs"] == "off", lm  # no CUDA graphs on a CPU
    bench = sections["bench_models"]["result"]
    assert set(bench["cases"]) == {"tiny", "tiny-llama"} and bench["gemm_gflops"] > 0
    for case, c in bench["cases"].items():
        assert c["autograd_err"] < 1e-10 and c["fastest_correct_peer"] and c["speedup"] > 0, (case, c)
        assert c["hvp_speedup"] > 0 and c["engine_hvp_block_err"] < 1e-10, (case, c)
        assert [v["K"] for k, v in c.items() if k.startswith("engine_s_blocks_")] == [c["P"], c["P"]]
    assert "tiny P=" in md and "tiny-llama P=" in md
    big = sections["large_block"]["result"]
    assert big["P_block"] == 8 * 24 + 24 and big["P_model"] > big["P_block"], big
    assert big["rows_vs_autograd_rel"] < 1e-10, big


def test_budget_and_errors_are_recorded(tmp_path, monkeypatch):
    mod = _load_script()

    def boom(chk):
        raise RuntimeError("deliberate failure")

    monkeypatch.setitem(mod.SECTIONS, "hessian5_closed_form", boom)
    args = mod.parse_args([str(tmp_path / "a"), "--tiny", "--device", "cpu", "--only", "hessian5_closed_form"])
    res = mod.run(args)
    s = res["sections"]["hessian5_closed_form"]
    assert s["status"] == "error" and "RuntimeError: deliberate failure" in s["error"]
    assert "| hessian5_closed_form | error |" in (tmp_path / "a" / "gpu_check.md").read_text()

    args = mod.parse_args([str(tmp_path / "b"), "--tiny", "--device", "cpu", "--budget", "1e-9"])
    res = json.loads(json.dumps(mod.run(args)))
    assert list(res["sections"]) == list(mod.SECTIONS)
    for s in res["sections"].values():
        assert s["status"] == "skipped" and "time budget" in s["reason"]

    with pytest.raises(SystemExit):
        mod.parse_args([str(tmp_path / "c"), "--budget", "0"])
    with pytest.raises(SystemExit, match="unknown section"):
        mod.run(mod.parse_args([str(tmp_path / "d"), "--only", "nope"]))


def test_mnist_without_torchvision_matches_project_reader(fake_mnist, monkeypatch):
    """Without torchvision (the GPU machine) the script still reads MNIST with the project's reader
    (data.load_dataset): the same tensors as with torchvision, from .gz or raw files, and the folder
    is left as it was."""
    pytest.importorskip("torchvision")
    from transformer_hessian.data import load_dataset

    mod = _load_script()
    files = sorted(p.name for p in fake_mnist.iterdir())
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import torchvision -> ImportError
    from_gz = mod.load_mnist(fake_mnist)
    assert sorted(p.name for p in fake_mnist.iterdir()) == files  # nothing decompressed into it
    monkeypatch.undo()
    ref = load_dataset("mnist", fake_mnist.parent)  # decompresses next to the .gz files (torchvision)
    from_raw = mod.load_mnist.__wrapped__(fake_mnist)  # uncached: now from the raw files
    for got in (from_gz, from_raw):
        for key in ("train_x", "train_y", "val_x", "val_y"):
            assert got[key].dtype == ref[key].dtype and torch.equal(got[key], ref[key]), key
        for key in ("num_classes", "image_size", "channels"):
            assert got[key] == ref[key]
    with pytest.raises(FileNotFoundError, match="MNIST IDX files"):
        mod.find_mnist(str(fake_mnist.parent))


def test_carry_folder(fake_mnist, tmp_path):
    """scripts/gpu_carry.py: MNIST recompressed byte for byte, readable by gpu_check; every wheel
    pinned by requirements.lock."""
    spec = importlib.util.spec_from_file_location("gpu_carry", ROOT / "scripts" / "gpu_carry.py")
    carry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(carry)
    dest = tmp_path / "carry" / "mnist"
    files = carry.carry_mnist(fake_mnist, dest)
    assert sorted(f.name for f in files) == sorted(f"{n}.gz" for n in carry.MNIST_FILES)
    for f in files:
        assert gzip.decompress(f.read_bytes()) == gzip.decompress((fake_mnist / f.name).read_bytes())
    mod = _load_script()
    assert mod.find_mnist(str(dest)) == dest.resolve()
    pins = carry.pinned()
    assert len(pins) == len(carry.WHEELS) and all("==" in p for p in pins)
    with pytest.raises(ValueError, match="no pinned version"):
        carry.pinned(["no-such-distribution"])
    with pytest.raises(FileNotFoundError, match="neither"):
        carry.carry_mnist(tmp_path / "empty", tmp_path / "out")
