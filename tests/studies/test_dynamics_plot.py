"""Figures 7-11 helpers: titles name data set and model, log scales, labelled colour bars."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from transformer_hessian.core.hessian import ALL_GROUPS  # noqa: E402
from transformer_hessian.studies.dynamics.plot import (  # noqa: E402
    FAMILIES,  # noqa: E402
    dynamics_figure,
    robust_log_range,
)


def _fake(d=4, dk=3, dff=5, steps=(0, 2, 4), heat=(0, 4), seed=0):
    rng = np.random.default_rng(seed)
    shapes = {"W_Q": (d, dk), "W_K": (d, dk), "W_V": (d, d), "W_1": (d, dff), "W_2": (dff, d)}
    n, k = len(steps), len(heat)
    data = {
        "steps": np.array(steps),
        "heat_steps": np.array(heat),
        "names": list(ALL_GROUPS),
        "weight_norms": rng.uniform(0.5, 2, (n, 2, 9)),
        "hessian_norms": rng.uniform(1e-6, 1, (n, 3, 9, 9)),
    }
    for g in ALL_GROUPS:
        data[f"weights_{g}"] = rng.standard_normal((n, *shapes.get(g, (d,)))).astype(np.float32)
    for g, s in shapes.items():
        p = s[0] * s[1]
        data[f"hdiag_{g}"] = rng.standard_normal((k, p, p)).astype(np.float32)
    data["hdiag_LN"] = rng.standard_normal((k, 4 * d, 4 * d)).astype(np.float32)
    data["hdiag_LN"][:, 0, :] = 0.0  # exact zeros get their own colour
    summary = {
        "steps": list(steps),
        "batch_size": 8,
        "dataset": "digits",
        "model": {"depth": 1, "width": d, "d_ff": dff, "patch_size": 2},
    }
    return data, summary


@pytest.mark.parametrize("fig_id", list(FAMILIES))
def test_every_figure_is_labelled(fig_id):
    data, summary = _fake()
    fig = dynamics_figure(fig_id, data, summary)
    title = fig._suptitle.get_text()
    assert "digits (stand-in for MNIST)" in title and "post-norm ViT" in title and FAMILIES[fig_id][0] in title
    axes = fig.get_axes()
    log_axes = [ax for ax in axes if ax.get_yscale() == "log"]
    # one Hessian-norm panel per group (its values span decades); the weight norms of _fake span
    # less than a decade (0.5 to 2), so their panel is linear (a log axis would show no label)
    assert len(log_axes) == len(FAMILIES[fig_id][1])
    weight_panel = next(ax for ax in axes if ax.get_title().startswith("weight norms"))
    assert weight_panel.get_yscale() == "linear" and weight_panel.get_xlabel() == "training step"
    assert all(ax.get_xlabel() == "training step" for ax in log_axes)
    cbars = [ax for ax in axes if ax.get_label() == "<colorbar>"]
    assert cbars and all(ax.get_ylabel() for ax in cbars)
    if fig_id == "fig10":
        assert any("grey: exactly 0" in ax.get_ylabel() for ax in cbars)
    matplotlib.pyplot.close(fig)


def test_robust_log_range_ignores_zeros_and_a_single_tiny_entry():
    m = np.full((10, 10), 1e-2)
    m[0, 0] = 1e-30
    m[1, 1] = 0.0
    m[2, 2] = 10.0
    lo, hi = robust_log_range([m])
    assert hi == pytest.approx(1.0) and lo == pytest.approx(-2.0)
    assert robust_log_range([np.zeros(3)]) == (-12.0, -11.0)
