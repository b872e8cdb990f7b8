"""Verdicts of a run against a committed snapshot (CI: ``docs/claims_mnist.json``).

:func:`compare_verdicts` lists every claim whose verdict differs, and every claim present on one
side only; :func:`compare_step` (command ``transformer-hessian claims-compare``) raises
:class:`VerdictMismatch` with that list, so that CI fails when a change moves a verdict on real
data. Only the verdict words are compared; the measured numbers may move within a verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import VerdictMismatch  # noqa: F401  (re-exported: the class lives in errors.py)

__all__ = ["VerdictMismatch", "compare_step", "compare_verdicts"]

log = logging.getLogger("transformer_hessian.claims")


def compare_verdicts(run: Iterable[Mapping[str, Any]], snapshot: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per difference: a changed verdict, a claim missing from the run, a new claim."""
    got = {r["id"]: r["verdict"] for r in run}
    want = {r["id"]: r["verdict"] for r in snapshot}
    out = [f"{i}: snapshot {want[i]!r}, this run {got[i]!r}" for i in want if i in got and got[i] != want[i]]
    out += [f"{i}: in the snapshot ({want[i]!r}) but not in this run" for i in want if i not in got]
    out += [f"{i}: in this run ({got[i]!r}) but not in the snapshot" for i in got if i not in want]
    return out


def compare_step(claims_path: str, snapshot_path: str) -> None:
    """Compare the verdicts of ``claims_path`` with ``snapshot_path``; :class:`VerdictMismatch` if any differ."""
    from ..util.io import load_claims

    run, snap = load_claims(claims_path), load_claims(snapshot_path)
    diffs = compare_verdicts(run, snap)
    if diffs:
        raise VerdictMismatch(
            f"{claims_path}: {len(diffs)} verdict(s) differ from the snapshot {snapshot_path}:\n  "
            + "\n  ".join(diffs)
            + f"\nIf the change is intended, copy {claims_path} to {snapshot_path} and refresh the README "
            f"(transformer-hessian claims-readme --claims {snapshot_path} --tag claims-mnist)."
        )
    log.info("%s: all %d verdicts equal those of %s", claims_path, len(run), snapshot_path)
