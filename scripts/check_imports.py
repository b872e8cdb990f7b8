"""The package's import contract, run by `make lint`: zero import cycles, no import upward.

Reads every `import` / `from ... import` of `src/transformer_hessian` with `ast`, including the ones
inside function bodies, under `if TYPE_CHECKING:` and relative ones, and fails (exit status 1, one line
per offence naming file:line and the import) on

- (a) a cycle among the package's modules (strongly connected components of the import graph), and
- (b) an import of a module in a higher layer of `LAYERS` than the importing module's, and
- (c) a module that `LAYERS` does not place (a new module must be given its layer here).

An import names the most specific module it loads: `from pkg import name` is an edge to `pkg.name`
when that is a module, else to `pkg` (its `__init__`); a module's own parent packages are not edges
(Python runs them first, whatever the module imports). Layers are matched by the longest dotted
prefix, so an entry for a package places all its modules unless one of them has an entry of its own.

    python scripts/check_imports.py                 # the package under src/
    python scripts/check_imports.py --graph         # also print the edges and the cycle count
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

# Layer numbers, bottom (0) to top: a module may import its own layer and the ones below it.
ERRORS, UTIL, CORE, DATA, CONFIG, TRAIN, STUDIES, REPORT, PIPELINE = range(9)
LAYER_NAMES = ["errors", "util", "core", "data", "config", "train", "studies", "report", "pipeline"]

# Package -> layer: one entry per subpackage (and per top-level module), no per-module exception.
LAYERS: dict[str, int] = {
    "errors": ERRORS,  # the exception classes every layer raises
    "_moved": ERRORS,  # the finder that names the new home of a module that moved (imports nothing)
    "util": UTIL,  # files, result formats, tables, progress, environment, data-set names, claim-row schema
    "plotting": UTIL,  # the shared style, print check, publish and diagrams; a study's panels sit above
    "core": CORE,  # the model, dense and matrix-free Hessians, the saved Hessian's check, statistics, Theorem 7
    "theory": CORE,  # the paper's closed forms
    "encoder": CORE,  # exact_hessian by curvature propagation
    "engine": CORE,  # exact_hessian of any torch model: capture, operation contract, rules, sweeps
    "scale": CORE,  # spectra of a data set's Hessian on many processes, resumable; the curvature command
    "data": DATA,  # data sets, their files and readers
    "config": CONFIG,  # validation, cross-key checks, the typed sections, the schema
    "train": TRAIN,  # training, checkpoints, the train rule's result paths
    "studies": STUDIES,  # each study's computation, plots, rule step, claim rows
    "bench": STUDIES,  # benchmarks (they time the core in util's sandbox)
    "claims": REPORT,  # verdicts collected and rendered
    "registry": REPORT,  # the figure registry and result paths
    "pipeline": PIPELINE,  # the command line, the rules' steps, report, recap and run guard
    "__main__": PIPELINE,
    "": PIPELINE,  # the package's own __init__ (the public API)
}


@dataclass(frozen=True)
class Edge:
    """One import: `src` imports `dst` at `path:line` (`text` is the statement as written)."""

    src: str
    dst: str
    path: Path
    line: int
    text: str


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of `package` under `root` by its name relative to the package ('' = __init__)."""
    base = root / package
    out = {}
    for path in sorted(base.rglob("*.py")):
        parts = list(path.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_package(name: str, mods: dict[str, Path]) -> bool:
    return mods[name].name == "__init__.py"


def _resolve(name: str, mods: dict[str, Path], package: str) -> str | None:
    """The relative name of an absolute module `name` inside `package`, or None if outside it."""
    if name == package:
        return ""
    if name.startswith(package + "."):
        return name[len(package) + 1 :]
    return None


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def _owner(name: str, mods: dict[str, Path]) -> str:
    """The most specific existing module that `name` (a module or a name in one) refers to."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name


def imports(mods: dict[str, Path], package: str) -> list[Edge]:
    """Every import between two of the package's modules, function bodies and relative ones included."""
    edges = []
    for src, path in mods.items():
        source = path.read_text()
        tree = ast.parse(source, filename=str(path))
        here = src if _is_package(src, mods) else src.rpartition(".")[0]  # the package `.` means
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                for alias in node.names:
                    rel = _resolve(alias.name, mods, package)
                    if rel is not None:
                        targets.append(_owner(rel, mods))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    rel = _join(base, node.module or "")
                else:
                    rel = _resolve(node.module or "", mods, package)
                    if rel is None:
                        continue
                for alias in node.names:
                    full = _join(rel, alias.name)
                    targets.append(full if full in mods else _owner(rel, mods))
            else:
                continue
            text = ast.get_source_segment(source, node) or ast.dump(node)
            # importing a.b.c runs the __init__ of a and a.b first: those are imports too, unless they
            # are packages of the importing module itself (already running)
            for t in list(targets):
                parent = t.rpartition(".")[0]
                while parent:
                    targets.append(parent)
                    parent = parent.rpartition(".")[0]
            for dst in dict.fromkeys(targets):
                ancestor = src == dst or (dst == "" or src.startswith(dst + ".")) and _is_package(dst, mods)
                if not ancestor:
                    edges.append(Edge(src, dst, path, node.lineno, " ".join(text.split())))
    return edges


def cycles(names, edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {n: set() for n in names}
    for e in edges:
        graph[e.src].add(e.dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def layer_of(name: str, layers: dict[str, int]) -> int | None:
    """The layer of module `name`: the entry of its longest dotted prefix ('' only for the root)."""
    probe = name
    while True:
        if probe in layers and (probe or not name):
            return layers[probe]
        if not probe:
            return None
        probe = probe.rpartition(".")[0]


def check(root: Path, package: str, layers: dict[str, int], names: list[str] | None = None) -> tuple[list[str], dict]:
    """The contract's offences as lines `file:line: message`, and counts (modules, edges, cycles)."""
    names = names or LAYER_NAMES
    mods = modules(root, package)
    edges = imports(mods, package)
    problems = []
    for m, path in mods.items():
        if layer_of(m, layers) is None:
            problems.append(f"{path}:1: module {_join(package, m)} has no layer: add it to LAYERS in {__file__}")
    comps = cycles(mods, edges)
    for comp in comps:
        members = set(comp)
        problems.append(f"import cycle among {len(comp)} modules: {', '.join(_join(package, m) for m in comp)}")
        for e in edges:
            if e.src in members and e.dst in members:
                problems.append(f"  {e.path}:{e.line}: {e.text}  (part of the cycle)")
    for e in edges:
        a, b = layer_of(e.src, layers), layer_of(e.dst, layers)
        if a is not None and b is not None and b > a:
            problems.append(
                f"{e.path}:{e.line}: upward import: {_join(package, e.src)} ({names[a]}) imports "
                f"{_join(package, e.dst)} ({names[b]}): {e.text}"
            )
    on_cycles = sum(len(c) for c in comps)
    return problems, {"modules": len(mods), "imports": len(edges), "cycles": len(comps), "modules_on_cycles": on_cycles}


def main(argv: list[str] | None = None) -> int:
    """Check the package; exit status 1 with one line per offence, 0 with a one-line count."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent / "src")
    p.add_argument("--package", default="transformer_hessian")
    p.add_argument("--graph", action="store_true", help="print every edge too")
    args = p.parse_args(argv)
    problems, counts = check(args.root, args.package, LAYERS)
    if args.graph:
        for e in imports(modules(args.root, args.package), args.package):
            print(f"{e.src or '__init__'} -> {e.dst or '__init__'}  ({e.path.name}:{e.line})")
    summary = ", ".join(f"{k} {v}" for k, v in counts.items())
    if problems:
        print("\n".join(problems), file=sys.stderr)
        print(f"check_imports: {len(problems)} problem lines; {summary}", file=sys.stderr)
        return 1
    print(f"check_imports: ok ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
