"""The benchmarks' problems: a torch encoder (layer or stack), its head, inputs and targets, from
a shape dict of :data:`transformer_hessian.bench.encoder.SHAPES` (used by ``bench encoder`` and
its ``--growth`` sweep)."""

from __future__ import annotations


def build_problem(shape: dict, seed: int = 0):
    """(model, head, inputs, targets) of a shape, float64, eval mode."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    dt = torch.float64
    layer = nn.TransformerEncoderLayer(
        shape["d"],
        shape["nhead"],
        shape["d_ff"],
        dropout=0.0,
        batch_first=True,
        norm_first=shape["norm_first"],
        activation=shape["act"],
        bias=shape["bias"],
        dtype=dt,
    )
    model = layer if shape["layers"] == 1 else nn.TransformerEncoder(layer, shape["layers"], enable_nested_tensor=False)
    model.eval()
    x = torch.randn(shape["B"], shape["T"], shape["d"], dtype=dt)
    if shape["loss"] == "mse":
        return model, None, x, torch.randn_like(x)
    head = nn.Linear(shape["d"], 10, dtype=dt)
    return model, head, x, torch.randint(0, 10, (shape["B"],))
