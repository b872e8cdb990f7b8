"""The language study's curvature over its training set (studies/lm/curvature.py): the curvature
command's factory on the study's own data and checkpoint, and the 2-D landscape on the plane of the
top two Hessian eigenvectors against the quadratic model, on a micro decoder in float64. The
curvature command itself is the engine's; here its eigenvectors are a stand-in computed in the test
(the dense Hessian of the data set's mean loss by torch.func, independent of the package), written
in the command's eigenvectors.pt format."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.func import functional_call

from transformer_hessian.config.settings import Lm
from transformer_hessian.core.gpt import GPT, GPTConfig
from transformer_hessian.engine.ops.losses import causal_lm
from transformer_hessian.studies.lm import curvature


def _micro(seed=0):
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab=7, context=5, width=4, depth=1, heads=2)
    model = GPT(cfg).double().eval()
    seqs = torch.randint(0, 7, (10, 5), generator=torch.Generator().manual_seed(seed + 1))
    return model, curvature.batches_of(seqs, 4)


def _stand_in_eigenvectors(model, batches, k=3, only=None) -> dict:
    """What the curvature command's eigenvectors.pt holds, from the dense Hessian of the mean loss
    over every predicted token (reverse-over-reverse torch.func of a flat function): names, shapes, the top ``k``
    eigenvalues (descending) and their unit eigenvectors as rows; w.r.t. the parameters whose names
    start with ``only`` (default: all)."""
    named = {n: p for n, p in model.named_parameters() if only is None or n.startswith(only)}
    names = list(named)
    shapes = {n: list(p.shape) for n, p in named.items()}
    flat0 = torch.cat([p.detach().reshape(-1) for p in named.values()])
    sizes = [p.numel() for p in named.values()]
    n_all = sum(y[:, 1:].numel() for _, y in batches)

    def loss(flat):
        parts = dict(zip(names, (t.reshape(shapes[n]) for t, n in zip(torch.split(flat, sizes), names))))
        return sum(causal_lm(functional_call(model, parts, (x,)), y) * (y[:, 1:].numel() / n_all) for x, y in batches)

    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):  # the fused CPU kernel has no second derivative
        H = torch.func.jacrev(torch.func.jacrev(loss))(flat0)
    w, V = torch.linalg.eigh((H + H.T) / 2)
    top = torch.argsort(w, descending=True)[:k]
    return {"names": names, "shapes": shapes, "eigenvalues": w[top].tolist(), "vectors": V[:, top].T.contiguous()}


def test_batches_cover_every_sequence_once_in_order():
    seqs = torch.arange(30).reshape(10, 3)
    b = curvature.batches_of(seqs, 4)
    assert [len(x) for x, _ in b] == [4, 4, 2]
    assert all(x is y or torch.equal(x, y) for x, y in b)
    assert torch.equal(torch.cat([x for x, _ in b]), seqs)
    with pytest.raises(ValueError, match="batch_size"):
        curvature.batches_of(seqs, 0)


def test_mean_loss_and_gradient_are_the_whole_sets():
    model, batches = _micro()
    x = torch.cat([a for a, _ in batches])
    with torch.no_grad():
        whole = float(causal_lm(model(x), x))
    assert curvature.mean_loss(model, batches) == pytest.approx(whole, rel=1e-13)
    names = [n for n, _ in model.named_parameters()]
    g = torch.autograd.grad(causal_lm(model(x), x), list(model.parameters()))
    assert torch.allclose(curvature.gradient(model, batches, names), torch.cat([t.reshape(-1) for t in g]), atol=1e-14)


def test_quadratic_model_matches_the_loss_to_third_order():
    """At w* (here an untrained micro decoder: g != 0) the gap L - Q on the plane of exact top
    eigenvectors shrinks like r^3: halving the radius divides the largest gap on the grid by about 8;
    the quadratic part is exact (Q - L0 is the second-order Taylor polynomial), so |L - Q| / |Q - L0|
    goes to 0 like r; the weights are restored."""
    model, batches = _micro()
    eig = _stand_in_eigenvectors(model, batches)
    before = [p.detach().clone() for p in model.parameters()]
    gaps, rels = [], []
    for r in (2e-3, 1e-3, 5e-4):  # the micro decoder leaves the quadratic regime near r = 1e-2
        out = curvature.landscape2d(model, batches, eig, radius=r, points=5, near=1.0)
        assert np.asarray(out["loss"]).shape == (5, 5) and out["loss"][2][2] == pytest.approx(out["L0"], abs=1e-15)
        assert out["eigenvalues"] == pytest.approx(eig["eigenvalues"][:2]) and abs(out["orthogonality"]) < 1e-12
        gaps.append(out["near"]["max_gap_all"])
        rels.append(out["near"]["rel_gap"])
    assert all(p.equal(q) for p, q in zip(before, model.parameters()))
    for big, small in zip(gaps, gaps[1:]):
        assert 7 < big / small < 9, gaps  # 8 for a cubic leading term
    assert rels[0] > rels[1] > rels[2] and rels[2] < 1e-2


def test_quadratic_gap_reads_the_disc_and_leaves_out_w_star():
    a = [-1.0, -0.5, 0.0, 0.5, 1.0]
    A, B = np.meshgrid(a, a, indexing="ij")
    Q = 1.0 + A**2 + B**2
    L = Q + 0.1 * np.abs(A) ** 3
    g = curvature.quadratic_gap({"a": a, "b": a, "loss": L, "quadratic": Q, "L0": 1.0, "radius": 1.0}, 0.5)
    # the disc holds at least the 8 points around w* (radius one diagonal grid step, 0.707 > 0.5)
    assert g["points"] == 8 and g["max_gap"] == pytest.approx(0.1 * 0.125) and g["max_change"] == pytest.approx(0.5)
    assert g["rel_gap"] == pytest.approx(0.025) and g["max_gap_all"] == pytest.approx(0.1)
    wide = curvature.quadratic_gap({"a": a, "b": a, "loss": L, "quadratic": Q, "L0": 1.0, "radius": 1.0}, 1.0)
    assert wide["points"] == 12 and wide["disc_radius"] == 1.0  # axes to 1, the four diagonals


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A micro decoder trained one epoch by the study's own train step on the embedded corpus."""
    from transformer_hessian.studies.lm import step

    tmp = tmp_path_factory.mktemp("lm")
    s = Lm.with_defaults({"enabled": True, "context": 6, "width": 4, "depth": 1, "heads": 2, "val_sequences": 8,
                          "train": {"epochs": 1, "batch_size": 16, "sequences": 40}})  # fmt: skip
    torch.set_num_threads(1)
    step.train_step(s, str(tmp / "data"), str(tmp / "main"), str(tmp / "main/corpus.json"), device="cpu")
    return s, tmp


