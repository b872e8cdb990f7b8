"""Every figure of the registry, drawn by its helper on small inputs, is readable in print.

Each figure is drawn the way its notebook draws it (same helper, same title text), on inputs
built here: synthetic arrays, or the pipeline's own computations on tiny models (probe,
bounds, spectrum). :func:`transformer_hessian.plotting.print_check.text_problems` then fails a
figure on text that overlaps other text (tick labels included), on fonts that print below
6 pt when the saved figure is scaled to the paper's text width (NeurIPS, 5.5 in) and on a
legend inside an axes that covers data points. A figure added to the registry without a
builder here fails ``test_every_registry_figure_is_covered``.
"""

from __future__ import annotations

import functools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from transformer_hessian import GROUPS, plotting, registry  # noqa: E402
from transformer_hessian.plotting.print_check import (  # noqa: E402
    MIN_FONT_PT,
    PRINT_WIDTH_IN,
    printed_scale,
    printed_texts,
    text_problems,
)
from transformer_hessian.studies.landscape import plot as landscape_plot  # noqa: E402
from transformer_hessian.studies.probe import plot as probe_plots  # noqa: E402
from transformer_hessian.studies.scaling import compute as scaling  # noqa: E402
from transformer_hessian.studies.scaling import plot as scaling_plot  # noqa: E402

from .builders import block_norms_doc, random_hessian  # noqa: E402

# A small block layout of Figures 3-5: d = 4, d_K = 2, d_ff = 8.
SHAPES = np.array([[4, 2], [4, 2], [4, 4], [4, 8], [8, 4]])
OFFSETS = np.concatenate([[0], np.cumsum(SHAPES.prod(axis=1))])


def _metrics(dataset="digits", depth=1, width=4, d_k=2, d_ff=8, image=8, patch=4, classes=10):
    model = {
        "image_size": image,
        "channels": 1,
        "num_classes": classes,
        "patch_size": patch,
        "width": width,
        "depth": depth,
        "d_k": d_k,
        "d_ff": d_ff,
    }
    return {"dataset": dataset, "epochs": 2, "final": {"val_acc": 0.8}, "model": model, "n_parameters": 1234}


def _hessian(seed, scale=1.0, zeros=True):
    h = random_hessian(seed, int(OFFSETS[-1]), scale, zeros)
    return {"H": h, "offsets": OFFSETS, "names": list(GROUPS)}


def _norms(h, stage, seed):
    return {**block_norms_doc(h, OFFSETS, stage, seed), "batch_size": 64}


# ----------------------------------------------------------------------------- builders


def build_fig2():
    from transformer_hessian.plotting.architecture_diagram import architecture_figure

    hess, land = _metrics(), _metrics(depth=2, width=8, d_k=8, d_ff=32)
    out = []
    for pair in ((hess, land), (hess, hess)):  # two models, and one model used by both experiments
        panels = [
            (
                "Hessian experiment (Figs. 3-5)\n"
                + plotting.dataset_model_label(pair[0], "MNIST", sep="\n").splitlines()[0],
                pair[0]["model"],
            ),
            (
                "Loss-landscape experiment (Fig. 6)\n"
                + plotting.dataset_model_label(pair[1], "CIFAR-100", sep="\n").splitlines()[0],
                pair[1]["model"],
            ),
        ]
        out.append(architecture_figure(panels))
    return out


def _heatmaps(which):
    out = []
    for zeros in (True, False):  # with exact zeros and without (the caption's share either way)
        init, trained = _hessian(0, zeros=zeros), _hessian(1, 30.0, zeros=zeros)
        vmin, vmax = plotting.robust_log_range(init["H"], trained["H"])
        label = plotting.dataset_model_label(_metrics(), "MNIST", sep="\n")
        shown = init if which == "fig3" else trained
        what = "Hessian at initialisation" if which == "fig3" else "Hessian after training"
        out.append(plotting.hessian_figure(shown, vmin, vmax, title=f"{what}\n{label}"))
    return out


