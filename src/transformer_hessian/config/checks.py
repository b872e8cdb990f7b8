"""Cross-key checks of a validated config: the checks that involve several keys (sizes against the
samples they draw from, patch sizes against image sides, memory against ``resources.mem_mb``, the
Hessian experiment's shape, the scaling sweep, the architecture study's section). Each message
names the dotted key to change. They run before any data is read, from the data sets' shapes
(:data:`DATASET_SHAPES`); :func:`.config.validate_config` calls :func:`cross_key_errors` after the
schema has filled in every default.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..util.datanames import DATA_SETS
from .architectures import config_errors as architecture_errors

#: Image side, channels and classes of each data set (for cross-key checks made before any data is read).
DATASET_SHAPES = {name: d.shape for name, d in DATA_SETS.items()}


def training_bytes_estimate(exp: dict) -> int | None:
    """Lower bound of training memory: 16 bytes (weights, gradients, two AdamW moments) per parameter.

    Parameters: ``resources.parameter_count`` of the whole model. ``None`` for an unknown data set.
    """
    from ..util.resources import parameter_count

    if exp.get("dataset") not in DATASET_SHAPES:
        return None
    return 16 * parameter_count(exp["model"], "model", image=DATASET_SHAPES[exp["dataset"]])


#: Training images of each data set before ``max_train`` (digits: all 1,797, split by ``val_fraction``).
DATASET_TRAIN = {name: d.train_images for name, d in DATA_SETS.items()}


def train_samples(exp: dict, name: str) -> tuple[int | None, str, list[str]]:
    """``(n, keys, errors)``: the number of training samples experiment ``name`` will have (before any
    data is read), the config keys that set it (for messages), and the errors of its split."""
    t, ds = exp["train"], exp["dataset"]
    if ds not in DATASET_TRAIN:
        return None, "", []
    errors, keys = [], f"experiments.{name}.dataset"
    n = DATASET_TRAIN[ds]
    if not DATA_SETS[ds].official_split:  # digits: sklearn's stratified split, ceil(val_fraction * 1797) for val
        n_val = math.ceil(t["val_fraction"] * n)
        classes = DATASET_SHAPES[ds][2]
        if min(n_val, n - n_val) < classes:
            errors.append(
                f"  experiments.{name}.train.val_fraction: {t['val_fraction']:g} of the {n} {ds} images leaves "
                f"{n_val} for validation and {n - n_val} for training; the stratified split needs at least "
                f"{classes} in each (one per class): use a value in [{classes / n:.4f}, {1 - classes / n:.4f}]"
            )
        n -= n_val
        keys = f"experiments.{name}.train.val_fraction"
    if t.get("max_train") is not None and t["max_train"] < n:
        n, keys = t["max_train"], f"experiments.{name}.train.max_train"
    if n < 2 and not errors:
        errors.append(f"  {keys}: leaves {n} training sample(s); at least 2 are needed")
    return n, keys, errors


def _sample_count_errors(config: dict) -> list[str]:
    """Sizes and k values against the number of samples they draw from (refused, never clamped)."""
    out, experiments, counts = [], config["experiments"], {}
    for name, exp in experiments.items():
        n, keys, errors = train_samples(exp, name)
        counts[name] = (n, keys)
        out += errors
    for name, exp in experiments.items():
        n, keys = counts[name]
        bs = exp["train"]["batch_size"]
        if n is not None and n >= 2 and bs > n:
            out.append(
                f"  experiments.{name}.train.batch_size: {bs} is more than the {n} training samples (set by "
                f"{keys}); lower it to at most {n}"
            )
    hname = config["hessian"]["experiment"]
    n, keys = counts.get(hname, (None, ""))
    bs = config["hessian"]["batch_size"]
    if n is not None and n >= 2 and bs > n:
        out.append(
            f"  hessian.batch_size: {bs} is more than the {n} training samples of experiment {hname!r} "
            f"(set by {keys}); lower hessian.batch_size to at most {n}"
        )
    lname = config["landscape"]["experiment"]
    n, keys = counts.get(lname, (None, ""))
    if n is not None and n >= 2:
        land = config["landscape"]
        n_l, lkeys = n, keys
        if land.get("max_samples") is not None and land["max_samples"] < n:
            n_l, lkeys = land["max_samples"], "landscape.max_samples"
        if land["k_min"] > n_l - 2:
            out.append(
                f"  landscape.k_min: {land['k_min']} leaves fewer than 2 values of k to fit among the {n_l} samples "
                f"(set by {lkeys}); use landscape.k_min <= {max(n_l - 2, 1)}"
            )
        probe = config.get("probe") or {}
        if probe:
            n_p, pkeys = n, keys
            if probe.get("max_samples") is not None and probe["max_samples"] < n:
                n_p, pkeys = probe["max_samples"], "probe.max_samples"
            if probe["k_small"] > n_p - 1:
                out.append(
                    f"  probe.k_small: {probe['k_small']} but the probes use {n_p} samples (set by {pkeys}); "
                    f"k_small must be at most {n_p - 1} (it is compared with k = {n_p - 1})"
                )
            big = [k for k in probe["shift_ks"] if k > n_p - 1]
            if big:
                out.append(
                    f"  probe.shift_ks: {big} exceed the {n_p - 1} the probes' {n_p} samples allow (set by "
                    f"{pkeys}); each k must be at most {n_p - 1}"
                )
    return out


def _cross_key_errors(config: dict) -> list[str]:
    """Checks that involve several keys; each message names the key to change."""
    from ..util.resources import dense_hessian_bytes, format_bytes, hessian_group_size

    out = []
    experiments = config["experiments"]
    root = config.get("data", {}).get("root", "")
    long_parts = [part for part in Path(root).parts if len(part.encode()) > 255]
    if long_parts:
        out.append(f"  data.root: a folder name of {len(long_parts[0].encode())} bytes; at most 255 per name")
    out += _sample_count_errors(config)
    for name, exp in experiments.items():
        m = exp["model"]
        side = DATASET_SHAPES.get(exp["dataset"], (None,))[0]
        if side is not None and side % m["patch_size"]:
            out.append(
                f"  experiments.{name}.model.patch_size: {m['patch_size']} does not divide the "
                f"{side}x{side} images of {exp['dataset']!r}"
            )
        need = training_bytes_estimate(exp)
        mem_mb = config.get("resources", {}).get("mem_mb")
        if need is not None and mem_mb and need > mem_mb * 2**20:
            out.append(
                f"  experiments.{name}.model: training needs at least {format_bytes(need)} (16 bytes per "
                f"parameter: weights, gradients, AdamW moments), more than resources.mem_mb = {mem_mb} MiB; "
                f"lower experiments.{name}.model.width / d_ff / d_k / depth or raise resources.mem_mb"
            )
    hname = config["hessian"]["experiment"]
    hexp = experiments[hname]
    depth = hexp["model"]["depth"]
    if config["hessian"]["block"] >= depth:
        out.append(
            f"  hessian.block: {config['hessian']['block']} but experiment {hname!r} has only {depth} "
            "block(s) (0-based index)"
        )
    if depth != 1:
        out.append(
            f"  hessian.experiment: {hname!r} has model.depth {depth}, but the closed-form check (rule "
            f"theory) needs a single-block model: point hessian.experiment at an experiment with "
            f"model.depth: 1 (or set experiments.{hname}.model.depth: 1)"
        )
    m = hexp["model"]
    need = dense_hessian_bytes(m["width"], m["d_k"], m["d_ff"])
    mem_mb = config.get("resources", {}).get("mem_mb")
    if mem_mb and need > mem_mb * 2**20:
        p = hessian_group_size(m["width"], m["d_k"], m["d_ff"])
        out.append(
            f"  hessian.experiment: the dense Hessian of {hname!r} has {p:,} x {p:,} float64 entries and its "
            f"jobs need about {format_bytes(need)}, more than resources.mem_mb = {mem_mb} MiB; lower "
            f"experiments.{hname}.model.width / d_k / d_ff or raise resources.mem_mb"
        )
    return out


def scaling_errors(config: dict) -> list[str]:
    """Cross-key problems of an enabled ``scaling:`` section (each names the key to change)."""
    from ..util.resources import format_bytes

    s = config.get("scaling") or {}
    if not s.get("enabled"):
        return []
    out = []
    side = DATASET_SHAPES[s["dataset"]][0]
    if side % s["patch_size"]:
        out.append(
            f"  scaling.patch_size: {s['patch_size']} does not divide the {side}x{side} images of {s['dataset']!r}"
        )
    for key in ("widths", "depths", "train_sizes"):
        if len(set(map(str, s[key]))) != len(s[key]):
            out.append(f"  scaling.{key}: {s[key]} lists a value twice")
    n_arch = len({(w, s["fixed_depth"]) for w in s["widths"]} | {(s["fixed_width"], n) for n in s["depths"]})
    if n_arch < 2:
        out.append(f"  scaling: the sweep has {n_arch} architecture; a power law in P needs 2 (add widths or depths)")
    for size in s["train_sizes"]:
        if size is not None and size < s["k_min"] + 2:
            out.append(f"  scaling.train_sizes: {size} leaves fewer than 2 k >= scaling.k_min = {s['k_min']} to fit")
    mem_mb = (config.get("resources") or {}).get("mem_mb")
    archs = [("scaling.widths", w, s["fixed_depth"]) for w in s["widths"]]
    archs += [("scaling.depths", s["fixed_width"], n) for n in s["depths"]]
    for key, w, depth in archs:
        model = {
            "patch_size": s["patch_size"],
            "width": w,
            "depth": depth,
            "d_k": max(1, round(s["d_k_ratio"] * w)),
            "d_ff": max(1, round(s["d_ff_ratio"] * w)),
            "ffn_bias": s["ffn_bias"],
        }
        need = training_bytes_estimate({"dataset": s["dataset"], "model": model})
        if mem_mb and need is not None and need > mem_mb * 2**20:
            out.append(
                f"  {key}: the model of width {w} and depth {depth} needs at least {format_bytes(need)} to train "
                f"(16 bytes per parameter), more than resources.mem_mb = {mem_mb} MiB; lower {key}"
            )
            break
    n_models = n_arch * len(s["train_sizes"])
    if s["jobs"] > n_models:
        out.append(f"  scaling.jobs: {s['jobs']} jobs for {n_models} models; at most one job per model")
    return out


def lm_errors(config: dict) -> list[str]:
    """Cross-key problems of an enabled ``lm:`` section (each names the key to change)."""
    s = config.get("lm") or {}
    if not s.get("enabled"):
        return []
    out = []
    g = s["scaling"]
    widths = [("lm.width", s["width"])] + ([("lm.scaling.widths", w) for w in g["widths"]] if g["enabled"] else [])
    for key, w in widths:
        if w % s["heads"]:
            out.append(f"  {key}: {w} is not a multiple of lm.heads = {s['heads']}")
    if s["corpus"] == "local" and not s["local"]:
        out.append("  lm.local: lm.corpus is 'local' but no .txt file or folder is given")
    if g["enabled"]:
        for key in ("widths", "depths", "train_sequences"):
            if len(set(g[key])) != len(g[key]):
                out.append(f"  lm.scaling.{key}: {g[key]} lists a value twice")
        n = len(g["widths"]) * len(g["depths"]) * len(g["train_sequences"])
        if len(set(g["widths"])) * len(set(g["depths"])) < 2 or len(set(g["train_sequences"])) < 2:
            out.append("  lm.scaling: the law L(N, D) needs 2 model sizes and 2 training-set sizes at least")
        if g["jobs"] > n:
            out.append(f"  lm.scaling.jobs: {g['jobs']} jobs for {n} models; at most one job per model")
    return out


def cross_key_errors(config: dict) -> list[str]:
    """Every cross-key problem of a schema-validated ``config`` (one indented line each, naming the key):
    experiments and Hessian, the scaling sweep, the architecture study and the language study."""
    return (
        _cross_key_errors(config)
        + scaling_errors(config)
        + architecture_errors(config, DATASET_SHAPES)
        + lm_errors(config)
    )
