"""Exact Hessian of the pipeline's own loss: cross-entropy on the mean-pooled ViT head.

The ViT of :mod:`transformer_hessian.core.model` feeds its last block's output Z through a mean over
tokens and a linear head; the loss is the batch mean of cross-entropy on those logits. This
module turns that loss into the gradient and Hessian w.r.t. Z and assembles the dense Hessian
over the block's five groups from the factored closed forms.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from .factored import _copy_transposed, _reduced_upper, _symmetrize, _token_factors, _write_sym
from .layout import HessianResult, _prep, dense_to_blocks, group_offsets, group_shapes
from .reduced import REDUCED_GROUPS, _expand_pair, reduced_shapes


def _sym_gram(A: torch.Tensor) -> torch.Tensor:
    """A^T A, exactly symmetric, from the three upper tiles of a 2 x 2 split (three quarters of
    the gemm); the two diagonal tiles are symmetrised, the lower tile is the upper one's transpose."""
    h = A.shape[1] // 2
    A0, A1 = A[:, :h], A[:, h:]
    G = A.new_empty(A.shape[1], A.shape[1])
    G[:h, :h] = A0.T @ A0
    G[:h, h:] = A0.T @ A1
    G[h:, h:] = A1.T @ A1
    _copy_transposed(G[h:, :h], G[:h, h:])
    _symmetrize(G[:h, :h])
    _symmetrize(G[h:, h:])
    return G


def _model_parts(model, images: torch.Tensor, labels: torch.Tensor, block: int, split: bool, ln: bool = False):
    """The closed-form Hessian of the pipeline's loss over the five groups (``split``: its two
    parts); ``ln=True`` (not with ``split``): the nine-group Hessian, the five-group part
    computed exactly as without ``ln`` and the LayerNorm rows and columns from
    :func:`.layernorm_params.ln_columns` on the same per-token factors."""
    depth = len(model.blocks)
    if block < 0:
        block += depth
    if block != depth - 1:
        raise ValueError(
            f"model_loss_hessian: block={block} is not the last block of a depth-{depth} model; "
            "the closed form covers the block that feeds the mean-pool and head directly "
            "(use a single-block model, model.depth == 1, or the last block)"
        )
    with torch.no_grad():
        blk = model.blocks[block]
        X = model.block_input(images, block).detach()
        bh = model.head.bias.detach() if model.head.bias is not None else None
        return token_loss_parts(
            X, _prep(blk.theory_params()), blk.eps, model.head.weight.detach(), bh, labels, split=split, ln=ln
        )


def token_loss_parts(
    X: torch.Tensor,
    p: dict,
    eps: float,
    Wh: torch.Tensor,
    bh: torch.Tensor | None,
    labels: torch.Tensor,
    *,
    split: bool = False,
    ln: bool = False,
):
    """The closed form of :func:`_model_parts` from the block's input tokens ``X`` (B, L, d), its
    detached parameters ``p`` (:func:`.layout.detached_block_params`), LayerNorm ``eps`` and the
    head (``Wh`` (C, d), ``bh`` or None): the loss is the batch mean of cross-entropy on
    ``Wh mean_t(Z_t) + bh``. Same return values as :func:`_model_parts`."""
    with torch.no_grad():
        d = X.shape[-1]
        f = _token_factors(X, p, eps, all_groups=False)
        c = _ce_factors(f, p, Wh, bh, labels)
        shapes = group_shapes(p)
        off = group_offsets(shapes)
        P = off["W_2"].stop
        if ln:  # nine groups: the five-group part is written into the top-left view
            H9 = X.new_empty(P + 4 * d, P + 4 * d)
            H_outer = H9[:P, :P]
        else:
            H_outer = X.new_empty(P, P)
        H_fun = X.new_empty(P, P) if split else H_outer
        _write_five_groups(f, c, H_outer, H_fun, off, split)
        if ln:
            from .layernorm_params import ln_columns

            cols = ln_columns(f, c.g, c.WJ, c.Vb, Wh, c.Jw, c.off_r)
            H9[:, P:] = cols
            _copy_transposed(H9[P:, :P], cols[:P])
            return H9
        if split:
            return (
                HessianResult(H_outer, dense_to_blocks(H_outer, shapes)),
                HessianResult(H_fun, dense_to_blocks(H_fun, shapes)),
            )
        return HessianResult(H_outer, dense_to_blocks(H_outer, shapes))