def build_fig5():
    init, trained = _norms(_hessian(0)["H"], "init", 3), _norms(_hessian(1, 30.0)["H"], "trained", 4)
    label = plotting.dataset_model_label(_metrics(), "MNIST")
    return [plotting.norms_figure(init, trained, title=f"{label}; one batch of 64 training images")]


def build_fig6():
    from transformer_hessian.core.landscape import analyse_landscape

    losses = np.random.default_rng(0).exponential(size=3000)
    out = []
    for batch in (None, 32):
        kw = {"granularity": "batch", "batch_size": batch} if batch else {}
        res = analyse_landscape(losses, n_orderings=10, seed=0, n_bootstrap=50, **kw)
        curve = landscape_plot.landscape_curve(res)
        label = plotting.dataset_model_label(_metrics(depth=2), "CIFAR-100", sep="\n")
        out.append(landscape_plot.landscape_figure(res, title=f"{label}\n{curve['label']}"))
    return out


@pytest.fixture(scope="module")
def probe_result():
    from transformer_hessian.config.settings import Probe
    from transformer_hessian.core.model import ModelConfig, ViT
    from transformer_hessian.studies.probe import compute

    def tiny(seed, n):
        torch.manual_seed(seed)
        cfg = ModelConfig(image_size=4, channels=1, num_classes=3, patch_size=2, width=3, depth=2, d_k=2, d_ff=4)
        model = ViT(cfg).double()
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.5)
        return model, torch.randn(n, 1, 4, 4, dtype=torch.float64), torch.randint(0, 3, (n,))

    model, x, y = tiny(11, 60)
    init, _, _ = tiny(12, 1)
    s = {
        "max_samples": 50,
        "n_orderings": 6,
        "n_random_directions": 2,
        "n_t": 4,
        "n_t_linear": 0,
        "lanczos_iters": 8,
        "hessian_samples": 20,
        "curvature_samples": 4,
        "k_small": 3,
        "n_bootstrap": 20,
        "shift_ks": [2, 8, 32],
        "shift_steps": 2,
        "shift_orderings": 2,
    }
    result = compute.run_probe(model, x, y, Probe.with_defaults(s), init_model=init)
    return dict(result, dataset="digits")


def _probe(fn):
    def build(probe_result):
        label = probe_plots.run_label(probe_result, _metrics(depth=2, width=3, d_k=2, d_ff=4))
        return [fn(probe_result, label)]

    return build


def _dynamics(fig_id):
    def build():
        from transformer_hessian.core.hessian import ALL_GROUPS
        from transformer_hessian.studies.dynamics.plot import dynamics_figure

        d, dk, dff = 8, 8, 16
        steps, heat = np.arange(0, 101, 10), (0, 10, 100)
        rng = np.random.default_rng(0)
        shapes = {"W_Q": (d, dk), "W_K": (d, dk), "W_V": (d, d), "W_1": (d, dff), "W_2": (dff, d)}
        n, k = len(steps), len(heat)
        data = {
            "steps": steps,
            "heat_steps": np.array(heat),
            "names": list(ALL_GROUPS),
            # norms between 1.7 and 4.7 (under a decade, as on MNIST)
            "weight_norms": rng.uniform(1.7, 4.7, (n, 2, 9)),
            "hessian_norms": 10.0 ** rng.uniform(-6, 0, (n, 3, 9, 9)),
        }
        for g in ALL_GROUPS:
            data[f"weights_{g}"] = rng.standard_normal((n, *shapes.get(g, (d,)))).astype(np.float32)
        for g, s in shapes.items():
            p = s[0] * s[1]
            data[f"hdiag_{g}"] = rng.standard_normal((k, p, p)).astype(np.float32)
        data["hdiag_LN"] = rng.standard_normal((k, 4 * d, 4 * d)).astype(np.float32)
        data["hdiag_LN"][:, 0, :] = 0.0
        summary = {
            "steps": [int(s) for s in steps],
            "batch_size": 128,
            "dataset": "mnist",
            "model": {"depth": 1, "width": d, "d_ff": dff, "patch_size": 7},
        }
        return [dynamics_figure(fig_id, data, summary)]

    return build


