"""The step of the pipeline's own ``download`` rule: fetch and verify a data set, then write its
manifest. Every other rule's step is in its study's ``step`` module (``studies/<name>/step.py``)
or, for the report rules, in :mod:`.report_steps`; ``docs/architecture.md`` gives the layering
(command -> step -> package function -> result file through :mod:`.io`).
"""

from __future__ import annotations

from pathlib import Path

from ..util.files import log

__all__ = ["download_dataset"]


def download_dataset(
    dataset: str,
    manifest_path: str,
    root: str | None = None,
    mirror: str | None = None,
    deadline: float = 3600.0,
    local: str | None = None,
) -> None:
    """Rule download: fetch and verify ``dataset`` under ``root/dataset`` (default root: two levels
    above ``manifest_path``; ``local``: a folder that holds the files already), then write its manifest."""
    from ..data import download
    from ..util.io import save_manifest

    root = root or Path(manifest_path).resolve().parent.parent
    manifest = download(dataset, root, mirror=mirror or None, deadline=deadline, local=local or None)
    save_manifest(manifest_path, manifest)
    log.info("%s ready under %s", dataset, Path(root) / dataset)
