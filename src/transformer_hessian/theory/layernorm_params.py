"""Closed form of the LayerNorm scale and shift rows of the loss Hessian (docs/theory.md §20).

The nine-group Hessian of Appendix A.1 (Figures 7-11) adds gamma1, beta1, gamma2, beta2 of the
block to the five matrix groups. With Y = gamma1 o xhat(U_1) + beta1 and
Z = gamma2 o xhat(S) + beta2 row by row, the per-token Jacobians are

    dS_l/dbeta1 = (dS_l/dY_l),   dS_l/dgamma1 = (dS_l/dY_l) diag(xhat1_l),
    dZ_l/dbeta2 = I,             dZ_l/dgamma2 = diag(xhat2_l),

and the functional part of the Hessian (the scalar sum_l <g_l, Z_l>, g = dl/dZ) has, against a
matrix group W with per-token factors dS_l/dW[c, (i, j)] = alpha_l[i] Phi^S_l[c, j]
(:func:`.factored._token_factors`), the blocks sum_l alpha_l[i] K_l[e, j] with

    K^beta1  = Js^T Omega_2 Phi^S,
    K^gamma1 = diag(xhat1) Js^T Omega_2 Phi^S + diag(g_Y) Jx_1 Phi^F   (Phi^F: attention only),
    K^gamma2 = diag(g) Jx_2 Phi^S,

(Jx = the LayerNorm Jacobian with gamma = 1, Js = dS/dY, Omega_2 = <g, d^2 LN_2/dS^2>,
g_Y = Js^T J_2^T g) plus the FFN's Lemma-1 cross terms for W_1 and W_2; beta2 has no
functional part and gamma2 none with itself or beta2. The Gauss-Newton part comes from the logit
Jacobian's LayerNorm columns, J^T H_CE J as for the five groups. No autograd.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from .factored import _CHUNK_TOKENS, _symmetrize
from .layernorm import layernorm_hessian_contract, layernorm_jacobian_rows, layernorm_row_stats, layernorm_vjp
from .reduced import REDUCED_GROUPS


def ln_logit_jacobian(f: SimpleNamespace, WJ: torch.Tensor, Wh: torch.Tensor) -> torch.Tensor:
    """(B, C, 4 d): L d logits_b / d[gamma1, beta1, gamma2, beta2], the scaling of the five-group
    logit Jacobian of :func:`.model_loss._model_parts` (sum over tokens, not mean). ``WJ`` =
    W_h J_2 per token (B, L, C, d)."""
    x1, _ = layernorm_row_stats(f.U1, f.eps)
    x2, _ = layernorm_row_stats(f.S, f.eps)
    WJs = WJ @ f.Js  # W_h J_2 dS/dY, (B, L, C, d)
    Bn, L = x1.shape[:2]
    return torch.cat(
        [
            (WJs * x1.unsqueeze(-2)).sum(1),
            WJs.sum(1),
            Wh * x2.sum(1).unsqueeze(-2),
            (L * Wh).expand(Bn, *Wh.shape),
        ],
        dim=-1,
    )


def ln_columns(
    f: SimpleNamespace,
    g: torch.Tensor,
    WJ: torch.Tensor,
    Vb: torch.Tensor,
    Wh: torch.Tensor,
    Jw: torch.Tensor,
    off_r: dict,
) -> torch.Tensor:
    """The LayerNorm columns H[:, LN] ((P + 4 d) x 4 d) of the loss Hessian over the nine groups
    (rows W_Q, W_K, W_V, W_1, W_2, gamma1, beta1, gamma2, beta2; columns gamma1, beta1, gamma2,
    beta2), from the per-token factors ``f`` (:func:`.factored._token_factors`, ``all_groups``
    False), ``g`` = dl/dZ (B, L, d), ``WJ`` = W_h J_2 (B, L, C, d), the CE square-root factor ``Vb``
    (B, C, C-1) and the five-group weighted logit Jacobian ``Jw`` (B (C-1), P') over the reduced
    groups with offsets ``off_r`` (all from :func:`.model_loss._model_parts`)."""
    p = f.p
    d = f.X.shape[-1]
    # --- Gauss-Newton part: the logit Jacobian's LayerNorm columns, weighted like Jw
    JwN = torch.einsum("bor,boP->brP", Vb, ln_logit_jacobian(f, WJ, Wh)).reshape(-1, 4 * d)
    outer_w = Jw.T @ JwN  # (P', 4 d), reduced groups
    outer_n = JwN.T @ JwN  # (4 d, 4 d)
    t = _ln_token_factors(f, g)
    fun_w = _ln_functional_rows(f, t)
    ln = _ln_ln_block(t, outer_n, d)
    # --- reduced rows W_QK -> W_Q, W_K (docs/theory.md §19), assembled in GROUPS order
    red = {nm: outer_w[off_r[nm]] + fun_w[nm] for nm in REDUCED_GROUPS}
    tqk = red.pop("W_QK").view(d, d, 4 * d)  # [i, j, column]
    rows = [
        torch.einsum("ijc,ja->iac", tqk, p["W_K"]).reshape(-1, 4 * d),
        torch.einsum("ijc,ia->jac", tqk, p["W_Q"]).reshape(-1, 4 * d),
        red["W_V"],
        red["W_1"],
        red["W_2"],
        ln,
    ]
    return torch.cat(rows, dim=0)


def _ln_token_factors(f: SimpleNamespace, g: torch.Tensor) -> SimpleNamespace:
    """The per-token factors of the functional part of :func:`ln_columns`, flattened to (B L, ...)
    rows: xhat1, g_S, Js, Q = Js^T Omega_2, G2 = diag(g) Jx_2, E1 = diag(g_Y) Jx_1, the mask."""
    p, eps = f.p, f.eps
    Bn, L, d = f.X.shape
    n = Bn * L
    ones = torch.ones(d, dtype=f.X.dtype, device=f.X.device)

    def flat(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(n, *x.shape[2:])

    gs = layernorm_vjp(f.S, p["gamma2"], eps, g)
    Om2 = layernorm_hessian_contract(f.S, p["gamma2"], eps, g)
    gy = (f.Js.transpose(-1, -2) @ gs.unsqueeze(-1)).squeeze(-1)
    Js = flat(f.Js)
    return SimpleNamespace(
        n=n,
        flat=flat,
        x1=flat(layernorm_row_stats(f.U1, eps)[0]),
        Js=Js,
        Q=Js.transpose(-1, -2) @ flat(Om2),  # Js^T Omega_2, [e, c]
        G2=flat(g).unsqueeze(-1) * flat(layernorm_jacobian_rows(f.S, ones, eps)),  # diag(g) Jx_2
        E1=flat(gy).unsqueeze(-1) * flat(layernorm_jacobian_rows(f.U1, ones, eps)),  # diag(g_Y) Jx_1
        gsl=flat(gs),
        Ml=flat(f.M),
    )


def _ln_functional_rows(f: SimpleNamespace, t: SimpleNamespace) -> dict[str, torch.Tensor]:
    """The functional part of the LayerNorm columns, per reduced group (rows (i, j) of the group,
    columns gamma1, beta1, gamma2, beta2), with the FFN's Lemma-1 cross terms."""
    W1, W2 = f.p["W_1"], f.p["W_2"]
    d = f.X.shape[-1]
    Q, G2, x1, Ml, E1, n = t.Q, t.G2, t.x1, t.Ml, t.E1, t.n
    phi_s = {nm: t.flat(f.phi_s[nm]) for nm in ("W_QK", "W_V")}
    phi_qk = t.flat(f.phi_f["W_QK"])

    def k_of(name: str, sl: slice) -> torch.Tensor:
        """(tokens, 3, d, q): K^gamma1, K^beta1, K^gamma2 of group ``name`` on tokens ``sl``."""
        q, g2, x = Q[sl], G2[sl], x1[sl].unsqueeze(-1)
        if name == "W_1":  # Phi^S[c, f] = W_2[f, c] m_f
            m = Ml[sl].unsqueeze(-2)
            kb, k2 = (q @ W2.T).mul_(m), (g2 @ W2.T).mul_(m)
            kg = x * kb
        elif name == "W_2":  # Phi^S = I
            kb, k2 = q, g2
            kg = x * q
        else:
            ps = phi_s[name][sl]
            kb, k2 = q @ ps, g2 @ ps
            kg = (x * kb).add_(E1[sl] @ phi_qk[sl] if name == "W_QK" else E1[sl])
        return torch.stack([kg, kb, k2], dim=1)

    fun_w = {}
    for name in REDUCED_GROUPS:
        a = t.flat(f.alpha[name])
        acc = None
        for c0 in range(0, n, _CHUNK_TOKENS):
            sl = slice(c0, c0 + _CHUNK_TOKENS)
            K = k_of(name, sl)
            prod = a[sl].T @ K.reshape(K.shape[0], -1)
            acc = prod if acc is None else acc.add_(prod)
        pw, qw = a.shape[1], K.shape[-1]
        # [i, (l, e), j] -> rows (i, j), columns (l, e); the fourth (beta2) column block is zero
        blk = acc.view(pw, 3 * d, qw).permute(0, 2, 1).reshape(pw * qw, 3 * d)
        fun_w[name] = torch.cat([blk, blk.new_zeros(pw * qw, d)], dim=1)
    # Lemma-1 cross terms of the FFN (Y x W_1, Y x W_2) along dY/dgamma1, dY/dbeta1, contracted with g_S
    gsl = t.gsl
    h = Ml * (gsl @ W2.T)  # m_f (W_2 g_S)_f
    dff = W1.shape[1]
    t1 = fun_w["W_1"].view(d, dff, 4, d)  # rows (a, f), columns (group, e); nonzero at e = a
    t1[:, :, :2, :].diagonal(0, 0, 3).add_(torch.stack([(x1.T @ h).T, h.sum(0).unsqueeze(-1).expand(dff, d)], 1))
    xm = (x1.unsqueeze(-1) * Ml.unsqueeze(-2)).reshape(n, d * dff)  # xhat1_e m_f
    cg = (xm.T @ gsl).view(d, dff, d)  # [e, f, c] = sum_n xhat1_e m_f g_S,c
    cb = Ml.T @ gsl  # [f, c]
    t2 = fun_w["W_2"].view(dff, d, 4, d)  # rows (f, c), columns (group, e)
    t2[:, :, 0, :].add_((cg * W1.unsqueeze(-1)).permute(1, 2, 0))
    t2[:, :, 1, :].add_(cb.unsqueeze(-1) * W1.T.unsqueeze(1))
    return fun_w


def _ln_ln_block(t: SimpleNamespace, outer_n: torch.Tensor, d: int) -> torch.Tensor:
    """The LayerNorm x LayerNorm block (4 d x 4 d; gamma1, beta1, gamma2, beta2): the Gauss-Newton
    part ``outer_n`` (added to in place) plus the functional part."""
    x1 = t.x1
    QJ = t.Q @ t.Js  # Js^T Omega_2 Js
    G2J = t.G2 @ t.Js  # diag(g) Jx_2 Js
    ln = outer_n
    gg = torch.einsum("ne,nef,nf->ef", x1, QJ, x1)
    gb = torch.einsum("ne,nef->ef", x1, QJ)
    bb = QJ.sum(0)
    cg1 = torch.einsum("nef,nf->ef", G2J, x1)  # (gamma2, gamma1)
    cb1 = G2J.sum(0)  # (gamma2, beta1)
    blocks = ((0, 0, gg), (0, 1, gb), (1, 1, bb), (2, 0, cg1), (2, 1, cb1))
    for r, c, b in blocks:
        ln[r * d : (r + 1) * d, c * d : (c + 1) * d] += b
        if r != c:
            ln[c * d : (c + 1) * d, r * d : (r + 1) * d] += b.T
    _symmetrize(ln)
    return ln


__all__ = ["ln_columns", "ln_logit_jacobian"]
