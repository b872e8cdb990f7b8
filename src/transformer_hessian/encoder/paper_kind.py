"""The paper's kind of encoder layer through the factored closed form (docs/theory.md, section 21).

A single ``nn.TransformerEncoderLayer`` with one head, no biases in attention and FFN, post-norm,
ReLU, no mask, and cross-entropy through a head on the token mean is the paper's block
(Theorems 4-5) with one difference: torch's out_proj W_O. Its value projection and W_O act
only through their product, the paper's value matrix

    V = W_v^T W_o^T   (d x d; torch: v = x W_v^T, out = (A v) W_o^T),

so the Hessian over the torch parameters is the paper block's nine-group Hessian (the factored
closed form, :func:`transformer_hessian.theory.model_loss.token_loss_parts`, with W_V = V)
pulled back through the bilinear map (W_v, W_o) -> V by the second-order chain rule:

    H[W_v, W_v] = J_v^T H_VV J_v,   H[W_o, W_o] = J_o^T H_VV J_o,
    H[W_v, W_o] = J_v^T H_VV J_o + (dL/dV contracted with d^2 V / dW_v dW_o),
    H[W_v, r] = J_v^T H_Vr,  H[W_o, r] = J_o^T H_Vr   (r: every other parameter),

with dV[i, j] = sum_k dW_v[k, i] W_o[j, k] + W_v[k, i] dW_o[j, k] and
d^2 V[i, j] / dW_v[k, i] dW_o[j, k] = 1. The gradient dL/dV comes from the closed form's own
per-token factors (:func:`_value_gradient`). Everything else is a transpose: torch stores
W^T of the paper's W_Q, W_K, W_1, W_2 (``y = x W^T``).
"""

from __future__ import annotations

import torch
from torch import nn

from .ops import symmetrize_


def eligible(layers: list, kinds: list, final_norm, spec, names: list[str]) -> bool:
    """Whether :func:`paper_kind_hessian` applies: one post-norm ReLU layer, one head, no biases
    outside the LayerNorms, equal LayerNorm eps, no mask, cross-entropy through a head, and only
    the layer's own parameters asked for."""
    if len(layers) != 1 or final_norm is not None or spec.loss != "cross_entropy" or spec.mask is not None:
        return False
    layer = layers[0]
    mha = layer.self_attn
    return (
        kinds[0] == "relu"
        and not layer.norm_first
        and mha.num_heads == 1
        and mha.in_proj_bias is None
        and mha.out_proj.bias is None
        and layer.linear1.bias is None
        and layer.linear2.bias is None
        and layer.norm1.eps == layer.norm2.eps
        and not any(n.startswith("head.") for n in names)
    )


