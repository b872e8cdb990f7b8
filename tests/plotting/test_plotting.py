"""Tests of transformer_hessian.plotting and of the papermill notebooks that use it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from transformer_hessian import GROUPS, plotting, registry  # noqa: E402
from transformer_hessian.core.landscape import analyse_landscape  # noqa: E402
from transformer_hessian.studies.landscape import plot as landscape_plot  # noqa: E402

from .builders import block_norms_doc, random_hessian  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"

# A small block layout: d = 4, d_K = 2, d_ff = 6.
SHAPES = np.array([[4, 2], [4, 2], [4, 4], [4, 6], [6, 4]])
OFFSETS = np.concatenate([[0], np.cumsum(SHAPES.prod(axis=1))])
P = int(OFFSETS[-1])


def synthetic_hessian(seed: int, scale: float = 1.0) -> np.ndarray:
    return random_hessian(seed, P, scale)


def norms_doc(h: np.ndarray, stage: str, seed: int) -> dict:
    return block_norms_doc(h, OFFSETS, stage, seed)


def landscape_result() -> dict:
    losses = np.random.default_rng(0).exponential(size=3000)
    res = analyse_landscape(losses, n_orderings=10, seed=0, n_bootstrap=50)
    res["experiment"] = "synthetic"
    return res


def check_saved(base: Path) -> None:
    png, pdf = base.with_name(base.name + ".png"), base.with_name(base.name + ".pdf")
    image = mpimg.imread(png)
    assert image.ndim == 3 and image.shape[0] > 0 and image.shape[1] > 0
    data = pdf.read_bytes()
    assert len(data) > 1000 and data.startswith(b"%PDF")
    leftovers = [p.name for p in base.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []


# ----------------------------------------------------------------------------- theme, saving


def test_theme_gives_300_dpi_png_and_embedded_truetype_pdf(tmp_path):
    plotting.set_theme()
    fig = plt.figure(figsize=(2.0, 1.0))
    fig.text(0.5, 0.5, "W_V")  # some text, so that a font is embedded
    plotting.save_figure(fig, tmp_path / "theme")
    from PIL import Image

    with Image.open(tmp_path / "theme.png") as png:
        assert png.info["dpi"] == pytest.approx((300, 300), abs=0.1)
    pdf = (tmp_path / "theme.pdf").read_bytes()
    assert b"/FontFile2" in pdf and b"DejaVuSans" in pdf  # TrueType (type 42), editable text


def test_save_figure_writes_pdf_and_png(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [3, 1, 2])
    base = tmp_path / "nested" / "deeper" / "figure"
    written = plotting.save_figure(fig, base)
    assert [p.suffix for p in written] == [".pdf", ".png"]
    check_saved(base)
    # a trailing suffix is ignored; the PDF has no creation date, so it is reproducible
    first = (tmp_path / "nested" / "deeper" / "figure.pdf").read_bytes()
    plotting.save_figure(fig, str(base) + ".pdf")
    assert (tmp_path / "nested" / "deeper" / "figure.pdf").read_bytes() == first
    umask = os.umask(0o022)
    os.umask(umask)
    assert os.stat(written[0]).st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600


def test_save_figure_failure_leaves_old_file_and_no_temp(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    base = tmp_path / "fig"
    plotting.save_figure(fig, base)
    before = (tmp_path / "fig.pdf").read_bytes()

    def broken(handle, **kwargs):
        with open(handle, "wb") as fh:  # save_figure hands savefig a temporary path
            fh.write(b"half a figure")
        raise RuntimeError("disk full")

    fig.savefig = broken
    with pytest.raises(RuntimeError, match="disk full"):
        plotting.save_figure(fig, base)
    assert (tmp_path / "fig.pdf").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.pdf", "fig.png"]


# ----------------------------------------------------------------------------- Figures 3, 4


def test_shared_log_range():
    a = np.array([[0.0, 1e-3], [1e-3, 5.0]])
    b = np.array([[20.0, 0.0], [0.0, 1e-15]])
    vmin, vmax = plotting.shared_log_range(a, b, floor=-12)
    assert vmax == pytest.approx(np.log10(20.0))
    assert vmin == -12  # 1e-15 is below the floor
    vmin, vmax = plotting.shared_log_range(a, b, floor=-20)
    assert vmin == pytest.approx(-15.0)
    assert plotting.shared_log_range(np.zeros((2, 2))) == (-12.0, -11.0)
    lo, hi = plotting.shared_log_range(np.full((2, 2), 0.1))
    assert lo < hi == pytest.approx(-1.0)


def test_robust_log_range_is_the_chosen_quantiles():
    h_init, h_trained = synthetic_hessian(0), synthetic_hessian(1, scale=50.0)
    h_init[5, 7] = h_init[7, 5] = 1e-30  # one tiny entry must not set the range
    for q in [(0.01, 0.99), (0.005, 0.9995), (0.2, 0.8)]:
        vmin, vmax = plotting.robust_log_range(h_init, h_trained, quantiles=q)
        pooled = np.concatenate([np.abs(h[h != 0]) for h in (h_init, h_trained)])
        lo, hi = np.percentile(np.log10(pooled), [100 * q[0], 100 * q[1]])
        assert vmin == pytest.approx(lo) and vmax == pytest.approx(hi)
    assert plotting.robust_log_range(h_init)[0] > -20  # not the 1e-30 entry
    assert plotting.robust_log_range(np.zeros((3, 3))) == (-12.0, -11.0)
    with pytest.raises(ValueError, match="quantiles"):
        plotting.robust_log_range(h_init, quantiles=(0.9, 0.1))


def test_hessian_heatmap_zeros_ticks_separators(tmp_path):
    h_init, h_trained = synthetic_hessian(0), synthetic_hessian(1, scale=50.0)
    vmin, vmax = plotting.robust_log_range(h_init, h_trained)
    fig, ax = plt.subplots()
    image = plotting.hessian_heatmap(ax, h_init, OFFSETS, list(GROUPS), vmin, vmax, "init")
    assert image.get_clim() == (vmin, vmax)
    shown = image.get_array()
    assert shown.shape == (P, P)
    # exact zeros are masked (drawn in the colour of their own), nothing else is
    mask = np.ma.getmaskarray(shown)
    assert mask.sum() == np.count_nonzero(h_init == 0)
    np.testing.assert_array_equal(mask, h_init == 0)
    from matplotlib.colors import to_rgba

    cmap = image.get_cmap()
    assert cmap.get_bad() == pytest.approx(to_rgba(plotting.ZERO_COLOUR))
    ramp = cmap(np.linspace(0, 1, 256))
    assert np.min(np.abs(ramp[:, :3] - np.array(to_rgba(plotting.ZERO_COLOUR))[:3]).sum(axis=1)) > 0.15
    nz = h_init != 0
    expected = np.clip(np.log10(np.abs(h_init[nz])), vmin, vmax)
    np.testing.assert_allclose(shown.data[nz], expected)
    # the legend states the share of zeros
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [f"exact 0 ({100 * np.mean(h_init == 0):.1f}% of entries)"]
    labels = ["$W_Q$", "$W_K$", "$W_V$", "$W_1$", "$W_2$"]
    assert [t.get_text() for t in ax.get_xticklabels()] == labels
    assert [t.get_text() for t in ax.get_yticklabels()] == labels
    assert ax.get_xticklabels()[2].get_color() == plotting.VALUES_COLOUR
    np.testing.assert_allclose(ax.get_xticks(), (OFFSETS[:-1] + OFFSETS[1:]) / 2 - 0.5)
    assert ax.get_title() == "init"
    # separators: one per inner boundary and direction, black on a white halo, so that they
    # keep a contrast ratio >= 3 against both ends of the colour map
    assert len(ax.lines) == 2 * (len(GROUPS) - 1)
    for line in ax.lines:
        halo = line.get_path_effects()[0]._gc["foreground"]
        darkest, brightest = cmap(0.0), cmap(1.0)
        assert plotting.contrast_ratio(line.get_color(), brightest) >= 3
        assert plotting.contrast_ratio(halo, darkest) >= 3
    cbar_axes = [a for a in fig.axes if a is not ax]
    assert len(cbar_axes) == 1 and "log_{10}" in cbar_axes[0].get_ylabel()
    plotting.save_figure(fig, tmp_path / "fig3")
    check_saved(tmp_path / "fig3")

    # the trained figure uses the same range; without zeros the legend says so
    fig4 = plotting.hessian_figure(
        {"H": h_trained + (h_trained == 0), "offsets": OFFSETS, "names": np.array(GROUPS)}, vmin, vmax
    )
    assert fig4.axes[0].images[0].get_clim() == (vmin, vmax)
    assert [t.get_text() for t in fig4.axes[0].get_legend().get_texts()] == [f"no exact zeros (0 of {P * P:,} entries)"]


def test_dataset_model_label_names_data_and_sizes():
    m = {
        "dataset": "digits",
        "model": {"image_size": 8, "patch_size": 2, "depth": 1, "width": 16, "d_k": 16, "d_ff": 64},
    }
    text = plotting.dataset_model_label(m, "MNIST")
    assert text.startswith("8x8 digits (scikit-learn; stand-in for MNIST)")
    assert "1 block," in text and "16 tokens" in text and "d_ff=64" in text
    m2 = {"dataset": "cifar100", "model": {**m["model"], "image_size": 32, "patch_size": 4, "depth": 8}}
    assert plotting.dataset_model_label(m2, "CIFAR-100").startswith("CIFAR-100; ViT, 8 blocks, 64 tokens")


def test_hessian_heatmap_rejects_bad_offsets():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="offsets"):
        plotting.hessian_heatmap(ax, np.eye(P), OFFSETS[:-1], list(GROUPS), -3, 0)
    with pytest.raises(ValueError, match="offsets"):
        plotting.hessian_heatmap(ax, np.eye(P + 1), OFFSETS, list(GROUPS), -3, 0)


@pytest.mark.slow  # about 15 s
def test_norms_figure(tmp_path):
    init = norms_doc(synthetic_hessian(0), "init", 0)
    trained = norms_doc(synthetic_hessian(1, scale=1e3), "trained", 1)
    fig = plotting.norms_figure(init, trained)
    titles = [ax.get_title() for ax in fig.axes]
    assert any(t.startswith("(a)") for t in titles) and any(t.startswith("(b)") for t in titles)
    panel_b = next(ax for ax in fig.axes if ax.get_title().startswith("(b)"))
    assert panel_b.get_yscale() == "log"  # block norms span three decades
    heights = sorted(p.get_height() for p in panel_b.patches if p.get_height() > 0)
    expected = sorted(
        e[f] for doc in (init, trained) for e in doc["blocks"] if e["row"] == e["col"] for f in ("spectral", "fro")
    )
    np.testing.assert_allclose(heights, expected)
    plotting.save_figure(fig, tmp_path / "fig5")
    check_saved(tmp_path / "fig5")
    # the legend of (a) and (b) covers no bar
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = [a.get_legend() for a in fig.axes if a.get_legend() is not None]
    assert len(legends) == 1
    box = legends[0].get_window_extent(renderer)
    for ax in fig.axes:
        for bar in ax.patches:
            if bar.get_height() > 0:
                assert not box.overlaps(bar.get_window_extent(renderer))
    # (c) and (d): one colour bar, labelled, shared limits
    panel_c = next(ax for ax in fig.axes if ax.get_title().startswith("(c)"))
    panel_d = next(ax for ax in fig.axes if ax.get_title().startswith("(d)"))
    assert panel_c.collections[0].get_clim() == panel_d.collections[0].get_clim()
    cbars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(cbars) == 1 and "H_{ij}" in cbars[0].get_ylabel()

    # paths work too, and a malformed document names the missing key
    p_init, p_trained = tmp_path / "i.json", tmp_path / "t.json"
    p_init.write_text(json.dumps(init))
    p_trained.write_text(json.dumps({"stage": "trained", "blocks": []}))
    with pytest.raises(KeyError, match="weights"):
        plotting.norms_figure(p_init, p_trained)


# ----------------------------------------------------------------------------- Figure 6


@pytest.mark.slow  # about 6 s
def test_landscape_figure_legend_smoother_and_bound(tmp_path):
    res = landscape_result()
    fig = landscape_plot.landscape_figure(res, title="digits; ViT")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_title() == "digits; ViT"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    label = landscape_plot.slope_label(res)
    assert label in legend
    assert label.startswith(f"fitted slope = {res['slope']:.2f}"[:17])
    assert "(95% CI)" in label
    assert any("2L/(k+1)" in t for t in legend) and any("1/k" in t for t in legend)
    assert not any("EMA" in t for t in legend)  # the EMA over k is not drawn
    # the smoother is the median of D_mean in log-spaced bins of k, on the data
    from transformer_hessian.core.theorem7 import loss_differences

    binned = next(line for line in ax.lines if "median" in line.get_label())
    losses = np.random.default_rng(0).exponential(size=3000)  # as in landscape_result()
    d_full = loss_differences(losses, 10, 0).mean(axis=0)
    k = np.arange(1, 3000, dtype=float)
    edges = 10 ** (np.arange(0, 5 * 8) / 8)
    centres, medians = [], []
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (k >= lo * (1 - 1e-9)) & (k < hi * (1 - 1e-9))
        if sel.any():
            centres.append(np.exp(np.log(k[sel]).mean()))
            medians.append(np.median(d_full[sel]))
    np.testing.assert_allclose(binned.get_xdata(), centres)
    np.testing.assert_allclose(binned.get_ydata(), medians, rtol=1e-10)
    # ... so each point lies within the data of its bin (an EMA over k does not)
    for ck, cm in zip(centres, medians):
        sel = (k >= ck / 10 ** (1 / 8)) & (k <= ck * 10 ** (1 / 8))
        assert d_full[sel].min() <= cm <= d_full[sel].max()
    # the legend lies inside the axes
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    lbox, abox = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert abox.x0 <= lbox.x0 and lbox.x1 <= abox.x1 and abox.y0 <= lbox.y0 and lbox.y1 <= abox.y1
    plotting.save_figure(fig, tmp_path / "fig6")
    check_saved(tmp_path / "fig6")

    path = tmp_path / "landscape.json"
    path.write_text(json.dumps(res))
    fig = landscape_plot.landscape_figure(path, show_bound=False)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert not any("2L/(k+1)" in t for t in legend)


def test_landscape_figure_draws_the_batch_curve_when_asked():
    losses = np.random.default_rng(3).exponential(size=2000)
    res = analyse_landscape(losses, n_orderings=6, seed=0, n_bootstrap=30, granularity="batch", batch_size=20)
    cur = landscape_plot.landscape_curve(res)
    assert cur["granularity"] == "batch" and cur["label"] == "data added batch-by-batch (b = 20)"
    fig = landscape_plot.landscape_figure(res)
    ax = fig.axes[0]
    mean_line = next(line for line in ax.lines if line.get_label().startswith("mean over"))
    np.testing.assert_allclose(mean_line.get_xdata(), res["batch"]["k"])
    np.testing.assert_allclose(mean_line.get_ydata(), res["batch"]["D_mean"])
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert landscape_plot.slope_label(res["batch"]) in legend
    assert any("2L/(j+1)" in t for t in legend)
    res["batch"] = None
    with pytest.raises(KeyError, match="batch"):
        landscape_plot.landscape_curve(res)


def test_slope_label_format():
    res = {"slope": -0.98123, "slope_ci95": [-1.0212, -0.9476]}
    assert landscape_plot.slope_label(res) == "fitted slope = -0.98 [-1.02, -0.95] (95% CI)"
    narrow = {"slope": -1.0001, "slope_ci95": [-1.003, -0.998]}
    assert landscape_plot.slope_label(narrow) == "fitted slope = -1.000 [-1.003, -0.998] (95% CI)"
    # the MNIST batch curve of an earlier run: at two decimals it read [-1.00, -0.97], as if it held -1
    mnist = {"slope": -0.98712, "slope_ci95": [-0.99812, -0.97462]}
    assert landscape_plot.slope_label(mnist) == "fitted slope = -0.987 [-0.998, -0.975] (95% CI)"


@settings(max_examples=200, deadline=None)
@given(a=st.floats(-1.2, -0.8), b=st.floats(-1.2, -0.8))
def test_slope_label_interval_contains_minus_one_only_when_it_does(a, b):
    lo, hi = min(a, b), max(a, b)
    text = landscape_plot.slope_label({"slope": 0.5 * (lo + hi), "slope_ci95": [lo, hi]})
    plo, phi = (float(v) for v in text.split("[")[1].split("]")[0].split(", "))
    assert (plo <= -1.0 <= phi) == (lo <= -1.0 <= hi)


# ----------------------------------------------------------------------------- notebooks


NOTEBOOK_NAMES = sorted({fig.notebook for fig in registry.FIGURES})
SYNTHETIC_CONFIG = {"hessian": {"experiment": "exp"}, "landscape": {"experiment": "exp"}}


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_notebook_is_committed_clean(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    assert nb.metadata.kernelspec.language == "python"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    source = "\n".join(c.source for c in code)
    assert "transformer_hessian" in source and "plotting.publish(" in source  # saves and shows the file
    assert "def " not in source  # no logic in notebooks, only helper calls


def write_results(root: Path) -> None:
    """Synthetic result files at the registry's paths for experiment 'exp' under ``root``."""
    hdir = root / "results" / "exp" / "hessian"
    hdir.mkdir(parents=True)
    h_init, h_trained = synthetic_hessian(0), synthetic_hessian(1, scale=30.0)
    for stage, h in (("init", h_init), ("trained", h_trained)):
        np.savez(hdir / f"{stage}.npz", H=h, names=np.array(GROUPS), offsets=OFFSETS, shapes=SHAPES)
        (hdir / f"{stage}_norms.json").write_text(json.dumps(norms_doc(h, stage, 3)))
    ldir = root / "results" / "exp" / "landscape"
    ldir.mkdir(parents=True)
    (ldir / "landscape.json").write_text(json.dumps(landscape_result()))
    metrics = {
        "dataset": "digits",
        "epochs": 2,
        "final": {"val_acc": 0.8},
        "model": {
            "image_size": 8,
            "channels": 1,
            "num_classes": 10,
            "patch_size": 4,
            "width": 4,
            "depth": 1,
            "d_k": 2,
            "d_ff": 6,
        },
    }
    (root / "results" / "exp" / "metrics.json").write_text(json.dumps(metrics))


