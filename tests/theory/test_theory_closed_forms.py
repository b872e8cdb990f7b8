"""Closed forms of transformer_hessian.theory against autograd (torch.func), float64.

Hypothesis picks the shapes (d_K != d and d_ff != d included), random gamma/beta, eps in
{0, 1e-5, 1e-1} and the seed of the random tensors; every comparison is the max relative
error max|closed - autograd| / max|autograd| <= 1e-10.
"""

from __future__ import annotations

import pytest
import torch
from helpers import rel_err
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.func import hessian, jacfwd, jacrev

from transformer_hessian import GROUPS
from transformer_hessian.core.model import PostNormBlock
from transformer_hessian.theory import (
    attention_hessian_from_loss_derivatives,
    attention_jacobians,
    attention_loss_hessian,
    attention_loss_hessian_parts,
    attention_second_derivatives,
    block_forward,
    block_hessian_from_loss_derivatives,
    block_jacobians,
    block_loss_hessian,
    block_loss_hessian_parts,
    block_output_hessian,
    commutation_matrix,
    ffn_jacobians,
    ffn_second_derivatives,
    kron,
    layernorm_hessian,
    layernorm_hessian_contract,
    layernorm_jacobian,
    softmax_row_hessian,
    softmax_row_jacobian,
)

from .builders import _attn, _ln, sample

TOL = 1e-10
ATT = ("W_Q", "W_K", "W_V")
SETTINGS = settings(max_examples=15, deadline=None)
EPS = st.sampled_from([0.0, 1e-5, 1e-1])

#: rel_err as these tests compare: by the largest entry, and against a reference that is exactly zero
#: by the absolute error
BY_MAX = dict(norm="max", absolute_at_zero=True)


def max_rel(closed: dict, ref: dict) -> float:
    """Max over blocks of max|diff| / max|ref| (denominator: the largest reference entry of
    all blocks, so that blocks which are exactly zero are compared in absolute terms)."""
    den = max(v.abs().max().item() for v in ref.values())
    return max((closed[k] - ref[k]).abs().max().item() for k in ref) / den


def ref_block(X, p, eps):
    """Block as a function of the five groups, for torch.func (independent of the theory code)."""

    def f(W):
        q = dict(p)
        q.update(W)
        Y = _ln(X + _attn(X, q), q["gamma1"], q["beta1"], eps)
        H = Y @ q["W_1"]
        if q.get("b_1") is not None:
            H = H + q["b_1"]
        S = torch.relu(H) @ q["W_2"] + Y
        if q.get("b_2") is not None:
            S = S + q["b_2"]
        return _ln(S, q["gamma2"], q["beta2"], eps)

    return f, {n: p[n] for n in GROUPS}


def to_stacked(H: dict, W: dict, n_out: int, names) -> dict:
    """torch.func nested Hessian dict -> {(i, j): (n_out * n_i) x n_j} stacked layout."""
    return {(i, j): H[i][j].reshape(n_out * W[i].numel(), W[j].numel()) for i in names for j in names}


shapes = dict(
    L=st.integers(2, 4),
    d=st.integers(3, 5),
    k=st.integers(1, 4),
    dff=st.integers(2, 6),
    eps=EPS,
    bias=st.booleans(),
    seed=st.integers(0, 10_000),
)


# ---------------------------------------------------------------------------- helpers


def test_commutation_matrix_convention():
    B = torch.randn(3, 5, dtype=torch.float64)  # n x m with n=3, m=5
    K = commutation_matrix(5, 3)
    assert torch.equal(K @ B.reshape(-1), B.T.reshape(-1))
    assert torch.equal(K.T, commutation_matrix(3, 5))
    # Magnus-Neudecker: K_{m,n} vec_c(A) = vec_c(A^T) for A (m x n); vec_c(A) = vec_r(A^T)
    A = torch.randn(5, 3, dtype=torch.float64)
    assert torch.equal(K @ A.T.reshape(-1), A.reshape(-1))


def test_kron_vec_r_rule():
    g = torch.Generator().manual_seed(1)
    A, M, B = (torch.randn(*s, generator=g, dtype=torch.float64) for s in [(3, 4), (4, 2), (2, 5)])
    assert rel_err(kron(A, B.T) @ M.reshape(-1), (A @ M @ B).reshape(-1), **BY_MAX) < 1e-14


