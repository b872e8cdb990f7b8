"""Old import paths of modules that moved: each still imports, as the module at its new home, with a
``DeprecationWarning`` that names that home.

``from transformer_hessian.bounds import block_bound`` worked before the one-folder-per-study layout;
``from transformer_hessian.hessian import ...`` before the subpackages. Both keep working through the
finder below; new code imports from :mod:`transformer_hessian` itself (the public API, docs/api.md) or
from the new path. Imports nothing from the package.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

PACKAGE = __name__.rpartition(".")[0]

#: Old module path -> its home now (both relative to the package).
MOVED = {
    # the one-folder-per-study layout
    "bounds": "studies.bounds.block",
    "table1": "studies.table1.compute",
    "probe_plots": "studies.probe.plot",
    "scaling": "studies.scaling.compute",
    "scaling_plot": "studies.scaling.plot",
    "dynamics": "studies.dynamics.compute",
    "dynamics_plot": "studies.dynamics.plot",
    "spectrum": "studies.spectrum.compute",
    "spectrum_plot": "studies.spectrum.plot",
    # the subpackages: util, config, pipeline, core
    "io": "util.io",
    "utils": "util.files",
    "tempfiles": "util.tempfiles",
    "numfmt": "util.numfmt",
    "tablefmt": "util.tablefmt",
    "progress": "util.progress",
    "resources": "util.resources",
    "datanames": "util.datanames",
    "claim_schema": "util.claim_schema",
    "bench.sandbox": "util.sandbox",
    "config_yaml": "config.yaml_file",
    "config_checks": "config.checks",
    "config_architectures": "config.architectures",
    "settings": "config.settings",
    "settings_base": "config.section",
    "cli": "pipeline.cli",
    "cli_commands": "pipeline.commands",
    "steps": "pipeline.steps",
    "report": "pipeline.report",
    "report_pages": "pipeline.report_pages",
    "report_steps": "pipeline.report_steps",
    "recap": "pipeline.recap",
    "runguard": "pipeline.runguard",
    "hessian": "core.hessian",
    "hessian_groups": "core.hessian",
    "checks": "core.checks",
    "model": "core.model",
    "krylov": "core.krylov",
    "stats": "core.stats",
    "theorem7": "core.theorem7",
    "diagrams": "plotting.diagrams",
    "architecture_diagram": "plotting.architecture_diagram",
    "checkpoints": "train.checkpoints",
    "train_result": "train.result",
    "encoder.bench": "bench.encoder",
    "encoder.growth": "bench.growth",
    "encoder.problems": "bench.encoder_problems",
    # analyses more than one study uses, moved down to the library (the language study)
    "studies.landscape.compute": "core.landscape",
    "studies.probe.assumption1": "core.assumption1",
}


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new home (one module object, not a second copy)."""

    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        return importlib.import_module(self.new)

    def exec_module(self, module) -> None:
        return None


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds only the old paths in :data:`MOVED`; every other name is left to the normal finders."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(PACKAGE + "."):
            return None
        new = MOVED.get(fullname[len(PACKAGE) + 1 :])
        if new is None:
            return None
        new = f"{PACKAGE}.{new}"
        warnings.warn(
            f"{fullname} moved to {new}; import it from there, or its stable names from {PACKAGE} (docs/api.md)",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Put the finder last on ``sys.meta_path`` (once): existing modules are always found first."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
