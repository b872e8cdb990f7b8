"""The benchmarked problem and methods: the seeded single-block ViT and batch of one
(shape, width), and the callables that compute its dense Hessian by each method."""

from __future__ import annotations

from .methods import CHUNK_COLUMNS
from .shapes import SHAPES


def build_problem(width: int, batch_size: int, seed: int, shape: str = "default", device: str = "cpu"):
    """The single-block ViT of ``SHAPES[shape]`` (float64, seeded init) and a seeded random
    float64 batch, drawn on the CPU (the same numbers on every device) and moved to ``device``."""
    import torch

    from ..core.model import ModelConfig, ViT

    sh = SHAPES[shape]
    cfg = ModelConfig(**sh, width=width, depth=1, d_k=width, d_ff=4 * width)
    torch.manual_seed(seed)
    model = ViT(cfg).to(torch.float64)
    gen = torch.Generator().manual_seed(seed + 1)
    side = sh["image_size"]
    images = torch.randn(batch_size, sh["channels"], side, side, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, cfg.num_classes, (batch_size,), generator=gen)
    dev = torch.device(device)
    return model.to(dev), images.to(dev), labels.to(dev)


def hessian_curvlinops_chunked(model, block: int, images, labels, chunk: int = CHUNK_COLUMNS):
    """``HessianLinearOperator @ I`` applied to blocks of ``chunk`` columns of I at a time."""
    from ..core.hessian import hessian_curvlinops

    return hessian_curvlinops(model, block, images, labels, chunk_size=chunk)


def _method_fn(method: str, model, images, labels):
    """(callable returning dense H, extra info). Imports everything the method needs now,
    so that the imports count towards the baseline, not the method."""
    import torch

    from ..core import hessian as hs

    if method == "curvlinops":
        import curvlinops  # noqa: F401

        return (lambda: hs.hessian_curvlinops(model, 0, images, labels)), {}
    if method == "curvlinops_chunked":
        import curvlinops  # noqa: F401

        return (lambda: hessian_curvlinops_chunked(model, 0, images, labels)), {"chunk_columns": CHUNK_COLUMNS}
    if method == "torch_func_hessian":
        import torch.func

        f, w = hs.loss_of_groups(model, 0, images, labels)
        hess = torch.func.hessian(f)
        return (lambda: hess(w)), {}
    if method == "closed_form":
        from ..theory import model_loss_hessian  # noqa: F401  (ImportError -> row "error")

        return (lambda: hs.hessian_closed_form(model, 0, images, labels)), {}
    if method == "pipeline":
        resolved = hs.resolve_method("auto", model)
        if resolved == "closed_form":
            from ..theory import model_loss_hessian  # noqa: F401,F811
        elif resolved == "curvlinops":
            import curvlinops  # noqa: F401
        return (lambda: hs.compute_hessian(model, 0, images, labels, method="auto")[0]), {"resolved_method": resolved}
    if method == "vmap":
        return (lambda: hs.hessian_vmap(model, 0, images, labels)), {}
    raise ValueError(f"unknown method {method!r}")
