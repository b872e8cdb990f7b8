"""The adjoint tangents of a sweep's reverse pass, gathered node by node."""

from __future__ import annotations

import torch
from torch.fx import Node


class AdjointSums(dict):
    """The adjoint tangents of a sweep's reverse pass, node -> (K, ...) tensor. Those the pass
    allocated itself (sums) are added to in place; the others may be shared with another of a
    rule's results (a sum's transpose hands the same tensor to both inputs) and are not."""

    def __init__(self):
        super().__init__()
        self.owned: set[Node] = set()

    def add(self, i: Node, gi: torch.Tensor) -> None:
        """self[i] += gi."""
        acc = self.get(i)
        if acc is None:
            self[i] = gi
        elif i in self.owned and torch.broadcast_shapes(acc.shape, gi.shape) == acc.shape:
            acc.add_(gi)
        else:
            self[i] = acc + gi
            self.owned.add(i)

    def own(self, i: Node, shape: tuple, like: torch.Tensor) -> torch.Tensor:
        """self[i] as a tensor of ``shape`` this pass owns (zeros plus what was there), to add into."""
        if i not in self.owned or tuple(self[i].shape) != tuple(shape):
            full = like.new_zeros(shape)
            acc = self.get(i)
            self[i] = full if acc is None else full.add_(acc)
            self.owned.add(i)
        return self[i]