def _ce_factors(f, p: dict, Wh: torch.Tensor, bh: torch.Tensor | None, labels: torch.Tensor) -> SimpleNamespace:
    """The cross-entropy head's factors of :func:`token_loss_parts`: the loss gradient g = dl/dZ
    (B, L, d), W_h J_2 per token (``WJ``), the square-root factor ``Vb`` of the CE Hessian and the
    weighted logit Jacobian ``Jw`` over the reduced groups (offsets ``off_r``), whose Gram matrix
    is the Gauss-Newton part."""
    X = f.X
    Bn, L, d = X.shape
    logits = f.Z.mean(1) @ Wh.T
    if bh is not None:
        logits = logits + bh
    prob = torch.softmax(logits, -1)
    onehot = torch.nn.functional.one_hot(labels.to(X.device).long(), Wh.shape[0]).to(X.dtype)
    # d logits / d vec_r(Z_b) = (1/L) (1_L^T (x) W_h); CE: grad p - e_y, Hessian diag(p) - p p^T.
    red_shapes = reduced_shapes(p)
    off_r = group_offsets(red_shapes, REDUCED_GROUPS)
    # d logits_b / d w over the reduced groups: sum_l alpha_l (x) (W_h J_2,l Phi^S_l) / L;
    # W_h J_2,l first (C rows, not d); Phi^S of W_2 is the identity, of W_1 W_2^T diag(m)
    C = Wh.shape[0]
    WJ = Wh @ f.j2  # (B, L, C, d)
    right = {
        "W_QK": WJ @ f.phi_s["W_QK"],
        "W_V": WJ @ f.phi_s["W_V"],
        "W_1": (WJ @ p["W_2"].T) * f.M.unsqueeze(-2),
        "W_2": WJ,
    }
    Jl = torch.cat(
        [
            (f.alpha[n].transpose(1, 2) @ right.pop(n).reshape(Bn, L, -1))
            .view(Bn, -1, C, red_shapes[n][1])
            .transpose(1, 2)
            .reshape(Bn, C, -1)
            for n in REDUCED_GROUPS
        ],
        dim=2,
    )  # (B, C, P'): L d logits_b / d w
    # outer = sum_b J_b^T (diag p_b - p_b p_b^T) J_b / B = Jw^T Jw with Jw_b = V_b^T J_b / sqrt(B),
    # V_b sqrt-eigen factor of the CE Hessian (rank C - 1: its null vector is the ones vector)
    Hce = torch.diag_embed(prob) - prob.unsqueeze(-1) * prob.unsqueeze(-2)
    lam, vec = torch.linalg.eigh(Hce)
    lam, vec = lam[:, 1:].clamp_min(0.0), vec[:, :, 1:]  # drop the zero eigenvalue
    # (B, C, C-1): V_b V_b^T = Hce_b / (B L^2), the mean's 1/B and the logit Jacobian's 1/L folded in
    Vb = vec * (lam.sqrt() / (L * math.sqrt(Bn))).unsqueeze(-2)
    Jw = torch.einsum("bor,boP->brP", Vb, Jl).reshape(-1, off_r["W_2"].stop)
    del Jl
    g = ((prob - onehot) @ Wh / (Bn * L)).unsqueeze(1).expand(Bn, L, d)
    return SimpleNamespace(g=g, WJ=WJ, Vb=Vb, Jw=Jw, off_r=off_r, red_shapes=red_shapes)