def _bounds_result(seed):
    from transformer_hessian.core.hessian import block_norms, group_layout, hessian_vmap
    from transformer_hessian.core.model import ModelConfig, ViT
    from transformer_hessian.studies.bounds.pipeline import evaluate_bounds, spectral_norm

    torch.manual_seed(seed)
    cfg = ModelConfig(image_size=8, channels=1, num_classes=4, patch_size=4, width=4, depth=1, d_k=3, d_ff=6)
    model = ViT(cfg).double()
    images = torch.randn(5, 1, 8, 8, dtype=torch.float64)
    labels = torch.randint(0, 4, (5,))
    H = hessian_vmap(model, 0, images, labels)
    names, _, off = group_layout(model, 0)
    norms = {"blocks": block_norms(H.numpy(), off, names), "total_spectral": spectral_norm(H, symmetric=True)}
    res = evaluate_bounds(model, images, labels, norms, n_samples=2, delta=1e-6)
    return dict(res, dataset="digits", width=4, d_k=3, d_ff=6, tokens=4)


def build_bounds():
    from transformer_hessian.studies.bounds.plot import bounds_figure

    return [bounds_figure({"init": _bounds_result(3), "trained": _bounds_result(4)})]


def build_scaling():
    from transformer_hessian.config.settings import Scaling
    from transformer_hessian.config.validate import validate_config

    base = {
        "enabled": True,
        "dataset": "mnist",
        "patch_size": 7,
        "widths": [8, 16, 32, 64],
        "depths": [1, 2, 4],
        "fixed_width": 16,
        "fixed_depth": 1,
        "train_sizes": [1000, None],
    }
    import copy
    from pathlib import Path

    import yaml

    cfg = copy.deepcopy(yaml.safe_load((Path(__file__).resolve().parents[2] / "config" / "config.yaml").read_text()))
    cfg["scaling"] = base
    s = Scaling.from_dict(validate_config(cfg)["scaling"])
    rng = np.random.default_rng(0)
    results = []
    groups = ["W_Q", "W_K", "W_V", "W_1", "W_2", "gamma1", "beta1", "gamma2", "beta2"]
    for p in scaling.sweep_models(s):
        P = 100 * p["width"] ** 2 * p["depth"]
        slope, pref = -rng.uniform(0.8, 1.1), rng.uniform(0.5, 3) * P**-0.2
        k_star = scaling.k_star_fitted(pref, slope, s.tolerance)
        k = np.geomspace(10, 5000, 20)
        r = {
            **p,
            "n_parameters": P,
            "n_train": 1000 if p["train_size"] else 60000,
            "final": {"val_acc": 0.9},
            "curve": {
                "slope": slope,
                "slope_ci95": [slope - 0.05, slope + 0.05],
                "prefactor": pref,
                "k_star_measured": k_star,
                "k_star_fitted": k_star,
                "D_binned_k": k.tolist(),
                "D_binned": (pref * k**slope).tolist(),
            },
            "top_eigenvalue": 10.0 * P**0.3,
            "block_norms": None,
        }
        if P < 30000:
            norms = np.diag(np.arange(1.0, 10.0)) * P**0.5
            r["block_norms"] = {"groups": groups, "spectral": norms.tolist(), "fro": norms.tolist()}
        results.append(r)
    return [scaling_plot.scaling_figure(scaling.aggregate(results, s))]


def build_spectrum():
    from transformer_hessian.config.settings import Spectrum
    from transformer_hessian.core.model import ModelConfig, ViT
    from transformer_hessian.studies.spectrum.compute import run_spectrum

    out = []
    for depth in (1, 3):
        torch.manual_seed(depth)
        cfg = ModelConfig(image_size=4, channels=1, num_classes=3, patch_size=2, width=3, depth=depth, d_k=2, d_ff=4)
        model = ViT(cfg).double()
        x, y = torch.randn(6, 1, 4, 4, dtype=torch.float64), torch.randint(0, 3, (6,))
        s = {"lanczos_steps": 30, "n_probes": 4, "slq_probes": 2, "pair_steps": 9, "n_eigenvalues": 3}
        result = dict(run_spectrum(model, x, y, Spectrum.with_defaults(s)), dataset="digits")
        label = probe_plots.run_label(result, _metrics(depth=depth, width=3, d_k=2, d_ff=4))
        from transformer_hessian.studies.spectrum.plot import spectrum_figure

        out.append(spectrum_figure(result, label))
    return out


