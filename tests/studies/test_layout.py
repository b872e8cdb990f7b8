"""A study is one folder: discovered by the command line, the registry and the Snakefile, and it
imports no other study."""

import ast
from pathlib import Path

from transformer_hessian import registry, studies
from transformer_hessian.pipeline.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
STUDIES = ROOT / "src" / "transformer_hessian" / "studies"


def test_discovery_is_sorted_and_finds_every_folder():
    folders = sorted(p.name for p in STUDIES.iterdir() if (p / "__init__.py").is_file())
    assert studies.study_names() == folders and "architectures" in folders
    clis = [m.__name__.split(".")[-2] for m in studies.study_parts("cli")]
    assert clis == sorted(clis) and "architectures" in clis
    assert studies.study_parts("no_such_part") == []


def test_every_study_command_and_registry_entry_is_collected():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for study in studies.study_parts("cli"):
        name = study.__name__.split(".")[-2]
        assert name in sub.choices, name
    ids = registry.figure_ids()
    for study in studies.study_parts("registry"):
        for fig in study.FIGURES:
            assert fig.id in ids and registry.by_id(fig.id) is fig
        for art in getattr(study, "ARTEFACTS", ()):
            assert art in registry.OTHER_ARTEFACTS
    assert len(ids) == len(set(ids)), ids


def test_every_study_rule_file_is_included_by_the_glob():
    snakefile = (ROOT / "Snakefile").read_text()
    assert '"workflow", "rules", "studies", "*.smk"' in snakefile
    assert (ROOT / "workflow" / "rules" / "studies" / "architectures.smk").is_file()


def _imported_studies(path: Path, own: str, root: Path = STUDIES) -> list[tuple[int, str]]:
    """(line, other study) for every import in ``path`` (relative or absolute, any depth) that
    reaches ``studies.<other>`` (a folder of ``root``) with ``other != own``."""
    package = list(path.relative_to(root.parent).parts[:-1])  # ['studies', own, ...]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                mod = ".".join(["transformer_hessian", *base, *(node.module.split(".") if node.module else [])])
            else:
                mod = node.module or ""
            names = [mod] + [f"{mod}.{a.name}" for a in node.names]
        others = {
            n.split(".")[2]
            for n in names
            if n.split(".")[:2] == ["transformer_hessian", "studies"] and n.count(".") > 1
        }
        out += [(node.lineno, o) for o in sorted(others) if o != own and (root / o).is_dir()]
    return out


def test_no_study_imports_another_study():
    bad = []
    for name in studies.study_names():
        for path in sorted((STUDIES / name).rglob("*.py")):
            bad += [
                f"{path.relative_to(ROOT)}:{line} imports studies.{other}"
                for line, other in _imported_studies(path, name)
            ]
    assert not bad, bad


def test_the_cross_study_check_can_fail(tmp_path):
    root = tmp_path / "studies"
    (root / "other").mkdir(parents=True)
    (root / "own" / "sub").mkdir(parents=True)
    bad = root / "own" / "sub" / "m.py"
    bad.write_text(
        "from ...other import compute\n"
        "from transformer_hessian.studies.entry import Figure\n"
        "from ..compute import run\n"
        "def f():\n    import transformer_hessian.studies.other.plot\n"
    )
    # entry.py is a module of the studies package, not a study; own's modules are its own
    assert _imported_studies(bad, "own", root) == [(1, "other"), (5, "other")]


def test_no_module_above_400_lines_and_no_function_above_80():
    """The package's size limits: a module of at most 400 lines, a function (or method)
    of at most 80 (ast: end_lineno - lineno + 1, decorators not counted)."""
    src = ROOT / "src" / "transformer_hessian"
    long_modules, long_functions = [], []
    for path in sorted(src.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > 400:
            long_modules.append((str(path.relative_to(src)), len(text.splitlines())))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 80:
                    long_functions.append((f"{path.relative_to(src)}:{node.name}", n))
    assert not long_modules and not long_functions, (long_modules, long_functions)
