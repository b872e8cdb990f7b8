"""The figure registry agrees with the generated rules, paper/README.md and the notebooks."""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

import nbformat
import pytest
import yaml
from conftest import snakemake_dry_run, unfold_terminal

from transformer_hessian import registry

REPO = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def parameter_names(notebook: Path) -> set[str]:
    """Names assigned in the cell tagged ``parameters``."""
    nb = nbformat.read(notebook, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{notebook.name}: needs exactly one cell tagged 'parameters'"
    tree = ast.parse(cells[0].source)
    return {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets}


def test_ids_unique_and_paths_public():
    ids = registry.figure_ids()
    assert len(ids) == len(set(ids))
    assert {"fig2", "fig3", "fig4", "fig5", "fig6"} <= set(ids)
    for fig in registry.FIGURES:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", fig.id)
        assert fig.out == f"paper/figures/{fig.id}"
        if re.fullmatch(r"fig\d+", fig.id):  # the paper's own figures keep its numbers and labels
            assert fig.paper == f"Figure {fig.id[3:]}"
            assert fig.label.startswith("fig:")
        else:
            assert fig.paper.startswith("beyond the paper")


@pytest.mark.parametrize("name", list(registry.groups()))
def test_notebook_parameters_match_registry(name):
    figs = registry.groups()[name]
    fig = figs[0]
    path = REPO / "notebooks" / fig.notebook
    assert path.is_file(), f"{fig.id}: notebook {fig.notebook} missing"
    outs = set(registry.output_parameters(figs))
    assert parameter_names(path) == set(fig.inputs) | set(fig.params) | outs


def test_groups_pass_one_output_parameter_per_figure_and_table():
    assert registry.output_parameters([registry.by_id("fig6")]) == {"out": "paper/figures/fig6"}
    group = registry.groups()["probe_figures"]
    outs = registry.output_parameters(group)
    assert {f"out_{f.id}" for f in group} | {"table_assumption1"} == set(outs)
    assert outs["table_assumption1"] == "paper/tables/assumption1"
    assert "assumption1" in registry.notebook_tables()
    bad = [registry.by_id("fig1"), registry.by_id("fig6")]
    with pytest.raises(ValueError, match="differs"):
        original = registry.FIGURES[:]
        try:
            registry.FIGURES[:] = [bad[0], registry.Figure(**{**bad[1].__dict__, "group": "probe_figures"})]
            registry.groups()
        finally:
            registry.FIGURES[:] = original


def test_every_figure_notebook_is_registered():
    registered = {fig.notebook for fig in registry.FIGURES}
    on_disk = {p.name for p in (REPO / "notebooks").glob("fig*.ipynb")}
    assert on_disk <= registered, (
        f"notebooks not in the registry: {sorted(on_disk - registered)}; add an entry to "
        "transformer_hessian.registry.FIGURES (see its docstring)"
    )


def test_paper_readme_is_generated_from_registry():
    text = (REPO / "paper" / "README.md").read_text()
    assert text == registry.render_paper_readme(), (
        "paper/README.md is out of date; run `transformer-hessian registry --write-readme`"
    )
    for fig in registry.FIGURES:
        assert f"`figures/{fig.id}.{{pdf,png}}`" in text and f"`notebooks/{fig.notebook}`" in text


def test_resolve_inputs_and_captions_follow_config():
    cfg = {
        **CONFIG,
        "hessian": {**CONFIG["hessian"], "experiment": "hx"},
        "landscape": {**CONFIG["landscape"], "experiment": "lx", "granularity": "batch", "batch_size": 7},
        "experiments": {"hx": {"dataset": "mnist"}, "lx": {"dataset": "cifar100"}},
    }
    specs = {s["name"]: s for s in registry.rule_specs(cfg)}
    assert specs["fig3_fig4"]["inputs"]["hessian_init"] == "results/hx/hessian/init.npz"
    assert specs["fig6"]["inputs"]["landscape"] == "results/lx/landscape/landscape.json"
    assert "batch-by-batch (batch size 7)" in specs["fig6"]["caption"]
    assert "CIFAR-100" in specs["fig6"]["caption"] and "stand-in" not in specs["fig6"]["caption"]
    assert "MNIST" in specs["fig3_fig4"]["caption"]
    # Figures 3 and 4 share one colour range, so one notebook run draws both
    assert specs["fig3_fig4"]["outs"] == {"out_fig3": "paper/figures/fig3", "out_fig4": "paper/figures/fig4"}
    default = {s["name"]: s for s in registry.rule_specs(CONFIG)}
    assert "stand-in for MNIST" in default["fig3_fig4"]["caption"]
    assert "sample-by-sample" in default["fig6"]["caption"]
    for spec in default.values():
        assert "{" not in spec["caption"]  # every placeholder filled


def test_provenance_hashes_files(tmp_path):
    fig = registry.by_id("fig6")
    paths = registry.resolve_inputs(fig, CONFIG)
    for i, p in enumerate(paths.values()):
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / p).write_bytes(f"content {i}".encode())
    prov = registry.provenance(CONFIG, root=tmp_path, notebook_dir=REPO / "notebooks")
    entry = prov["fig6"]
    assert entry["rule"] == "fig6" and entry["notebook"] == f"notebooks/{fig.notebook}"
    for i, p in enumerate(paths.values()):
        assert entry["inputs"][p] == hashlib.sha256(f"content {i}".encode()).hexdigest()
    nb_bytes = (REPO / "notebooks" / fig.notebook).read_bytes()
    assert entry["inputs"][f"notebooks/{fig.notebook}"] == hashlib.sha256(nb_bytes).hexdigest()
    assert entry["outputs"] == {"paper/figures/fig6.pdf": None, "paper/figures/fig6.png": None}
    with pytest.raises(KeyError, match="fig99"):
        registry.by_id("fig99")


@pytest.mark.slow  # about 8 s
def test_generated_rules_run_the_registered_notebooks(env):
    """Dry-run of the workflow: one rule per entry, each running its notebook (`transformer-hessian
    notebook`, papermill's -p parameters) with every registry input as a parameter and `out`."""
    proc = snakemake_dry_run(
        REPO,
        REPO,
        env,
        "-p",
        "--forceall",
        "--cores",
        "1",
        *[f"paper/figures/{i}.pdf" for i in registry.figure_ids(CONFIG)],
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = unfold_terminal(proc.stdout + proc.stderr)
    commands = [line.strip() for line in text.splitlines() if "transformer-hessian notebook " in line]
    for spec in registry.rule_specs(CONFIG):
        first_out = " ".join(f"-p {k} {v}" for k, v in list(spec["outs"].items())[:1])
        mine = [c for c in commands if first_out + " " in c + " "]
        assert len(mine) == 1, f"{spec['name']}: expected one notebook command, got {mine}"
        cmd = mine[0]
        assert f"notebooks/{spec['notebook']}" in cmd
        assert f"results/notebooks/{spec['name']}.ipynb" in cmd
        for name, path in spec["inputs"].items():
            assert f"-p {name} {path}" in cmd
        assert spec["literal"] in cmd
        for name, path in spec["outs"].items():
            assert f"-p {name} {path}" in cmd
