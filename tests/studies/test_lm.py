"""The language study's computations: the Hessian's block layout, the per-sequence losses, the
scaling law's fit, the reading of the paper's Discussion on a grid, the curvature approximations
against independent computations (float64), the claim rows and the corpus check."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from transformer_hessian.config.settings import Lm
from transformer_hessian.core.gpt import GPT, GPTConfig
from transformer_hessian.engine.api import exact_hessian
from transformer_hessian.engine.ops.losses import NextTokenLogits
from transformer_hessian.studies.lm import approx, claims, compute, scaling, step

torch.set_default_dtype(torch.float32)


def _model(seed=0, width=4, depth=2, heads=2, context=6):
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab=256, context=context, width=width, depth=depth, heads=heads)
    return GPT(cfg).double(), cfg


def test_hessian_groups_follow_the_parameters_and_split_heads_by_rows():
    model, cfg = _model(width=6, depth=2, heads=3)
    named = dict(model.named_parameters())
    names = compute.hessian_params(cfg.depth)
    P = sum(named[n].numel() for n in names)
    whole = compute.hessian_groups(cfg, split_heads=False)
    assert [g for g, _, _ in whole][:7] == ["E", "L0 W_Q", "L0 W_K", "L0 W_V", "L0 W_O", "L0 W_1", "L0 W_2"]
    assert [b - a for _, a, b in whole] == [named[n].numel() for n in names] and whole[-1][2] == P
    split = {g: (a, b) for g, a, b in compute.hessian_groups(cfg)}
    a, b = split["L1 W_K h2"]
    k0 = next(a0 for g, a0, _ in whole if g == "L1 W_K")
    dh = cfg.width // cfg.heads
    assert (a - k0, b - a) == (2 * dh * cfg.width, dh * cfg.width)  # rows 2 dh .. 3 dh of the (d, d) weight
    # the head's rows of H are the Hessian w.r.t. those rows of W_K: compare with the engine on W_K alone
    ids = torch.randint(0, 256, (2, cfg.context), generator=torch.Generator().manual_seed(1))
    H = exact_hessian(model, ids, ids, loss="causal_lm", params=names, progress=False)
    Hk = exact_hessian(model, ids, ids, loss="causal_lm", params=["blocks.1.attn.k.weight"], progress=False)
    assert torch.allclose(H[a:b, a:b], Hk[2 * dh * cfg.width :, 2 * dh * cfg.width :], rtol=0, atol=1e-14)


def test_per_sequence_losses_average_to_the_causal_lm_loss():
    from transformer_hessian.engine.ops.losses import causal_lm

    model, cfg = _model()
    ids = torch.randint(0, 256, (5, cfg.context), generator=torch.Generator().manual_seed(2))
    per = compute.per_sequence_losses(model, ids)
    with torch.no_grad():
        whole = float(causal_lm(model(ids), ids))
    assert per.shape == (5,) and per.mean() == pytest.approx(whole, rel=1e-12)


def test_layer_norms_have_the_hessian_studys_format_and_values():
    model, cfg = _model()
    ids = torch.randint(0, 256, (2, cfg.context), generator=torch.Generator().manual_seed(3))
    H, out = compute.hessian_stage(model, ids, cfg)
    assert out["P"] == H.shape[0] and out["asymmetry"] < 1e-12
    blocks = out["layers"][1]
    assert [(b["row"], b["col"]) for b in blocks][:2] == [("W_Q", "W_Q"), ("W_Q", "W_K")] and len(blocks) == 25
    whole = {g: (a, b) for g, a, b in compute.hessian_groups(cfg, split_heads=False)}
    a, b = whole["L1 W_V"]
    c, d = whole["L1 W_1"]
    vw = next(x for x in blocks if (x["row"], x["col"]) == ("W_V", "W_1"))
    assert vw["fro"] == pytest.approx(float(torch.linalg.matrix_norm(H[a:b, c:d])), rel=1e-12)
    assert vw["spectral"] == pytest.approx(float(torch.linalg.matrix_norm(H[a:b, c:d], 2)), rel=1e-10)
    g = out["groups"]
    i = g["labels"].index("E")
    assert g["spectral_diagonal"][i] == pytest.approx(
        float(torch.linalg.eigvalsh(H[: 256 * 4, : 256 * 4]).abs().max()), rel=1e-10
    )


@pytest.mark.parametrize("shape", [(300, 900), (1200, 400)])
def test_large_block_spectral_norms_match_a_full_decomposition(shape):
    A = torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    assert compute._spectral(A, False) == pytest.approx(float(torch.linalg.matrix_norm(A, 2)), rel=1e-12)
    S = A[: shape[0], : shape[0]] if shape[0] <= shape[1] else A[: shape[1], : shape[1]]
    S = S + S.T
    assert compute._spectral(S, True) == pytest.approx(float(torch.linalg.eigvalsh(S).abs().max()), rel=1e-10)


def test_scaling_law_recovers_its_constants():
    theta = (1.7, 40.0, 0.45, 90.0, 0.3)
    rows = [
        {"N": 12 * w * w * d, "tokens": 32 * n, "val_loss": float(scaling.law_value(theta, 12 * w * w * d, 32 * n))}
        for w in (8, 12, 16, 24)
        for d in (1, 2)
        for n in (64, 256, 1024, 4096)
    ]
    fit = scaling.fit_scaling_law(rows, n_bootstrap=20, seed=0)
    for name, value in zip(scaling.LAW_NAMES, theta):
        assert fit[name] == pytest.approx(value, rel=1e-3), name
        lo, hi = fit[f"{name}_ci95"]
        assert lo <= fit[name] * (1 + 1e-6) and fit[name] <= hi * (1 + 1e-6)
    assert fit["rms_residual"] < 1e-6


def test_stationarity_reading_counts_cells_on_each_side():
    def row(w, n, loss, k_star):
        return {"id": f"w{w}_n{n}", "width": w, "depth": 1, "sequences": n, "val_loss": loss, "k_star": k_star}

    # width 8: stationary at n = 100 (k* = 50): the wider model gains 0.5, more data 0.1 -> holds;
    # at n = 10 (no k*): more data gains 1.0, width 0.2 -> holds. Width 16 has no wider neighbour.
    rows = [row(8, 10, 3.0, None), row(8, 100, 2.0, 50), row(8, 1000, 1.9, 50)]
    rows += [row(16, 10, 2.8, None), row(16, 100, 1.5, 40), row(16, 1000, 1.4, 40)]
    v = scaling.stationarity_verdict(rows)
    assert v["stationary"] == {"cells": 1, "holds": 1} and v["before"] == {"cells": 1, "holds": 1}
    rows[2]["val_loss"] = 1.0  # past stationarity more data now gains 1.0 against the width's 0.5: fails
    v = scaling.stationarity_verdict(rows)
    assert v["stationary"] == {"cells": 1, "holds": 0}


def _flat_call(module, keys, *args):
    """``(w0, f, sizes)``: ``f(w)`` is ``module(*args)`` with the parameters ``keys`` taken, in
    order, from the flat vector ``w``; ``w0`` their values, ``sizes`` their numbers of entries."""
    from torch.func import functional_call

    named = dict(module.named_parameters())
    w0 = torch.cat([named[k].detach().reshape(-1) for k in keys])
    sizes = [named[k].numel() for k in keys]

    def f(w):
        parts = torch.split(w, sizes)
        return functional_call(module, {k: p.view_as(named[k]) for k, p in zip(keys, parts)}, args)

    return w0, f, sizes


def _exact_ggn(model, ids, names):
    """J^T H_loss J of the causal LM loss, J by autograd's jacobian of the flattened logits."""
    w0, out, _ = _flat_call(NextTokenLogits(model), [f"model.{n}" for n in names], ids)

    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        J = torch.autograd.functional.jacobian(out, w0).reshape(-1, w0.numel())
        z = out(w0).detach()
    p = z.softmax(-1)
    Hl = torch.block_diag(*[torch.diag(q) - torch.outer(q, q) for q in p]) / z.shape[0]
    return J.T @ Hl @ J