def build_architectures():
    """The architecture study's figure on a tiny run of its computation (8x8 images, 3 architectures)."""
    import copy
    from pathlib import Path

    from transformer_hessian.config.architectures import architectures
    from transformer_hessian.config.validate import load_config
    from transformer_hessian.studies.architectures.compute import run_architecture
    from transformer_hessian.studies.architectures.plot import architectures_figure

    s = copy.deepcopy(load_config(Path(__file__).resolve().parents[2] / "config" / "config.yaml")["architectures"])
    s.update(d_model=4, dim_feedforward=6, patch_size=4, hessian_batch_size=3)
    s["train"].update(epochs=1, batch_size=64)
    s["variants"] = {"heads_2": {"nhead": 2}, "layers_2": {"num_layers": 2}}
    gen = torch.Generator().manual_seed(0)
    data = {
        "train_x": torch.randn(64, 1, 8, 8, generator=gen),
        "train_y": torch.randint(0, 10, (64,), generator=gen),
        "val_x": torch.randn(16, 1, 8, 8, generator=gen),
        "val_y": torch.randint(0, 10, (16,), generator=gen),
        "image_size": 8,
        "channels": 1,
        "num_classes": 10,
    }
    batch = (data["train_x"][:3], data["train_y"][:3])
    result = {
        "dataset": "digits",
        "settings": s,
        "architectures": [run_architecture(a, s, data, batch) for a in architectures(s)],
    }
    return [architectures_figure(result)]


@functools.cache
def _lm_results():
    """The language study's results on a micro decoder (d 4, 2 layers, context 8: P = 1408 in the
    Hessian), its own computations, and a synthetic 4 x 2 x 4 grid for the scaling figure."""
    from transformer_hessian.config.settings import Lm
    from transformer_hessian.core.gpt import GPT
    from transformer_hessian.studies.lm import compute, step
    from transformer_hessian.studies.lm.scaling import fit_scaling_law, law_value, stationarity_verdict
    from transformer_hessian.studies.scaling.compute import fit_power_law

    s = Lm.with_defaults({"enabled": True, "context": 8, "width": 4, "depth": 2, "heads": 2, "n_orderings": 5,
                          "n_bootstrap": 20, "gram_sequences": 16, "batch_size": 8})  # fmt: skip
    cfg = compute.gpt_config(s)
    seqs = torch.randint(0, 256, (64, 8), generator=torch.Generator().manual_seed(0))
    h = {"corpus": {"name": "micro", "bytes": 512}, "model": cfg.to_dict(), "hessian_sequences": 2}
    maps = {}
    for stage, seed in (("init", 0), ("trained", 1)):
        torch.manual_seed(seed)
        model = GPT(cfg)
        H, h[stage] = compute.hessian_stage(model, seqs[:2], cfg)
        maps[stage] = compute.downsample_log(H)
        h[stage]["approximations"] = step._approximations(model, seqs[:2], cfg, H)
    h["map_groups"] = [list(g) for g in compute.hessian_groups(cfg, split_heads=False)]
    ls = compute.landscape_analysis(GPT(cfg).eval(), seqs, s)
    rng = np.random.default_rng(0)
    rows = []
    for d in (1, 2):
        for w in (8, 12, 16, 24):
            for n in (64, 256, 1024, 4096):
                N = 12 * w * w * d
                rows.append({"id": f"w{w}_d{d}_n{n}", "width": w, "depth": d, "sequences": n, "tokens": 32 * n, "N": N,
                             "P": N + 288 * w, "val_loss": float(law_value((1.5, 30.0, 0.4, 60.0, 0.35), N, 32 * n)
                             + rng.normal(0, 0.01)), "train_loss": 2.0, "slope": -1.0, "prefactor": 0.1 * N**0.1,
                             "k_star": int(100 * N**0.1), "lambda_max": 0.1 * N**0.3, "largest_block": "tok.weight",
                             "block_spectral": {"tok.weight": 1.0}})  # fmt: skip
    fits = {q: fit_power_law([r["N"] for r in rows if r["sequences"] == 4096],
                             [r[q] for r in rows if r["sequences"] == 4096], n_bootstrap=50) for q in ("k_star", "prefactor", "lambda_max")}  # fmt: skip
    sc = {"rows": rows, "law": fit_scaling_law(rows, 20, 0), "fits": fits, "fit_sequences": 4096,
          "stationarity": stationarity_verdict(rows)}  # fmt: skip
    return h, maps, ls, sc, _vit_approx_result()