@SETTINGS
@given(m=st.integers(1, 4), n=st.integers(2, 5), seed=st.integers(0, 10_000))
def test_softmax_derivatives(m, n, seed):
    T = torch.randn(m, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    f = lambda t: torch.softmax(t, -1)  # noqa: E731
    A = f(T)
    assert rel_err(softmax_row_jacobian(A), jacrev(f)(T).reshape(m * n, m * n), **BY_MAX) < TOL
    assert rel_err(softmax_row_hessian(A), hessian(f)(T).reshape(m * n * m * n, m * n), **BY_MAX) < TOL


# -------------------------------------------------------------------- LayerNorm (Thm 2/3)


@SETTINGS
@given(m=st.integers(1, 4), n=st.integers(3, 6), eps=EPS, seed=st.integers(0, 10_000))
def test_layernorm_jacobian_hessian(m, n, eps, seed):
    g = torch.Generator().manual_seed(seed)
    U = 2.0 * torch.randn(m, n, generator=g, dtype=torch.float64)
    gamma = 1.0 + torch.randn(n, generator=g, dtype=torch.float64)
    beta = torch.randn(n, generator=g, dtype=torch.float64)
    f = lambda u: _ln(u, gamma, beta, eps)  # noqa: E731
    assert rel_err(layernorm_jacobian(U, gamma, beta, eps), jacrev(f)(U).reshape(m * n, m * n), **BY_MAX) < TOL
    Href = hessian(f)(U).reshape(m * n * m * n, m * n)
    assert rel_err(layernorm_hessian(U, gamma, beta, eps), Href, **BY_MAX) < TOL
    G = torch.randn(m, n, generator=g, dtype=torch.float64)
    contracted = torch.einsum("a,aij->ij", G.reshape(-1), Href.reshape(m * n, m * n, m * n))
    blocks = layernorm_hessian_contract(U, gamma, eps, G)
    assert rel_err(torch.block_diag(*blocks), contracted, **BY_MAX) < TOL


# ------------------------------------------------------------------------ FFN (Lemma 1)


@SETTINGS
@given(**shapes)
def test_ffn_lemma1(L, d, k, dff, eps, bias, seed):
    X, p = sample(seed, L, d, k, dff, bias, eps)
    Y = _ln(X + _attn(X, p), p["gamma1"], p["beta1"], eps)
    b1 = p.get("b_1")

    def S(u):
        H = u["Y"] @ u["W_1"] + (b1 if b1 is not None else 0.0)
        return torch.relu(H) @ u["W_2"] + u["Y"]

    u = {"Y": Y, "W_1": p["W_1"], "W_2": p["W_2"]}
    J = jacrev(S)(u)
    got = ffn_jacobians(Y, p["W_1"], p["W_2"], b1)
    for n in u:
        assert rel_err(got[n], J[n].reshape(L * d, -1), **BY_MAX) < TOL
    H = jacfwd(jacrev(S))(u)
    got2 = ffn_second_derivatives(Y, p["W_1"], p["W_2"], b1)
    ref2 = to_stacked(H, u, L * d, tuple(u))
    assert max_rel(got2, ref2) < TOL
    for n in u:  # Lemma 1: the diagonal second derivatives vanish
        assert ref2[(n, n)].abs().max() == 0 and got2[(n, n)].abs().max() == 0


# ------------------------------------------------------------ attention (Ormaniec et al.)


@pytest.mark.slow  # about 11 s
@SETTINGS
@given(**shapes)
def test_attention_derivatives_and_loss_hessian(L, d, k, dff, eps, bias, seed):
    X, p = sample(seed, L, d, k, dff, bias, eps)
    W = {n: p[n] for n in ATT}

    def F(w):
        q = dict(p)
        q.update(w)
        return _attn(X, q)

    J = jacrev(F)(W)
    got = attention_jacobians(X, p)
    for n in ATT:
        assert rel_err(got[n], J[n].reshape(L * d, -1), **BY_MAX) < TOL
    assert max_rel(attention_second_derivatives(X, p), to_stacked(jacfwd(jacrev(F))(W), W, L * d, ATT)) < TOL
    T = torch.randn(L, d, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    loss = lambda w: ((F(w) - T) ** 2).sum() / (L * d)  # noqa: E731
    Href = hessian(loss)(W)
    ref = {(i, j): Href[i][j].reshape(W[i].numel(), W[j].numel()) for i in ATT for j in ATT}
    assert max_rel(attention_loss_hessian(X, p, T), ref) < TOL
    # outer part = J^T (2/(L d)) J (Gauss-Newton), functional part = the rest
    outer, fun = attention_loss_hessian_parts(X, p, T)
    ggn = {(i, j): 2.0 / (L * d) * J[i].reshape(L * d, -1).T @ J[j].reshape(L * d, -1) for i in ATT for j in ATT}
    assert max_rel(outer, ggn) < TOL
    assert max_rel({key: outer[key] + fun[key] for key in ref}, ref) < TOL
    assert fun[("W_V", "W_V")].abs().max() == 0  # F is linear in W_V


@pytest.mark.slow  # about 8 s
@SETTINGS
@given(**shapes)
def test_attention_loss_agnostic_form(L, d, k, dff, eps, bias, seed):
    """Any loss: block = B_i^T G B_j + (g^T (x) I) d^2F; here a random quadratic-plus-cubic loss."""
    X, p = sample(seed, L, d, k, dff, bias, eps)
    g = torch.Generator().manual_seed(seed + 7)
    M = torch.randn(L * d, L * d, generator=g, dtype=torch.float64)
    c = torch.randn(L * d, generator=g, dtype=torch.float64)
    W = {n: p[n] for n in ATT}

    def loss_of_F(Fv):
        v = Fv.reshape(-1)
        return 0.5 * v @ (M @ M.T) @ v + c @ v + (v**3).sum() / 3

    def loss(w):
        q = dict(p)
        q.update(w)
        return loss_of_F(_attn(X, q))

    Fv = _attn(X, p)
    gvec = jacrev(loss_of_F)(Fv).reshape(-1)
    Gmat = hessian(loss_of_F)(Fv).reshape(L * d, L * d)
    outer, fun = attention_hessian_from_loss_derivatives(X, p, gvec, Gmat)
    Href = hessian(loss)(W)
    ref = {(i, j): Href[i][j].reshape(W[i].numel(), W[j].numel()) for i in ATT for j in ATT}
    assert max_rel({key: outer[key] + fun[key] for key in ref}, ref) < TOL


# -------------------------------------------------------------- full block (Thms 4-5)


@pytest.mark.slow  # about 33 s
@SETTINGS
@given(**shapes)
def test_block_forward_jacobians_output_hessian(L, d, k, dff, eps, bias, seed):
    X, p = sample(seed, L, d, k, dff, bias, eps)
    blk = PostNormBlock(d, k, dff, ffn_bias=bias, eps=eps).double()
    with torch.no_grad():
        for n, v in p.items():
            getattr(blk, n).copy_(v)
        Zm = blk(X)
    assert rel_err(block_forward(X, p, eps), Zm, **BY_MAX) < 1e-13
    f, W = ref_block(X, p, eps)
    assert rel_err(f(W), Zm, **BY_MAX) < 1e-13
    J = jacrev(f)(W)
    for method in ("kron", "factored"):
        got = block_jacobians(X, p, eps, method=method)
        for n in GROUPS:
            assert rel_err(got[n], J[n].reshape(L * d, -1), **BY_MAX) < TOL, (method, n)
    ref = to_stacked(jacfwd(jacrev(f))(W), W, L * d, GROUPS)
    assert max_rel(block_output_hessian(X, p, eps), ref) < TOL


@pytest.mark.slow  # about 40 s
@SETTINGS
@given(**shapes)
def test_block_mse_loss_hessian(L, d, k, dff, eps, bias, seed):
    X, p = sample(seed, L, d, k, dff, bias, eps)
    T = torch.randn(L, d, generator=torch.Generator().manual_seed(seed + 3), dtype=torch.float64)
    f, W = ref_block(X, p, eps)
    Href = hessian(lambda w: ((f(w) - T) ** 2).sum() / (L * d))(W)
    ref = {(i, j): Href[i][j].reshape(W[i].numel(), W[j].numel()) for i in GROUPS for j in GROUPS}
    assert max_rel(block_loss_hessian(X, p, T, eps), ref) < TOL
    assert max_rel(block_loss_hessian(X, p, T, eps, materialise=True), ref) < TOL
    outer, fun = block_loss_hessian_parts(X, p, T, eps)
    J = {n: v.reshape(L * d, -1) for n, v in jacrev(f)(W).items()}
    ggn = {(i, j): 2.0 / (L * d) * J[i].T @ J[j] for i in GROUPS for j in GROUPS}
    assert max_rel(outer, ggn) < TOL
    assert max_rel({key: outer[key] + fun[key] for key in ref}, ref) < TOL


@pytest.mark.slow  # about 50 s
@SETTINGS
@given(**shapes)
def test_block_loss_agnostic_form(L, d, k, dff, eps, bias, seed):
    """Generic loss of Z (full, non-diagonal G): factored and materialised functional parts agree
    with each other and, added to B^T G B, with autograd."""
    X, p = sample(seed, L, d, k, dff, bias, eps)
    g = torch.Generator().manual_seed(seed + 11)
    M = torch.randn(L * d, L * d, generator=g, dtype=torch.float64)
    c = torch.randn(L * d, generator=g, dtype=torch.float64)

    def loss_of_Z(Z):
        v = Z.reshape(-1)
        return 0.5 * v @ (M @ M.T) @ v + c @ v + torch.sin(v).sum()

    f, W = ref_block(X, p, eps)
    Z = f(W)
    gvec = jacrev(loss_of_Z)(Z).reshape(-1)
    Gmat = hessian(loss_of_Z)(Z).reshape(L * d, L * d)
    Href = hessian(lambda w: loss_of_Z(f(w)))(W)
    ref = {(i, j): Href[i][j].reshape(W[i].numel(), W[j].numel()) for i in GROUPS for j in GROUPS}
    outer, fun = block_hessian_from_loss_derivatives(X, p, gvec, Gmat, eps)
    outer_m, fun_m = block_hessian_from_loss_derivatives(X, p, gvec, Gmat, eps, materialise=True)
    assert max_rel({key: outer[key] + fun[key] for key in ref}, ref) < TOL
    assert max_rel(fun, fun_m) < TOL
    assert max_rel(outer, outer_m) == 0.0


# ------------------------------------------------------------------ no autograd inside


@pytest.mark.slow  # about 17 s
def test_everything_runs_under_no_grad():
    """Same numbers with grad-requiring inputs and with plain tensors under torch.no_grad()."""
    from transformer_hessian.core.model import ModelConfig, ViT
    from transformer_hessian.theory import model_loss_hessian, model_loss_hessian_parts

    L, d, k, dff, eps = 3, 4, 2, 5, 1e-5
    X, p = sample(0, L, d, k, dff, True)
    T = torch.randn(L, d, dtype=torch.float64)
    g = torch.randn(L * d, dtype=torch.float64)
    G = torch.randn(L * d, L * d, dtype=torch.float64)
    G = G @ G.T
    U = torch.randn(L, d, dtype=torch.float64)
    Y = torch.randn(L, d, dtype=torch.float64)
    calls = {
        "layernorm_jacobian": lambda X, p: layernorm_jacobian(U, p["gamma1"], p["beta1"], eps),
        "layernorm_hessian": lambda X, p: layernorm_hessian(U, p["gamma1"], p["beta1"], eps),
        "ffn_jacobians": lambda X, p: ffn_jacobians(Y, p["W_1"], p["W_2"], p["b_1"]),
        "ffn_second_derivatives": lambda X, p: ffn_second_derivatives(Y, p["W_1"], p["W_2"], p["b_1"]),
        "attention_jacobians": lambda X, p: attention_jacobians(X, p),
        "attention_second_derivatives": lambda X, p: attention_second_derivatives(X, p),
        "attention_loss_hessian": lambda X, p: attention_loss_hessian(X, p, T),
        "attention_loss_hessian_parts": lambda X, p: attention_loss_hessian_parts(X, p, T),
        "block_forward": lambda X, p: block_forward(X, p, eps),
        "block_jacobians": lambda X, p: block_jacobians(X, p, eps),
        "block_jacobians_factored": lambda X, p: block_jacobians(X, p, eps, method="factored"),
        "block_output_hessian": lambda X, p: block_output_hessian(X, p, eps),
        "block_loss_hessian": lambda X, p: block_loss_hessian(X, p, T, eps),
        "block_loss_hessian_parts": lambda X, p: block_loss_hessian_parts(X, p, T, eps),
        "block_hessian_from_loss_derivatives": lambda X, p: block_hessian_from_loss_derivatives(X, p, g, G, eps),
        "block_hessian_from_loss_derivatives_mat": lambda X, p: block_hessian_from_loss_derivatives(
            X, p, g, G, eps, materialise=True
        ),
    }

    def leaves(out):
        if isinstance(out, torch.Tensor):
            return [out]
        if isinstance(out, dict):
            return [t for key in sorted(out, key=str) for t in leaves(out[key])]
        return [t for o in out for t in leaves(o)]

    Xg = X.clone().requires_grad_(True)
    pg = {n: v.clone().requires_grad_(True) for n, v in p.items()}
    for name, fn in calls.items():
        a = leaves(fn(Xg, pg))
        with torch.no_grad():
            b = leaves(fn(X, p))
        assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b)), name
        assert not any(x.requires_grad for x in a), name

    cfg = ModelConfig(image_size=4, channels=1, num_classes=3, patch_size=2, width=4, depth=1, d_k=3, d_ff=5)
    torch.manual_seed(0)
    model = ViT(cfg).double()
    imgs, labels = torch.randn(2, 1, 4, 4, dtype=torch.float64), torch.tensor([0, 2])
    H1 = model_loss_hessian(model, imgs, labels).dense
    o1, f1 = model_loss_hessian_parts(model, imgs, labels)
    with torch.no_grad():
        for q in model.parameters():
            q.requires_grad_(False)
        H2 = model_loss_hessian(model, imgs, labels).dense
        o2, f2 = model_loss_hessian_parts(model, imgs, labels)
    assert torch.equal(H1, H2) and torch.equal(o1.dense, o2.dense) and torch.equal(f1.dense, f2.dense)
    assert not H1.requires_grad


def test_bad_params_give_clear_error():
    X, p = sample(0, 3, 4, 2, 5, False)
    del p["gamma2"]
    with pytest.raises(KeyError, match="gamma2"):
        block_forward(X, p)
