"""Curvature of a data set's mean loss (``data=``): products, gradients, dense Hessians and blocks
against autograd's Hessian of the mean over every loss term of every batch, in float64, with
batches of different sizes and lengths, ignored tokens, a batch with no terms, Hugging Face dict
batches with attention masks; and two gloo processes equal to one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import rel_err
from ranks import run_ranks
from torch.func import functional_call
from torch.nn.attention import SDPBackend, sdpa_kernel

from transformer_hessian import HessianOperator, exact_hessian, hessian_blocks, hvp
from transformer_hessian.engine.data import check_sweep_memory, loss_terms, sweep_bytes

from .models import DT, TOL, gpt2, nano_gpt

HERE = Path(__file__).resolve().parent


def _data_reference(model, batches, names, kind="causal_lm"):
    """autograd's Hessian (and gradient) of the data set's mean loss: every term's loss summed over
    every batch (reduction 'sum'), divided by the number of terms; math attention kernel."""
    named = {n: p.detach() for n, p in model.named_parameters()}

    def total(*flat):
        ps = dict(named)
        ps.update(dict(zip(names, flat, strict=True)))
        s, n = 0.0, 0
        for inputs, targets in batches:
            args, kwargs = ((inputs,), {}) if isinstance(inputs, torch.Tensor) else ((), dict(inputs))
            out = functional_call(model, ps, args, kwargs)
            out = out.logits if hasattr(out, "logits") else out
            if kind == "causal_lm":
                V = out.shape[-1]
                y = targets[:, 1:].reshape(-1)
                s = s + F.cross_entropy(out[:, :-1].reshape(-1, V), y, ignore_index=-100, reduction="sum")
                n += int((y != -100).sum())
            elif kind == "cross_entropy":
                s = s + F.cross_entropy(out, targets, reduction="sum")
                n += targets.shape[0]
            else:
                s = s + ((out - targets) ** 2).sum()
                n += targets.numel()
        return s / n

    flat = tuple(named[n] for n in names)
    with sdpa_kernel(SDPBackend.MATH):
        Hs = torch.autograd.functional.hessian(total, flat)
        g = torch.autograd.functional.jacobian(total, flat)
    sizes = [named[n].numel() for n in names]
    H = torch.cat(
        [torch.cat([Hs[i][j].reshape(sizes[i], sizes[j]) for j in range(len(names))], 1) for i in range(len(names))]
    )
    return H, torch.cat([x.reshape(-1) for x in g])


def _nano(seed, vocab=7, T=6, d=4, h=2, layers=1):
    torch.manual_seed(seed)
    return nano_gpt(vocab, T, d, h, layers).to(DT).eval()


def _lm_batches(seed, vocab, shapes, ignore=0.25):
    """(ids, targets) batches of the given (B, T) shapes, a share of the targets -100."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for B, T in shapes:
        ids = torch.randint(0, vocab, (B, T), generator=gen)
        t = ids.clone()
        t[torch.rand(B, T, generator=gen) < ignore] = -100
        out.append((ids, t))
    return out


