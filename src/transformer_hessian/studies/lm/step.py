"""The rules' steps of the language study (``transformer-hessian lm ...``): each loads the corpus,
checks it is the one the model was trained on (both hashes named otherwise), computes, and writes
its result with the corpus' record (name, source, file list, sha256)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...util.files import log
from .result import save_result

if TYPE_CHECKING:
    from ...config.settings import Lm

__all__ = [
    "claims_step",
    "hessian_step",
    "landscape_step",
    "scaling_models_step",
    "scaling_step",
    "train_step",
    "trained_sequences",
]


def _data(s: Lm, data_root: str, trained_on: str | None = None):
    """(corpus record, train sequences, validation sequences); with ``trained_on`` (the train
    step's corpus.json) a corpus other than the training's is refused naming both hashes."""
    from .compute import corpus_of, sequences_of
    from .result import load_result

    corpus = corpus_of(s, data_root)
    if trained_on is not None:
        was = load_result(trained_on, "lm_train")
        if was["sha256"] != corpus.sha256:
            raise ValueError(
                f"lm: the corpus changed since the model was trained: sha256 {corpus.sha256} now, "
                f"{was['sha256']} in {trained_on}; rerun the lm_train rule (snakemake reruns it when its inputs change)"
            )
    train, val = sequences_of(s, corpus)
    return corpus.manifest(), train, val


def trained_sequences(s: Lm, train):
    """The training sequences the study's decoder is trained on: the first ``lm.train.sequences``
    of the training split (all of them where it is null)."""
    return train if s.train.sequences is None else train[: s.train.sequences]


def _load_model(path: str):
    from ...train.lm import load_lm

    model = load_lm(path)
    model.eval()
    return model


def train_step(s: Lm, data_root: str, out_dir: str, corpus_out: str, device: str = "auto") -> dict[str, Any]:
    """Rule lm_train: train the study's decoder (``lm.width``, ``depth``, ``heads``) on the first
    ``lm.train.sequences`` training sequences; checkpoints and metrics under ``out_dir``."""
    from ...train.lm import train_lm
    from ...util.io import write_json
    from .compute import gpt_config

    record, train, val = _data(s, data_root)
    log.info("lm corpus %s: %d bytes, sha256 %s", record["name"], record["bytes"], record["sha256"])
    t = s.train
    seqs = trained_sequences(s, train)
    metrics = train_lm(
        gpt_config(s),
        seqs,
        val,
        epochs=t.epochs,
        batch_size=t.batch_size,
        lr=t.lr,
        weight_decay=t.weight_decay,
        seed=t.seed,
        out_dir=out_dir,
        device=device,
    )
    write_json(record, corpus_out)
    return metrics


def hessian_step(s: Lm, data_root: str, init: str, final: str, corpus: str, out: str, maps_out: str) -> dict[str, Any]:
    """Rule lm_hessian: the exact Hessian of the causal LM loss on the first ``lm.hessian_sequences``
    training sequences at initialisation and after training (block norms, the paper's blocks per
    layer, entry spread, print-size maps) and, with ``lm.approximations``, the error of the GGN,
    K-FAC, EK-FAC and the layer-block-diagonal Hessian on the weight matrices."""
    import numpy as np

    from ...util.files import atomic_path
    from .compute import downsample_log, gpt_config, hessian_groups, hessian_stage

    record, train, _ = _data(s, data_root, corpus)
    cfg = gpt_config(s)
    batch = train[: s.hessian_sequences]
    result: dict[str, Any] = {"corpus": record, "model": cfg.__dict__, "hessian_sequences": int(len(batch))}
    maps = {}
    for stage, path in (("init", init), ("trained", final)):
        model = _load_model(path)
        H, numbers = hessian_stage(model, batch, cfg)
        maps[stage] = downsample_log(H)
        if s.approximations:
            numbers["approximations"] = _approximations(model, batch, cfg, H)
        result[stage] = numbers
        del H
    result["map_groups"] = [list(g) for g in hessian_groups(cfg, split_heads=False)]
    save_result(out, result)
    with atomic_path(maps_out) as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **maps)
    return result


def _approximations(model, batch, cfg, H) -> dict[str, Any]:
    from .approx import approximation_errors, approximations, layers_of, weight_names

    E = cfg.vocab * cfg.width
    named = dict(model.named_parameters())
    names = weight_names(cfg.depth)
    sizes = [named[n].numel() for n in names]
    t0 = time.perf_counter()
    approx = approximations(model, batch, cfg.depth)
    out = approximation_errors(H[E:, E:], approx, names, sizes, layers_of(cfg.depth))
    out["seconds"] = time.perf_counter() - t0
    return out


def landscape_step(s: Lm, data_root: str, final: str, corpus: str, out: str) -> dict[str, Any]:
    """Rule lm_landscape: Figure 6, Theorem 7 and Assumption 1 on the training sequences at the
    trained weights (:func:`.compute.landscape_analysis`)."""
    from .compute import landscape_analysis

    record, train, _ = _data(s, data_root, corpus)
    result = {"corpus": record, **landscape_analysis(_load_model(final), trained_sequences(s, train), s)}
    save_result(out, result)
    return result


def scaling_models_step(s: Lm, part: int, jobs: int, data_root: str, cache_dir: str, out: str) -> dict[str, Any]:
    """Rule lm_scaling_models: train and measure the grid's models ``part, part + jobs, ...``."""
    from .scaling import grid_points, run_point

    record, train, val = _data(s, data_root)
    points = grid_points(s)[part::jobs]
    models = []
    for i, p in enumerate(points):
        log.info("lm scaling: model %d/%d of part %d", i + 1, len(points), part)
        models.append(run_point(p, s, train, val, cache_dir))
    result = {"part": int(part), "jobs": int(jobs), "corpus": record, "models": models}
    save_result(out, result)
    return result


def scaling_step(s: Lm, parts: Sequence[str], out: str) -> dict[str, Any]:
    """Rule lm_law: the law L(N, D), power laws in N at the largest training set, and the
    reading of the paper's Discussion on the grid."""
    from ...core.stats import fit_power_law
    from .result import load_result
    from .scaling import fit_scaling_law, stationarity_verdict

    loaded = [load_result(p, "lm_scaling_models") for p in parts]
    rows = [m for r in loaded for m in r["models"]]
    law = fit_scaling_law(rows, s.n_bootstrap, s.seed)
    n_max = max(r["sequences"] for r in rows)
    at_max = [r for r in rows if r["sequences"] == n_max]
    fits = {}
    for q in ("slope_abs", "prefactor", "k_star", "lambda_max", "block_max"):
        ys = [_quantity(r, q) for r in at_max]
        pts = [(r["N"], y) for r, y in zip(at_max, ys) if y is not None and y > 0]
        fits[q] = (
            fit_power_law([p for p, _ in pts], [y for _, y in pts], n_bootstrap=s.n_bootstrap, seed=s.seed)
            if len({p for p, _ in pts}) >= 2
            else {"skipped": f"{len(pts)} models with a value"}
        )
    result = {
        "corpus": loaded[0]["corpus"],
        "rows": rows,
        "law": law,
        "fits": fits,
        "fit_sequences": int(n_max),
        "stationarity": stationarity_verdict(rows),
    }
    save_result(out, result)
    if law.get("fitted"):
        log.info(
            "lm scaling law: E %.3f, A %.3g, alpha %.3f %s, B %.3g, beta %.3f %s",
            law["E"], law["A"], law["alpha"], law["alpha_ci95"], law["B"], law["beta"], law["beta_ci95"],
        )  # fmt: skip
    return result


def _quantity(r: dict[str, Any], q: str) -> float | None:
    if q == "slope_abs":
        return -r["slope"] if r["slope"] < 0 else None
    if q == "block_max":
        return max(r["block_spectral"].values())
    return r[q]


#: the study's tables (``paper/tables/<stem>.{csv,tex,md}``): stem -> caption
TABLES = {
    "lm_approx": "Relative error of the curvature approximations against the exact Hessian of the language model "
    "and of the paper's ViT",
    "lm_scaling": "The language scaling grid: one row per model",
}


def claims_step(
    s: Lm,
    hessian: str,
    landscape: str,
    scaling: str | None,
    metrics: str,
    out: str,
    summary_out: str,
    tables_dir: str | None = None,
    vit: str | None = None,
    landscape2d: str | None = None,
) -> list[dict[str, Any]]:
    """Rule lm_claims: the study's claim rows (:func:`.claims.lm_claim_rows`), its summary section
    and, with ``tables_dir``, its tables (:data:`TABLES`; ``lm_scaling`` only when the grid ran);
    ``vit``: rule lm_vit_approx's result (the approximations on the paper's ViT), in the summary
    section and the table ``lm_approx``; ``landscape2d``: rule lm_landscape2d's result (its claim row
    and the curvature numbers in the summary section)."""
    from ...util.io import load_json, write_json
    from .claims import lm_claim_rows
    from .result import load_result

    h = load_result(hessian, "lm_hessian")
    ls = load_result(landscape, "lm_landscape")
    sc = load_result(scaling, "lm_law") if scaling else None
    m = load_json(metrics, "lm_train")
    evidence = f"{hessian}, {landscape}" + (f", {scaling}" if scaling else "")
    l2 = load_result(landscape2d, "lm_landscape2d") if landscape2d else None
    rows = lm_claim_rows(h, ls, sc, s, evidence, l2, landscape2d or "")
    write_json(rows, out)
    v = load_result(vit, "lm_vit_approx") if vit else None
    section = summary_section(h, ls, sc, m)
    if l2 is not None:
        section["curvature"] = {
            **l2["curvature"],
            **{k: l2[k] for k in ("sequences", "L0", "grad_norm", "g_u1", "g_u2", "radius", "points", "near")},
        }
    if v is not None and v["approximations"]:
        section["approximations_vit"] = {stage: v[stage] for stage in ("init", "trained")}
    write_json(section, summary_out)
    if tables_dir is not None:
        from ...util.tablefmt import write_table
        from .plot import approx_table, scaling_table

        write_table(approx_table(h, v), Path(tables_dir) / "lm_approx", TABLES["lm_approx"])
        if sc is not None:
            write_table(scaling_table(sc), Path(tables_dir) / "lm_scaling", TABLES["lm_scaling"])
    return rows


def summary_section(h, ls, sc, metrics) -> dict[str, Any]:
    """The ``lm`` section of ``paper/summary.json``: the corpus, the model's training, the Hessian
    numbers (no maps), the D_k fit, Assumption 1, the law's constants under their names with their
    intervals, the power laws and the approximation errors."""
    c = ls["curve"]
    out = {
        "corpus": {k: h["corpus"][k] for k in ("name", "source", "bytes", "sha256", "files")},
        "corpus_files": len(h["corpus"]["files"]),
        "training": {k: metrics[k] for k in metrics if k != "history"} if isinstance(metrics, dict) else metrics,
        "hessian": {stage: {k: v for k, v in h[stage].items() if k != "groups"} for stage in ("init", "trained")},
        "D_k": {
            k: c[k]
            for k in ("n_samples", "slope", "slope_ci95", "ci95_contains_minus_one", "bound_holds", "bound_max_ratio")
        },
        "assumption1": {
            k: ls["assumption1"][k] for k in ("slope", "slope_ci95", "full_grad_norm", "zero_gradient_test")
        },
    }
    if sc is not None:
        law = sc["law"]
        out["scaling_law"] = {k: law[k] for k in law}
        out["scaling_fits"] = {
            q: {k: v for k, v in f.items() if not k.startswith("band")} for q, f in sc["fits"].items()
        }
        out["stationarity"] = {k: sc["stationarity"][k] for k in ("stationary", "before")}
    return out
