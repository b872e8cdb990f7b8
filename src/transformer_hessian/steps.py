"""One function per Snakemake rule: read the rule's inputs, run the computation, write its results.

Layering (``docs/architecture.md``): ``cli.py`` only parses arguments and calls one function
here; each function here loads its inputs (through :mod:`.io`, :mod:`.train`), calls the
package's computation (:mod:`.data`, ...; a study's steps are in its ``step`` module),
applies the rule's gate (pass/fail against a tolerance), logs one line and writes its outputs
through :mod:`.io`. The computation modules therefore never touch argument parsing or file
formats, :mod:`.io` owns the formats, and these functions can be called (and tested) from Python
with plain arguments. Heavy modules (torch) are imported inside each function so that importing
this module, like ``transformer-hessian --help``, stays cheap.

Config sections arrive typed and frozen (:mod:`.settings`, parsed once by the command line from
the validated config's JSON): ``spec`` = one ``experiments.<name>`` section
(:class:`.settings.Experiment`), ``hessian`` = the ``hessian`` section (:class:`.settings.Hessian`),
...; every default was filled in from the schema before, so none is repeated here.
"""

from __future__ import annotations

from pathlib import Path

from .utils import log

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
    from .data import download
    from .io import save_manifest

    root = root or Path(manifest_path).resolve().parent.parent
    manifest = download(dataset, root, mirror=mirror or None, deadline=deadline, local=local or None)
    save_manifest(manifest_path, manifest)
    log.info("%s ready under %s", dataset, Path(root) / dataset)