@pytest.mark.slow  # seconds: captures per batch shape, autograd's Hessian or two processes
@pytest.mark.parametrize("seed,params", [(3, None), (8, "blocks.0.attn.*"), (21, ["ln_f.weight", "pos.weight"])])
def test_data_set_equals_autograd_of_the_mean_over_every_term(seed, params):
    model = _nano(seed)
    # different batch sizes and lengths, ignored tokens, and a batch whose targets are all ignored
    batches = _lm_batches(seed, 7, [(2, 5), (3, 4), (1, 6), (2, 5)])
    batches.append((batches[0][0], torch.full_like(batches[0][1], -100)))
    op = HessianOperator(model, data=batches, loss="causal_lm", params=params)
    names = op.names
    H_ref, g_ref = _data_reference(model, batches, names)
    P = H_ref.shape[0]
    assert op.shape == (P, P)
    assert op.n_terms == sum(int((t[:, 1:] != -100).sum()) for _, t in batches)
    gen = torch.Generator().manual_seed(seed + 1)
    V = torch.randn(P, 3, generator=gen, dtype=DT)
    assert rel_err(op @ V, H_ref @ V) <= TOL
    assert rel_err(op @ V[:, 0], H_ref @ V[:, 0]) <= TOL
    assert rel_err(op.gradient(), g_ref) <= TOL
    # the dense Hessian and its blocks, summed batch by batch
    H = exact_hessian(model, data=batches, loss="causal_lm", params=names, progress=False)
    assert rel_err(H, H_ref) <= TOL
    blocks = hessian_blocks(model, data=batches, loss="causal_lm", params=names, progress=False)
    a, b = names[0], names[-1]
    sa = sum(dict(model.named_parameters())[n].numel() for n in names[: names.index(a)])
    sb = sum(dict(model.named_parameters())[n].numel() for n in names[: names.index(b)])
    na, nb = (dict(model.named_parameters())[n].numel() for n in (a, b))
    assert rel_err(blocks[(a, b)], H_ref[sa : sa + na, sb : sb + nb]) <= TOL
    # every batch evaluated again for each product (one in memory at a time): the same numbers
    lean = HessianOperator(model, data=batches, loss="causal_lm", params=params, keep=False)
    assert not lean.data.keep and op.data.keep
    assert rel_err(lean @ V, H_ref @ V) <= TOL
    assert rel_err(hvp(model, data=batches, v=V, loss="causal_lm", params=params), H_ref @ V) <= TOL


def test_a_first_batch_that_passes_one_tensor_twice_keeps_inputs_and_targets_apart():
    """``(ids, ids)`` first: the capture must not take the later batches' targets (with -100 where
    the inputs hold tokens) for their inputs."""
    model = _nano(4, T=5)
    ids = torch.randint(0, 7, (2, 5), generator=torch.Generator().manual_seed(4))
    later = _lm_batches(9, 7, [(2, 5), (2, 5)], ignore=0.4)
    batches = [(ids, ids), *later]
    op = HessianOperator(model, data=batches, loss="causal_lm", params="blocks.0.mlp.fc1.*")
    H_ref, g_ref = _data_reference(model, batches, op.names)
    V = torch.randn(op.shape[0], 2, generator=torch.Generator().manual_seed(5), dtype=DT)
    assert rel_err(op @ V, H_ref @ V) <= TOL
    assert rel_err(op.gradient(), g_ref) <= TOL


@pytest.mark.slow  # seconds: captures per batch shape, autograd's Hessian or two processes
def test_one_batch_holding_them_all_gives_the_same_operator():
    model = _nano(5, T=5)
    batches = _lm_batches(5, 7, [(2, 5), (1, 5), (2, 5), (2, 5)])
    whole = (torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches]))
    gen = torch.Generator().manual_seed(0)
    op = HessianOperator(model, data=batches, loss="causal_lm")
    V = torch.randn(op.shape[0], 2, generator=gen, dtype=DT)
    one = HessianOperator(model, *whole, loss="causal_lm")
    assert rel_err(op @ V, one @ V) <= TOL
    assert abs(op.loss() - one.loss()) <= 1e-13
    # the three batches of one shape share one captured graph
    assert len(op.data.captures) == 2


@pytest.mark.parametrize("kind", ["cross_entropy", "mse"])
def test_other_losses_weight_samples_and_entries(kind):
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3)).to(DT)
    gen = torch.Generator().manual_seed(9)
    batches = []
    for B in (2, 5, 1):
        x = torch.randn(B, 3, generator=gen, dtype=DT)
        y = (
            torch.randint(0, 3, (B,), generator=gen)
            if kind == "cross_entropy"
            else torch.randn(B, 3, generator=gen, dtype=DT)
        )
        batches.append((x, y))
    H_ref, g_ref = _data_reference(model, batches, [n for n, _ in model.named_parameters()], kind)
    op = HessianOperator(model, data=batches, loss=kind)
    V = torch.randn(op.shape[0], 2, generator=gen, dtype=DT)
    assert rel_err(op @ V, H_ref @ V) <= TOL
    assert rel_err(op.gradient(), g_ref) <= TOL


