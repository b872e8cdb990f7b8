"""Tests of transformer_hessian.pipeline.report_steps: the registry step's check. The other rules' steps are
tested with their studies (tests/studies/: the Hessian study's checkpoint-size gate in
test_hessian.py, the landscape study's in test_landscape.py; Table 1 in test_table1.py)."""

from __future__ import annotations

import pytest

from transformer_hessian.pipeline import report_steps


def test_registry_step_check_detects_a_stale_readme(tmp_path):
    path = tmp_path / "README.md"
    report_steps.registry_step(str(path), write_readme=True)
    report_steps.registry_step(str(path), check=True)
    path.write_text(path.read_text() + "\nedited by hand\n")
    with pytest.raises(ValueError, match="differs from the registry"):
        report_steps.registry_step(str(path), check=True)