def _vit_approx_result():
    """Rule lm_vit_approx's result on a micro ViT of the paper's form (d 4, one block, P = 160)."""
    from transformer_hessian import GROUPS
    from transformer_hessian.core.hessian import compute_hessian, group_layout
    from transformer_hessian.core.model import ModelConfig, ViT
    from transformer_hessian.studies.lm import approx, vit

    cfg = ModelConfig(image_size=4, channels=1, num_classes=3, patch_size=2, width=4, depth=1, d_k=4, d_ff=8)
    g = torch.Generator().manual_seed(3)
    images, labels = torch.randn(8, 1, 4, 4, dtype=torch.float64, generator=g), torch.randint(0, 3, (8,), generator=g)
    out = {"approximations": True}
    for stage, seed in (("init", 0), ("trained", 1)):
        torch.manual_seed(seed)
        model = ViT(cfg).double()
        H, _, _ = compute_hessian(model, 0, images, labels)
        _, _, offs = group_layout(model, 0)
        sizes = [int(b - a) for a, b in zip(offs[:-1], offs[1:])]
        A = vit.vit_approximations(model, 0, images, labels)
        out[stage] = {**approx.approximation_errors(H, A, list(GROUPS), sizes, [0] * 5), "block": 0, "P": 160,
                      "batch_size": 8}  # fmt: skip
    return out


def _lm(name):
    def build():
        from transformer_hessian.studies.lm import plot

        h, maps, ls, sc, va = _lm_results()
        return {
            "lm_hessian": lambda: [plot.hessian_maps_figure(maps, h)],
            "lm_norms": lambda: [plot.norms_figure(h)],
            "lm_landscape": lambda: [plot.landscape_figure(ls)],
            "lm_approx": lambda: [plot.approx_figure(h, va)],
            "lm_scaling": lambda: [plot.scaling_figure(sc)],
        }[name]()

    return build


def build_lm_landscape2d():
    """The 2-D landscape figure on a micro decoder (d 4, one layer, vocab 7): the loss and the quadratic
    model on the plane of two orthonormal directions of the blocks' parameters, eigenvalues given."""
    from transformer_hessian.core.gpt import GPT, GPTConfig
    from transformer_hessian.studies.lm import curvature, plot

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab=7, context=5, width=4, depth=1, heads=2)).double().eval()
    batches = curvature.batches_of(torch.randint(0, 7, (12, 5), generator=torch.Generator().manual_seed(1)), 4)
    named = {n: p for n, p in model.named_parameters() if n.startswith("blocks.")}
    P = sum(p.numel() for p in named.values())
    V, _ = torch.linalg.qr(torch.randn(P, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2)))
    eig = {"names": list(named), "shapes": {n: list(p.shape) for n, p in named.items()}, "eigenvalues": [2.0, 1.0],
           "vectors": V.T.contiguous()}  # fmt: skip
    r = curvature.landscape2d(model, batches, eig, radius=0.5, points=9, near=0.25)
    return [plot.landscape2d_figure(r)]


BUILDERS = {
    "fig2": build_fig2,
    "fig3": lambda: _heatmaps("fig3"),
    "fig4": lambda: _heatmaps("fig4"),
    "fig5": build_fig5,
    "fig6": build_fig6,
    "fig1": _probe(probe_plots.fig1_figure),
    "theorem7": _probe(probe_plots.theorem7_figure),
    "fig12": _probe(probe_plots.fig12_figure),
    **{f"fig{n}": _dynamics(f"fig{n}") for n in range(7, 12)},
    "bounds": build_bounds,
    "scaling": build_scaling,
    "spectrum": build_spectrum,
    "architectures": build_architectures,
    **{name: _lm(name) for name in ("lm_hessian", "lm_norms", "lm_landscape", "lm_approx", "lm_scaling")},
    "lm_landscape2d": build_lm_landscape2d,
}
NEEDS_PROBE = {"fig1", "theorem7", "fig12"}