@pytest.mark.slow  # seconds: captures per batch shape, autograd's Hessian or two processes
def test_hugging_face_dict_batches_with_masks_and_labels():
    model = gpt2(vocab=11, T=6, d=8, h=2, layers=1)
    gen = torch.Generator().manual_seed(4)
    batches = []
    for B, T, pad in ((2, 6, 2), (2, 6, 1), (3, 4, 0)):
        ids = torch.randint(0, 11, (B, T), generator=gen)
        mask = torch.ones(B, T, dtype=torch.long)
        labels = ids.clone()
        if pad:  # right padding on the first row: masked and not counted
            mask[0, T - pad :] = 0
            labels[0, T - pad :] = -100
        batches.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    names = ["transformer.h.0.attn.c_attn.weight", "transformer.ln_f.weight"]
    ref_batches = [({k: v for k, v in b.items() if k != "labels"}, b["labels"]) for b in batches]
    H_ref, g_ref = _data_reference(model, ref_batches, names)
    op = HessianOperator(model, data=batches, loss="causal_lm", params=names)
    V = torch.randn(op.shape[0], 2, generator=gen, dtype=DT)
    assert rel_err(op @ V, H_ref @ V) <= TOL
    assert rel_err(op.gradient(), g_ref) <= TOL
    # the two (2, 6) batches (different masks) share a graph, the (3, 4) one has its own
    assert len(op.data.captures) == 2


def test_bad_data_is_refused_naming_it():
    model = _nano(0)
    ids = torch.randint(0, 7, (2, 5))
    with pytest.raises(TypeError, match="iterator"):
        HessianOperator(model, data=iter([(ids, ids)]), loss="causal_lm")
    with pytest.raises(TypeError, match=r"data\[1\]"):
        HessianOperator(model, data=[(ids, ids), (ids,)], loss="causal_lm")
    with pytest.raises(ValueError, match="not both"):
        HessianOperator(model, ids, ids, data=[(ids, ids)], loss="causal_lm")
    with pytest.raises(ValueError, match="no loss terms"):
        HessianOperator(model, data=[(ids, torch.full_like(ids, -100))], loss="causal_lm")
    with pytest.raises(ValueError, match="only with data="):
        HessianOperator(model, ids, ids, loss="causal_lm", keep=True)
    with pytest.raises(ValueError, match=r"data\[1\]: inputs: has nan"):
        x = torch.randn(2, 3, dtype=DT)
        HessianOperator(torch.nn.Linear(3, 2).to(DT), data=[(x, x[:, :2]), (x * float("nan"), x[:, :2])])
    assert loss_terms("causal_lm", ids, ids) == 8
    with pytest.raises(ValueError, match="loss_terms"):
        loss_terms("mse", ids, ids, lambda i, t: -1)


