"""Matrix-free spectrum estimators (transformer_hessian.studies.spectrum.compute) against dense Hessians.

The dense reference is curvlinops' HessianLinearOperator applied to the identity (reverse over
reverse), independent of the forward-over-reverse HVPs the estimators use. Float64, random
tiny ViTs of shapes and seeds drawn by hypothesis.
"""

import math

import numpy as np
import pytest
import torch
from conftest import tiny_vit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer_hessian import GROUPS
from transformer_hessian.config.settings import Spectrum
from transformer_hessian.core.hessian import group_layout, hessian_curvlinops, loss_of_groups
from transformer_hessian.core.krylov import FlatModel
from transformer_hessian.core.spectral import (
    batched_hvp,
    broadened_density,
    density_grid,
    hutchinson_trace,
    lanczos_tridiagonal,
    pair_spectral_norms,
    ritz,
    slq_density,
    top_eigenvalues,
)
from transformer_hessian.studies.spectrum.compute import run_spectrum, summary_section


@pytest.fixture(autouse=True)
def _float64():
    """Float64 by default inside these tests only (restored afterwards for the other modules)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _data(seed, n=6, classes=3):
    g = torch.Generator().manual_seed(seed + 17)
    return torch.randn(n, 1, 4, 4, generator=g), torch.randint(0, classes, (n,), generator=g)


def _dense_whole(model, x, y):
    """Dense Hessian over all parameters (named_parameters order), reverse over reverse with
    torch.autograd, one row per basis vector (independent of the torch.func HVPs under test).

    Not curvlinops: on torch 2.14 its HessianLinearOperator gets the entries between the
    LayerNorm scales and earlier parameters wrong (see test_curvlinops_layernorm_scale_entries)."""
    fm = FlatModel.of(model)
    w = fm.w0.clone().requires_grad_(True)
    g = torch.autograd.grad(fm.mean_loss(w, x, y), w, create_graph=True)[0]
    eye = torch.eye(fm.dim)
    return torch.stack([torch.autograd.grad(g, w, e, retain_graph=True)[0] for e in eye])


def _dense_block(model, block, x, y):
    H = hessian_curvlinops(model, block, x, y)
    for p in model.parameters():  # hessian_curvlinops switches the other parameters off
        p.requires_grad_(True)
    return H


shapes = st.tuples(
    st.integers(3, 4),  # width
    st.integers(2, 4),  # d_k
    st.integers(3, 5),  # d_ff
    st.integers(1, 2),  # depth
    st.booleans(),  # ffn bias
    st.integers(0, 10_000),  # seed
)


@pytest.mark.slow  # about 206 s
@settings(
    max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(shapes)
def test_block_estimators_match_dense_hessian(shape):
    width, d_k, d_ff, depth, bias, seed = shape
    model = tiny_vit(width, d_k, d_ff, depth, bias, seed)
    x, y = _data(seed)
    block = depth - 1
    H = _dense_block(model, block, x, y)
    evals = torch.linalg.eigvalsh(H)
    f, w = loss_of_groups(model, block, x, y)
    mv = batched_hvp(f, w, chunk=7)
    P = w.numel()
    # the operator itself: H V for a few random columns
    V = torch.randn(3, P)
    assert torch.allclose(mv(V), V @ H, rtol=1e-10, atol=1e-12)

    top = top_eigenvalues(mv, w, k=3, steps=P, seed=seed)
    assert abs(top["eigenvalues"][0] - evals[-1]) <= 1e-6 * abs(evals[-1])
    np.testing.assert_allclose(top["eigenvalues"], evals.flip(0)[:3].numpy(), rtol=1e-6, atol=1e-10)
    assert top["smallest"] == pytest.approx(float(evals[0]), rel=1e-6, abs=1e-10)

    # fewer steps than the dimension: top Ritz value a lower bound, converged to 1e-6 here
    part = top_eigenvalues(mv, w, k=1, steps=max(2, (2 * P) // 3), seed=seed + 1)
    assert part["eigenvalues"][0] <= evals[-1] * (1 + 1e-12) + 1e-14
    assert abs(part["eigenvalues"][0] - evals[-1]) <= 1e-6 * abs(evals[-1])

    # Hutchinson: within 4 standard errors of the exact trace
    tr = float(torch.trace(H))
    hut = hutchinson_trace(mv, w, n_probes=40, seed=seed)
    assert hut["stderr"] > 0 and abs(hut["mean"] - tr) <= 4 * hut["stderr"]

    # SLQ density: weights sum to 1 per probe, quadrature mean = v^T H v exactly, integrates to 1
    q = slq_density(mv, w, n_probes=3, steps=min(P, 20), seed=seed)
    np.testing.assert_allclose(q["weights"].sum(axis=1), 1.0, rtol=1e-10)
    g = torch.Generator().manual_seed(int(seed) + 271)
    vs = torch.randn(3, P, generator=g)
    vs = vs / vs.norm(dim=1, keepdim=True)
    quad = (q["nodes"] * q["weights"]).sum(axis=1)
    np.testing.assert_allclose(quad, torch.einsum("ip,pq,iq->i", vs, H, vs).numpy(), rtol=1e-9, atol=1e-12)
    # exact second moment too (Gauss quadrature is exact for degree < 2m)
    m2 = (q["nodes"] ** 2 * q["weights"]).sum(axis=1)
    np.testing.assert_allclose(m2, torch.einsum("ip,pq,iq->i", vs, H @ H, vs).numpy(), rtol=1e-9, atol=1e-12)
    grid, sigma = density_grid(q["nodes"], 2000, 0.01)
    rho = broadened_density(q["nodes"], q["weights"], grid, sigma)
    assert np.trapezoid(rho, grid) == pytest.approx(1.0, abs=1e-6)
    assert np.trapezoid(grid * rho, grid) == pytest.approx(quad.mean(), rel=1e-6, abs=1e-10)
    # with the full dimension each probe's nodes are the eigenvalues (where it has weight)
    qf = slq_density(mv, w, n_probes=1, steps=P, seed=seed)
    for node, wt in zip(qf["nodes"][0], qf["weights"][0]):
        if wt > 1e-8:
            assert float((evals - node).abs().min()) <= 1e-7 * float(evals.abs().max())


@pytest.mark.slow  # about 50 s
@settings(
    max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(shapes)
def test_pair_norms_match_numpy(shape):
    width, d_k, d_ff, depth, bias, seed = shape
    model = tiny_vit(width, d_k, d_ff, depth, bias, seed)
    x, y = _data(seed + 3)
    H = _dense_block(model, 0, x, y).numpy()
    f, w = loss_of_groups(model, 0, x, y)
    _, _, off = group_layout(model, 0)
    N = pair_spectral_norms(batched_hvp(f, w), w, off, steps=int(max(np.diff(off))), seed=seed)
    for a in range(len(GROUPS)):
        for b in range(len(GROUPS)):
            ref = np.linalg.norm(H[off[a] : off[a + 1], off[b] : off[b + 1]], 2)
            assert N[a, b] == pytest.approx(ref, rel=1e-6, abs=1e-12), (GROUPS[a], GROUPS[b])


@pytest.mark.slow  # about 151 s
def test_whole_model_top_eigenvalue_and_trace():
    model = tiny_vit(4, 3, 5, 2, False, 123)
    x, y = _data(5, n=8)
    H = _dense_whole(model, x, y)
    evals = torch.linalg.eigvalsh(H)
    fm = FlatModel.of(model)
    mv = batched_hvp(lambda p: fm.mean_loss(p, x, y), fm.w0)
    assert torch.allclose(mv(torch.eye(fm.dim)[:5]), H[:5], rtol=1e-10, atol=1e-12)
    top = top_eigenvalues(mv, fm.w0, k=2, steps=80, seed=0)
    assert abs(top["eigenvalues"][0] - float(evals[-1])) <= 1e-6 * abs(float(evals[-1]))
    assert top["residuals"][0] <= 1e-5 * abs(float(evals[-1]))
    tr = float(torch.trace(H))
    hut = hutchinson_trace(mv, fm.w0, n_probes=60, seed=9)
    assert abs(hut["mean"] - tr) <= 4 * hut["stderr"]


def test_hutchinson_is_exact_for_diagonal_and_converges():
    """Rademacher probes: z^T D z = tr(D) exactly for diagonal D (zero standard error); for a
    dense matrix the estimate approaches the trace as the number of probes grows."""
    g = torch.Generator().manual_seed(4)
    d = torch.randn(30, generator=g)
    w = torch.zeros(30)
    hut = hutchinson_trace(lambda V: V * d, w, n_probes=5, seed=1)
    assert hut["mean"] == pytest.approx(float(d.sum()), rel=1e-12) and hut["stderr"] <= 1e-12
    A = torch.randn(30, 30, generator=g)
    A = A + A.T
    small, big = (hutchinson_trace(lambda V: V @ A, w, n, seed=2) for n in (4, 4000))
    assert big["stderr"] < small["stderr"] / 10
    assert abs(big["mean"] - float(A.trace())) <= 4 * big["stderr"]
    with pytest.raises(ValueError, match="n_probes"):
        hutchinson_trace(lambda V: V @ A, w, 1)


def test_lanczos_breakdown_keeps_exact_spectrum():
    """A matrix with 3 distinct eigenvalues breaks down after 3 steps; the Ritz values of the
    continued T are still all eigenvalues and the top one is exact."""
    g = torch.Generator().manual_seed(0)
    Qm, _ = torch.linalg.qr(torch.randn(12, 12, generator=g))
    lam = torch.tensor([5.0] * 4 + [1.0] * 4 + [-2.0] * 4)
    A = Qm @ torch.diag(lam) @ Qm.T
    alpha, beta = lanczos_tridiagonal(lambda V: V @ A, torch.randn(2, 12, generator=g), 12)
    theta, S, _ = ritz(alpha, beta)
    assert torch.all((theta[..., None] - lam).abs().amin(-1) < 1e-9)
    assert torch.allclose(theta[:, -1], torch.tensor([5.0, 5.0]))
    # first-components weights: only the 3 eigenvalues seen by the start vector carry weight
    w = S[:, 0, :] ** 2
    assert torch.allclose(w.sum(1), torch.ones(2))


@pytest.mark.slow  # about 195 s
def test_run_spectrum_structure_and_interlacing():
    model = tiny_vit(3, 2, 3, 2, True, 77)
    x, y = _data(8, n=6)
    s = {"lanczos_steps": 200, "n_probes": 4, "slq_probes": 2, "pair_steps": 9, "n_eigenvalues": 3}
    r = run_spectrum(model, x, y, Spectrum.with_defaults(s))
    assert len(r["blocks"]) == 2 and r["batch_size"] == 6
    H = _dense_whole(model, x, y)
    lam = float(torch.linalg.eigvalsh(H)[-1])
    assert r["whole_model"]["top"]["eigenvalues"][0] == pytest.approx(lam, rel=1e-6)
    for k, b in enumerate(r["blocks"]):
        Hb = _dense_block(model, k, x, y)
        assert b["top"]["eigenvalues"][0] == pytest.approx(float(torch.linalg.eigvalsh(Hb)[-1]), rel=1e-6)
        assert np.asarray(b["pair_norms"]).shape == (5, 5)
        assert np.isclose(np.trapezoid(b["density"]["density"], b["density"]["grid"]), 1.0, atol=1e-4)
    assert r["interlacing"]["holds"] and all(gap >= 0 for gap in r["interlacing"]["gap"])
    sec = summary_section(r)
    assert len(sec["blocks"]) == 2 and all(math.isfinite(v) for v in sec["whole_model"]["top_eigenvalues"])


def test_curvlinops_layernorm_scale_entries():
    """Documents why the whole-model reference above is not curvlinops: with every parameter
    (LayerNorm scales included) its dense H @ I differs from reverse-over-reverse autograd, and
    central finite differences of the gradient side with autograd. If this starts failing,
    curvlinops / torch were fixed and the reference may use curvlinops again."""
    from curvlinops import HessianLinearOperator

    model = tiny_vit(3, 2, 3, 1, False, 5)
    x, y = _data(2, n=5)
    H = _dense_whole(model, x, y)
    fm = FlatModel.of(model)
    params = list(model.parameters())
    op = HessianLinearOperator(model, torch.nn.CrossEntropyLoss(), params, [(x, y)], check_deterministic=False)
    Hc = op @ torch.eye(fm.dim)
    i = sum(fm.sizes[: fm.names.index("blocks.0.gamma1")])
    e = torch.zeros(fm.dim)
    e[i] = 1.0

    def grad_at(w):
        w = w.clone().requires_grad_(True)
        return torch.autograd.grad(fm.mean_loss(w, x, y), w)[0]

    fd = (grad_at(fm.w0 + 1e-5 * e) - grad_at(fm.w0 - 1e-5 * e)) / 2e-5
    assert torch.allclose(fd, H[i], atol=1e-8)
    assert (Hc - H).abs().max() > 1e-3 and (Hc - Hc.T).abs().max() > 1e-3


def test_result_and_summary_files_roundtrip(tmp_path):
    from transformer_hessian.studies.spectrum.result import load_result, load_summary, save_result, save_summary

    obj = {"blocks": [{"block": 0}], "whole_model": {"n_params": 3}, "interlacing": {"holds": True}}
    save_result(tmp_path / "r.json", obj)
    assert load_result(tmp_path / "r.json") == obj
    save_summary(tmp_path / "s.json", {"batch_size": 4, "blocks": []})
    assert load_summary(tmp_path / "s.json") == {"batch_size": 4, "blocks": []}
    save_result(tmp_path / "bad.json", {"blocks": []})
    with pytest.raises(KeyError, match="whole_model.*spectrum_compute"):
        load_result(tmp_path / "bad.json")