@pytest.mark.slow  # about 3 s
def test_curvlinops_ggn_matches_an_independent_ggn_and_its_hessian_the_engines():
    from curvlinops import HessianLinearOperator
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model, cfg = _model(seed=5, width=4, depth=1, context=5)
    ids = torch.randint(0, 256, (2, cfg.context), generator=torch.Generator().manual_seed(6))
    names = approx.weight_names(cfg.depth)
    A = approx.approximations(model, ids, cfg.depth)
    G = _exact_ggn(model, ids, names)
    assert float((A["GGN"] - G).norm() / G.norm()) < 1e-10
    H = exact_hessian(model, ids, ids, loss="causal_lm", params=names, progress=False)
    named = dict(model.named_parameters())
    with sdpa_kernel(SDPBackend.MATH):
        op = HessianLinearOperator(
            NextTokenLogits(model), nn.CrossEntropyLoss(), [named[n] for n in names], [(ids, ids[:, 1:].reshape(-1))],
            check_deterministic=False,
        )  # fmt: skip
        Hc = op @ torch.eye(H.shape[0], dtype=torch.float64)
    assert float((H - Hc).norm() / H.norm()) < 1e-10
    sizes = [named[n].numel() for n in names]
    errors = approx.approximation_errors(H, {**A, "GGN": H.clone()}, names, sizes, approx.layers_of(cfg.depth))
    assert errors["whole"]["GGN"]["fro"] == 0 and errors["whole"]["block-diagonal"]["fro"] == 0  # one layer
    assert errors["off_layer_share"] == 0 and errors["whole"]["K-FAC"]["fro"] > 0