def _ln(norm: nn.LayerNorm, d: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    w = like.new_ones(d) if norm.weight is None else norm.weight.detach().to(like)
    b = like.new_zeros(d) if norm.bias is None else norm.bias.detach().to(like)
    return w, b


def _value_gradient(layer, X, labels, head, V: torch.Tensor) -> torch.Tensor:
    """dL/dV (d x d) of the batch-mean cross-entropy, by reverse mode through the paper block
    written out with V as the value matrix (first order only; the Hessian is the closed form)."""
    mha = layer.self_attn
    d = mha.embed_dim
    Wq, Wk, _ = mha.in_proj_weight.detach().to(X).split(d)
    g1, b1 = _ln(layer.norm1, d, X)
    g2, b2 = _ln(layer.norm2, d, X)
    W1, W2 = layer.linear1.weight.detach().to(X), layer.linear2.weight.detach().to(X)
    Vl = V.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        S = (X @ Wq.T) @ (X @ Wk.T).transpose(-1, -2) / d**0.5
        Y = torch.nn.functional.layer_norm(X + torch.softmax(S, -1) @ X @ Vl, (d,), g1, b1, layer.norm1.eps)
        Z = torch.nn.functional.layer_norm(Y + torch.relu(Y @ W1.T) @ W2.T, (d,), g2, b2, layer.norm2.eps)
        hb = None if head.bias is None else head.bias.detach().to(X)
        logits = torch.nn.functional.linear(Z.mean(1), head.weight.detach().to(X), hb)
        loss = torch.nn.functional.cross_entropy(logits, labels.to(X.device).long())
        (G,) = torch.autograd.grad(loss, Vl)
    return G


def _paper_block(layer, X: torch.Tensor, labels: torch.Tensor, head):
    """The nine-group closed-form Hessian of the paper's block at W_V = V = W_v^T W_o^T, and V."""
    from ..theory.model_loss import token_loss_parts

    d = layer.self_attn.embed_dim
    Wq, Wk, Wv = layer.self_attn.in_proj_weight.detach().to(X).split(d)
    V = Wv.T @ layer.self_attn.out_proj.weight.detach().to(X).T
    g1, b1 = _ln(layer.norm1, d, X)
    g2, b2 = _ln(layer.norm2, d, X)
    W1, W2 = layer.linear1.weight.detach().to(X), layer.linear2.weight.detach().to(X)
    p = {"W_Q": Wq.T, "W_K": Wk.T, "W_V": V, "W_1": W1.T, "W_2": W2.T}
    p.update(gamma1=g1, beta1=b1, gamma2=g2, beta2=b2, b_1=None, b_2=None)
    hb = None if head.bias is None else head.bias.detach().to(X)
    return token_loss_parts(X.detach(), p, layer.norm1.eps, head.weight.detach().to(X), hb, labels, ln=True), V


def _torch_order(d: int, d_ff: int, device) -> tuple[torch.Tensor, slice]:
    """Rows of the paper's nine-group Hessian in torch's storage order, every group but W_V
    (W_q, W_k, linear1, linear2 as the transposes torch stores, then the LayerNorm rows), and the
    rows of W_V."""
    dd, df = d * d, d * d_ff
    offs = torch.tensor([0, dd, dd, dd, df, df, d, d, d, d]).cumsum(0).tolist()

    def tperm(rows: int, cols: int, start: int) -> torch.Tensor:  # torch W (rows x cols) = paper^T
        return start + torch.arange(rows * cols).view(cols, rows).T.reshape(-1)

    rest = torch.cat(
        [
            tperm(d, d, offs[0]),
            tperm(d, d, offs[1]),
            tperm(d_ff, d, offs[3]),
            tperm(d, d_ff, offs[4]),
            torch.arange(offs[5], offs[-1]),
        ]
    )
    return rest.to(device), slice(offs[2], offs[3])


def _pullback(H9: torch.Tensor, rest, vsl: slice, Wv, Wo, G) -> dict[str, torch.Tensor]:
    """The (W_v, W_o) rows of the torch Hessian from the paper's V rows (module docstring)."""
    d = Wv.shape[0]
    dd = d * d
    H4 = H9[vsl, vsl].reshape(d, d, d, d)  # [i, j, i', j'] of V
    HVr = H9[vsl][:, rest].reshape(d, d, -1)  # [i, j, r]
    eye = torch.eye(d, dtype=H9.dtype, device=H9.device)
    vo = torch.einsum("jk,ijIJ,KI->kiJK", Wo, H4, Wv) + torch.einsum("kK,iJ->kiJK", eye, G)
    return {
        "vv": torch.einsum("jk,ijIJ,JK->kiKI", Wo, H4, Wo).reshape(dd, dd),
        "oo": torch.einsum("ki,ijIJ,KI->jkJK", Wv, H4, Wv).reshape(dd, dd),
        "vo": vo.reshape(dd, dd),
        "vr": torch.einsum("jk,ijr->kir", Wo, HVr).reshape(dd, -1),
        "or": torch.einsum("ki,ijr->jkr", Wv, HVr).reshape(dd, -1),
    }


def paper_kind_hessian(layer, X: torch.Tensor, labels: torch.Tensor, head, names: list[str]) -> torch.Tensor:
    """Dense Hessian over the parameters ``names`` of ``layer`` (torch order of each parameter's
    entries), for a layer that :func:`eligible` accepts."""
    mha = layer.self_attn
    d = mha.embed_dim
    Wv = mha.in_proj_weight.detach().to(X)[2 * d :]
    Wo = mha.out_proj.weight.detach().to(X)
    d_ff = layer.linear1.weight.shape[0]
    dd, df = d * d, d * d_ff
    H9, V = _paper_block(layer, X, labels, head)
    rest, vsl = _torch_order(d, d_ff, X.device)
    pb = _pullback(H9, rest, vsl, Wv, Wo, _value_gradient(layer, X, labels, head, V))
    # torch layout: [W_q W_k | W_v | W_o | linear1 linear2 | LayerNorms]; `rest` is [W_q W_k | ffn | LN]
    Hr = H9[rest][:, rest]
    nq = 2 * dd
    parts = {"qk": slice(0, nq), "ffn": slice(nq, nq + 2 * df), "ln": slice(nq + 2 * df, Hr.shape[0])}
    n_all = Hr.shape[0] + 2 * dd
    pos = {"qk": slice(0, nq), "v": slice(nq, nq + dd), "o": slice(nq + dd, nq + 2 * dd)}
    pos["ffn"] = slice(nq + 2 * dd, nq + 2 * dd + 2 * df)
    pos["ln"] = slice(pos["ffn"].stop, n_all)
    Ht = X.new_empty(n_all, n_all)
    for a in ("qk", "ffn", "ln"):
        for b in ("qk", "ffn", "ln"):
            Ht[pos[a], pos[b]] = Hr[parts[a], parts[b]]
        for r, key in (("v", "vr"), ("o", "or")):
            Ht[pos[r], pos[a]] = pb[key][:, parts[a]]
            Ht[pos[a], pos[r]] = pb[key][:, parts[a]].T
    # H9 is exactly symmetric and every off-diagonal block above is placed with its exact
    # transpose, so only the two diagonal blocks of the pullback need symmetrising (the same bits
    # as symmetrising the whole matrix: (a + b) / 2 of an exactly symmetric pair is a)
    Ht[pos["v"], pos["v"]], Ht[pos["o"], pos["o"]] = symmetrize_(pb["vv"]), symmetrize_(pb["oo"])
    Ht[pos["v"], pos["o"]], Ht[pos["o"], pos["v"]] = pb["vo"], pb["vo"].T
    where = {
        "self_attn.in_proj_weight": range(0, nq + dd),
        "self_attn.out_proj.weight": range(pos["o"].start, pos["o"].stop),
        "linear1.weight": range(pos["ffn"].start, pos["ffn"].start + df),
        "linear2.weight": range(pos["ffn"].start + df, pos["ffn"].stop),
    }
    for k, nm in enumerate(("norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias")):
        where[nm] = range(pos["ln"].start + k * d, pos["ln"].start + (k + 1) * d)
    idx = [i for n in names for i in where[n]]
    if idx == list(range(n_all)):  # every parameter in torch's order: no gather
        return Ht
    idx_t = torch.tensor(idx, device=X.device)
    return Ht.index_select(0, idx_t).index_select(1, idx_t)
