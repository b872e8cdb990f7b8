"""scripts/check_imports.py: the import contract finds planted cycles, upward imports and
unplaced modules in a temporary package, sees function-body and relative imports, and passes on the
package itself."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_imports.py"


@pytest.fixture(scope="module")
def checker():
    spec = importlib.util.spec_from_file_location("check_imports", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["check_imports"] = mod
    spec.loader.exec_module(mod)
    return mod


LOW, MID, HIGH = 0, 1, 2
NAMES = ["low", "mid", "high"]


def _package(tmp_path, files: dict[str, str]) -> Path:
    """A package `pkg` under `tmp_path` with `files` (relative path -> source)."""
    for rel, text in {"__init__.py": "", **files}.items():
        p = tmp_path / "pkg" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


LAYERS = {"": HIGH, "base": LOW, "core": MID, "core.a": MID, "core.b": MID, "app": HIGH}


def _check(checker, root, layers=LAYERS):
    return checker.check(root, "pkg", layers, NAMES)


def test_clean_package_passes(checker, tmp_path):
    root = _package(
        tmp_path,
        {
            "base.py": "import os\n",
            "core/__init__.py": "from .a import f\n",
            "core/a.py": "from ..base import os\n",
            "core/b.py": "from . import a\n",
            "app.py": "from pkg.core import f\nfrom .core.b import a\n",
        },
    )
    problems, counts = _check(checker, root)
    assert problems == []
    assert counts == {"modules": 6, "imports": 6, "cycles": 0, "modules_on_cycles": 0}


def test_planted_cycle_through_a_function_body_is_found(checker, tmp_path):
    root = _package(
        tmp_path,
        {
            "base.py": "",
            "core/__init__.py": "",
            "core/a.py": "from .b import g\n",
            "core/b.py": "def g():\n    from pkg.core.a import x  # hidden in a function\n    return x\n",
            "app.py": "",
        },
    )
    problems, counts = _check(checker, root)
    assert counts["cycles"] == 1 and counts["modules_on_cycles"] == 2
    assert any("import cycle among 2 modules: pkg.core.a, pkg.core.b" in p for p in problems)
    assert any(p.strip().startswith(f"{root / 'pkg/core/b.py'}:2: from pkg.core.a import x") for p in problems)


def test_planted_upward_import_is_named_with_file_and_line(checker, tmp_path):
    root = _package(
        tmp_path,
        {
            "base.py": "import json\n\n\ndef h():\n    from .app import run\n    return run\n",
            "core/__init__.py": "",
            "core/a.py": "",
            "core/b.py": "",
            "app.py": "def run():\n    pass\n",
        },
    )
    problems, counts = _check(checker, root)
    assert counts["cycles"] == 0
    assert problems == [
        f"{root / 'pkg/base.py'}:5: upward import: pkg.base (low) imports pkg.app (high): from .app import run"
    ]


def test_importing_a_submodule_runs_its_package_init(checker, tmp_path):
    # base -> core.a is not upward by itself if core.a were low, but core/__init__ (mid) runs first
    root = _package(
        tmp_path,
        {"base.py": "from .core import a\n", "core/__init__.py": "", "core/a.py": "", "core/b.py": "", "app.py": ""},
    )
    problems, _ = _check(checker, root, {**LAYERS, "core.a": LOW})
    assert [p.split(": upward import: ")[1].split(":")[0] for p in problems] == [
        "pkg.base (low) imports pkg.core (mid)"
    ]


def test_unplaced_module_is_an_error(checker, tmp_path):
    root = _package(
        tmp_path,
        {"base.py": "", "core/__init__.py": "", "core/a.py": "", "core/b.py": "", "app.py": "", "new.py": ""},
    )
    problems, _ = _check(checker, root)
    assert len(problems) == 1 and "module pkg.new has no layer" in problems[0]


def test_relative_imports_resolve_from_packages_and_modules(checker, tmp_path):
    root = _package(
        tmp_path,
        {
            "base.py": "",
            "core/__init__.py": "from . import b\nfrom .. import app\n",
            "core/a.py": "from ..app import x\n",
            "core/b.py": "",
            "app.py": "x = 1\n",
        },
    )
    problems, _ = _check(checker, root)
    ups = sorted(p.split(": upward import: ")[1].split(":")[0] for p in problems)
    assert ups == ["pkg.core (mid) imports pkg.app (high)", "pkg.core.a (mid) imports pkg.app (high)"]


@pytest.mark.slow  # about 5 s
def test_the_package_keeps_the_contract():
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "cycles 0" in proc.stdout
