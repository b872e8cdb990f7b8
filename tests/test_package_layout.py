"""The package's shape stays readable: a top level of at most ten modules (the public API, the entry
point, the errors and the finder of moved paths), every subpackage one entry of the import contract,
and no test module that imports another test module (shared builders live in conftest.py fixtures or
in helper modules whose names do not start with ``test_``)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "transformer_hessian"


def _check_imports():
    spec = importlib.util.spec_from_file_location("check_imports", ROOT / "scripts" / "check_imports.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["check_imports"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_top_level_has_at_most_ten_modules():
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert len(top) <= 10, top
    assert {"__init__.py", "__main__.py", "errors.py"} <= set(top)


def test_every_subpackage_is_one_entry_of_the_layer_table():
    layers = _check_imports().LAYERS
    subpackages = sorted(p.parent.name for p in PKG.glob("*/__init__.py"))
    assert subpackages and all(name in layers for name in subpackages), subpackages
    nested = [key for key in layers if "." in key]
    assert not nested, f"per-module exceptions in the layer table: {nested}"
    top = {p.stem for p in PKG.glob("*.py")} - {"__init__"}
    assert set(layers) == set(subpackages) | top | {""}


def test_no_test_module_imports_another():
    offences = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [a.name for a in node.names if node.level]
            else:
                continue
            if any(n.split(".")[-1].startswith("test_") for n in names if n):
                offences.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offences, offences
