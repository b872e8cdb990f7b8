"""Tests of transformer_hessian.studies.probe against independent float64 computations.

Dense Hessians come from torch.autograd.functional.hessian (reverse-over-reverse) of the flat
loss, per-sample gradients from a Python loop over torch.autograd.grad, running means and gradient norms from explicit loops,
and the expected squared gradient norm from an enumeration of all subsets.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.autograd.functional import hessian as _ag_hessian

from transformer_hessian.config.settings import Probe
from transformer_hessian.core import assumption1, krylov, stats
from transformer_hessian.core.krylov import FlatModel
from transformer_hessian.core.model import ModelConfig, ViT
from transformer_hessian.core.theorem7 import orderings
from transformer_hessian.studies.probe import compute, theorem7, verdicts
from transformer_hessian.util.numfmt import fmt


def tiny(seed=0, depth=1, width=3, d_k=2, d_ff=4, n=6, classes=3, scale=1.0):
    torch.manual_seed(seed)
    cfg = ModelConfig(
        image_size=4, channels=1, num_classes=classes, patch_size=2, width=width, depth=depth, d_k=d_k, d_ff=d_ff
    )
    model = ViT(cfg).double()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    x = torch.randn(n, 1, 4, 4, dtype=torch.float64)
    y = torch.randint(0, classes, (n,))
    return model, x, y


def hessian(f):
    """Dense Hessian by reverse-over-reverse autograd.

    Not torch.func.hessian: in torch 2.14 it (and jacrev(jacrev)) returns wrong mixed
    (LayerNorm weight, input) entries for F.layer_norm, an O(1) error that finite differences,
    torch.autograd and jvp(grad) all agree on (see docs/theory.md, Theorem 7 section).
    """
    return lambda w: _ag_hessian(f, w)


def dense_hessian(fm, x, y):
    return hessian(lambda w: fm.mean_loss(w, x, y))(fm.w0)


@pytest.mark.slow  # about 8 s
def test_dense_reference_is_symmetric_and_matches_finite_differences():
    model, x, y = tiny(seed=13, depth=2, n=4, scale=1.5)
    fm = FlatModel.of(model)
    H = dense_hessian(fm, x, y)
    torch.testing.assert_close(H, H.T, rtol=0, atol=1e-12)
    g = torch.func.grad(lambda w: fm.mean_loss(w, x, y))
    v = torch.randn(fm.dim, dtype=torch.float64)
    h = 1e-5
    fd = (g(fm.w0 + h * v) - g(fm.w0 - h * v)) / (2 * h)
    torch.testing.assert_close(H @ v, fd, rtol=1e-4, atol=1e-5)  # FD truncation; the torch.func error is O(1)
    hv = krylov.hvp_operator(lambda w: fm.mean_loss(w, x, y), fm.w0)(v)
    torch.testing.assert_close(hv, H @ v, rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- Lanczos


@settings(max_examples=25, deadline=None)
@given(P=st.integers(2, 30), seed=st.integers(0, 2**31 - 1), which=st.sampled_from(["LM", "LA"]))
def test_lanczos_with_full_basis_is_exact(P, seed, which):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(P, P))
    A = torch.as_tensor(A + A.T)
    ev = torch.linalg.eigvalsh(A)
    theta, vec, _ = krylov.lanczos(lambda Q: Q @ A, torch.as_tensor(rng.normal(size=P)), P, which=which)
    i = int(ev.abs().argmax()) if which == "LM" else P - 1
    assert float(theta) == pytest.approx(float(ev[i]), rel=1e-9, abs=1e-12)
    assert float(torch.linalg.norm(A @ vec - theta * vec)) <= 1e-8 * float(ev.abs().max())


def test_lanczos_survives_breakdown():
    """I + 5 e e^T has 2 distinct eigenvalues: the Krylov space breaks down after 2 steps."""
    P = 12
    e = torch.ones(P, dtype=torch.float64) / P**0.5
    A = torch.eye(P, dtype=torch.float64) + 5 * torch.outer(e, e)
    A[0, 0] -= 3.0  # a third eigen-direction with a lower value
    ev = torch.linalg.eigvalsh(A)
    theta, _, _ = krylov.lanczos(lambda Q: Q @ A, torch.ones(P, dtype=torch.float64), 10, which="LA")
    assert float(theta) == pytest.approx(float(ev[-1]), rel=1e-10)
    B = -torch.eye(P, dtype=torch.float64)  # all eigenvalues -1: a spurious 0 would win "LA"
    theta, _, _ = krylov.lanczos(lambda Q: Q @ B, torch.randn(P, dtype=torch.float64), 6, which="LA")
    assert float(theta) == pytest.approx(-1.0, rel=1e-12)


@pytest.mark.slow  # 4-8 s a case
@pytest.mark.parametrize("seed,depth", [(1, 1), (2, 2), (3, 1)])
def test_top_eigenpair_matches_dense_hessian(seed, depth):
    model, x, y = tiny(seed=seed, depth=depth, scale=2.0)
    fm = FlatModel.of(model)
    H = dense_hessian(fm, x, y)
    ev, V = torch.linalg.eigh(H)
    lam, u, _ = krylov.top_eigenpair(fm, x, y, n_iter=60, seed=seed)
    assert abs(lam - float(ev[-1])) / abs(float(ev[-1])) < 1e-6
    assert abs(float(u @ V[:, -1])) > 1 - 1e-6
    assert float(u.norm()) == pytest.approx(1.0)


@pytest.mark.slow  # about 113 s
def test_per_sample_spectral_norms_match_dense():
    model, x, y = tiny(seed=4, depth=2, n=5, scale=2.0)
    fm = FlatModel.of(model)
    got = krylov.per_sample_spectral_norms(fm, x, y, n_iter=70, chunk=2)
    for i in range(len(x)):
        Hi = hessian(lambda w, i=i: fm.sample_loss(w, x[i], y[i]))(fm.w0)
        true = float(torch.linalg.matrix_norm(Hi, 2))
        assert abs(got[i] - true) / true < 1e-6


# ----------------------------------------------------------------------------- derivatives


@pytest.mark.slow  # about 37 s
def test_directional_derivatives_match_autograd():
    model, x, y = tiny(seed=5, depth=2, n=4, scale=1.5)
    fm = FlatModel.of(model)
    d = torch.randn(fm.dim, dtype=torch.float64)
    d /= d.norm()
    w = fm.w0 + 0.1 * torch.randn(fm.dim, dtype=torch.float64)
    l0, a, c = theorem7.directional_derivatives(fm, x, y, d, w=w)
    for i in range(len(x)):

        def f(p, i=i):
            return fm.sample_loss(p, x[i], y[i])

        wi = w.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(f(wi), wi)
        Hi = hessian(f)(w)
        assert l0[i] == pytest.approx(float(f(w)), rel=1e-12)
        assert a[i] == pytest.approx(float(g @ d), rel=1e-9, abs=1e-13)
        assert c[i] == pytest.approx(float(d @ Hi @ d), rel=1e-9, abs=1e-13)


def test_per_sample_gradients_match_loop():
    model, x, y = tiny(seed=6, depth=2, n=7)
    fm = FlatModel.of(model)
    G = assumption1.per_sample_gradients(fm, x, y, chunk=3)
    for i in range(len(x)):
        out = model(x[i : i + 1])
        loss = F.cross_entropy(out, y[i : i + 1])
        grads = torch.autograd.grad(loss, list(model.parameters()))
        ref = torch.cat([g.reshape(-1) for g in grads])
        torch.testing.assert_close(G[i], ref, rtol=1e-10, atol=1e-13)


def test_flat_model_reproduces_the_model():
    model, x, y = tiny(seed=7, depth=2)
    fm = FlatModel.of(model)
    ref = F.cross_entropy(model(x), y, reduction="none")
    torch.testing.assert_close(fm.per_sample_losses(fm.w0, x, y), ref, rtol=1e-14, atol=0)
    losses = theorem7.path_losses(fm, x, y, torch.zeros(fm.dim, dtype=torch.float64), [0.0, 1.0])
    np.testing.assert_allclose(losses[0], losses[1])


# ----------------------------------------------------------------------------- running means


def test_prefix_means_and_gradient_norms_match_loops():
    rng = np.random.default_rng(3)
    n, P = 9, 4
    vals = rng.normal(size=n)
    G = rng.normal(size=(n, P)) * rng.uniform(0.1, 3, size=(n, 1))
    perms = np.stack([rng.permutation(n) for _ in range(3)])
    pm = theorem7.prefix_means(vals, perms)
    gn = assumption1.gradient_norms(G @ G.T, perms)
    for r, p in enumerate(perms):
        for k in range(1, n + 1):
            assert pm[r, k - 1] == pytest.approx(np.mean(vals[p[:k]]), rel=1e-13)
            assert gn[r, k - 1] == pytest.approx(np.linalg.norm(G[p[:k]].mean(axis=0)), rel=1e-10)
    two = theorem7.prefix_means(np.stack([vals, 2 * vals]), perms)
    np.testing.assert_allclose(two[1], 2 * pm)


@pytest.mark.parametrize("n", [3, 5, 6])
def test_expected_sq_grad_norm_is_the_subset_average(n):
    rng = np.random.default_rng(n)
    G = rng.normal(size=(n, 3)) + rng.normal(size=3)
    K = G @ G.T
    for k in range(1, n + 1):
        vals = [np.sum(G[list(c)].mean(axis=0) ** 2) for c in itertools.combinations(range(n), k)]
        assert assumption1.expected_sq_grad_norm(K, k) == pytest.approx(np.mean(vals), rel=1e-12)


def test_log_grid():
    g = stats.log_grid(2, 500, 30)
    assert g[0] == 2 and g[-1] == 500 and np.all(np.diff(g) > 0)
    with pytest.raises(ValueError):
        stats.log_grid(5, 4, 3)


# ----------------------------------------------------------------------------- checks


def test_theorem7_check_counts_match_brute_force():
    rng = np.random.default_rng(8)
    n, R = 12, 4
    ts = np.array([0.0, 0.3, -1.0])
    losses = np.abs(rng.normal(size=(3, n))) * np.array([[1.0], [1.5], [4.0]])
    L, M = float(losses[0].max()), 0.7
    res = theorem7.theorem7_check(losses, ts, L, M, R, seed=3, k_store=np.array([1, 5, 11]))
    perms = orderings(n, R, 3)
    held = held_tight = 0
    for ti, t in enumerate(ts):
        for p in perms:
            for k, gap in enumerate(running_gaps(losses[ti][p]), start=1):
                held += gap <= (2 * L + M * t * t) / (k + 1) * (1 + 1e-12)
                held_tight += gap <= (L + M * t * t) / (k + 1) * (1 + 1e-12)
    assert res["held"]["bound"] == held and res["held"]["tight"] == held_tight
    assert res["n_comparisons"] == 3 * R * (n - 1)
    assert held_tight < res["n_comparisons"]  # the loss at t = -1 is 4x larger: violations exist
    assert res["worst"]["ratio"] >= max(max(r) for r in res["ratio_max"]) - 1e-12


def running_gaps(seq):
    means = np.cumsum(seq) / np.arange(1, len(seq) + 1)
    return np.abs(np.diff(means))


def test_taylor_check_is_exact_on_quadratics_and_breaks_on_cubics():
    rng = np.random.default_rng(9)
    n = 10
    l0, a, c = rng.uniform(0, 1, n), rng.normal(size=n), rng.uniform(1, 2, n)
    ts = np.array([-0.1, -0.01, 0.0, 0.01, 0.1, 1.0])
    quad = l0 + ts[:, None] * a + 0.5 * ts[:, None] ** 2 * c
    perms = orderings(n, 3, 0)
    res = theorem7.taylor_check(quad, ts, l0, a, c, perms, np.array([2, n]), 0.1)
    assert res["full"]["t_break"] == [None, None]
    # the paper's model drops t a: relative error 2|A|/(|t| C), large for small t
    A, C = a.mean(), c.mean()
    assert res["paper"]["rel_error_median"][3][1] == pytest.approx(2 * abs(A) / (0.01 * C), rel=1e-9)
    # a cubic term e t^3 gives a relative error 2 |e t| / C_k exactly
    e = 0.2
    cubic = quad + e * ts[:, None] ** 3
    res = theorem7.taylor_check(cubic, ts, l0, a, c, perms, np.array([n]), 0.1)
    assert res["full"]["rel_error_median"][5][0] == pytest.approx(2 * e * 1.0 / C, rel=1e-9)
    # the error 2 e |t| / C is a power of |t|: the interpolated break is exact, |t| = 0.1 C / (2 e)
    assert res["full"]["break_status"] == ["crossing"]
    assert res["full"]["t_break"][0] == pytest.approx(0.1 * C / (2 * e), rel=1e-9)


def test_taylor_break_known_crossings():
    ts = np.array([-1.0, -0.1, -0.01, 0.0, 0.01, 0.1, 1.0])
    # error = 3 |t| on both sides: exceeds 0.1 from |t| = 1/30 (between the grid points 0.01 and 0.1)
    err = np.where(ts != 0, 3 * np.abs(ts), np.nan)
    b = theorem7.taylor_break(ts, err, 0.1)
    assert b["status"] == b["final_status"] == "crossing"
    assert b["t_break"] == pytest.approx(1 / 30, rel=1e-12) and b["t_break_final"] == b["t_break"]
    assert theorem7.describe_break(b) == "|t| = 0.0333"
    # asymmetric: error 30 t^2 for t > 0 (break at sqrt(1/300)), 3 |t| for t < 0: the side closer to 0 wins
    err2 = np.where(ts > 0, 30 * ts**2, err)
    b2 = theorem7.taylor_break(ts, err2, 0.1)
    assert b2["t_break"] == pytest.approx(1 / 30, rel=1e-12)
    assert b2["sides"]["+"]["first"]["t"] == pytest.approx(np.sqrt(1 / 300), rel=1e-12)
    # above the tolerance at the smallest |t| only (as a ReLU kink can do), within it further out:
    # the first break is below the probed range, the final one interpolated between 0.1 and 1
    err3 = np.array([5.0, 0.05, 0.5, np.nan, 0.5, 0.05, 5.0])
    b3 = theorem7.taylor_break(ts, err3, 0.1)
    assert b3["status"] == "below" and b3["t_break"] is None and b3["t_min"] == 0.01
    final = 10 ** (-1 + np.log10(0.1 / 0.05) / np.log10(5.0 / 0.05))
    assert b3["final_status"] == "crossing" and b3["t_break_final"] == pytest.approx(final, rel=1e-12)
    assert theorem7.describe_break(b3) == "below the probed range (|t| < 0.0100) (for good from |t| = 0.141)"
    # above the tolerance everywhere: no number invented
    b4 = theorem7.taylor_break(ts, np.where(ts != 0, 0.5, np.nan), 0.1)
    assert b4["status"] == b4["final_status"] == "below"
    assert theorem7.describe_break(b4) == "below the probed range (|t| < 0.0100)"
    # within everywhere: not within the probed range
    b5 = theorem7.taylor_break(ts, np.where(ts != 0, 0.01, np.nan), 0.1)
    assert b5["status"] == b5["final_status"] == "none" and b5["t_break"] is None
    assert theorem7.describe_break(b5) == "not within the probed range (|t| <= 1.00)"
    with pytest.raises(ValueError, match="same length"):
        theorem7.taylor_break(ts, err[:3], 0.1)


def test_taylor_break_on_a_function_with_a_known_break():
    """l(t) = exact quadratic + s max(0, |t| - t0)^3: the second-order model at 0 is exact up to
    |t| = t0 and its relative error 2 s (|t| - t0)^3 / (C t^2) reaches the tolerance at a |t*|
    found by bisection; the interpolated break lies in the grid cell around t* and, on a fine
    grid, within 0.2% of it."""
    n, C, s_, t0, tol = 4, 2.0, 50.0, 0.05, 0.1
    rng = np.random.default_rng(3)
    l0, a, c = rng.uniform(0, 1, n), rng.normal(size=n), np.full(n, C)
    lo, hi = t0, 10.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if 2 * s_ * (mid - t0) ** 3 / (C * mid**2) < tol else (lo, mid)
    t_star = 0.5 * (lo + hi)
    for n_t, rtol in ((9, 0.2), (400, 2e-3)):
        half = np.geomspace(1e-3, 1.0, n_t)
        ts = np.concatenate([-half[::-1], [0.0], half])
        kink = s_ * np.maximum(0.0, np.abs(ts) - t0) ** 3
        losses = l0 + ts[:, None] * a + 0.5 * ts[:, None] ** 2 * c + kink[:, None]
        res = theorem7.taylor_check(losses, ts, l0, a, c, orderings(n, 2, 0), np.array([n]), tol)
        b = res["full"]["breaks"][0]
        assert b["status"] == b["final_status"] == "crossing" and b["t_break_final"] == b["t_break"]
        cell = np.searchsorted(half, t_star)
        assert half[cell - 1] < b["t_break"] <= half[cell]
        assert b["t_break"] == pytest.approx(t_star, rel=rtol)


def test_zero_gradient_test_against_direct_numbers():
    rng = np.random.default_rng(4)
    n, P = 40, 7
    G = rng.normal(size=(n, P))
    # mean exactly zero and symmetric: every sign flip gives a statistic >= 0 = T, p = 1
    Gz = np.concatenate([G[:20], -G[:20]])
    z = assumption1.zero_gradient_test(Gz @ Gz.T, n_flips=300, seed=0)
    assert z["p_value"] == 1.0 and z["vanishes"] and z["floor"] == pytest.approx(0.0, abs=1e-12)
    # a mean far above the noise: rejected at the smallest attainable p, floor estimates close to ||g||
    g = np.full(P, 2.0)
    Gs = G + g
    s = assumption1.zero_gradient_test(Gs @ Gs.T, n_flips=300, seed=0)
    assert s["p_value"] == pytest.approx(1 / 301) and not s["vanishes"]
    gbar = Gs.mean(axis=0)
    s2 = ((Gs - gbar) ** 2).sum() / (n - 1)  # unbiased tr(Cov)
    assert s["floor"] == pytest.approx(np.linalg.norm(gbar), rel=1e-12)
    assert s["noise_at_n"] == pytest.approx(np.sqrt(s2 / n), rel=1e-10)
    assert s["floor_unbiased"] == pytest.approx(np.sqrt(np.linalg.norm(gbar) ** 2 - s2 / n), rel=1e-10)
    assert s["ratio"] == pytest.approx(n * np.linalg.norm(gbar) ** 2 / np.mean((Gs**2).sum(axis=1)), rel=1e-12)
    assert abs(s["floor_unbiased"] - np.linalg.norm(g)) < 0.3 * np.linalg.norm(g)


def test_zero_gradient_test_is_calibrated_under_the_null():
    """With zero-mean Gaussian per-sample gradients the p-values are uniform: the rejection rate
    at 5% over 300 data sets lies within a 99.9% binomial band; with a mean of 1.5 noise
    standard deviations of a sample mean it rejects most of the time."""
    from scipy.stats import binom

    rng = np.random.default_rng(11)
    n, P, trials = 25, 5, 300
    rejected = rejected_alt = 0
    for i in range(trials):
        G = rng.normal(size=(n, P))
        rejected += not assumption1.zero_gradient_test(G @ G.T, n_flips=199, seed=i)["vanishes"]
        Ga = G + 1.5 * np.sqrt(P / n) * np.eye(P)[0] * np.sqrt(P)
        rejected_alt += not assumption1.zero_gradient_test(Ga @ Ga.T, n_flips=199, seed=i)["vanishes"]
    lo, hi = binom.ppf([0.0005, 0.9995], trials, 0.05)
    assert lo <= rejected <= hi
    assert rejected_alt > 0.5 * trials


def test_minimiser_shift_matches_manual_gradient_descent():
    model, x, y = tiny(seed=10, depth=1, n=8)
    fm = FlatModel.of(model)
    perm = np.random.default_rng(0).permutation(8)
    res = assumption1.minimiser_shift(fm, x, y, perm, [3], steps=4, lr=0.05)

    def gd(k):
        w = fm.w0.clone()
        for _ in range(4):
            wv = w.clone().requires_grad_(True)
            loss = fm.mean_loss(wv, x[torch.as_tensor(perm[:k])], y[torch.as_tensor(perm[:k])])
            (g,) = torch.autograd.grad(loss, wv)
            w = w - 0.05 * g
        return w

    w3, w4 = gd(3), gd(4)
    row = res["rows"][0]
    assert row["shift"] == pytest.approx(float((w3 - w4).norm()), rel=1e-10)
    assert row["move"] == pytest.approx(float((w3 - fm.w0).norm()), rel=1e-10)


# ----------------------------------------------------------------------------- protocol


@pytest.fixture(scope="module")
def small_run():
    model, x, y = tiny(seed=11, depth=2, n=40, scale=1.5)
    init, _, _ = tiny(seed=12, depth=2, n=1)
    settings_ = {
        "max_samples": 30,
        "n_orderings": 6,
        "n_random_directions": 1,
        "n_t": 3,
        "n_t_linear": 0,
        "lanczos_iters": 8,
        "hessian_samples": 20,
        "curvature_samples": 4,
        "k_small": 3,
        "n_bootstrap": 20,
        "shift_ks": [2, 8],
        "shift_steps": 2,
        "shift_orderings": 2,
    }
    return compute.run_probe(model, x, y, Probe.with_defaults(settings_), init_model=init)


@pytest.mark.slow  # about 8 s
def test_run_probe_result_is_consistent(small_run):
    r = small_run
    assert r["n_samples"] == 30
    assert r["M"] == max(r["M_star"], r["M_path"]) > 0
    s = r["theorem7_summary"]
    assert 0 <= s["held_fraction"] <= 1 and s["n_comparisons"] == 2 * 7 * 6 * 29
    assert s["at_w_star"]["holds_printed"] and s["at_w_star"]["holds_tight"]
    assert s["at_w_star"]["max_ratio_printed"] <= 0.5 + 1e-12
    assert set(r["theorem7"]) == {"top eigenvector u", "random 1"}
    a1 = r["assumption1"]
    assert a1["k"][-1] == 30 and a1["grad_norm_k_mean"][-1] == pytest.approx(a1["full_grad_norm"], rel=1e-9)
    assert a1["slope_ci95"][0] <= a1["slope_ci95"][1] and "init" in a1
    assert [row["k"] for row in r["minimiser_shift"]["rows"]] == [2, 8]
    f1 = r["fig1"]["directions"]["top eigenvector u"]
    assert set(f1["curves"]) == {"3", "29"} and len(f1["t"]) == 7


def test_claim_rows_and_table(small_run):
    rows = verdicts.claim_rows(small_run, evidence="x.json")
    assert [r["id"] for r in rows] == ["theorem7_at_w_star", "theorem7_off_w_star", "assumption1_trend"]
    for r in rows:
        assert set(r) == {"id", "claim", "source", "measured", "verdict", "evidence", "rule"}
        assert r["verdict"] in {"reproduced", "not reproduced", "not testable on this data set"}
    assert rows[0]["verdict"] == "reproduced"
    a1 = small_run["assumption1"]
    zt = a1["zero_gradient_test"]
    assert rows[2]["verdict"] == ("reproduced" if zt["p_value"] >= 0.05 else "not reproduced")
    assert f"sign-flip p = {fmt(zt['p_value'])}" in rows[2]["measured"]
    assert "first exceeds 10.0% relative error (interpolated on the t grid): top eigenvector u: " in rows[1]["measured"]
    assert "first grid point" not in rows[1]["measured"]
    assert "slope" not in small_run["minimiser_shift"]  # no power law from three k
    df = verdicts.assumption1_table(small_run)
    assert list(df["k"]) == small_run["assumption1"]["k"]
    assert (df["minimiser_shift"] != "").sum() == 2


def test_block_stack_diagram_and_probe_figures(small_run):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from transformer_hessian.plotting.diagrams import BLOCK_STACK, draw_block_stack
    from transformer_hessian.studies.probe import plot as probe_plots

    fig, ax = plt.subplots()
    art = draw_block_stack(ax)
    assert len(art["boxes"]) == len(BLOCK_STACK) == 4
    assert len(art["arrows"]) == 5 + 2  # flow arrows, then the two residuals
    labels = [t.get_text() for t in art["texts"]]
    assert labels[:4] == ["Self-Attention", "LayerNorm", "FeedForward", "LayerNorm"]
    plt.close(fig)
    result = dict(small_run, dataset="digits")
    label = probe_plots.run_label(result, {"model": {"depth": 2, "width": 3, "d_ff": 4}, "n_parameters": 99})
    assert "digits" in label and "2 blocks" in label
    for fn, n_axes in (
        (probe_plots.fig1_figure, 2 * 3 + 1),
        (probe_plots.theorem7_figure, 3),
        (probe_plots.fig12_figure, 2),
    ):
        fig = fn(result, label)
        assert len(fig.axes) == n_axes
        assert " ".join(label.split()) in " ".join(fig._suptitle.get_text().split())  # wrapped title
        plt.close(fig)


def test_result_file_roundtrip_and_missing_keys(tmp_path):
    from transformer_hessian.studies.probe.result import load_probe, save_probe

    obj = {"theorem7_summary": {"n": 1}, "assumption1": {"slope": -1.0}}
    save_probe(tmp_path / "p.json", obj)
    assert load_probe(tmp_path / "p.json") == obj
    save_probe(tmp_path / "bad.json", {"theorem7_summary": {}})
    with pytest.raises(KeyError, match="assumption1.*probe"):
        load_probe(tmp_path / "bad.json")