# Figures whose inputs write_results() synthesises; the notebooks of the probe, dynamics and bounds
# figures need those rules' results and are executed on real (tiny) results by test_workflow.py.
SYNTHETIC_RULES = {
    name: figs
    for name, figs in registry.groups().items()
    if {f.id for f in figs} <= {"fig2", "fig3", "fig4", "fig5", "fig6"}
}


@pytest.mark.slow  # 6-10 s a case
@pytest.mark.parametrize("rule", sorted(SYNTHETIC_RULES))
def test_notebook_executes_with_papermill(rule, tmp_path, monkeypatch):
    papermill = pytest.importorskip("papermill")
    figs = SYNTHETIC_RULES[rule]
    write_results(tmp_path)
    params = {
        **registry.resolve_inputs(figs[0], SYNTHETIC_CONFIG),
        **figs[0].params,
        **registry.output_parameters(figs),
    }
    # The kernel is a subprocess: make the package importable there however pytest found it.
    src = str(REPO / "src")
    paths = [src, os.environ.get("PYTHONPATH")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # let the kernel use its inline backend
    out = tmp_path / "executed" / f"{rule}.ipynb"
    out.parent.mkdir()
    papermill.execute_notebook(
        str(NOTEBOOKS / figs[0].notebook),
        str(out),
        parameters=params,
        kernel_name="python3",
        cwd=str(tmp_path),
        progress_bar=False,
    )
    executed = nbformat.read(out, as_version=4)
    outputs = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= len(figs)  # every figure displayed
    for fig in figs:
        check_saved(tmp_path / fig.out)


def _notebook_command(cwd: Path, notebook: Path, executed: Path, params: dict) -> subprocess.CompletedProcess:
    """``transformer-hessian notebook`` (what the figure rules run) in ``cwd``, as a rule calls it."""
    args = [arg for name, value in params.items() for arg in ("-p", name, str(value))]
    cmd = [sys.executable, "-m", "transformer_hessian", "notebook", str(notebook), str(executed), *args]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)
    )
    env.pop("MPLBACKEND", None)  # as under snakemake: the runner picks the kernel's inline backend
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # about 9 s
def test_notebook_command_draws_the_bytes_papermill_draws(tmp_path, monkeypatch):
    """The figure rules' in-process runner gives the files papermill gives (same parameters, same
    relative paths), and an executed notebook with the injected parameters and every figure shown."""
    papermill = pytest.importorskip("papermill")
    figs = SYNTHETIC_RULES["fig5"]
    params = {**registry.resolve_inputs(figs[0], SYNTHETIC_CONFIG), **registry.output_parameters(figs)}
    runs = {}
    for runner in ("papermill", "command"):
        root = tmp_path / runner
        write_results(root)
        executed = root / "executed.ipynb"
        if runner == "papermill":
            monkeypatch.setenv(
                "PYTHONPATH", os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)
            )
            monkeypatch.delenv("MPLBACKEND", raising=False)
            papermill.execute_notebook(
                str(NOTEBOOKS / figs[0].notebook), str(executed), parameters=params, kernel_name="python3",
                cwd=str(root), progress_bar=False,
            )  # fmt: skip
        else:
            proc = _notebook_command(root, NOTEBOOKS / figs[0].notebook, executed, params)
            assert proc.returncode == 0, proc.stderr[-3000:]
        runs[runner] = root
        nb = nbformat.read(executed, as_version=4)
        injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
        assert len(injected) == 1 and all(f"{name} = " in injected[0].source for name in params)
        outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
        assert not [o for o in outputs if o.output_type == "error"]
        assert sum("image/png" in o.get("data", {}) for o in outputs) >= len(figs)
    for fig in figs:
        for ext in ("pdf", "png"):
            paper = (runs["papermill"] / f"{fig.out}.{ext}").read_bytes()
            assert paper == (runs["command"] / f"{fig.out}.{ext}").read_bytes(), f"{fig.out}.{ext}"