def test_block_diagonal_error_is_the_share_outside_the_layers():
    H = torch.randn(14, 14, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    H = H + H.T
    names = approx.weight_names(2)
    out = approx.approximation_errors(H, {}, names, [1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1], approx.layers_of(2))
    mask = torch.zeros(14, 14, dtype=torch.bool)
    mask[:8, :8] = True
    mask[8:, 8:] = True
    off = torch.where(mask, 0.0, H)
    assert out["off_layer_share"] == pytest.approx(float(off.norm() / H.norm()), rel=1e-12)
    assert out["whole"]["block-diagonal"]["fro"] == pytest.approx(out["off_layer_share"], rel=1e-12)


def _hessian_result(vv_trained: float):
    def blocks(scale, vv):
        groups = compute.PAPER_GROUPS
        return [
            {"row": r, "col": c, "fro": vv if (r, c) == ("W_V", "W_V") else scale, "spectral": scale, "max_abs": scale}
            for r in groups
            for c in groups
        ]

    def stage(s, vv):
        return {
            "layers": [blocks(s, vv), blocks(s, vv)],
            "spread": {"q01": 1e-6, "q99": 1.0, "zero_fraction": 0.0},
        }

    return {
        "corpus": {"name": "torch-docs", "bytes": 1_393_628, "sha256": "a" * 64},
        "model": {"width": 4, "mlp_ratio": 4},
        "init": stage(1.0, 1.0),
        "trained": stage(2.0, vv_trained),
    }


def test_claim_rows_are_marked_and_hold_only_on_every_layer():
    rows = claims.hessian_rows(_hessian_result(100.0), "results/lm/hessian.json")
    by = {r["id"]: r for r in rows}
    assert set(by) == {f"lm_{i}" for i in ("hessian_heterogeneity", "values_larger_at_init", "every_block_grows",
                                          "vv_largest_trained", "keys_values_highest")}  # fmt: skip
    assert all(r["source"].startswith(claims.BEYOND) for r in rows)
    assert (
        by["lm_vv_largest_trained"]["verdict"] == "reproduced" and "layer 1:" in by["lm_vv_largest_trained"]["measured"]
    )
    h = _hessian_result(100.0)
    h["trained"]["layers"][1] = _hessian_result(0.5)["trained"]["layers"][1]  # V-V not the largest in layer 1
    by = {r["id"]: r for r in claims.hessian_rows(h, "e")}
    assert by["lm_vv_largest_trained"]["verdict"] == "not reproduced"


def test_a_changed_corpus_is_refused_with_both_hashes(tmp_path):
    s = Lm.with_defaults({"enabled": True})
    record = tmp_path / "corpus.json"
    from transformer_hessian.util.io import write_json

    write_json({"name": "torch-docs", "sha256": "0" * 64, "files": []}, record)
    with pytest.raises(ValueError, match="0{64}") as err:
        step._data(s, str(tmp_path), str(record))
    from transformer_hessian.data.text import EMBEDDED_SHA256

    assert EMBEDDED_SHA256 in str(err.value)


def test_claims_step_writes_rows_summary_and_tables(tmp_path):
    """The study's rows and summary section from results built by its own computations on a micro
    decoder (the scaling grid synthetic)."""
    s = Lm.with_defaults({"enabled": True, "context": 6, "width": 4, "depth": 1, "heads": 2, "n_orderings": 4,
                          "n_bootstrap": 20, "gram_sequences": 8, "batch_size": 4})  # fmt: skip
    model, cfg = _model(width=4, depth=1, context=6)
    ids = torch.randint(0, 256, (40, 6), generator=torch.Generator().manual_seed(8))
    h = {"corpus": {"name": "micro", "bytes": 240, "sha256": "b" * 64, "source": "test", "files": []},
         "model": cfg.to_dict(), "hessian_sequences": 2}  # fmt: skip
    H, h["init"] = compute.hessian_stage(model, ids[:2], cfg)
    h["init"]["approximations"] = step._approximations(model, ids[:2], cfg, H)
    h["trained"] = h["init"]  # the rows read both stages; one Hessian serves here
    ls = {"corpus": h["corpus"], **compute.landscape_analysis(model.float(), ids[:16], s)}
    rows = [{"id": f"w{w}_d1_n{n}", "width": w, "depth": 1, "sequences": n, "tokens": 6 * n, "N": 12 * w * w,
             "val_loss": float(scaling.law_value((1.0, 20.0, 0.5, 30.0, 0.4), 12 * w * w, 6 * n)), "k_star": 10,
             "slope": -1.0, "prefactor": 0.1, "lambda_max": 1.0, "block_spectral": {"x": 1.0}}
            for w in (4, 8, 16) for n in (8, 32, 128)]  # fmt: skip
    sc = {"corpus": h["corpus"], "rows": rows, "law": scaling.fit_scaling_law(rows, 20, 0), "fits": {},
          "fit_sequences": 128, "stationarity": scaling.stationarity_verdict(rows)}  # fmt: skip
    paths = {}
    for name, obj in (("hessian", h), ("landscape", ls), ("scaling", sc), ("metrics", {"final": {"val_loss": 5.0}})):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(obj))
    out = step.claims_step(s, paths["hessian"], paths["landscape"], paths["scaling"], paths["metrics"],
                           tmp_path / "claims.json", tmp_path / "summary.json", tmp_path)  # fmt: skip
    ids_ = {r["id"] for r in out}
    assert {"lm_fig6_slope", "lm_theorem7_bound_at_wstar", "lm_assumption1_trend", "lm_scaling_law"} <= ids_
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["scaling_law"]["alpha"] == pytest.approx(0.5, rel=1e-3)
    assert math.isfinite(summary["D_k"]["slope"]) and summary["corpus"]["sha256"] == "b" * 64
    assert (tmp_path / "lm_approx.csv").read_text().count("\n") == 1 + 2 * 7 * 4  # stages x (6 blocks + all) x methods


