"""Per-figure provenance for ``paper/summary.json`` (``figure_provenance``), derived from the
registry: notebook, rule, paper label, caption and the sha256 of every input and output file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .figures import FIGURES, enabled
from .rules import caption, resolve_inputs

__all__ = ["file_sha256", "provenance", "provenance_json"]


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of the bytes of ``path``."""
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def provenance(
    config: dict, root: str | Path = ".", notebook_dir: str | Path | None = None
) -> dict[str, dict[str, Any]]:
    """Per-figure provenance for ``summary.json``: ``{id: {paper, label, notebook, rule,
    caption, inputs: {path: sha256}, outputs: {path: sha256}}}``; a missing file hashes to None.

    Result paths are relative to ``root`` (the working directory of the run); notebooks are
    looked up in ``notebook_dir`` (default ``<root>/notebooks``) but listed as ``notebooks/<name>``.
    """
    root = Path(root)
    nb_dir = Path(notebook_dir) if notebook_dir is not None else root / "notebooks"

    cache: dict[Path, str | None] = {}

    def digest(path: str) -> str | None:
        p = nb_dir / Path(path).name if path.startswith("notebooks/") else root / path
        if p not in cache:  # figures share inputs (fig3, fig4): hash each file once
            cache[p] = file_sha256(p) if p.is_file() else None
        return cache[p]

    out = {}
    for fig in FIGURES:
        if not enabled(fig, config):
            continue
        inputs = resolve_inputs(fig, config)
        out[fig.id] = {
            "paper": fig.paper,
            "label": fig.label,
            "notebook": f"notebooks/{fig.notebook}",
            "rule": fig.rule,
            "caption": caption(fig, config),
            "inputs": {p: digest(p) for p in [f"notebooks/{fig.notebook}", *inputs.values()]},
            "outputs": {p: digest(p) for p in (f"{fig.out}.pdf", f"{fig.out}.png")},
        }
    return out


def provenance_json(config: dict, root: str | Path = ".") -> str:
    """:func:`provenance` as indented JSON text."""
    return json.dumps(provenance(config, root), indent=2, sort_keys=True)