def test_notebook_command_types_parameters_as_papermill_and_stops_at_a_failing_cell(tmp_path):
    from transformer_hessian.pipeline.notebooks import parameter_value, parameters_source

    typed = [parameter_value(v) for v in ("True", "False", "None", "3", "-2", "0.5", "1e-3", "3x")]
    assert typed == [True, False, None, 3, -2, 0.5, 1e-3, "3x"] and isinstance(typed[3], int)
    assert np.isnan(parameter_value("nan"))
    assert parameter_value("a b") == "a b" and parameter_value("paper/figures/fig5") == "paper/figures/fig5"
    namespace: dict = {}
    exec(parameters_source({"a": 'it\'s "q"', "n": 2, "x": float("inf"), "f": False, "z": None}), namespace)
    assert (namespace["a"], namespace["n"], namespace["x"], namespace["f"], namespace["z"]) == (
        "it's \"q\"", 2, float("inf"), False, None,
    )  # fmt: skip
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("print('x is', x)\nx * 2"),
        nbformat.v4.new_code_cell("raise ValueError('broken on purpose')"),
        nbformat.v4.new_code_cell("print('never')"),
    ]
    nbformat.write(nb, tmp_path / "nb.ipynb")
    proc = _notebook_command(tmp_path, tmp_path / "nb.ipynb", tmp_path / "out" / "nb.ipynb", {"x": "5"})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("transformer-hessian notebook: error: ")
    assert "cell 4 raised ValueError: broken on purpose" in proc.stderr
    cells = nbformat.read(tmp_path / "out" / "nb.ipynb", as_version=4).cells
    assert cells[1].source == "# Parameters\nx = 5\n"
    assert cells[2].outputs[0].text == "x is 5\n" and cells[2].outputs[1].data["text/plain"] == "10"
    assert cells[3].outputs[0].output_type == "error" and cells[3].outputs[0].ename == "ValueError"
    assert cells[4].outputs == []


