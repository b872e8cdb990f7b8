"""Sums over tokens as matrix products, and packed pairs of a symmetric index pair.

The closed forms sum per-token Kronecker-structured terms, sum_n (a_n (x) b_n) vec(C_n)^T, over
thousands of tokens. Each such sum is one gemm with the tokens as inner dimension
(:class:`_TokenSums`). Where both sides are symmetric in an index pair (a diagonal block of the
Hessian), only the packed pairs (a <= a') enter the gemm, about a quarter of the flops
(:func:`_pair_layout`); :func:`_unpack` restores the full 4-index block.
"""

from __future__ import annotations

import functools

import torch


class _TokenSums(dict):
    """Sums over tokens, accumulated chunk by chunk: ``add(key, a, b)`` does self[key] += a @ b
    (the first call allocates), one gemm whose inner dimension is the chunk's tokens."""

    def add(self, key, a: torch.Tensor, b: torch.Tensor) -> None:
        if key in self:
            self[key].addmm_(a, b)
        else:
            self[key] = a @ b


def _outer_rows(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """(n, p p'): row n is a_n (x) b_n, the left factor of sum_n (a_n (x) b_n) vec(C_n)^T.
    ``out``: a flat scratch buffer of at least n p p' entries to write into (reused from one
    product to the next instead of a fresh allocation each time)."""
    n, p, q = a.shape[0], a.shape[1], b.shape[1]
    if out is None:
        return (a.unsqueeze(2) * b.unsqueeze(1)).reshape(n, p * q)
    return torch.mul(a.unsqueeze(2), b.unsqueeze(1), out=out[: n * p * q].view(n, p, q)).view(n, p * q)


def _pair_block(m: int) -> int:
    """Rows per block of the packed pair layout of an m x m symmetric index pair: 1 (exactly the
    upper triangle) up to m = 16, else 8 (some redundant pairs; one broadcast product per block of
    rows instead of one per row, which matters where idle OpenMP threads sleep between kernels)."""
    return 1 if m <= 16 else 8


def _pair_blocks(m: int):
    """The packed pair layout of an m x m symmetric index pair, block by block: (a0, a1, k0, k1)
    for rows a in [a0, a1) paired with every a' in [a0, m), at positions k0:k1 of the packed list
    ((m - a0) x (a1 - a0) pairs, a' major: position k0 + (a' - a0) (a1 - a0) + a - a0)."""
    b, k0 = _pair_block(m), 0
    for a0 in range(0, m, b):
        a1 = min(m, a0 + b)
        k1 = k0 + (a1 - a0) * (m - a0)
        yield a0, a1, k0, k1
        k0 = k1


@functools.lru_cache(maxsize=32)
def _pair_layout(m: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows, cols, pos) of the packed pairs of an m x m symmetric index pair: block by block of
    :func:`_pair_block` rows a in [a0, a1), every a' in [a0, m); so a <= a' for every pair but the
    few below the diagonal of a block, which are computed and never read. pos[a, a'] = pos[a', a]
    is the position of the pair (min, max)."""
    rows, cols = [], []
    for a0, a1, _, _ in _pair_blocks(m):
        for ap in range(a0, m):  # a' major
            rows += range(a0, a1)
            cols += [ap] * (a1 - a0)
    rows_t = torch.tensor(rows, dtype=torch.long, device=device)
    cols_t = torch.tensor(cols, dtype=torch.long, device=device)
    pos = torch.empty(m, m, dtype=torch.long, device=device)
    upper = rows_t <= cols_t  # one position per unordered pair, so that unpacking is symmetric
    k = torch.arange(len(rows), device=device)[upper]
    pos[rows_t[upper], cols_t[upper]] = k
    pos[cols_t[upper], rows_t[upper]] = k
    return rows_t, cols_t, pos


def _packed_outer_t(aT: torch.Tensor) -> torch.Tensor:
    """(pairs, n): row k is aT[rows[k]] * aT[cols[k]] for the packed pairs of
    :func:`_pair_layout`, from aT (m, n): one broadcast product per block of rows, written into one
    buffer (a gather of the rows is several times slower at m = 64)."""
    m, n = aT.shape
    out = aT.new_empty(_pair_layout(m, aT.device)[0].numel(), n)
    for a0, a1, k0, k1 in _pair_blocks(m):
        torch.mul(aT[a0:, None], aT[None, a0:a1], out=out[k0:k1].view(m - a0, a1 - a0, n))
    return out


def _packed_cols(C: torch.Tensor) -> torch.Tensor:
    """(n, pairs): the packed pairs (:func:`_pair_layout`) of each symmetric C_n (n, q, q)."""
    n, q = C.shape[:2]
    rc, cc, _ = _pair_layout(q, C.device)
    return C.reshape(n, q * q).index_select(1, rc * q + cc)


def _unpack(T: torch.Tensor, p: int, q: int) -> torch.Tensor:
    """A sum over packed pairs, T (pairs of p, pairs of q), as the full 4-index tensor
    [a, a', c, c'] (p, p, q, q), symmetric in (a, a') and in (c, c')."""
    mp, mq = _pair_layout(p, T.device)[2], _pair_layout(q, T.device)[2]
    return T.index_select(0, mp.reshape(-1)).index_select(1, mq.reshape(-1)).view(p, p, q, q)


def _packed_sandwich_t(Om: torch.Tensor, W: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """The packed pairs (:func:`_pair_layout`) of diag(m_n) W Om_n W^T diag(m_n), transposed:
    (pairs of f, n), for symmetric Om (n, e, e), W (f, e), m (n, f). First
    OW[e, a, n] = m_a (Om_n W^T)[e, a] for all tokens (one batched product with the shared W),
    then per block of rows [a0, a1) the entries (a' >= a0, a) as one product W[a0:] OW[:, a0:a1]
    (about a quarter of the flops of a product with the packed Kronecker square of W), then the
    mask m_a'."""
    n, e = Om.shape[:2]
    f = W.shape[0]
    mT = m.T.contiguous()  # [a, n]
    OW = torch.matmul(W, Om.permute(1, 2, 0))  # [e, a, n] (Om_n symmetric)
    OW.mul_(mT)
    out = Om.new_empty(_pair_layout(f, Om.device)[0].numel(), n)
    for a0, a1, k0, k1 in _pair_blocks(f):
        blk = out[k0:k1].view(f - a0, (a1 - a0) * n)
        torch.mm(W[a0:], OW[:, a0:a1].reshape(e, (a1 - a0) * n), out=blk)
        blk.view(f - a0, a1 - a0, n).mul_(mT[a0:, None])
    return out
