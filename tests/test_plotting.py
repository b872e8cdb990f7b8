"""Tests of transformer_hessian.plotting and of the papermill notebooks that use it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from transformer_hessian import GROUPS, plotting  # noqa: E402
from transformer_hessian.landscape import analyse_landscape  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"

# A small block layout: d = 4, d_K = 2, d_ff = 6.
SHAPES = np.array([[4, 2], [4, 2], [4, 4], [4, 6], [6, 4]])
OFFSETS = np.concatenate([[0], np.cumsum(SHAPES.prod(axis=1))])
P = int(OFFSETS[-1])


@pytest.fixture(autouse=True)
def _close_figures():
    plotting.set_theme()
    yield
    plt.close("all")


def synthetic_hessian(seed: int, scale: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((P, P)) * 10.0 ** rng.uniform(-9, 0, size=(P, P))
    h = scale * (a + a.T)
    h[:3, :] = 0.0  # exact zeros, as in rows of parameters that get no gradient
    h[:, :3] = 0.0
    return h


def norms_doc(h: np.ndarray, stage: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    blocks = []
    for i, row in enumerate(GROUPS):
        for j, col in enumerate(GROUPS):
            b = h[OFFSETS[i] : OFFSETS[i + 1], OFFSETS[j] : OFFSETS[j + 1]]
            blocks.append(
                {"row": row, "col": col, "fro": float(np.linalg.norm(b)),
                 "spectral": float(np.linalg.norm(b, 2)), "max_abs": float(np.abs(b).max())}
            )
    weights = {
        g: {"spectral": float(rng.uniform(0.5, 3)), "fro": float(rng.uniform(2, 9))}
        for g in GROUPS
    }
    return {"stage": stage, "blocks": blocks, "weights": weights}


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


def test_set_theme_sets_shared_style():
    plotting.set_theme()
    assert plt.rcParams["savefig.dpi"] == 300
    assert plt.rcParams["figure.dpi"] == 150
    assert plt.rcParams["pdf.fonttype"] == 42
    assert "DejaVu Sans" in plt.rcParams["font.sans-serif"]


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


def test_hessian_heatmap_scale_ticks_and_zeros(tmp_path):
    h_init, h_trained = synthetic_hessian(0), synthetic_hessian(1, scale=50.0)
    vmin, vmax = plotting.shared_log_range(h_init, h_trained)
    fig, ax = plt.subplots()
    image = plotting.hessian_heatmap(ax, h_init, OFFSETS, list(GROUPS), vmin, vmax, "init")
    assert image.get_clim() == (vmin, vmax)
    shown = np.asarray(image.get_array())
    assert shown.shape == (P, P)
    np.testing.assert_allclose(shown[:3, :], vmin)  # zeros take the colour of vmin
    nz = h_init != 0
    expected = np.clip(np.log10(np.abs(h_init[nz])), vmin, vmax)
    np.testing.assert_allclose(shown[nz], expected)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["Q", "K", "V", "W1", "W2"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["Q", "K", "V", "W1", "W2"]
    np.testing.assert_allclose(ax.get_xticks(), (OFFSETS[:-1] + OFFSETS[1:]) / 2 - 0.5)
    assert ax.get_title() == "init"
    cbar_axes = [a for a in fig.axes if a is not ax]
    assert len(cbar_axes) == 1 and cbar_axes[0].get_ylabel() == "log10 |H|"
    assert len(ax.lines) == 2 * (len(GROUPS) - 1)  # block boundaries, both directions
    plotting.save_figure(fig, tmp_path / "fig3")
    check_saved(tmp_path / "fig3")

    # the trained figure uses the same range
    fig4 = plotting.hessian_figure(
        {"H": h_trained, "offsets": OFFSETS, "names": np.array(GROUPS)}, vmin, vmax
    )
    assert fig4.axes[0].images[0].get_clim() == (vmin, vmax)


def test_hessian_heatmap_rejects_bad_offsets():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="offsets"):
        plotting.hessian_heatmap(ax, np.eye(P), OFFSETS[:-1], list(GROUPS), -3, 0)
    with pytest.raises(ValueError, match="offsets"):
        plotting.hessian_heatmap(ax, np.eye(P + 1), OFFSETS, list(GROUPS), -3, 0)


def test_load_hessian_roundtrip_and_missing_file(tmp_path):
    h = synthetic_hessian(2)
    path = tmp_path / "init.npz"
    np.savez(path, H=h, names=np.array(GROUPS), offsets=OFFSETS, shapes=SHAPES)
    loaded = plotting.load_hessian(path)
    np.testing.assert_array_equal(loaded["H"], h)
    assert loaded["names"] == list(GROUPS)
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        plotting.load_hessian(tmp_path / "missing.npz")


# ----------------------------------------------------------------------------- Figure 5


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
        e[f] for doc in (init, trained) for e in doc["blocks"] if e["row"] == e["col"]
        for f in ("spectral", "fro")
    )
    np.testing.assert_allclose(heights, expected)
    plotting.save_figure(fig, tmp_path / "fig5")
    check_saved(tmp_path / "fig5")

    # paths work too, and a malformed document names the missing key
    p_init, p_trained = tmp_path / "i.json", tmp_path / "t.json"
    p_init.write_text(json.dumps(init))
    p_trained.write_text(json.dumps({"stage": "trained", "blocks": []}))
    with pytest.raises(KeyError, match="weights"):
        plotting.norms_figure(p_init, p_trained)


# ----------------------------------------------------------------------------- Figure 6


def test_landscape_figure_legend_shows_slope(tmp_path):
    res = landscape_result()
    fig = plotting.landscape_figure(res)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    label = plotting.slope_label(res)
    assert label in legend
    assert label.startswith(f"fitted slope = {res['slope']:.2f}"[:17])
    assert "(95% CI)" in label
    assert any("2L/(k+1)" in t for t in legend) and any("1/k" in t for t in legend)
    plotting.save_figure(fig, tmp_path / "fig6")
    check_saved(tmp_path / "fig6")

    path = tmp_path / "landscape.json"
    path.write_text(json.dumps(res))
    fig = plotting.landscape_figure(path, show_bound=False)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert not any("2L/(k+1)" in t for t in legend)


def test_slope_label_format():
    res = {"slope": -0.98123, "slope_ci95": [-1.0212, -0.9476]}
    assert plotting.slope_label(res) == "fitted slope = -0.98 [-1.02, -0.95] (95% CI)"
    narrow = {"slope": -1.0001, "slope_ci95": [-1.003, -0.998]}
    assert plotting.slope_label(narrow) == "fitted slope = -1.000 [-1.003, -0.998] (95% CI)"


# ----------------------------------------------------------------------------- notebooks


NOTEBOOK_NAMES = [
    "fig3_fig4_hessian_heatmaps.ipynb",
    "fig5_norms.ipynb",
    "fig6_landscape.ipynb",
]


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
    assert "transformer_hessian" in source and "save_figure" in source
    assert "def " not in source  # no logic in notebooks, only helper calls


def write_results(root: Path) -> dict[str, dict[str, str]]:
    hdir = root / "results" / "exp" / "hessian"
    hdir.mkdir(parents=True)
    h_init, h_trained = synthetic_hessian(0), synthetic_hessian(1, scale=30.0)
    for stage, h in (("init", h_init), ("trained", h_trained)):
        np.savez(hdir / f"{stage}.npz", H=h, names=np.array(GROUPS), offsets=OFFSETS,
                 shapes=SHAPES)
        (hdir / f"{stage}_norms.json").write_text(json.dumps(norms_doc(h, stage, 3)))
    ldir = root / "results" / "exp" / "landscape"
    ldir.mkdir(parents=True)
    (ldir / "landscape.json").write_text(json.dumps(landscape_result()))
    figs = root / "paper" / "figures"
    return {
        "fig3_fig4_hessian_heatmaps.ipynb": {
            "hessian_init": str(hdir / "init.npz"),
            "hessian_trained": str(hdir / "trained.npz"),
            "out_fig3": str(figs / "fig3"),
            "out_fig4": str(figs / "fig4"),
        },
        "fig5_norms.ipynb": {
            "norms_init": str(hdir / "init_norms.json"),
            "norms_trained": str(hdir / "trained_norms.json"),
            "out_fig5": str(figs / "fig5"),
        },
        "fig6_landscape.ipynb": {
            "landscape": str(ldir / "landscape.json"),
            "out_fig6": str(figs / "fig6"),
        },
    }


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_notebook_executes_with_papermill(name, tmp_path, monkeypatch):
    papermill = pytest.importorskip("papermill")
    params = write_results(tmp_path)[name]
    # The kernel is a subprocess: make the package importable there however pytest found it.
    src = str(REPO / "src")
    paths = [src, os.environ.get("PYTHONPATH")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # let the kernel use its inline backend
    out = tmp_path / "executed" / name
    out.parent.mkdir()
    papermill.execute_notebook(
        str(NOTEBOOKS / name), str(out), parameters=params, kernel_name="python3",
        cwd=str(tmp_path), progress_bar=False,
    )
    executed = nbformat.read(out, as_version=4)
    outputs = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 1  # figures displayed
    for key, value in params.items():
        if key.startswith("out_"):
            check_saved(Path(value))
