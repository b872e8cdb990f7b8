"""The configuration: validation of a YAML file against the schema (:mod:`.validate`, :mod:`.yaml_file`,
``schema/config.schema.yaml``, the one home of defaults), the cross-key checks (:mod:`.checks`,
:mod:`.architectures`) and the frozen typed sections built once from a validated config
(:mod:`.settings` on :mod:`.section`).

The names of :mod:`.validate` (``load_config``, ``validate_config``, ...) are also reachable here, as
they were when this was one module.
"""

from __future__ import annotations


def __getattr__(name: str):
    """``from transformer_hessian.config import load_config``: the name from :mod:`.validate`."""
    if not name.startswith("__"):
        from . import validate

        if hasattr(validate, name):
            return getattr(validate, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
