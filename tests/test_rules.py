"""The workflow's rule files: every result path is typed once (the template of the rule that makes
it, in the ``OUTPUTS`` of its producer's ``result`` module) and the Hessian rules evaluate the
experiment their ``{exp}`` wildcard names."""

import re
import tokenize
from io import StringIO
from pathlib import Path

import pytest
from conftest import snakemake_dry_run, unfold_terminal

ROOT = Path(__file__).resolve().parents[1]
_PATH = re.compile(r"(?:results|paper)/[^\s\"']*[^\s\"'.,;:)]")
_BRACES = re.compile(r"\{[^{}]*\}")


def result_paths(text: str) -> list[str]:
    """Result paths (results/..., paper/...) in the string literals of a Snakefile's text.

    Comments are skipped (tokenize); docstrings are string literals too, so they must not spell
    out a path either (they name it as e.g. ``paper/tables/<stem>.<ext>``, which is no path here).
    """
    out = []
    for tok in tokenize.generate_tokens(StringIO(text).readline):
        if tok.type == tokenize.STRING:
            out += [p for p in _PATH.findall(tok.string) if "<" not in p]
    return out


def wildcard_constraints(text: str) -> dict[str, str]:
    """The global ``wildcard_constraints:`` of a Snakefile's text: name -> regex."""
    block = re.search(r"^wildcard_constraints:\n((?:[ \t]+.*\n)+)", text, re.M)
    return dict(re.findall(r'(\w+)="([^"]*)"', block.group(1))) if block else {}


def retyped(paths: list[str], constraints: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """Pairs (a, b) of distinct occurrences where b is a path that the template a also describes:
    every ``{name}`` of a stands for its wildcard constraint (``constraints``), else for one path
    component or part of one (``[^/]+``); every ``{...}`` of b for a value. Identical literals
    count too."""
    constraints = constraints or {}
    pairs = []
    for i, a in enumerate(paths):
        pattern = re.compile(
            "".join(
                re.escape(s) if k % 2 == 0 else f"(?:{constraints.get(s[1:-1].strip(), '[^/]+')})"
                for k, s in enumerate(_split(a))
            )
        )
        for j, b in enumerate(paths):
            if i != j and pattern.fullmatch(_BRACES.sub("x", b)):
                pairs.append((a, b))
    return pairs


def _split(path: str) -> list[str]:
    """``path`` cut at its ``{...}`` fields: literal, field, literal, ..."""
    parts, last = [], 0
    for m in _BRACES.finditer(path):
        parts += [path[last : m.start()], m.group()]
        last = m.end()
    return parts + [path[last:]]


def workflow_texts() -> dict[str, str]:
    """The Snakefile and every rule file, by name."""
    files = [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").rglob("*.smk"))]
    return {f.name: f.read_text() for f in files}


def test_no_result_path_is_typed_twice():
    """The rule files' literals and the producers' path templates in the package (the rule files'
    ``output:`` comes from them, ``produced(...)``): no path is typed twice among them all."""
    from transformer_hessian.registry import templates

    package = [path for outputs in templates().values() for path in outputs.values()]
    paths = [p for text in workflow_texts().values() for p in result_paths(text)] + package
    assert len(package) >= 15 and len(paths) >= 25, paths  # the producers' outputs are found at all
    constraints = wildcard_constraints(workflow_texts()["Snakefile"])
    assert constraints.get("stage") == "init|trained", constraints
    assert not retyped(paths, constraints), retyped(paths, constraints)


def test_the_guard_finds_a_retyped_path():
    """A consumer that spells out its producer's output (with the value of a wildcard) is caught,
    and so is the same literal typed twice; distinct outputs are not."""
    producer = 'rule hessian:\n    output:\n        npz="results/{exp}/hessian/{stage}.npz",\n'
    consumer = 'rule claims:\n    input:\n        h=f"results/{HEXP}/hessian/init.npz",\n'
    assert retyped(result_paths(producer + consumer)) == [
        ("results/{exp}/hessian/{stage}.npz", "results/{HEXP}/hessian/init.npz")
    ]
    assert len(retyped(result_paths('a = "paper/claims.md"\nb = "paper/claims.md"\n'))) == 2
    assert retyped(result_paths('a = "results/{exp}/metrics.json"\nb = "results/{exp}/theory/{stage}.json"\n')) == []
    assert result_paths("# results/in/a/comment.json\nx = 1\n") == []
    # a wildcard's constraint tells a stage's file from another file of the same folder
    stage = ['"results/{exp}/bounds/{stage}.json"', 'f"results/{HEXP}/bounds/claim_rows.json"']
    assert len(retyped(result_paths("\n".join(stage)))) == 1
    assert retyped(result_paths("\n".join(stage)), {"stage": "init|trained"}) == []


def _jobs(out: str) -> dict[str, list[str]]:
    """rule name -> the input lines of its jobs in a dry run's listing."""
    jobs: dict[str, list[str]] = {}
    rule = None
    for line in unfold_terminal(out).splitlines():
        m = re.match(r"^(?:local)?rule (\w+):$", line.strip())
        if m:
            rule = m.group(1)
        elif rule and line.strip().startswith("input:"):
            jobs.setdefault(rule, []).append(line.strip())
    return jobs


@pytest.mark.slow  # 3-7 s a case
@pytest.mark.parametrize("target", ["hessian/init.npz", "theory/trained.json", "bounds/init.json"])
def test_exp_wildcard_selects_the_experiment(root, tmp_path, env, target):
    """The Hessian of landscape_digits (not the hessian experiment) is built from landscape_digits'
    own checkpoint: the {exp} wildcard is not ignored."""
    config = str(root / "config/config.yaml")
    proc = snakemake_dry_run(
        root, tmp_path, env, "--cores", "1", f"results/landscape_digits/{target}", "--configfile", config
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _jobs(proc.stdout + proc.stderr)
    stage = "init" if "init" in target else "final"
    rule = target.split("/")[0]
    assert any(f"results/landscape_digits/checkpoints/{stage}.pt" in line for line in jobs[rule]), jobs
    assert not any("hessian_digits" in line for lines in jobs.values() for line in lines), jobs
