"""The CI check of real-MNIST verdicts against docs/claims_mnist.json, and the README's second
claims table (markers claims-mnist)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from transformer_hessian import claims
from transformer_hessian.claims.compare import VerdictMismatch, compare_step, compare_verdicts

REPO = Path(__file__).resolve().parents[2]


def row(i, verdict):
    return {"id": i, "claim": "c", "source": "s", "rule": "r", "measured": "m", "verdict": verdict, "evidence": "e"}


def test_compare_lists_changed_missing_and_new_claims():
    snap = [row("a", "reproduced"), row("b", "not reproduced"), row("c", "reproduced")]
    run = [row("a", "reproduced"), row("b", "reproduced"), row("d", "reproduced")]
    assert compare_verdicts(snap, snap) == []
    assert compare_verdicts(run, snap) == [
        "b: snapshot 'not reproduced', this run 'reproduced'",
        "c: in the snapshot ('reproduced') but not in this run",
        "d: in this run ('reproduced') but not in the snapshot",
    ]


@pytest.mark.slow  # about 3 s
def test_compare_command_fails_with_one_clear_message(tmp_path):
    snap, run = tmp_path / "snap.json", tmp_path / "run.json"
    snap.write_text(json.dumps({"claims": [row("a", "reproduced")]}))
    run.write_text(json.dumps({"claims": [row("a", "not reproduced")]}))
    with pytest.raises(VerdictMismatch, match="a: snapshot 'reproduced', this run 'not reproduced'"):
        compare_step(str(run), str(snap))
    compare_step(str(snap), str(snap))
    proc = subprocess.run(
        [sys.executable, "-m", "transformer_hessian", "claims-compare", "--claims", str(run), "--snapshot", str(snap)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "1 verdict(s) differ" in proc.stderr


def test_tagged_readme_sections_are_independent():
    text = "x\n<!-- claims:start -->\nold\n<!-- claims:end -->\ny\n<!-- claims-mnist:start -->\nold\n<!-- claims-mnist:end -->\n"
    new = claims.update_readme(text, [row("m", "reproduced")], "claims-mnist")
    assert "<!-- claims:start -->\nold\n<!-- claims:end -->" in new
    assert "`m`" in new and "claims-readme --tag claims-mnist" in new
    with pytest.raises(ValueError, match="claims-other:start"):
        claims.update_readme(text, [], "claims-other")


def test_readme_mnist_section_matches_the_committed_snapshot():
    doc = json.loads((REPO / "docs" / "claims_mnist.json").read_text())
    readme = (REPO / "README.md").read_text()
    tables = (REPO / claims.CLAIMS_DOC).read_text()
    refresh = "run `transformer-hessian claims-readme --claims docs/claims_mnist.json --tag claims-mnist`"
    assert claims.update_readme(tables, doc["claims"], "claims-mnist") == tables, (
        f"docs/claims.md's real-MNIST table is stale: {refresh}"
    )
    assert claims.update_readme(readme, doc["claims"], "claims-mnist", claims.CLAIMS_DOC) == readme, (
        f"README's real-MNIST claims summary is stale: {refresh}"
    )


def test_claims_readme_writes_the_table_and_the_summary_and_checks_both(tmp_path):
    from transformer_hessian.pipeline.report_steps import claims_readme_step

    rows = [row("a", "reproduced"), row("b", "not reproduced")]
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"claims": rows}))
    (tmp_path / "docs").mkdir()
    readme, doc = tmp_path / "README.md", tmp_path / "docs" / "claims.md"
    for path in (readme, doc):
        path.write_text("x\n<!-- claims:start -->\n<!-- claims:end -->\n")
    with pytest.raises(ValueError, match="differs"):
        claims_readme_step(str(snap), str(readme), check=True, doc=str(doc))
    claims_readme_step(str(snap), str(readme), doc=str(doc))
    claims_readme_step(str(snap), str(readme), check=True, doc=str(doc))  # up to date: no error
    assert "| `b`:" in doc.read_text() and "| `b`" not in readme.read_text()
    assert "- `b` (" in readme.read_text() and "[docs/claims.md](docs/claims.md)" in readme.read_text()