def test_factory_returns_the_trained_decoder_and_every_training_sequence(trained):
    from transformer_hessian.studies.lm import compute
    from transformer_hessian.util.io import write_json

    s, tmp = trained
    settings = tmp / "lm.json"
    write_json(s.to_dict(), settings, sealed=False)
    model, batches = curvature.training_set(
        str(tmp / "main/checkpoints/final.pt"), str(tmp / "data"), f"@{settings}", 16, str(tmp / "main/corpus.json")
    )
    assert not model.training and all(p.dtype == torch.float64 for p in model.parameters())
    assert [len(x) for x, _ in batches] == [16, 16, 8]
    train, _ = compute.sequences_of(s, compute.corpus_of(s, tmp / "data"))
    assert torch.equal(torch.cat([x for x, _ in batches]), train[:40])
    # the same from the settings as a dict; a corpus record of another corpus is refused by its hash
    model2, batches2 = curvature.training_set(
        str(tmp / "main/checkpoints/final.pt"), str(tmp / "data"), s.to_dict(), 64
    )
    assert len(batches2) == 1 and torch.equal(batches2[0][0], train[:40])
    assert all(p.equal(q) for p, q in zip(model.parameters(), model2.parameters()))
    write_json({"name": "x", "sha256": "0" * 64, "files": []}, tmp / "other.json")
    with pytest.raises(ValueError, match="0{64}"):
        curvature.training_set(str(tmp / "main/checkpoints/final.pt"), str(tmp / "data"), s.to_dict(), 16,
                               str(tmp / "other.json"))  # fmt: skip