def test_a_sweep_that_cannot_fit_is_refused_before_work(monkeypatch):
    model = _nano(1, T=6)
    ids = torch.randint(0, 7, (2, 6))
    from transformer_hessian.engine.capture import capture

    cap = capture(model, ids, ids, loss="causal_lm")
    need = sum(sweep_bytes(cap).values())
    assert need > 0 and check_sweep_memory(cap, ids) == need
    monkeypatch.setenv("TRANSFORMER_HESSIAN_MEMORY_BYTES", str(need // 3))
    with pytest.raises(MemoryError, match=r"needs about .* available: pass fewer tokens a batch \(about 2 of 6"):
        HessianOperator(model, data=[(ids, ids)], loss="causal_lm")
    with pytest.raises(MemoryError, match="parameter subset"):
        HessianOperator(model, ids, ids, loss="causal_lm")


@pytest.mark.slow  # seconds: captures per batch shape, autograd's Hessian or two processes
def test_two_gloo_processes_equal_one_process(tmp_path):
    out = tmp_path / "two.json"
    run_ranks(HERE / "dist_worker.py", 2, [str(out)])
    got = json.loads(out.read_text())
    sys.path.insert(0, str(HERE))
    try:
        import dist_worker
    finally:
        sys.path.remove(str(HERE))
    one = dist_worker.compute(rank=0, world=1)
    assert got["ranks"] == 2 and got["n_terms"] == one["n_terms"]
    hv, hv1 = torch.tensor(got["hv"]), torch.tensor(one["hv"])
    assert rel_err(hv, hv1) <= 1e-10
    assert rel_err(torch.tensor(got["grad"]), torch.tensor(one["grad"])) <= 1e-10
    assert rel_err(torch.tensor(got["H"]), torch.tensor(one["H"])) <= 1e-10
    top, top1 = got["top"]["eigenvalues"], one["top"]["eigenvalues"]
    assert all(abs(a - b) <= 1e-8 * max(abs(b), 1e-12) for a, b in zip(top, top1, strict=True))
    assert abs(got["trace"]["mean"] - one["trace"]["mean"]) <= 1e-10 * abs(one["trace"]["mean"])
    assert abs(got["lanczos"] - one["lanczos"]) <= 1e-8 * abs(one["lanczos"])
    assert abs(got["lanczos"] - top1[0]) <= 1e-8 * abs(top1[0])  # krylov.lanczos on the operator too
    assert torch.allclose(torch.tensor(got["slq"]), torch.tensor(one["slq"]), rtol=1e-8, atol=1e-10)
    # the one-process data set equals autograd (test_data_set_equals_autograd_of_the_mean_over_every_term);
    # the top Ritz values are the dense Hessian's top eigenvalues
    H = torch.tensor(got["H"], dtype=DT)
    ev = torch.linalg.eigvalsh(H).flip(0)[:3]
    assert all(abs(a - float(b)) <= 1e-8 * float(H.norm()) for a, b in zip(top, ev, strict=True))
    # both ranks held the same product (rank 1 wrote its own copy)
    other = json.loads((tmp_path / "two.json.rank1").read_text())
    assert other["hv"] == got["hv"]


@pytest.mark.slow  # seconds: captures per batch shape, autograd's Hessian or two processes
def test_a_lower_precision_model_runs_in_its_dtype_and_accumulates_as_asked():
    import copy

    m64 = _nano(6, vocab=11, T=6, d=8)
    batches = _lm_batches(6, 11, [(2, 6), (2, 6), (2, 6)], ignore=0.0)  # one shape: one capture each
    ref = HessianOperator(m64, data=batches, loss="causal_lm")
    V = torch.randn(ref.shape[0], 2, generator=torch.Generator().manual_seed(3), dtype=DT)
    hv = ref @ V
    for dt, tol in ((torch.float32, 1e-5), (torch.bfloat16, 0.05)):
        m = copy.deepcopy(m64).to(dt)
        op = HessianOperator(m, data=batches, loss="causal_lm")
        plain = op @ V
        op.data.acc_dtype = torch.float64  # what accumulate=torch.float64 sets
        wide = op @ V
        assert plain.dtype == dt and wide.dtype == torch.float64
        assert rel_err(plain.double(), hv) <= tol and rel_err(wide, hv) <= tol
    assert HessianOperator(m, data=batches, loss="causal_lm", accumulate=torch.float32).data.acc_dtype == torch.float32
    with pytest.raises(TypeError, match="accumulate"):
        HessianOperator(m64, data=batches, loss="causal_lm", accumulate="float64")