# ----------------------------------------------------------------------------- Figure 2


def test_architecture_diagram_shows_the_model_sizes(tmp_path):
    from transformer_hessian.plotting.architecture_diagram import architecture_figure, draw_architecture

    rng = np.random.default_rng(8)
    for _ in range(3):
        p = int(rng.choice([1, 2, 4, 7]))
        model = {
            "image_size": p * int(rng.integers(1, 8)),
            "channels": int(rng.integers(1, 4)),
            "num_classes": int(rng.integers(2, 101)),
            "patch_size": p,
            "width": int(rng.integers(2, 200)),
            "depth": int(rng.integers(1, 13)),
            "d_k": int(rng.integers(1, 200)),
            "d_ff": int(rng.integers(1, 900)),
        }
        fig, ax = plt.subplots()
        drawn = draw_architecture(ax, model, title="t")
        text = " ".join(t.get_text() for t in ax.texts)
        tokens = (model["image_size"] // p) ** 2
        d = model["width"]
        assert drawn["sizes"]["tokens"] == tokens
        for needle in (
            f"{p}x{p} patches",
            f"L={tokens} tokens",
            f"d={d}",
            f"{model['depth']} x",
            f"W_Q, W_K: {d}x{model['d_k']}",
            f"W_V: {d}x{d}",
            f"W_1: {d}x{model['d_ff']}",
            f"W_2: {model['d_ff']}x{d}",
            f"{model['num_classes']} class logits",
            f"image {model['channels']}x{model['image_size']}x{model['image_size']}",
        ):
            assert needle in text, needle
        # post-norm order, bottom to top, and two residual arrows into the two Add boxes
        order = ["input", "embed", "attention", "add1", "norm1", "ffn", "add2", "norm2", "pool", "head"]
        assert list(drawn["boxes"]) == order
        ys = [drawn["boxes"][n].get_y() for n in order]
        assert ys == sorted(ys)
        assert len(drawn["residuals"]) == 2
        for arrow, add in zip(drawn["residuals"], ("add1", "add2")):
            box = drawn["boxes"][add]
            end = arrow._posA_posB[1]
            assert box.get_y() <= end[1] <= box.get_y() + box.get_height()
        # the repeated block frames exactly the six block boxes
        frame = drawn["frame"]
        inside = [n for n in order if frame.get_y() < drawn["boxes"][n].get_y() < frame.get_y() + frame.get_height()]
        assert inside == order[2:8]
        plt.close(fig)
    with pytest.raises(KeyError, match="d_ff"):
        draw_architecture(plt.subplots()[1], {k: v for k, v in model.items() if k != "d_ff"})
    with pytest.raises(ValueError, match="divide"):
        draw_architecture(plt.subplots()[1], {**model, "image_size": 9, "patch_size": 2})
    other = {**model, "depth": model["depth"] + 1}
    fig = architecture_figure([("a", model), ("b", other)])
    assert len(fig.axes) == 2 and [a.get_title() for a in fig.axes] == ["a", "b"]
    # one model used by both experiments: drawn once, titled with both (each line once)
    same = architecture_figure([("a\ndata", model), ("b\ndata", dict(model))])
    assert len(same.axes) == 1 and same.axes[0].get_title() == "a\ndata\nb"
    plt.close(same)
    plotting.save_figure(fig, tmp_path / "fig2")
    check_saved(tmp_path / "fig2")
