"""Table 1 (transformer_hessian.studies.table1): generated from the config; the paper config matches
the paper's Table 1; the rule's step writes what it builds."""

import pandas as pd
import pytest

from transformer_hessian.config.settings import Config
from transformer_hessian.config.validate import load_config
from transformer_hessian.studies.table1.step import run_step
from transformer_hessian.util import io
from transformer_hessian.util.tablefmt import write_table

from .table1_builders import _metrics, _table1


def test_paper_config_reproduces_table1(root):
    cfg = load_config(root / "config/paper.yaml")
    df = _table1(cfg, _metrics(cfg))
    assert len(df) == 4 and list(df["source"][::2]) == ["paper", "paper"]
    runs = df[df["source"] != "paper"]
    assert list(runs["differs from paper"]) == ["none", "none"]
    assert list(runs["tokens"].astype(int)) == [49, 64]  # MNIST 28/4, CIFAR-100 32/4
    assert list(runs["hidden dim"].astype(int)) == [16, 128] and list(runs["ff dim"].astype(int)) == [64, 512]
    assert list(runs["blocks"].astype(int)) == [1, 8] and list(runs["patch size"].astype(int)) == [4, 4]
    assert cfg["hessian"]["batch_size"] == 128  # Figure 5: "one batch containing 128 examples"


def test_default_config_names_its_differences(root, tmp_path):
    cfg = load_config(root / "config/config.yaml")
    metrics = _metrics(cfg)
    df = _table1(cfg, metrics)
    runs = df[df["source"] != "paper"].reset_index(drop=True)
    assert runs.loc[0, "differs from paper"].startswith("dataset, patch size")
    assert "blocks" in runs.loc[1, "differs from paper"] and "hidden dim" in runs.loc[1, "differs from paper"]
    name = cfg["hessian"]["experiment"]
    assert runs.loc[0, "parameters"] == str(metrics[name]["n_parameters"])
    assert runs.loc[0, "val acc"] == f"{100 * metrics[name]['final']['val_acc']:.1f}%"
    assert runs.loc[0, "lr"] == f"{cfg['experiments'][name]['train']['lr']:g}"
    paths = write_table(df, tmp_path / "table1", "Table 1")
    assert r"\toprule" in paths[1].read_text() and "not stated" in paths[2].read_text()


def test_missing_metrics_is_an_error(root):
    cfg = load_config(root / "config/config.yaml")
    with pytest.raises(ValueError, match="no metrics.json"):
        _table1(cfg, {})


def test_step_reads_the_metrics_files_and_writes_the_table(root, tmp_path):
    """The rule's step: the metrics files as the train rule writes them (io.save_metrics) in, the
    three table files out, the CSV equal to the table built from the same metrics directly."""
    cfg = load_config(root / "config/config.yaml")
    metrics = _metrics(cfg)
    paths = []
    for name, m in metrics.items():
        paths.append(str(tmp_path / name / "metrics.json"))
        io.save_metrics(paths[-1], m)
    c = Config.from_dict(cfg)
    run_step(c.experiments, {"hessian": c.hessian.experiment, "landscape": c.landscape.experiment}, paths, tmp_path)
    got = pd.read_csv(tmp_path / "table1.csv", dtype=str, keep_default_na=False)
    want = _table1(cfg, metrics)
    assert list(got.columns) == list(want.columns) and got.values.tolist() == want.astype(str).values.tolist()
    assert r"\toprule" in (tmp_path / "table1.tex").read_text()
    assert "Table 1" in (tmp_path / "table1.md").read_text()
