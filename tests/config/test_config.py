"""Config validation: bad configs stop the run before any job starts, naming the key."""

import copy

import pytest
import yaml
from conftest import snakemake_dry_run

from transformer_hessian.config.validate import ConfigError, config_hash, load_config, validate_config


@pytest.fixture()
def default(root):
    return yaml.safe_load((root / "config/config.yaml").read_text())


def test_shipped_configs_are_valid(root):
    for name in ("config.yaml", "paper.yaml"):
        cfg = load_config(root / "config" / name)
        assert cfg["hessian"]["method"] in {"auto", "closed_form", "curvlinops", "vmap"}
    paper = load_config(root / "config/paper.yaml")
    h = paper["experiments"][paper["hessian"]["experiment"]]
    lnd = paper["experiments"][paper["landscape"]["experiment"]]
    # Table 1 of the paper: (dataset, patch size, hidden dim, ff dim, blocks); Figure 5: batch 128.
    m, c = h["model"], lnd["model"]
    assert (h["dataset"], m["patch_size"], m["width"], m["d_ff"], m["depth"]) == ("mnist", 4, 16, 64, 1)
    assert (lnd["dataset"], c["patch_size"], c["width"], c["d_ff"], c["depth"]) == ("cifar100", 4, 128, 512, 8)
    assert paper["hessian"]["batch_size"] == 128
    assert paper["dynamics"]["steps"] == 1000  # App. A.1: "the first 1000 training steps"


def test_defaults_filled_and_hash_stable(default):
    cfg = validate_config(copy.deepcopy(default))
    assert cfg["theory"]["tolerance"] == 1e-8
    assert cfg["landscape"]["ema_factor"] == 0.99
    assert config_hash(cfg) == config_hash(validate_config(copy.deepcopy(default)))
    other = copy.deepcopy(default)
    other["landscape"]["seed"] = 1
    assert config_hash(validate_config(other)) != config_hash(cfg)


def _set(cfg, dotted, value):
    *head, last = dotted.split(".")
    node = cfg
    for k in head:
        node = node[k]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value


BAD = [
    ("experiments.hessian_digits.dataset", "imagenet", "experiments.hessian_digits.dataset"),
    ("experiments.hessian_digits.train.epochs", -1, "experiments.hessian_digits.train.epochs"),
    ("experiments.hessian_digits.train.lr", "fast", "experiments.hessian_digits.train.lr"),
    ("experiments.hessian_digits.model.width", 16.5, "experiments.hessian_digits.model.width"),
    ("experiments.hessian_digits.train.learning_rate", 0.1, "experiments.hessian_digits.train.learning_rate"),
    ("hessian.method", "finite_differences", "hessian.method"),
    ("hessian.experiment", "missing_exp", "hessian.experiment"),
    ("spectrum.experiment", "missing_exp", "spectrum.experiment"),
    ("hessian.block", 3, "hessian.block"),
    ("landscape.ema_factor", 1.5, "landscape.ema_factor"),
    ("device", "tpu", "device"),
    ("typo_section", {}, "typo_section"),
    ("experiments.hessian_digits.model.d_k", KeyError, "d_k"),
]


@pytest.mark.parametrize("key,value,named", BAD, ids=[b[0] + "=" + str(b[1]) for b in BAD])
def test_bad_config_names_the_key(default, key, value, named):
    cfg = copy.deepcopy(default)
    _set(cfg, key, value)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert named in str(err.value)


@pytest.mark.slow  # about 4 s a case
@pytest.mark.parametrize("key,value", [("experiments.hessian_digits.train.epochs", -2), ("hessian.color", "red")])
def test_snakemake_stops_before_any_job(default, root, tmp_path, env, key, value):
    cfg = copy.deepcopy(default)
    _set(cfg, key, value)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake_dry_run(root, tmp_path, env, "--configfile", str(path), timeout=120)
    assert proc.returncode != 0
    assert key in proc.stdout + proc.stderr
    assert "rule train" not in proc.stdout and not (tmp_path / "results").exists()


@pytest.mark.slow  # about 5 s
def test_paper_config_dry_run_builds_dag(root, tmp_path, env):
    proc = snakemake_dry_run(root, tmp_path, env, "--configfile", str(root / "config/paper.yaml"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    for needle in (
        "results/data/mnist/manifest.json",
        "results/data/cifar100/manifest.json",
        "results/hessian_mnist/hessian/init.npz",
        "results/landscape_cifar100/landscape/landscape.json",
        "paper/summary.json",
        "results/hessian_mnist/dynamics/dynamics.npz",
        "paper/figures/fig10.pdf",
        "paper/tables/table1.md",
    ):
        assert needle in out
