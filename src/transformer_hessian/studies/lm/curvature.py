"""The trained decoder's curvature over its whole training set (rules lm_curvature, lm_landscape2d).

Rule lm_curvature runs the package's ``curvature`` command (under ``torchrun`` with
``lm.curvature.processes`` processes) with :func:`training_set` as its factory: the trained decoder
in float64 and every training sequence it was trained on, in batches. Rule lm_landscape2d then
evaluates, at the trained weights w*, the whole training set's mean loss on the plane of the top two
Hessian eigenvectors u1, u2 (the command's ``eigenvectors.pt``),

    L(a, b) = L(w* + a u1 + b u2),   a, b in [-r, r],

next to the quadratic model Q(a, b) = L0 + a g.u1 + b g.u2 + (lambda1 a^2 + lambda2 b^2) / 2 (g the
gradient at w*; the Hessian restricted to the plane is diag(lambda1, lambda2) for Ritz pairs), the
second-order Taylor expansion that the paper's landscape argument rests on: their gap is O(r^3).

The mean loss is the causal LM loss averaged over every predicted token of the training set (all
sequences have ``lm.context`` tokens, so this is also the mean of the sequences' losses), the loss
whose Hessian the command measures.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ...util.files import log

if TYPE_CHECKING:
    from ...config.settings import Lm

__all__ = [
    "batches_of",
    "gradient",
    "landscape2d",
    "landscape2d_step",
    "load_eigenvectors",
    "mean_loss",
    "quadratic_gap",
    "training_set",
]

Batches = Sequence[tuple[torch.Tensor, torch.Tensor]]


def _settings(lm: str | Mapping[str, Any]) -> Lm:
    """The ``lm`` section: a validated dict, or the path of its settings file (``@`` prefix allowed)."""
    from ...config.settings import Lm

    if isinstance(lm, str):
        lm = json.loads(Path(lm.removeprefix("@")).read_text())
    return Lm.from_dict(dict(lm))


def batches_of(seqs: torch.Tensor, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(ids, ids)`` pairs of ``batch_size`` consecutive sequences (the last may be smaller): the
    causal LM loss predicts each token of ``ids`` from the ones before it."""
    if batch_size < 1:
        raise ValueError(f"batch_size: at least 1, got {batch_size}")
    return [(seqs[i : i + batch_size], seqs[i : i + batch_size]) for i in range(0, len(seqs), batch_size)]


