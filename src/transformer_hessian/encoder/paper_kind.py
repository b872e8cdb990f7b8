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


def paper_kind_hessian(layer, X: torch.Tensor, labels: torch.Tensor, head, names: list[str]) -> torch.Tensor:
    """Dense Hessian over the parameters ``names`` of ``layer`` (torch order of each parameter's
    entries), for a layer that :func:`eligible` accepts."""
    from ..theory.model_loss import token_loss_parts

    mha = layer.self_attn
    d = mha.embed_dim
    dt = X.dtype
    Wq, Wk, Wv = mha.in_proj_weight.detach().to(X).split(d)
    Wo = mha.out_proj.weight.detach().to(X)
    W1, W2 = layer.linear1.weight.detach().to(X), layer.linear2.weight.detach().to(X)
    d_ff = W1.shape[0]
    g1, b1 = _ln(layer.norm1, d, X)
    g2, b2 = _ln(layer.norm2, d, X)
    V = Wv.T @ Wo.T
    p = {"W_Q": Wq.T, "W_K": Wk.T, "W_V": V, "W_1": W1.T, "W_2": W2.T}
    p.update(gamma1=g1, beta1=b1, gamma2=g2, beta2=b2, b_1=None, b_2=None)
    hb = None if head.bias is None else head.bias.detach().to(X)
    H9 = token_loss_parts(X.detach(), p, layer.norm1.eps, head.weight.detach().to(X), hb, labels, ln=True)
    dd, df = d * d, d * d_ff
    # paper order: W_Q, W_K, W_V (d x d each), W_1 (d x d_ff), W_2 (d_ff x d), gamma1, beta1, gamma2, beta2
    sizes = [dd, dd, dd, df, df, d, d, d, d]
    offs = torch.tensor([0, *sizes]).cumsum(0).tolist()
    sl = {k: slice(offs[i], offs[i + 1]) for i, k in enumerate(["Q", "K", "V", "1", "2", "g1", "b1", "g2", "b2"])}

    # torch entry (o, i) of W^T stores paper entry (i, o): index permutations into the paper order
    def tperm(rows: int, cols: int, start: int) -> torch.Tensor:  # torch W (rows x cols) = paper^T
        return start + torch.arange(rows * cols).view(cols, rows).T.reshape(-1)

    # rows of the paper Hessian that the pulled-back V rows replace: everything except V itself
    rest = torch.cat(
        [
            tperm(d, d, sl["Q"].start),
            tperm(d, d, sl["K"].start),
            tperm(d_ff, d, sl["1"].start),
            tperm(d, d_ff, sl["2"].start),
            torch.arange(sl["g1"].start, offs[-1]),
        ]
    ).to(X.device)
    H4 = H9[sl["V"], sl["V"]].reshape(d, d, d, d)  # [i, j, i', j'] of V
    HVr = H9[sl["V"]][:, rest].reshape(d, d, -1)  # [i, j, r]
    G = _value_gradient(layer, X, labels, head, V)
    vv = torch.einsum("jk,ijIJ,JK->kiKI", Wo, H4, Wo).reshape(dd, dd)
    oo = torch.einsum("ki,ijIJ,KI->jkJK", Wv, H4, Wv).reshape(dd, dd)
    vo = torch.einsum("jk,ijIJ,KI->kiJK", Wo, H4, Wv) + torch.einsum(
        "kK,iJ->kiJK", torch.eye(d, dtype=dt, device=X.device), G
    )
    vo = vo.reshape(dd, dd)
    vr = torch.einsum("jk,ijr->kir", Wo, HVr).reshape(dd, -1)
    orr = torch.einsum("ki,ijr->jkr", Wv, HVr).reshape(dd, -1)
    # the torch layout: in_proj (Wq, Wk, Wv), out_proj, linear1, linear2, norm1 (w, b), norm2 (w, b)
    nq = 2 * dd  # Wq, Wk rows of in_proj come first in `rest`
    Hr = H9[rest][:, rest]
    parts = {"qk": slice(0, nq), "ffn": slice(nq, nq + 2 * df), "ln": slice(nq + 2 * df, Hr.shape[0])}
    # torch-order index blocks: [qk | v | o | ffn | ln]
    n_all = Hr.shape[0] + 2 * dd
    Ht = X.new_empty(n_all, n_all)
    pos = {"qk": slice(0, nq), "v": slice(nq, nq + dd), "o": slice(nq + dd, nq + 2 * dd)}
    pos["ffn"] = slice(nq + 2 * dd, nq + 2 * dd + 2 * df)
    pos["ln"] = slice(pos["ffn"].stop, n_all)
    for a in ("qk", "ffn", "ln"):
        for b in ("qk", "ffn", "ln"):
            Ht[pos[a], pos[b]] = Hr[parts[a], parts[b]]
        Ht[pos["v"], pos[a]] = vr[:, parts[a]]
        Ht[pos[a], pos["v"]] = vr[:, parts[a]].T
        Ht[pos["o"], pos[a]] = orr[:, parts[a]]
        Ht[pos[a], pos["o"]] = orr[:, parts[a]].T
    Ht[pos["v"], pos["v"]] = vv
    Ht[pos["o"], pos["o"]] = oo
    Ht[pos["v"], pos["o"]] = vo
    Ht[pos["o"], pos["v"]] = vo.T
    # the parameters' slices in Ht, then the ones asked for, in the order asked for
    ln_names, o = {}, pos["ln"].start
    for nm in ("norm1", "norm2"):
        norm = getattr(layer, nm)
        for kind in ("weight", "bias"):
            if getattr(norm, kind) is not None:
                ln_names[f"{nm}.{kind}"] = slice(o, o + d)
            o += d
    where = {
        "self_attn.in_proj_weight": torch.arange(0, nq + dd),
        "self_attn.out_proj.weight": torch.arange(pos["o"].start, pos["o"].stop),
        "linear1.weight": torch.arange(pos["ffn"].start, pos["ffn"].start + df),
        "linear2.weight": torch.arange(pos["ffn"].start + df, pos["ffn"].stop),
        **{k: torch.arange(s.start, s.stop) for k, s in ln_names.items()},
    }
    idx = torch.cat([where[n] for n in names]).to(X.device)
    return symmetrize_(Ht[idx][:, idx])
