"""The matrix-free estimators (krylov, studies.spectrum) on a model that is not the project's ViT:
torch's own nn.TransformerEncoderLayer, whose attention goes through scaled_dot_product_attention.
References: reverse-over-reverse autograd (torch.autograd.functional.hessian, inside the MATH
attention backend) and the dense Hessian's eigenvalues, float64, on fresh random inputs."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel


class TinyEncoder(nn.Module):
    """Tokens of ``d_in`` features -> linear embedding -> one torch TransformerEncoderLayer -> mean -> head."""

    def __init__(self, d_in, d_model, nhead, d_ff, classes, norm_first):
        super().__init__()
        self.emb = nn.Linear(d_in, d_model)
        self.enc = nn.TransformerEncoderLayer(
            d_model, nhead, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first
        )
        self.head = nn.Linear(d_model, classes)

    def forward(self, x):
        return self.head(self.enc(self.emb(x)).mean(1))


def _setup(seed, d_model, nhead, tokens, norm_first):
    torch.manual_seed(seed)
    model = TinyEncoder(3, d_model, nhead, 2 * d_model, 3, norm_first).double()
    x = torch.randn(4, tokens, 3, dtype=torch.float64)
    y = torch.randint(0, 3, (4,))
    from transformer_hessian.core.krylov import FlatModel

    fm = FlatModel.of(model)
    loss = lambda w: fm.mean_loss(w, x, y)  # noqa: E731
    with sdpa_kernel(SDPBackend.MATH):
        H = torch.autograd.functional.hessian(loss, fm.w0.clone())
    return fm, loss, H, x, y


@pytest.mark.slow  # about 18 s
@settings(max_examples=3, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    d_model=st.just(2),  # about 80 parameters: a dense reference Hessian in seconds
    tokens=st.integers(2, 4),
    norm_first=st.booleans(),
)
def test_hvp_and_lanczos_on_torch_transformer_layer_match_the_dense_hessian(seed, d_model, tokens, norm_first):
    from transformer_hessian.core.krylov import hvp_operator, top_eigenpair
    from transformer_hessian.core.spectral import batched_hvp, top_eigenvalues

    fm, loss, H, x, y = _setup(seed, d_model, 2, tokens, norm_first)
    gen = torch.Generator().manual_seed(seed)
    V = torch.randn(3, fm.dim, generator=gen, dtype=torch.float64)
    mv = hvp_operator(loss, fm.w0)
    for v in V:
        assert torch.allclose(mv(v), H @ v, rtol=1e-9, atol=1e-11)
    HV = batched_hvp(loss, fm.w0)(V)  # vmapped, as the spectrum rule uses it
    assert torch.allclose(HV, V @ H, rtol=1e-9, atol=1e-11)
    eig = torch.linalg.eigvalsh(H)
    top = top_eigenvalues(batched_hvp(loss, fm.w0), fm.w0, k=2, steps=fm.dim, seed=seed)["eigenvalues"]
    assert top == pytest.approx([float(eig[-1]), float(eig[-2])], rel=1e-8, abs=1e-12)
    lam, u, _ = top_eigenpair(fm, x, y, n_iter=fm.dim, seed=seed)
    assert lam == pytest.approx(float(eig[-1]), rel=1e-8)
    assert torch.allclose(H @ u, lam * u, atol=1e-6 * abs(lam))


def test_operation_without_forward_ad_gets_a_clear_error():
    """A fused attention kernel called directly (not through scaled_dot_product_attention, so no
    backend choice applies) has no forward-mode derivative: the error names it and says what to do."""
    from transformer_hessian.core.krylov import forward_over_reverse

    q = torch.randn(1, 1, 3, 2)

    def fused(t):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(t, q, q)[0].sum()

    with pytest.raises(ValueError, match="without forward-mode derivatives: .*_scaled_dot_product_flash_attention"):
        forward_over_reverse(torch.func.grad(fused), (q.clone(),), (torch.ones_like(q),))
