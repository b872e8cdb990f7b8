"""Every result file of the pipeline: one ``save_<format>`` / ``load_<format>`` pair per format.

This module owns the on-disk layout of each result; the rule steps (:mod:`.steps`), the
tables and summary (:mod:`.report`, :mod:`.claims`), the bounds pipeline and the notebooks
read and write results only through it. Every writer is atomic (a temporary file in the same
folder, renamed into place: :func:`.utils.atomic_path`), so an interrupted job never leaves a
half-written result. Every reader names the file (and the rule that writes it) when the file is
missing or malformed.

JSON files are UTF-8, indented, with no NaN/inf (refused on write: they are not valid JSON);
numpy scalars and arrays become numbers and lists. ``.npz`` files are compressed and hold only
plain arrays (read with ``allow_pickle=False``).

Formats (path patterns as the workflow names them; ``<exp>`` an experiment, ``<stage>`` init or
trained):

* ``results/<exp>/hessian/<stage>.npz`` (hessian rule): :func:`save_hessian` / :func:`load_hessian`
* ``results/<exp>/hessian/<stage>_norms.json`` (hessian rule): :func:`save_norms` / :func:`load_norms`
* ``results/<exp>/theory/<stage>.json`` (theory rule): :func:`save_theory_check` / :func:`load_theory_check`
* ``results/<exp>/metrics.json`` (train rule): :func:`save_metrics` / :func:`load_metrics`
* ``results/data/<ds>/manifest.json`` (download rule): :func:`save_manifest` / :func:`load_manifest`
* ``paper/claims.{json,md}`` (claims rule): :func:`save_claims` / :func:`load_claims`
* ``paper/summary.json`` (summary rule): :func:`save_summary` / :func:`load_summary`

A study's own result files are saved and loaded by its ``studies/<name>/result.py`` (on
the writers and readers here). Any other JSON result (a notebook parameter) is read with
:func:`load_json`.

Every result file under ``results/`` carries a digest: the writer records the SHA-256 of the
bytes it wrote in ``<file>.sha256`` (before the file is renamed into place) and every reader
checks it first, so a result edited by hand (or damaged) is refused, naming the file and the
rule to rerun, instead of being believed. A file without a ``.sha256`` (written before digests
existed) is read as it is. ``paper/`` files (claims, summary) are outputs, not inputs, and carry none.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ResultError  # noqa: F401  (re-exported: the class lives in errors.py)
from .files import atomic_path, dump_json, read_json, sha256_file, write_text

PathLike = str | os.PathLike[str]

__all__ = [
    "load_json",
    "load_metrics_by_experiment",
    "save_hessian",
    "load_hessian",
    "save_norms",
    "load_norms",
    "save_theory_check",
    "load_theory_check",
    "save_metrics",
    "load_metrics",
    "save_manifest",
    "load_manifest",
    "save_claims",
    "load_claims",
    "save_summary",
    "load_summary",
    "NORMS_KEYS",
]


# ----------------------------------------------------------------------------- generic


def digest_path(path: PathLike) -> Path:
    """The digest file of result ``path``: ``<path>.sha256``."""
    p = Path(path)
    return p.with_name(p.name + ".sha256")


def _sealed(path: PathLike, write, suffix: str | None = None) -> None:
    """``write(tmp)`` to a temp file, record its SHA-256 in the digest file, then rename into place."""
    with atomic_path(path, suffix=suffix) as tmp:
        write(tmp)
        write_text(f"{sha256_file(tmp)}  {Path(path).name}\n", digest_path(path))


def write_json(obj: Any, path: PathLike, sealed: bool = True) -> None:
    """Write ``obj`` as indented JSON atomically (:func:`.files.dump_json`: NaN/inf refused, numpy/torch
    values as numbers), with its digest file unless ``sealed=False`` (the package's one JSON writer:
    ``sealed=False`` for files that are no pipeline result, e.g. caches and benchmark records, and for
    ``paper/`` files a user may edit)."""

    def write(tmp):
        with open(tmp, "w") as fh:
            dump_json(obj, fh)

    if sealed:
        _sealed(path, write)
    else:
        with atomic_path(path) as tmp:
            write(tmp)


def save_npz(path: PathLike, **arrays) -> None:
    """Write ``arrays`` to a compressed ``.npz`` atomically, with its digest."""

    def write(tmp):
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)

    _sealed(path, write, suffix=".npz")


def verify_result(path: PathLike, rule: str | None = None) -> None:
    """:class:`ResultError` naming ``path`` if its bytes no longer match the digest its writer recorded."""
    side = digest_path(path)
    if not side.is_file():
        return
    try:
        expected = side.read_text().split()[0].lower()
    except (OSError, IndexError, UnicodeDecodeError):
        expected = "<unreadable>"
    got = sha256_file(path)
    if got != expected:
        by = f"the {rule} rule" if rule else "its rule"
        raise ResultError(
            f"result file {str(path)!r} was changed after {by} wrote it (its SHA-256 differs from {side.name}): "
            f"an edited or damaged result is not used; delete it and {side.name} and rerun {by}"
        )


def open_npz(path: PathLike, rule: str):
    """``np.load`` (no pickles) of a verified ``.npz``; :class:`ResultError` naming it when it is damaged."""
    import zipfile

    verify_result(path, rule)
    try:
        return np.load(path, allow_pickle=False)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as err:
        raise ResultError(
            f"result file {str(path)!r} is not a readable .npz (truncated or damaged: {type(err).__name__}); "
            f"delete it and rerun the {rule} rule"
        ) from None


def load_json(path: PathLike, rule: str | None = None) -> Any:
    """Parse a JSON result file.

    Raises :class:`FileNotFoundError` naming the file (and ``rule``, the rule that writes it) when
    it is missing and :class:`ValueError` when it is not valid JSON.
    """
    p = Path(path)
    if not p.is_file():
        by = f"the pipeline's {rule} rule" if rule else "the pipeline (snakemake)"
        raise FileNotFoundError(
            f"result file {str(p)!r} not found; run {by} to produce it or pass the right path as a notebook parameter"
        )
    verify_result(p, rule)
    try:
        return read_json(p)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ResultError(f"{str(p)!r} is not valid JSON ({err}); delete it and rerun") from err


def load_keyed(path: PathLike, rule: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """:func:`load_json` of a JSON object that must hold ``keys``; the error names the missing ones."""
    obj = load_json(path, rule)
    if not isinstance(obj, dict):
        raise ValueError(f"{str(path)!r} holds a JSON {type(obj).__name__}, not an object; rerun the {rule} rule")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise KeyError(f"{str(path)!r} lacks the key(s) {missing}; rerun the {rule} rule")
    return obj


# ----------------------------------------------------------------------------- Hessian (.npz)


def save_hessian(path: PathLike, H: np.ndarray, names: list[str], offsets: np.ndarray, shapes: np.ndarray) -> None:
    """Write the dense Hessian of one block's parameter groups (``results/<exp>/hessian/<stage>.npz``).

    Layout (compressed ``.npz``, no pickles):

    * ``H``: float64, shape ``(P, P)``, symmetric; rows/columns in the order of ``names``, each
      group's weight flattened row-major (``W.reshape(-1)``).
    * ``names``: unicode strings, shape ``(G,)``; the groups (``W_Q, W_K, W_V, W_1, W_2``).
    * ``offsets``: int64, shape ``(G + 1,)``; group ``g`` occupies ``H[offsets[g]:offsets[g+1]]``,
      ``offsets[0] = 0`` and ``offsets[-1] = P``.
    * ``shapes``: int64, shape ``(G, 2)``; each group's weight shape (out, in).
    """
    save_npz(path, H=H, names=names, offsets=offsets, shapes=shapes)


def load_hessian(path: PathLike) -> dict[str, Any]:
    """Read a file written by :func:`save_hessian`.

    Returns a dict with ``H`` (float64 ``(P, P)``), ``names`` (list of str), ``offsets`` (int64
    ``(G + 1,)``) and, when stored, ``shapes`` (int64 ``(G, 2)``).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"Hessian file {str(p)!r} not found; run the pipeline's hessian rule to produce it "
            f"or pass the right path as a notebook parameter"
        )
    with open_npz(p, "hessian") as data:
        missing = [key for key in ("H", "names", "offsets") if key not in data.files]
        if missing:
            raise KeyError(f"{str(p)!r} lacks the array(s) {missing}; rerun the hessian rule")
        out = {
            "H": np.asarray(data["H"], dtype=np.float64),
            "names": [v.decode() if isinstance(v, bytes) else str(v) for v in data["names"]],
            "offsets": np.asarray(data["offsets"], dtype=np.int64),
        }
        if "shapes" in data.files:
            out["shapes"] = np.asarray(data["shapes"], dtype=np.int64)
    return out


