"""Tests of transformer_hessian.pipeline.report_steps: the registry step's check and the order of the claim rows. The other rules' steps are
tested with their studies (tests/studies/: the Hessian study's checkpoint-size gate in
test_hessian.py, the landscape study's in test_landscape.py; Table 1 in test_table1.py)."""

from __future__ import annotations

import json

import pytest

from transformer_hessian.pipeline import report_steps


def test_registry_step_check_detects_a_stale_readme(tmp_path):
    path = tmp_path / "README.md"
    report_steps.registry_step(str(path), write_readme=True)
    report_steps.registry_step(str(path), check=True)
    path.write_text(path.read_text() + "\nedited by hand\n")
    with pytest.raises(ValueError, match="differs from the registry"):
        report_steps.registry_step(str(path), check=True)


def _row(key: str) -> dict:
    return {"id": key, "claim": "c", "source": "s", "measured": "m", "verdict": "reproduced", "evidence": "e"}


@pytest.mark.parametrize("at", [None, 0, 1, 2])
def test_claims_step_puts_the_pipelines_own_rows_at_their_rank(tmp_path, at):
    """The studies' row files in the order given, the training-accuracy rows after the first ``at`` of
    them (last when None), each file's rows in their own order."""
    from transformer_hessian.util.io import write_json

    metrics = {"experiment": "e", "dataset": "digits", "epochs": 3, "final": {"val_acc": 0.9}}
    write_json(metrics, tmp_path / "m.json")
    write_json([_row("a1"), _row("a2")], tmp_path / "a.json")
    write_json([_row("b1")], tmp_path / "b.json")
    out = report_steps.claims_step(
        str(tmp_path / "m.json"),
        str(tmp_path / "m.json"),
        str(tmp_path / "claims.json"),
        str(tmp_path / "claims.md"),
        rows=[str(tmp_path / "a.json"), str(tmp_path / "b.json")],
        own_rows_at=at,
    )
    own = ["accuracy_hessian_model", "accuracy_landscape_model"]
    files = [["a1", "a2"], ["b1"]]
    k = 2 if at is None else at
    expected = [i for f in files[:k] for i in f] + own + [i for f in files[k:] for i in f]
    assert [r["id"] for r in out] == expected
    assert [r["id"] for r in json.loads((tmp_path / "claims.json").read_text())["claims"]] == expected