@pytest.mark.parametrize(
    "change, message",
    [
        ({"heads": 3}, "lm.width: 16 is not a multiple of lm.heads = 3"),
        ({"scaling": {"widths": [8, 9]}}, "lm.scaling.widths: 9 is not a multiple of lm.heads = 2"),
        ({"corpus": "local"}, "lm.local: lm.corpus is 'local'"),
        ({"scaling": {"train_sequences": [64]}}, "needs 2 model sizes and 2 training-set sizes"),
        ({"scaling": {"jobs": 100}}, "lm.scaling.jobs: 100 jobs for 32 models"),
    ],
)
def test_bad_lm_sections_are_refused_naming_the_key(change, message):
    import copy
    from pathlib import Path

    from transformer_hessian.config.validate import ConfigError, load_config, validate_config

    cfg = copy.deepcopy(load_config(Path(__file__).resolve().parents[2] / "config" / "lm.yaml"))
    for k, v in change.items():
        cfg["lm"][k] = {**cfg["lm"][k], **v} if isinstance(v, dict) else v
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate_config(cfg)


def _vit(seed=11):
    """A ViT of the paper's form whose five matrices are all non-square (so a transpose shows)."""
    from transformer_hessian.core.model import ModelConfig, ViT

    torch.manual_seed(seed)
    cfg = ModelConfig(image_size=4, channels=2, num_classes=3, patch_size=2, width=5, depth=2, d_k=3, d_ff=7,
                      ffn_bias=True)  # fmt: skip
    model = ViT(cfg).double()
    with torch.no_grad():  # LayerNorm away from gamma = 1, beta = 0, as after training
        for b in model.blocks:
            for p in (b.gamma1, b.beta1, b.gamma2, b.beta2, b.b_1, b.b_2):
                p.add_(0.3 * torch.randn_like(p))
    g = torch.Generator().manual_seed(seed + 1)
    images = torch.randn(6, 2, 4, 4, dtype=torch.float64, generator=g)
    labels = torch.randint(0, 3, (6,), generator=g)
    return model, images, labels