#: Keys of the block-norms JSON (:func:`save_norms`), in the order they are written.
NORMS_KEYS = ("stage", "experiment", "block", "method", "seconds", "batch_size", "n_params", "blocks", "weights")


def save_norms(path: PathLike, norms: Mapping[str, Any]) -> None:
    """Write the block norms of one saved Hessian (``results/<exp>/hessian/<stage>_norms.json``).

    A JSON object with exactly the keys :data:`NORMS_KEYS`:

    * ``stage`` (str: init | trained), ``experiment`` (str), ``block`` (int, transformer block),
    * ``method`` (str: the Hessian method that ran), ``seconds`` (float, its wall time),
    * ``batch_size`` (int, samples in the fixed batch), ``n_params`` (int, P),
    * ``blocks``: list of ``{"row", "col", "fro", "spectral", "max_abs"}`` (str, str, float x 3) per
      group pair, row-major over the groups (:func:`.hessian.block_norms`),
    * ``weights``: ``{group: {"spectral", "fro"}}`` (floats) of the weights (:func:`.hessian.weight_norms`).
    """
    missing = [k for k in NORMS_KEYS if k not in norms]
    extra = [k for k in norms if k not in NORMS_KEYS]
    if missing or extra:
        raise ValueError(f"norms for {str(path)!r}: missing keys {missing}, unknown keys {extra}")
    write_json({k: norms[k] for k in NORMS_KEYS}, path)