def test_landscape2d_step_writes_the_grid_and_the_figure_draws(trained, tmp_path):
    """The rule's step on the trained micro decoder, the eigenvectors from the stand-in in the
    command's format, its result's save/load pair, and the figure."""
    import json

    from transformer_hessian.studies.lm import plot
    from transformer_hessian.studies.lm.result import load_result
    from transformer_hessian.util.io import write_json

    s, tmp = trained
    s = Lm.from_dict({**s.to_dict(), "curvature": {**s.to_dict()["curvature"], "batch_size": 16,
                      "landscape": {"points": 7, "radius": 0.5, "near": 0.34, "tolerance": 0.1}}})  # fmt: skip
    model, batches = curvature.training_set(str(tmp / "main/checkpoints/final.pt"), str(tmp / "data"), s.to_dict(), 16)
    eig = _stand_in_eigenvectors(model, batches, only="blocks.")  # P = 244, not the embedding's 1536 more
    torch.save(eig, tmp_path / "eigenvectors.pt")
    write_json({"eigenvalues": eig["eigenvalues"], "trace": {"mean": 1.0, "stderr": 0.1, "n_probes": 2},
                "P": int(eig["vectors"].shape[1]), "processes": 2}, tmp_path / "curvature.json", sealed=False)  # fmt: skip
    out = tmp_path / "landscape2d.json"
    curvature.landscape2d_step(
        s, str(tmp / "data"), str(tmp / "main/checkpoints/final.pt"), str(tmp / "main/corpus.json"),
        str(tmp_path / "eigenvectors.pt"), str(tmp_path / "curvature.json"), str(out),
    )  # fmt: skip
    r = load_result(out, "lm_landscape2d")
    assert r["sequences"] == 40 and r["points"] == 7 and r["curvature"]["processes"] == 2
    assert np.isfinite(np.asarray(r["loss"])).all() and r["near"]["points"] == 8  # the 8 points around w*
    assert r["loss"][3][3] == pytest.approx(r["L0"], rel=1e-12) and r["near"]["rel_gap"] is not None
    assert json.loads(out.read_text())["tolerance"] == 0.1
    fig = plot.landscape2d_figure(r)
    assert len(fig.axes) == 3  # two panels and one colour bar
    fig.savefig(tmp_path / "f.png")
    assert math.isfinite(r["grad_norm"])


def test_claim_row_follows_the_measured_gap():
    from transformer_hessian.studies.lm import claims

    l2 = {"near": {"points": 4, "disc_radius": 0.1, "max_gap": 1e-3, "max_change": 0.1, "rel_gap": 0.01,
                   "max_gap_all": 0.5}, "tolerance": 0.1, "eigenvalues": [3.0, 1.0], "sequences": 40, "P": 244,
          "radius": 0.4}  # fmt: skip
    (row,) = claims.landscape2d_rows(l2, "e")
    assert row["id"] == "lm_quadratic_model_near_wstar" and row["verdict"] == "reproduced"
    assert row["source"].startswith(claims.BEYOND) and "ratio 0.01" in row["measured"]
    l2["near"]["rel_gap"] = 0.2
    assert claims.landscape2d_rows(l2, "e")[0]["verdict"] == "not reproduced"
    l2["near"]["rel_gap"] = None
    assert claims.landscape2d_rows(l2, "e")[0]["verdict"] == "not testable on this data set"


def test_factory_reads_its_arguments_from_a_settings_file(trained, tmp_path):
    """Rule lm_curvature passes {"settings": FILE}: the same model and batches as the keywords."""
    import json

    s, tmp = trained
    kw = {"checkpoint": str(tmp / "main/checkpoints/final.pt"), "data_root": str(tmp / "data"), "lm": s.to_dict(),
          "batch_size": 16, "corpus": str(tmp / "main/corpus.json")}  # fmt: skip
    (tmp_path / "f.json").write_text(json.dumps(kw))
    m1, b1 = curvature.training_set(settings=str(tmp_path / "f.json"))
    m2, b2 = curvature.training_set(**kw)
    assert len(b1) == len(b2) == 3 and all(torch.equal(x, y) for (x, _), (y, _) in zip(b1, b2))
    assert all(p.equal(q) for p, q in zip(m1.parameters(), m2.parameters()))
