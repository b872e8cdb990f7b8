"""Theorem 1 (arXiv 2510.16927) and the project's self-attention bound against the exact
MSE-loss Hessian from torch.func (float64, shapes and inputs drawn by hypothesis)."""

import math

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from torch.func import hessian

from transformer_hessian.studies.bounds.attention import attention_bound, attention_bound_paper

NAMES = ("W_Q", "W_K", "W_V")


def attention_out(X, WQ, WK, WV):
    A = torch.softmax(X @ WQ @ WK.T @ X.T / math.sqrt(WQ.shape[1]), dim=-1)
    return A @ X @ WV


def true_norms(X, p, target):
    """Spectral norms of the 9 blocks and of the whole Hessian of ||F - target||_F^2/(L d)."""
    L, d = X.shape

    def loss(WQ, WK, WV):
        return ((attention_out(X, WQ, WK, WV) - target) ** 2).sum() / (L * d)

    H = hessian(loss, argnums=(0, 1, 2))(*(p[n] for n in NAMES))
    sizes = [p[n].numel() for n in NAMES]
    blocks = {(a, b): H[i][j].reshape(sizes[i], sizes[j]) for i, a in enumerate(NAMES) for j, b in enumerate(NAMES)}
    dense = torch.cat([torch.cat([blocks[(a, b)] for b in NAMES], 1) for a in NAMES], 0)
    out = {key: float(torch.linalg.matrix_norm(v, 2)) for key, v in blocks.items()}
    out["total"] = float(torch.linalg.matrix_norm(dense, 2))
    return out


def draw(seed, L, d, k, w_scale, x_scale, peak, delta):
    g = torch.Generator().manual_seed(seed)
    X = x_scale * torch.randn(L, d, generator=g, dtype=torch.float64)
    p = {
        "W_Q": w_scale * peak / delta * torch.randn(d, k, generator=g, dtype=torch.float64),
        "W_K": w_scale * delta * torch.randn(d, k, generator=g, dtype=torch.float64),
        "W_V": w_scale * torch.randn(d, d, generator=g, dtype=torch.float64),
    }
    target = torch.randn(L, d, generator=g, dtype=torch.float64)
    return X, p, target


CASES = st.tuples(
    st.integers(0, 2**31 - 1),  # seed
    st.integers(2, 5),  # L
    st.integers(1, 5),  # d_V
    st.integers(1, 4),  # d_K
    st.sampled_from([0.1, 1.0, 3.0, 10.0]),  # weight scale (large weights included)
    st.sampled_from([0.5, 1.0, 4.0]),  # input scale
    st.sampled_from([1.0, 20.0]),  # peaked attention
    st.sampled_from([1.0, 1e-2, 1e-3]),  # W_Q -> W_Q/delta, W_K -> delta W_K
)


@pytest.mark.slow  # about 7 s
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CASES, st.sampled_from(["random", "own_output"]))
@example((937, 2, 2, 2, 3.0, 4.0, 1.0, 1e-3), "own_output")  # attained: Q-Q, Q-K, K-K 2.5e-9 below
def test_project_attention_bound_holds(case, target_kind):
    """Where the bound is attained (own_output: no functional part), the two sides agree only to
    round-off amplified by the conditioning: delta = 1e-3 spreads W_Q and W_K over six decades,
    and the reference lands up to 2.5e-9 (relative) above the bound in the example above; hence
    1e-7, which still fails any bound that misses by more than round-off."""
    X, p, target = draw(*case)
    if target_kind == "own_output":  # F = Target: the functional part vanishes
        target = attention_out(X, *(p[n] for n in NAMES))
    true = true_norms(X, p, target)
    bound = attention_bound(X, p, target)
    assert set(bound) == set(true)
    for key, t in true.items():
        assert bound[key] >= t * (1 - 1e-7) - 1e-12, (key, bound[key], t)


def test_project_attention_bound_is_tight_for_VV_without_functional_part():
    """H(V,V) = 2/(L d) (M_1^T M_1 (x) I) exactly, so its bound is attained (ratio 1)."""
    X, p, target = draw(3, 4, 3, 2, 1.0, 1.0, 1.0, 1.0)
    true = true_norms(X, p, target)
    bound = attention_bound(X, p, target)
    assert bound[("W_V", "W_V")] == pytest.approx(true[("W_V", "W_V")], rel=1e-9)