def training_set(
    checkpoint: str | None = None,
    data_root: str | None = None,
    lm: str | Mapping[str, Any] | None = None,
    batch_size: int | None = None,
    corpus: str | None = None,
    settings: str | None = None,
) -> tuple[torch.nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The ``curvature`` command's factory for the language study: ``(model, batches)``, the decoder
    of ``checkpoint`` in float64 and eval mode, and every training sequence it was trained on
    (``lm.train.sequences`` of the corpus' training split, in order) as ``(ids, ids)`` batches of
    ``batch_size`` (the last may be smaller). ``lm``: the validated ``lm`` section or the path of its
    settings file; ``corpus``: the training's corpus record (``corpus.json``), with which a corpus
    that changed since the training is refused naming both hashes. ``settings``: a JSON file of these
    keyword arguments instead (what rule lm_curvature passes: a short command line)."""
    if settings is not None:
        kw = json.loads(Path(settings).read_text())
        return training_set(**{k: kw.get(k) for k in ("checkpoint", "data_root", "lm", "batch_size", "corpus")})
    if checkpoint is None or data_root is None or lm is None or batch_size is None:
        raise TypeError("training_set: checkpoint, data_root, lm and batch_size are needed (or settings)")
    _, model, batches = _training_set(_settings(lm), checkpoint, data_root, batch_size, corpus)
    return model, batches


def _training_set(s: Lm, checkpoint: str, data_root: str, batch_size: int, corpus: str | None):
    """(corpus record, model, batches) of :func:`training_set`."""
    from .step import _data, _load_model, trained_sequences

    record, train, _ = _data(s, data_root, corpus)
    model = _load_model(checkpoint).double()
    model.eval()
    return record, model, batches_of(trained_sequences(s, train), batch_size)


def _tokens(targets: torch.Tensor) -> int:
    """Predicted tokens of a batch (the loss' denominator): every position but the first."""
    return int(targets[:, 1:].numel())


def mean_loss(model, batches: Batches) -> float:
    """The causal LM loss over every predicted token of ``batches`` (each batch's loss weighted by
    its tokens), float64."""
    from ...engine.ops.losses import causal_lm

    total, n = 0.0, 0
    with torch.no_grad():
        for x, y in batches:
            k = _tokens(y)
            total += float(causal_lm(model(x), y)) * k
            n += k
    return total / n


def gradient(model, batches: Batches, names: Sequence[str]) -> torch.Tensor:
    """The gradient of :func:`mean_loss` w.r.t. the parameters ``names``, flattened in that order."""
    from ...engine.ops.losses import causal_lm

    named = dict(model.named_parameters())
    params = [named[n] for n in names]
    n_all = sum(_tokens(y) for _, y in batches)
    out = torch.zeros(sum(p.numel() for p in params), dtype=torch.float64)
    for x, y in batches:
        g = torch.autograd.grad(causal_lm(model(x), y) * (_tokens(y) / n_all), params)
        out += torch.cat([t.reshape(-1) for t in g]).double()
    return out


def load_eigenvectors(path: str | Path) -> dict[str, Any]:
    """The curvature command's ``eigenvectors.pt`` (names, shapes, eigenvalues, vectors), checked:
    unit rows, one per eigenvalue, as many columns as the named parameters hold."""
    e = torch.load(path, map_location="cpu", weights_only=True)
    missing = [k for k in ("names", "shapes", "eigenvalues", "vectors") if k not in e]
    if missing:
        raise KeyError(f"{str(path)!r} lacks {missing}; rerun the lm_curvature rule")
    V = e["vectors"].detach().double()
    P = sum(int(np.prod(e["shapes"][n])) for n in e["names"])
    if V.dim() != 2 or V.shape != (len(e["eigenvalues"]), P) or V.shape[0] < 2:
        raise ValueError(
            f"{str(path)!r}: vectors of shape {tuple(V.shape)}, expected ({len(e['eigenvalues'])}, {P}) with 2 rows at least"
        )
    return {**e, "vectors": V}


def _split(v: torch.Tensor, names: Sequence[str], shapes: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    out, off = {}, 0
    for n in names:
        size = int(np.prod(shapes[n]))
        out[n] = v[off : off + size].reshape(tuple(shapes[n]))
        off += size
    return out


def landscape2d(
    model, batches: Batches, eig: Mapping[str, Any], radius: float, points: int, near: float = 0.25
) -> dict[str, Any]:
    """The mean loss on the plane of the top two eigenvectors of ``eig`` (:func:`load_eigenvectors`)
    through the model's weights w*, on a ``points`` x ``points`` grid of ``[-radius, radius]^2``,
    and the quadratic model there; ``loss[i][j]`` and ``quadratic[i][j]`` are at ``(a[i], b[j])``.
    The model's weights are restored afterwards. ``near``: the disc (``near * radius``) of
    :func:`quadratic_gap`, whose numbers are returned too."""
    names, shapes = list(eig["names"]), eig["shapes"]
    V = eig["vectors"]
    lam = [float(x) for x in eig["eigenvalues"][:2]]
    u1, u2 = _split(V[0], names, shapes), _split(V[1], names, shapes)
    named = dict(model.named_parameters())
    w0 = {n: named[n].detach().clone() for n in names}
    t0 = time.perf_counter()
    L0 = mean_loss(model, batches)
    g = gradient(model, batches, names)
    g1, g2 = float(g @ V[0]), float(g @ V[1])
    grid = np.linspace(-radius, radius, points)
    loss = np.empty((points, points))
    try:
        with torch.no_grad():
            for i, a in enumerate(grid):
                for j, b in enumerate(grid):
                    for n in names:
                        named[n].copy_(w0[n] + a * u1[n].to(w0[n].dtype) + b * u2[n].to(w0[n].dtype))
                    loss[i, j] = mean_loss(model, batches)
    finally:
        with torch.no_grad():
            for n in names:
                named[n].copy_(w0[n])
    A, B = np.meshgrid(grid, grid, indexing="ij")
    quad = L0 + A * g1 + B * g2 + 0.5 * (lam[0] * A**2 + lam[1] * B**2)
    out = {
        "a": grid.tolist(),
        "b": grid.tolist(),
        "radius": float(radius),
        "points": int(points),
        "loss": loss.tolist(),
        "quadratic": quad.tolist(),
        "L0": L0,
        "g_u1": g1,
        "g_u2": g2,
        "grad_norm": float(g.norm()),
        "eigenvalues": lam,
        "orthogonality": float(V[0] @ V[1]),
        "P": int(V.shape[1]),
        "batches": len(batches),
        "sequences": int(sum(len(x) for x, _ in batches)),
        "tokens": int(sum(_tokens(y) for _, y in batches)),
        "seconds": time.perf_counter() - t0,
    }
    out["near"] = quadratic_gap(out, near)
    return out


def quadratic_gap(r: Mapping[str, Any], near: float) -> dict[str, Any]:
    """How far the loss is from the quadratic model within ``near * radius`` of w*, at least the
    eight grid points around it (the grid's points in that disc, w* itself left out): the largest ``|L - Q|``, the largest
    ``|Q - L0|`` (what the quadratic model predicts there) and their ratio ``rel_gap``; and over
    the whole grid the largest ``|L - Q|``."""
    a, b = np.asarray(r["a"]), np.asarray(r["b"])
    A, B = np.meshgrid(a, b, indexing="ij")
    L, Q = np.asarray(r["loss"]), np.asarray(r["quadratic"])
    dist = np.hypot(A, B)
    # at least the eight grid points around w* (a disc inside one grid step would hold only w*)
    step = float(np.max(np.diff(a))) if len(a) > 1 else 0.0
    radius = max(near * r["radius"], step * np.sqrt(2.0))
    disc = (dist <= radius * (1 + 1e-12)) & (dist > 0)
    gap = np.abs(L - Q)
    out = {"near": float(near), "disc_radius": float(radius), "points": int(disc.sum()),
           "max_gap_all": float(gap.max())}  # fmt: skip
    if disc.any():
        change = float(np.abs(Q[disc] - r["L0"]).max())
        out.update(max_gap=float(gap[disc].max()), max_change=change,
                   rel_gap=float(gap[disc].max() / change) if change > 0 else None)  # fmt: skip
    else:
        out.update(max_gap=None, max_change=None, rel_gap=None)
    return out


def landscape2d_step(
    s: Lm, data_root: str, final: str, corpus: str, eigenvectors: str, curvature: str, out: str
) -> dict[str, Any]:
    """Rule lm_landscape2d: :func:`landscape2d` at the trained decoder on its whole training set
    (:func:`training_set`, ``lm.curvature.batch_size``) and the plane of rule lm_curvature's top
    two eigenvectors; the result carries the corpus record and the command's eigenvalues, trace
    and run numbers."""
    from ...util.io import load_json
    from .result import save_result

    c = s.curvature
    record, model, batches = _training_set(s, final, data_root, c.batch_size, corpus)
    eig = load_eigenvectors(eigenvectors)
    cj = load_json(curvature, "lm_curvature")
    r = landscape2d(model, batches, eig, c.landscape.radius, c.landscape.points, c.landscape.near)
    result = {
        "corpus": record,
        "curvature": {k: cj[k] for k in ("eigenvalues", "residuals", "trace", "P", "processes", "seconds") if k in cj},
        "tolerance": c.landscape.tolerance,
        **r,
    }
    save_result(out, result)
    n = r["near"]
    log.info(
        "lm landscape2d: %d x %d points on %d sequences, lambda %.4g, %.4g; |L - Q| / |Q - L0| within %.3g: %s, %.1f s",
        r["points"], r["points"], r["sequences"], *r["eigenvalues"], n["disc_radius"], n["rel_gap"], r["seconds"],
    )  # fmt: skip
    return result
