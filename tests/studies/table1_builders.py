"""Builders shared by the Table 1 tests (tests/studies/test_table1.py) and the paper's MNIST setting
(tests/test_paper_mnist.py): Table 1 of a config dict and metrics.json-like dicts for it."""

from transformer_hessian.config.settings import Config
from transformer_hessian.core.model import ModelConfig, ViT, count_parameters
from transformer_hessian.studies.table1.compute import table1


def _table1(cfg, metrics):
    """Table 1 of a validated config dict, through its typed sections."""
    c = Config.from_dict(cfg)
    return table1(c.experiments, {"hessian": c.hessian.experiment, "landscape": c.landscape.experiment}, metrics)


IMAGE = {"digits": (8, 1, 10), "mnist": (28, 1, 10), "cifar100": (32, 3, 100)}


def _metrics(cfg):
    """metrics.json-like dicts with the parameter count of the model the config builds."""
    out = {}
    for name in {cfg["hessian"]["experiment"], cfg["landscape"]["experiment"]}:
        spec = cfg["experiments"][name]
        size, ch, classes = IMAGE[spec["dataset"]]
        mc = ModelConfig(image_size=size, channels=ch, num_classes=classes, **spec["model"])
        out[name] = {
            "experiment": name,
            "model": mc.to_dict(),
            "n_parameters": count_parameters(ViT(mc)),
            "final": {"val_acc": 0.5 + 0.01 * len(name)},
        }
    return out
