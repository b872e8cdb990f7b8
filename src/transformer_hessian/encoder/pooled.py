"""The loss's own curvature in the factored rows of H, for cross-entropy through the token mean.

With ``loss = CE(head(mean_t z_t))`` the Hessian is ``J^T Lambda J`` plus the operations' own
curvature weighted by the adjoints, J the per-sample Jacobian of the logits and
``Lambda_b = (diag p_b - p_b p_b^T) / B`` the softmax's. A factored sweep (:class:`.ops.Hess`)
carries an entry's tangent as its row weight times a unit tangent, row by row; the token mean
sums rows, and the mean of an entry's tangent is not of that form, so the loss's ``Lambda``
cannot act on it inside the sweep. The loss's gradient can: it is the same for every token of a
sample, and everything after the last attention is row by row. So when no head parameter is
asked for, the mean does not count as mixing rows (:class:`.ops.MeanTokens`), the weights after
the last attention are swept factored with the operations' curvature only
(:func:`.graph.chunk_hessian` drops the loss's), and :func:`add_gauss_newton` adds ``J^T Lambda
J`` to their rows, J from a backward sweep with no forward tangents (:func:`logit_jacobian`;
docs/theory.md, section 21, "Cross-entropy through the token mean").
"""

from __future__ import annotations

import torch

from .graph import forward_sweep
from .ops import Hess
from .sweeps import factored_kind, per_sample_bytes


def applies(loss: str, fast_path: bool, names: list[str], classes: int, tokens: int) -> bool:
    """Whether the factored sweeps may run through the token mean: cross-entropy, the fast path,
    no head parameter among the rows (the head's columns read the mean's tangent), and at most
    ``2 T`` classes. J^T Lambda J costs 2 B C flops per entry of the factored rows, where the dense
    sweep's Hessian-column products cost about 4 N = 4 B T (docs/theory.md, section 21): with more
    classes than 2 T the split would cost more than the sweep it replaces (counted, not timed)."""
    heads = any(n.startswith("head.") for n in names)
    return loss == "cross_entropy" and fast_path and not heads and classes <= 2 * tokens


def logit_jacobian(spec, slots: dict, P: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (b, C), per-sample Jacobian (b, C, P) w.r.t. all selected parameters) of the samples
    ``x``: one backward sweep of :mod:`.graph` with no forward tangents, whose adjoint tangents are
    the b C unit vectors at the logits (the Hessian rules then reduce to vector-Jacobian products:
    the column block an operation adds for a unit of sample s is that sample's Jacobian row)."""
    b, C = x.shape[0], spec.head_values[0].shape[0]
    J = torch.zeros(b * C, P, dtype=x.dtype, device=x.device)
    hess = Hess(J, [(slice(0, b * C), slice(0, b * C))])
    tape, node = forward_sweep(spec, hess, slots, x)  # exact_hessian's slots: never seeded (sweeps seed copies)
    z = tape.v[node]
    units = torch.eye(b * C, dtype=x.dtype, device=x.device).view(b * C, b, C)
    tape.backward(node, torch.zeros_like(z), units)
    return z, J.view(b, C, P)


def samples_per_jacobian(spec, x: torch.Tensor, P: int, chunk_bytes: int) -> int:
    """Samples per :func:`logit_jacobian`: its b C tangents over b samples' activations take b^2
    times one sample's C tangents (:func:`.sweeps.per_sample_bytes`), J and Lambda J 2 b C P
    entries; each at most ``chunk_bytes``."""
    (B, T, d), item, C, layers = x.shape, x.element_size(), spec.head_values[0].shape[0], spec.layers
    d_ff = max(m.linear1.out_features for m in layers)
    one = per_sample_bytes(C, T, d, d_ff, layers[0].self_attn.num_heads, len(layers), item)
    b = min(int((chunk_bytes / max(1, one)) ** 0.5), chunk_bytes // (2 * C * P * item))
    return max(1, min(B, b))


def add_gauss_newton(H: torch.Tensor, spec, slots: dict, rows: list[slice], wrt: list[slice], x, chunk_bytes: int):
    """H[r, c] += (J^T Lambda J)[r, c] over the samples ``x`` for every slice r of ``rows`` and c
    of ``wrt`` (columns of H)."""
    step = samples_per_jacobian(spec, x, H.shape[1], chunk_bytes)
    for b0 in range(0, x.shape[0], step):
        z, J = logit_jacobian(spec, slots, H.shape[1], x[b0 : b0 + step].detach())
        p = torch.softmax(z, -1).unsqueeze(-1)
        LJ = ((p * J - p * (p.transpose(1, 2) @ J)) / spec.count).flatten(0, 1)  # Lambda J, (b C, P)
        J = J.flatten(0, 1)
        for r in rows:
            for c in wrt:
                H[r, c] += J[:, r].T @ LJ[:, c]


def add_to_factored_rows(H: torch.Tensor, spec, sweep, x, chunk_bytes: int) -> None:
    """:func:`add_gauss_newton` for the rows of the factored blocks of ``sweep`` (a namespace of the
    sweeps' blocks, factored ranges, graph ranks, selected names, columns and slots), against the
    columns from the first of them on in graph order (the earlier columns are filled by transposes)."""
    rows = [pcs[0] for pcs in sweep.blocks if factored_kind(pcs, sweep.factored)]
    if not spec.pooled_split or not rows:
        return
    first = min(sweep.rank[name] for name, *_ in rows)
    wrt = [sweep.cols[n] for n in sweep.names if sweep.rank[n] >= first]
    add_gauss_newton(H, spec, sweep.slots, [r[4] for r in rows], wrt, x, chunk_bytes)