def load_norms(path: PathLike) -> dict[str, Any]:
    """Read a file written by :func:`save_norms` (a dict with the keys :data:`NORMS_KEYS`)."""
    return load_keyed(path, "hessian", NORMS_KEYS)


# ----------------------------------------------------------------------------- theory check


def save_theory_check(path: PathLike, result: Mapping[str, Any]) -> None:
    """Write the saved-Hessian vs curvlinops check (``results/<exp>/theory/<stage>.json``).

    The object of :func:`.checks.saved_hessian_check` (``check`` = "probes", ``blocks``: one row
    per group pair with ``row``, ``col``, the errors and the functional share, ``max_rel_error``,
    ``tolerance``, ``passed`` (bool), ``n_probes``, ``probes_per_group``, ``probe_seed``,
    ``seconds_curvlinops``, ``seconds_gauss_newton``, ``n_params``, ``batch_size``) plus ``stage``,
    ``hessian_file`` and ``hessian_method``.
    """
    write_json(dict(result), path)


def load_theory_check(path: PathLike) -> dict[str, Any]:
    """Read a file written by :func:`save_theory_check`."""
    return load_keyed(path, "theory", ("stage", "blocks", "max_rel_error", "passed"))


# ----------------------------------------------------------------------------- metrics, manifest


def save_metrics(path: PathLike, metrics: Mapping[str, Any]) -> None:
    """Write a training run's metrics (``results/<exp>/metrics.json``).

    Keys: ``experiment``, ``dataset``, ``device``, ``model`` (the model config), ``n_parameters``,
    ``n_train``, ``n_val``, ``epochs``, ``history`` (one entry per epoch), ``final``
    (``train_loss``, ``train_acc``, ``val_loss``, ``val_acc``) and ``train_seconds``. Written by
    :func:`.train.train` today.
    """
    write_json(dict(metrics), path)


def load_metrics(path: PathLike) -> dict[str, Any]:
    """Read a file written by the train rule (layout: :func:`save_metrics`)."""
    return load_keyed(path, "train", ("experiment", "final"))


def load_metrics_by_experiment(paths) -> dict[str, dict[str, Any]]:
    """The train rule's ``metrics.json`` files at ``paths``, keyed by their experiment's name."""
    return {m["experiment"]: m for m in map(load_metrics, paths)}


def save_manifest(path: PathLike, manifest: Mapping[str, Any]) -> None:
    """Write a data set's manifest (``results/data/<ds>/manifest.json``): ``{"dataset", "files",
    "source"}`` with one ``{"name", "md5", "bytes"}`` entry per verified file and ``source`` the url
    (or ``"sklearn"``) the data came from (:func:`.data.download`)."""
    write_json(dict(manifest), path)


def load_manifest(path: PathLike) -> dict[str, Any]:
    """Read a file written by :func:`save_manifest`."""
    return load_json(path, "download")


# ----------------------------------------------------------------------------- claims, summary


def save_claims(
    json_path: PathLike, md_path: PathLike, rows: list[dict], config_hash: str | None, document: str
) -> None:
    """Write the claim verdicts: ``json_path`` holds ``{"config_hash": str | null, "claims": rows}``
    (rows in the shared schema: ``id``, ``claim``, ``source``, ``measured``, ``verdict``,
    ``evidence``) and ``md_path`` the Markdown ``document`` rendered from them."""
    write_json({"config_hash": config_hash, "claims": rows}, json_path, sealed=False)
    write_text(document, md_path)


def load_claims(path: PathLike) -> list[dict]:
    """The claim rows of a claims JSON (the object of :func:`save_claims`, or a bare list of rows)."""
    doc = load_json(path, "claims")
    return doc["claims"] if isinstance(doc, dict) else doc


def save_summary(path: PathLike, summary: Mapping[str, Any]) -> None:
    """Write ``paper/summary.json`` (:func:`transformer_hessian.pipeline.report.build_summary`:
    ``provenance``, ``training``, ``figures``, ``tables`` and, when given, ``figure_provenance``,
    ``claims`` and each study's section, e.g. ``hessian``, ``theory``, ``landscape``, ``bounds``)."""
    write_json(dict(summary), path, sealed=False)


def load_summary(path: PathLike) -> dict[str, Any]:
    """Read ``paper/summary.json``."""
    return load_keyed(path, "summary", ("provenance",))