#: The figures whose check took 3 s or more, marked slow (`make test-fast` leaves them out). The five
#: language-study figures share _lm_results, which the first of them in a run pays (about 9 s).
SLOW = {
    "architectures",  # about 17 s
    "lm_hessian",
    "lm_norms",
    "lm_landscape",
    "lm_approx",
    "lm_scaling",
    "bounds",  # about 5 s
    "fig1",  # about 3 s
    "scaling",  # about 41 s
    "spectrum",  # about 75 s
    "theorem7",  # about 32 s when fig1 is not run: it then builds the probe fixture
}


def test_every_registry_figure_is_covered():
    assert set(BUILDERS) == {fig.id for fig in registry.FIGURES}
    assert SLOW <= set(BUILDERS)  # a renamed figure would otherwise leave its slow mark behind


#: Figures that still fail the print-size check on these inputs (none now): the reason
#: is the check's own message when run; remove an id once its figure passes (strict: a pass fails).
UNFINISHED: dict[str, str] = {}


def _marks(fig_id: str) -> list:
    marks = [pytest.mark.slow] if fig_id in SLOW else []
    if fig_id in UNFINISHED:
        marks.append(pytest.mark.xfail(reason=UNFINISHED[fig_id], strict=True))
    return marks


@pytest.mark.parametrize("fig_id", [pytest.param(fig.id, marks=_marks(fig.id)) for fig in registry.FIGURES])
def test_figure_text_is_readable_in_print(fig_id, request):
    build = BUILDERS[fig_id]
    figs = build(request.getfixturevalue("probe_result")) if fig_id in NEEDS_PROBE else build()
    problems = []
    for i, fig in enumerate(figs):
        problems += [f"{fig_id} (variant {i}): {p}" for p in text_problems(fig)]
        assert printed_texts(fig), f"{fig_id}: no text found"
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- the check itself


def test_check_finds_overlap_small_fonts_and_covering_legends():
    fig, ax = plt.subplots(figsize=(PRINT_WIDTH_IN, 3))
    ax.text(0.5, 0.5, "first text", transform=ax.transAxes)
    ax.text(0.52, 0.5, "second text", transform=ax.transAxes)
    problems = text_problems(fig)
    assert any("overlaps" in p and "first text" in p for p in problems)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(2 * PRINT_WIDTH_IN, 3))  # printed at half size
    ax.set_title("nine points", fontsize=9)
    problems = text_problems(fig)
    assert printed_scale(fig) < 0.7  # the tight box crops some margin
    assert any("'nine points'" in p and "< 6.0 pt" in p for p in problems)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(PRINT_WIDTH_IN, 3))
    x = np.linspace(0, 1, 200)
    ax.plot(x, np.full_like(x, 0.5), label="a line through the middle")
    ax.legend(loc="center")
    assert any("covers" in p for p in text_problems(fig))
    assert not [p for p in text_problems(fig, legends=False) if "covers" in p]
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(PRINT_WIDTH_IN, 3))
    ax.plot(x, x, label="rising")
    ax.legend(loc="upper left")
    ax.set_title("clean", fontsize=MIN_FONT_PT + 2)
    assert text_problems(fig) == []
    texts = {t.string for t in printed_texts(fig)}
    assert {"clean", "rising", "0.0", "1.0"} <= texts
    assert all(isinstance(t.text, Text) for t in printed_texts(fig))
    plt.close(fig)


def test_crowded_tick_labels_are_found():
    fig, ax = plt.subplots(figsize=(1.5, 1.5))
    ax.set_xticks(np.arange(30), [f"label {i}" for i in range(30)])
    problems = text_problems(fig)
    assert any("'label 1'" in p and "overlaps" in p for p in problems)
    plt.close(fig)
