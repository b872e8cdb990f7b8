"""Parameter-group layout shared by every Hessian of the package.

The five groups of one block, W_Q, W_K, W_V, W_1, W_2 (``transformer_hessian.GROUPS``), are
flattened with vec_r and concatenated in that order; a dense Hessian is P x P with
P = sum_i p_i q_i, and its (i, j) block is (p_i q_i) x (p_j q_j).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from .. import GROUPS

_PARAM_KEYS = ("W_Q", "W_K", "W_V", "W_1", "W_2", "gamma1", "beta1", "gamma2", "beta2")


class HessianResult(NamedTuple):
    """A Hessian over the five groups: ``dense`` (P x P, GROUPS order) and ``blocks``
    ({(name_i, name_j): (p_i q_i) x (p_j q_j)}, views into ``dense``)."""

    dense: torch.Tensor
    blocks: dict


def detached_block_params(params: dict) -> dict:
    """Detached copies of the nine block parameters (``W_Q, W_K, W_V, W_1, W_2, gamma1, beta1,
    gamma2, beta2``) plus ``b_1``, ``b_2`` (None when absent); KeyError names the missing ones."""
    missing = [k for k in _PARAM_KEYS if k not in params]
    if missing:
        raise KeyError(
            f"theory params are missing {missing}; expected keys {list(_PARAM_KEYS)} "
            "(optionally b_1, b_2), e.g. from PostNormBlock.theory_params()"
        )
    p = {k: params[k].detach() for k in _PARAM_KEYS}
    for k in ("b_1", "b_2"):
        v = params.get(k)
        p[k] = None if v is None else v.detach()
    return p


#: Package-private name used inside ``theory/``.
_prep = detached_block_params


def group_shapes(params: dict) -> dict[str, tuple[int, int]]:
    """{name: (p, q)} for the five groups, in GROUPS order."""
    return {n: tuple(params[n].shape) for n in GROUPS}


def blocks_to_dense(blocks: dict, shapes: dict[str, tuple[int, int]]) -> torch.Tensor:
    """Assemble {(i, j): block} into the dense P x P matrix in GROUPS order."""
    sizes = [shapes[n][0] * shapes[n][1] for n in GROUPS]
    return torch.cat([torch.cat([blocks[(i, j)] for j in GROUPS], 1) for i in GROUPS], 0).reshape(
        sum(sizes), sum(sizes)
    )


def offsets_of(shapes: Sequence[Sequence[int]]) -> np.ndarray:
    """Offsets (int64, length n + 1) of groups of these shapes in the flat vector: group i occupies
    ``w[off[i]:off[i + 1]]``, each in vec_r order, concatenated in the given order. The one place
    where group offsets are computed (:func:`flat_layout`, :func:`group_offsets`)."""
    sizes = [int(np.prod(s)) for s in shapes]
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def flat_layout(params: Mapping[str, Any], names: Sequence[str] = GROUPS) -> tuple[list[str], list[tuple], np.ndarray]:
    """(names, shapes, offsets) of the groups ``names`` of ``params`` (anything with ``.shape``):
    group ``names[i]`` occupies ``w[offsets[i]:offsets[i+1]]``; used by ``hessian.group_layout`` (the five
    groups) and ``hessian_groups.layout`` (any of the nine)."""
    shapes = [tuple(params[n].shape) for n in names]
    return list(names), shapes, offsets_of(shapes)


def group_offsets(shapes: dict[str, tuple[int, int]], names=GROUPS) -> dict[str, slice]:
    """{name: slice of its entries in the flat parameter vector}.

    Groups come in ``names`` order, each contributing p q entries in vec_r order (:func:`offsets_of`).
    """
    off = offsets_of([shapes[n] for n in names])
    return {n: slice(int(off[i]), int(off[i + 1])) for i, n in enumerate(names)}


def dense_to_blocks(H: torch.Tensor, shapes: dict[str, tuple[int, int]]) -> dict:
    """Views {(i, j): H[rows of W_i, cols of W_j]} of a dense P x P matrix (GROUPS order)."""
    off = group_offsets(shapes)
    return {(i, j): H[off[i], off[j]] for i in GROUPS for j in GROUPS}