def _scaled_case(delta):
    g = torch.Generator().manual_seed(0)
    L, dV, dK = 4, 3, 2
    X = torch.randn(L, dV, generator=g, dtype=torch.float64)
    WQ = torch.randn(dV, dK, generator=g, dtype=torch.float64)
    WK = torch.randn(dV, dK, generator=g, dtype=torch.float64)
    WV = torch.randn(dV, dV, generator=g, dtype=torch.float64)
    p = {"W_Q": WQ / delta, "W_K": WK * delta, "W_V": WV}
    target = attention_out(X, *(p[n] for n in NAMES))  # T = F(X): a minimiser, zero residual
    return X, p, target


@pytest.mark.parametrize("form", ["statement", "appendix"])
def test_theorem1_as_printed_fails_for_rescaled_queries_and_keys(form):
    """Counter-example (a): W_Q -> W_Q/delta, W_K -> delta W_K leaves the scores, F and the
    printed M (it never lists the (K,K) block) unchanged while ||H(K,K)|| grows like delta^-2.
    With L=4, d_V=3, d_K=2 (seed 0): ||H||/M = 2.6e-6 at delta = 1, 0.64 (statement) and 2.2
    (appendix) at delta = 1e-3, 63.6 and 269.9 at delta = 1e-4 on the machine these were first
    measured on; on an AMD EPYC machine the appendix form gave 220.4 at delta = 1e-4 (the statement
    form agrees), so the value is not pinned: at delta = 1e-4 the appendix M is sensitive to rounding."""
    ratios = {}
    for delta in (1.0, 1e-4):
        X, p, target = _scaled_case(delta)
        ratios[delta] = true_norms(X, p, target)["total"] / attention_bound_paper(X, p, target, form=form)
    assert ratios[1.0] < 1  # holds at delta = 1 ...
    assert ratios[1e-4] > 1  # ... and fails once the keys are rescaled
    assert ratios[1e-4] / ratios[1.0] > 1e6  # ||H(K,K)|| ~ delta^-2 while M does not grow


def test_theorem1_printed_M_is_invariant_under_the_rescaling():
    Ms = [attention_bound_paper(*_scaled_case(delta)) for delta in (1.0, 1e-1, 1e-3)]
    assert Ms[2] <= Ms[0] * (1 + 1e-9)


def test_proof_softmax_jacobian_norm_is_not_one_over_L():
    """The proof of Theorem 1 uses ||dA/dT||_2 <= 1/L (uniform attention only). For peaked
    attention the blockdiag norm max_l ||diag(a_l) - a_l a_l^T|| approaches 1/2."""
    from transformer_hessian.theory.vec import softmax_row_jacobian

    L = 8
    T = torch.zeros(L, L, dtype=torch.float64)
    T[:, 0] = T[:, 1] = 30.0  # two tied winners per row
    JA = softmax_row_jacobian(torch.softmax(T, -1))
    assert float(torch.linalg.matrix_norm(JA, 2)) == pytest.approx(0.5, rel=1e-6)
    assert float(torch.linalg.matrix_norm(JA, 2)) > 1 / L
    uniform = softmax_row_jacobian(torch.full((L, L), 1 / L, dtype=torch.float64))
    assert float(torch.linalg.matrix_norm(uniform, 2)) == pytest.approx(1 / L)


def test_statement_and_appendix_constants_differ_as_documented():
    """Statement uses 8 vs 2 (QQ, QK outer), 4 vs 2 (VQ outer) and sqrt(min(L, d_V)) vs
    sqrt(rank(F - T)): with the residual full rank and (Q,Q)/(Q,K) terms dominating the
    statement's M exceeds the appendix's."""
    X, p, target = draw(11, 4, 3, 2, 3.0, 2.0, 1.0, 1.0)
    assert attention_bound_paper(X, p, target, "statement") > attention_bound_paper(X, p, target, "appendix")
    with pytest.raises(ValueError):
        attention_bound_paper(X, p, target, "proof")


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 5), st.integers(2, 5), st.integers(1, 4))
def test_theorem1_holds_on_generic_random_inputs(seed, L, d, k):
    """Away from the rescaling, with unit-scale inputs, the printed M is far above the truth."""
    X, p, target = draw(seed, L, d, k, 1.0, 1.0, 1.0, 1.0)
    true = true_norms(X, p, target)["total"]
    for form in ("statement", "appendix"):
        assert attention_bound_paper(X, p, target, form) >= true