def _write_five_groups(
    f, c: SimpleNamespace, H_outer: torch.Tensor, H_fun: torch.Tensor, off: dict, split: bool
) -> None:
    """Both parts over the five groups into ``H_outer`` / ``H_fun`` (the same matrix unless
    ``split``): block by block in the reduced groups (the Gram matrix of ``c.Jw`` and the token
    sums of :func:`.factored._reduced_upper`), then W_QK -> (W_Q, W_K) (:func:`.reduced._expand_pair`)."""
    p = f.p
    WQ, WK = p["W_Q"], p["W_K"]
    red_shapes, off_r, Jw = c.red_shapes, c.off_r, c.Jw
    stream = _reduced_upper(f, c.g)
    _, _, grad = next(stream)
    for gi, gj, t4 in stream:
        (pi, qi), (pj, qj) = red_shapes[gi], red_shapes[gj]
        Ji = Jw[:, off_r[gi]]
        o2 = _sym_gram(Ji) if gi == gj else Ji.T @ Jw[:, off_r[gj]]
        o4 = o2.view(pi, qi, pj, qj).permute(0, 2, 1, 3)
        if split:
            for a, b, blk in _expand_pair(gi, gj, o4, WQ, WK):
                _write_sym(H_outer, off, a, b, blk)
        else:
            t4.add_(o4)
        for a, b, blk in _expand_pair(gi, gj, t4, WQ, WK, grad):
            _write_sym(H_fun, off, a, b, blk)
        del t4, o4
    # exact symmetry of the diagonal blocks: those of W_V, W_1, W_2 are sums of exactly
    # symmetric parts (_unpack, _sym_gram); the expansion W_QK -> W_Q, W_K rounds unevenly
    for nm in ("W_Q", "W_K"):
        for H in {id(H_outer): H_outer, id(H_fun): H_fun}.values():
            _symmetrize(H[off[nm], off[nm]])


@torch.no_grad()
def model_loss_hessian(model, images: torch.Tensor, labels: torch.Tensor, block: int = 0) -> HessianResult:
    """Exact Hessian of the pipeline's loss, mean over the batch of cross-entropy on
    logits = W_h mean_t(Z_t) + b_h, w.r.t. the five groups of ``block`` (the model's last block,
    i.e. a single-block model). Per sample b, with p_b = softmax(logits_b):

        g_b = (1/(B L)) 1_L (x) W_h^T (p_b - e_y),
        G_b = (1/(B L^2)) (1 1^T) (x) W_h^T (diag p_b - p_b p_b^T) W_h,
        H = sum_b [ B_b^T G_b B_b + (g_b^T (x) I) d^2Z_b/dW^2 ].

    The outer part is computed through the logit Jacobian (rank C per sample), the functional
    part by the factored contraction. Returns HessianResult(dense P x P in GROUPS order,
    blocks dict of views). Runs under torch.no_grad(); dtype follows the model.
    """
    return _model_parts(model, images, labels, block, split=False)


@torch.no_grad()
def model_loss_hessian_parts(
    model, images: torch.Tensor, labels: torch.Tensor, block: int = 0
) -> tuple[HessianResult, HessianResult]:
    """(outer, functional) parts of :func:`model_loss_hessian`, each a HessianResult."""
    return _model_parts(model, images, labels, block, split=True)


@torch.no_grad()
def model_loss_hessian_all_groups(model, images: torch.Tensor, labels: torch.Tensor, block: int = 0) -> torch.Tensor:
    """Exact Hessian of the pipeline's loss (as :func:`model_loss_hessian`) w.r.t. the nine
    groups ``W_Q, W_K, W_V, W_1, W_2, gamma1, beta1, gamma2, beta2`` of ``block`` (the last
    block), dense (P + 4 d) x (P + 4 d) in that order (``hessian_groups.ALL_GROUPS``). The
    five-group part is the same computation as :func:`model_loss_hessian` (the same numbers);
    the LayerNorm rows and columns are the closed form of docs/theory.md section 20. Runs under
    torch.no_grad(); dtype follows the model."""
    return _model_parts(model, images, labels, block, split=False, ln=True)
