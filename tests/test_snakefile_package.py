"""The Snakefile takes the package from the Python that runs snakemake (no ``sys.path`` edit), and
says in one line what to do when that Python does not have it."""

import os
from pathlib import Path

from conftest import snakemake_dry_run

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ("--configfile", str(ROOT / "config/config.yaml"))


def test_snakefile_does_not_edit_sys_path():
    text = (ROOT / "Snakefile").read_text()
    assert "sys.path.insert" not in text and "sys.path.append" not in text


def test_missing_package_is_one_clear_line(tmp_path, env):
    # A package of the same name that fails to import shadows the installed one (PYTHONPATH first).
    fake = tmp_path / "shadow" / "transformer_hessian"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('simulated: not installed')\n")
    e = dict(env, PYTHONPATH=str(fake.parent) + os.pathsep + env.get("PYTHONPATH", ""))
    proc = snakemake_dry_run(ROOT, tmp_path, e, *CONFIG, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    assert "the package is not installed for" in out and "make setup" in out, out[-2000:]
    assert "Traceback" not in out, out[-2000:]


def test_installed_package_runs_the_dry_run(tmp_path, env):
    proc = snakemake_dry_run(ROOT, tmp_path, env, "--quiet", *CONFIG, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-2000:]
    assert "not from this checkout" not in out, out[-2000:]
    # a dry run writes nothing into the working directory: no settings files (written when a run
    # starts, workflow/rules/hooks.smk), no result folder; only snakemake's own .snakemake/
    assert not (tmp_path / "results").exists(), sorted(p.name for p in tmp_path.iterdir())
