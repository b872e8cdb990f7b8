"""The model as a function of one flat parameter vector, Hessian-vector products, and
Lanczos for the extreme eigenpairs of the Hessian (float64, ``torch.func``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, jvp, vmap

# ----------------------------------------------------------------------------- flat model


@dataclass
class FlatModel:
    """A model as a function of one flat float64 parameter vector.

    ``w0`` is the concatenation of ``p.reshape(-1)`` over ``model.named_parameters()``;
    :meth:`params` maps a flat vector back to the name -> tensor dict that
    :func:`torch.func.functional_call` takes.
    """

    model: torch.nn.Module
    names: list[str]
    shapes: list[torch.Size]
    sizes: list[int]
    w0: torch.Tensor

    @classmethod
    def of(cls, model: torch.nn.Module) -> FlatModel:
        """Wrap ``model`` (its parameters are read once, detached)."""
        named = list(model.named_parameters())
        return cls(
            model=model,
            names=[n for n, _ in named],
            shapes=[p.shape for _, p in named],
            sizes=[p.numel() for _, p in named],
            w0=torch.cat([p.detach().reshape(-1) for _, p in named]),
        )

    @property
    def dim(self) -> int:
        """Number of entries of the flat parameter vector."""
        return int(self.w0.numel())

    def params(self, w: torch.Tensor) -> dict[str, torch.Tensor]:
        """The named parameters of the flat vector ``w`` (views, for torch.func.functional_call)."""
        return {n: p.reshape(s) for n, p, s in zip(self.names, torch.split(w, self.sizes), self.shapes)}

    def per_sample_losses(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``(l_1(w), .., l_n(w))``: cross-entropy of every sample at ``w``."""
        logits = functional_call(self.model, self.params(w), (x,))
        return F.cross_entropy(logits, y, reduction="none")

    def mean_loss(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``L(w) = mean_i l_i(w)`` over the given samples."""
        return self.per_sample_losses(w, x, y).mean()

    def sample_loss(self, w: torch.Tensor, xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        """``l(w)`` of one sample (``xi`` without its batch axis); vmappable."""
        return self.mean_loss(w, xi.unsqueeze(0), yi.unsqueeze(0))


def forward_over_reverse(fn: Callable, primals: tuple, tangents: tuple):
    """``torch.func.jvp(fn, primals, tangents)[1]`` for any ``nn.Module`` inside ``fn``: torch's
    ``scaled_dot_product_attention`` (``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``)
    runs with its MATH backend, the one with forward-mode derivatives (the fused CPU and CUDA
    kernels have none). An operation still without them ends in a ValueError that names it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    try:
        with sdpa_kernel(SDPBackend.MATH):
            return jvp(fn, primals, tangents)[1]
    except NotImplementedError as err:
        if "forward AD" not in str(err):
            raise
        raise ValueError(
            "Hessian-vector products here are forward-over-reverse (torch.func.jvp of grad), and the "
            f"model calls an operation without forward-mode derivatives: {str(err).splitlines()[0]} "
            "Attention through torch.nn.functional.scaled_dot_product_attention is handled (MATH backend); "
            "replace other fused kernels by their plain torch form."
        ) from err


def hvp_operator(loss: Callable[[torch.Tensor], torch.Tensor], w: torch.Tensor):
    """``v -> H v`` with ``H`` the Hessian of scalar ``loss`` at ``w`` (forward-over-reverse);
    works for any ``nn.Module`` behind ``loss`` (see :func:`forward_over_reverse`)."""
    g = grad(loss)

    def matvec(v: torch.Tensor) -> torch.Tensor:
        return forward_over_reverse(g, (w,), (v,))

    return matvec


# ----------------------------------------------------------------------------- Lanczos


def _rows(matvec):
    """A rows-to-rows matvec of ``matvec``, or of an operator (``shape``, ``@``): ``(op @ V^T)^T``."""
    if hasattr(matvec, "shape") and hasattr(matvec, "__matmul__") and not callable(matvec):
        op = matvec
        return lambda V: (op @ V.T).T
    return matvec


def lanczos_basis(matvec, v0: torch.Tensor, steps: int, gen: torch.Generator, *, resume=None, save=None, who="lanczos"):
    """The one Lanczos iteration of the package: full reorthogonalisation, ``B`` symmetric operators
    at once; :func:`lanczos` (one Ritz pair) and :func:`.spectral.lanczos_tridiagonal` (the whole
    tridiagonal) are read from it.

    ``v0`` is ``(B, P)``; ``matvec`` maps ``(B, P) -> (B, P)`` row by row. ``m = min(steps, P)``
    steps build orthonormal ``Q`` (``(m, B, P)``, ``q_1 = v0 / ||v0||``, each new vector
    Gram-Schmidt orthogonalised twice against all previous ones) and the tridiagonal
    ``T = Q^T A Q``: diagonal ``alpha`` and off-diagonal ``beta[:, :m-1]`` (each ``(B, m)``);
    ``beta[:, m-1]`` is the norm of the next residual. On breakdown (an invariant subspace) the
    basis continues with a random vector from ``gen`` orthogonal to it and ``beta = 0``: ``T``
    decouples and its eigenvalues stay eigenvalues of ``A``. ``save(state)``, when given, is called
    after every step with the whole state (steps done ``j``, ``Q``, ``alpha``, ``beta``, the next
    ``q``, the generator's state); ``resume``, such a state, continues from it to the same numbers.
    Returns ``(Q, alpha, beta)``; errors name ``who``."""
    B, P = v0.shape
    m = max(1, min(int(steps), P))
    if resume is not None:
        j0, Q, alpha, beta, q = resume["j"], resume["Q"], resume["alpha"], resume["beta"], resume["q"]
        gen.set_state(resume["gen"])
        if tuple(Q.shape) != (m, B, P):
            raise ValueError(f"{who}: a saved basis of shape {tuple(Q.shape)}, this run's is {(m, B, P)}")
    else:
        j0 = 0
        Q = v0.new_zeros(m, B, P)
        alpha, beta = v0.new_zeros(B, m), v0.new_zeros(B, m)
        norms = v0.norm(dim=1, keepdim=True)
        if torch.any(norms == 0):
            raise ValueError(f"{who}: a start vector is zero")
        q = v0 / norms
    for j in range(j0, m):
        Q[j] = q
        w = matvec(q)
        alpha[:, j] = (w * q).sum(dim=1)
        for _ in range(2):  # w -= Q Q^T w, twice ("twice is enough")
            w = w - torch.einsum("jb,jbp->bp", torch.einsum("jbp,bp->jb", Q[: j + 1], w), Q[: j + 1])
        b = w.norm(dim=1)
        beta[:, j] = b
        if j < m - 1:
            broke = b <= 1e-10 * alpha[:, : j + 1].abs().amax(dim=1).clamp_min(1e-300)
            if torch.any(broke):
                r = torch.randn(B, P, generator=gen, dtype=v0.dtype).to(v0.device)
                for _ in range(2):
                    r = r - torch.einsum("jb,jbp->bp", torch.einsum("jbp,bp->jb", Q[: j + 1], r), Q[: j + 1])
                r = r / r.norm(dim=1, keepdim=True)
                q = torch.where(broke[:, None], r, w / torch.where(broke, 1.0, b)[:, None])
                beta[:, j] = torch.where(broke, torch.zeros_like(b), b)
            else:
                q = w / b[:, None]
        if save is not None:
            save({"j": j + 1, "Q": Q, "alpha": alpha, "beta": beta, "q": q, "gen": gen.get_state()})
    return Q, alpha, beta


def lanczos(
    matvec: Callable[[torch.Tensor], torch.Tensor],
    v0: torch.Tensor,
    n_iter: int,
    which: str = "LM",
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Extreme eigenpair of symmetric operators by Lanczos with full reorthogonalisation
    (:func:`lanczos_basis`).

    ``v0`` is ``(P,)`` for one operator or ``(B, P)`` for ``B`` applied together (``matvec`` maps
    rows to rows, e.g. per-sample Hessians; or an operator with ``shape`` and ``@``).
    ``m = min(n_iter, P)`` steps; the Ritz pair of ``T = Q^T A Q`` is returned: ``which="LM"`` the
    eigenvalue of largest magnitude (the spectral norm ``||A||_2`` is its absolute value), ``"LA"``
    the largest (algebraic) one. With ``m = P`` the result is exact up to rounding.

    Returns ``(theta, vector, residual)``: ``(B,)``, ``(B, P)`` (unit norm), ``(B,)`` (no batch axis
    for a 1-D ``v0``); ``residual = ||A x - theta x||`` estimated by ``|beta_m s_m|``.
    """
    if which not in ("LM", "LA"):
        raise ValueError(f"which must be 'LM' or 'LA', got {which!r}")
    single = v0.ndim == 1
    V = v0.unsqueeze(0) if single else v0
    gen = torch.Generator(device="cpu").manual_seed(int(seed) + 7919)
    Q, alpha, beta = lanczos_basis(_rows(matvec), V, n_iter, gen)
    m, B = Q.shape[0], V.shape[0]
    T = torch.diag_embed(alpha) + torch.diag_embed(beta[:, :-1], 1) + torch.diag_embed(beta[:, :-1], -1)
    theta, S = torch.linalg.eigh(T)  # ascending
    idx = theta.abs().argmax(dim=1) if which == "LM" else torch.full((B,), m - 1, device=V.device)
    rows = torch.arange(B, device=V.device)
    th = theta[rows, idx]
    s = S[rows, :, idx]  # (B, m)
    vec = torch.einsum("jbp,bj->bp", Q, s)
    vec = vec / vec.norm(dim=1, keepdim=True)
    resid = (beta[:, -1] * s[:, -1]).abs()
    if single:
        return th[0], vec[0], resid[0]
    return th, vec, resid


def top_eigenpair(
    fm: FlatModel, x: torch.Tensor, y: torch.Tensor, n_iter: int = 20, seed: int = 0, w: torch.Tensor | None = None
) -> tuple[float, torch.Tensor, float]:
    """Largest eigenvalue ``lambda_1`` and unit eigenvector ``u`` of ``H = d^2/dw^2 mean_i l_i``.

    Lanczos (:func:`lanczos`, ``which="LA"``) on Hessian-vector products at ``w`` (default
    ``w0``) from a seeded Gaussian start. Returns ``(lambda_1, u, residual)``; ``u``'s sign is
    fixed so that its largest-magnitude entry is positive.
    """
    w = fm.w0 if w is None else w
    matvec = hvp_operator(lambda p: fm.mean_loss(p, x, y), w)
    gen = torch.Generator().manual_seed(int(seed))
    v0 = torch.randn(fm.dim, generator=gen, dtype=w.dtype).to(w.device)
    theta, u, resid = lanczos(lambda V: matvec(V[0]).unsqueeze(0), v0.unsqueeze(0), n_iter, which="LA", seed=seed)
    u = u[0]
    u = u * torch.sign(u[u.abs().argmax()])
    return float(theta[0]), u, float(resid[0])


def per_sample_spectral_norms(
    fm: FlatModel,
    x: torch.Tensor,
    y: torch.Tensor,
    n_iter: int = 20,
    seed: int = 0,
    chunk: int = 32,
    w: torch.Tensor | None = None,
) -> np.ndarray:
    """``||H_i(w)||_2 = max |eig(d^2 l_i / dw^2)|`` for every sample (batched Lanczos, ``LM``).

    Per-sample Hessian-vector products are vmapped over the samples (``chunk`` at a time);
    ``n_iter`` Lanczos steps each, from seeded Gaussian starts.
    """
    w = fm.w0 if w is None else w
    g1 = grad(fm.sample_loss)

    def hv1(v, xi, yi):
        return forward_over_reverse(lambda p: g1(p, xi, yi), (w,), (v,))

    gen = torch.Generator().manual_seed(int(seed) + 1)
    out = []
    for i in range(0, len(x), chunk):
        xs, ys = x[i : i + chunk], y[i : i + chunk]
        v0 = torch.randn(len(xs), fm.dim, generator=gen, dtype=w.dtype).to(w.device)
        theta, _, _ = lanczos(lambda V, xs=xs, ys=ys: vmap(hv1)(V, xs, ys), v0, n_iter, which="LM", seed=seed + i)
        out.append(theta.abs().cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0)