def test_linear_vit_is_the_paper_vit_and_its_ggn_is_the_paper_orders():
    from transformer_hessian.studies.lm import vit

    model, images, labels = _vit()
    with torch.no_grad():
        assert float((vit.LinearViT(model)(images) - model(images)).abs().max()) < 1e-13
    block = 1
    from transformer_hessian import GROUPS

    w0, logits, sizes = _flat_call(model, [f"blocks.{block}.{n}" for n in GROUPS], images)
    A = vit.vit_approximations(model, block, images, labels)
    J = torch.autograd.functional.jacobian(logits, w0)  # (B, C, P)
    p = logits(w0).detach().softmax(-1)
    G = sum(J[b].T @ (torch.diag(p[b]) - torch.outer(p[b], p[b])) @ J[b] for b in range(len(p))) / len(p)
    assert float((A["GGN"] - G).norm() / G.norm()) < 1e-10
    H = torch.autograd.functional.hessian(lambda w: nn.functional.cross_entropy(logits(w), labels), w0)
    errors = approx.approximation_errors(H, A, ["W_Q", "W_K", "W_V", "W_1", "W_2"], sizes, [0] * 5)
    assert errors["whole"]["GGN"]["fro"] == pytest.approx(float((G - H).norm() / H.norm()), rel=1e-10)
    assert errors["off_layer_share"] == 0 and errors["whole"]["block-diagonal"]["fro"] == 0  # one block


def test_vit_kfac_is_a_kronecker_product_per_group_in_the_paper_order():
    from transformer_hessian.studies.lm import vit

    model, images, labels = _vit(seed=12)
    A = vit.vit_approximations(model, 0, images, labels)["K-FAC"]
    blk = model.blocks[0]
    shapes = [tuple(getattr(blk, n).shape) for n in ("W_Q", "W_K", "W_V", "W_1", "W_2")]
    offs = [0]
    for r, c in shapes:
        offs.append(offs[-1] + r * c)
    for g, (r, c) in enumerate(shapes):
        B = A[offs[g] : offs[g + 1], offs[g] : offs[g + 1]]
        # A_in (x) G_out in row-major W order: rearranged to (in in, out out) it has rank one
        R = B.reshape(r, c, r, c).permute(0, 2, 1, 3).reshape(r * r, c * c)
        s = torch.linalg.svdvals(R)
        assert float(s[1] / s[0]) < 1e-10, shapes[g]
        if g < len(shapes) - 1:
            assert float(A[offs[g] : offs[g + 1], offs[g + 1] :].abs().max()) == 0  # block-diagonal


def test_transpose_order_maps_each_transposed_matrix_to_row_major():
    from transformer_hessian.studies.lm import vit

    Ws = [torch.arange(6.0).reshape(2, 3), 100 + torch.arange(8.0).reshape(4, 2)]
    lin = torch.cat([W.T.reshape(-1) for W in Ws])
    order = vit.transpose_order([tuple(W.shape) for W in Ws])
    assert torch.equal(lin[order], torch.cat([W.reshape(-1) for W in Ws]))
