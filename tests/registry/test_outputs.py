"""A registry input names its producer (``Output(rule, key, **wildcards)``), not a path; every
result path template is typed once, in its producer's ``OUTPUTS`` ("every fact once")."""

from __future__ import annotations

import re
import tokenize
from io import StringIO
from pathlib import Path

import pytest
import yaml

from transformer_hessian import registry
from transformer_hessian.registry import outputs
from transformer_hessian.studies import study_parts
from transformer_hessian.studies.entry import HESSIAN_CHECKED, Output
from transformer_hessian.train import result as train_result

REPO = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
RULE_FILES = sorted((REPO / "workflow" / "rules").rglob("*.smk"))


def every_output() -> list[tuple[str, Output]]:
    """(where, Output) of every input and gate of every registry entry, and of HESSIAN_CHECKED."""
    found = [(f"HESSIAN_CHECKED[{i}]", out) for i, out in enumerate(HESSIAN_CHECKED)]
    for fig in registry.FIGURES:
        found += [(f"{fig.id}.inputs[{name!r}]", out) for name, out in fig.inputs.items()]
        found += [(f"{fig.id}.gate[{i}]", out) for i, out in enumerate(fig.gate)]
    return found


def test_every_registry_input_names_a_known_rule_and_key():
    found = every_output()
    assert len(found) >= 30
    known = registry.templates()
    for where, out in found:
        assert isinstance(out, Output), (where, out)
        assert out.rule in known and out.key in known[out.rule], (where, out, sorted(known))
        # every wildcard of the template given, and no other
        template = registry.template(out.rule, out.key)
        assert set(dict(out.wildcards)) == set(outputs.wildcard_names(template)), (where, out, template)
        assert registry.placeholder_path(out).startswith("results/"), where


def test_templates_come_from_their_producers_once():
    """train_result (rule train) and every study's result module declare their rules' outputs; the
    lookup holds exactly their union, each rule once, and every template is a plain result path."""
    declared: dict[str, dict[str, str]] = dict(train_result.OUTPUTS)
    for module in study_parts("result"):
        for rule, keys in getattr(module, "OUTPUTS", {}).items():
            assert rule not in declared, f"{module.__name__} declares rule {rule!r} again"
            declared[rule] = keys
    assert registry.templates() == declared
    expected = {
        "train",
        "hessian",
        "theory",
        "hessian_report",
        "dynamics",
        "landscape",
        "probe",
        "spectrum_compute",
        "bounds",
    }
    expected |= {"bounds_table", "architectures", "architectures_report", "scaling_models", "scaling"}
    expected |= {"lm_train", "lm_hessian", "lm_vit_approx", "lm_landscape", "lm_scaling_models", "lm_law", "lm_claims"}
    expected |= {"lm_curvature", "lm_landscape2d"}
    assert set(declared) == expected
    for rule, keys in declared.items():
        for key, path in keys.items():
            assert re.fullmatch(r"results/[A-Za-z0-9_./{}]+", path), (rule, key, path)
            assert "{" not in re.sub(r"\{[A-Za-z_]\w*\}", "", path), (rule, key, path)  # plain wildcards only


def test_resolving_gives_the_paths_of_the_embedded_default():
    """The resolved paths are the strings the registry typed before the templates moved to the producers (pinned literally)."""
    resolved = {fig.id: registry.resolve_inputs(fig, CONFIG) for fig in registry.FIGURES}
    assert resolved["fig2"] == {
        "metrics_hessian": "results/hessian_digits/metrics.json",
        "metrics_landscape": "results/landscape_digits/metrics.json",
    }
    assert resolved["fig3"]["hessian_init"] == "results/hessian_digits/hessian/init.npz"
    assert resolved["fig5"]["norms_trained"] == "results/hessian_digits/hessian/trained_norms.json"
    assert resolved["fig6"]["landscape"] == "results/landscape_digits/landscape/landscape.json"
    assert resolved["fig7"]["dynamics_npz"] == "results/hessian_digits/dynamics/dynamics.npz"
    assert resolved["fig1"]["probe"] == "results/landscape_digits/probe/probe.json"
    assert resolved["bounds"]["results_init"] == "results/hessian_digits/bounds/init.json"
    assert resolved["architectures"]["result"] == "results/architectures/hessian_digits/architectures.json"
    assert resolved["spectrum"]["spectrum"] == "results/spectrum/landscape_digits.json"
    assert resolved["scaling"] == {"scaling": "results/scaling/scaling.json"}
    specs = {spec["name"]: spec for spec in registry.rule_specs(CONFIG)}
    assert specs["fig3_fig4"]["gate"] == [
        "results/hessian_digits/theory/init.json",
        "results/hessian_digits/theory/trained.json",
    ]
    # paper/README.md shows the templates with the registry's placeholders
    assert registry.placeholder_path(Output("train", "metrics", exp="{hexp}")) == "results/{hexp}/metrics.json"
    assert "`results/{lexp}/probe/probe.json`" in registry.render_paper_readme()


def test_produced_fills_the_given_wildcards_and_keeps_the_others():
    assert registry.produced("train") == {
        "init": "results/{exp}/checkpoints/init.pt",
        "final": "results/{exp}/checkpoints/final.pt",
        "metrics": "results/{exp}/metrics.json",
    }
    assert registry.produced("dynamics", exp="hx") == {
        "npz": "results/hx/dynamics/dynamics.npz",
        "json": "results/hx/dynamics/dynamics.json",
    }
    assert registry.produced("hessian", exp="hx")["norms"] == "results/hx/hessian/{stage}_norms.json"
    assert registry.produced("scaling_models")["json"] == "results/scaling/parts/part{part}of{jobs}.json"


def test_an_unknown_rule_key_or_wildcard_is_a_clear_error():
    with pytest.raises(KeyError, match=r"no rule 'nosuch' declares its outputs.*known: \[.*'train'"):
        registry.template("nosuch", "json")
    with pytest.raises(KeyError, match=r"no rule 'nosuch'"):
        registry.produced("nosuch")
    with pytest.raises(KeyError, match=r"rule 'theory' has no output 'npz'; its outputs: \['json'\]"):
        registry.template("theory", "npz")
    with pytest.raises(KeyError, match=r"no rule 'nosuch'"):
        registry.resolve(Output("nosuch", "json", exp="{hexp}"), {"hexp": "h"})
    with pytest.raises(KeyError, match=r"no output has the wildcard \['stge'\]"):
        registry.produced("theory", stge="init")
    with pytest.raises(KeyError, match=r"wildcards \['stage'\] .* are not given"):
        registry.placeholder_path(Output("theory", "json", exp="{hexp}"))
    with pytest.raises(KeyError, match=r"has no wildcard \['stage'\]"):
        registry.placeholder_path(Output("train", "metrics", exp="{hexp}", stage="init"))


def _string_literals(text: str) -> list[str]:
    return [tok.string for tok in tokenize.generate_tokens(StringIO(text).readline) if tok.type == tokenize.STRING]


def typed_templates(text: str, templates: list[str]) -> list[tuple[str, str]]:
    """(template, literal) for every string literal of a rule file's ``text`` that spells out a path
    of ``templates``: each ``{wildcard}`` of a template stands for any value, or for any ``{...}``
    field (an f-string's ``{HEXP}``, a doubled ``{{exp}}``) of the literal."""
    out = []
    for template in templates:
        parts = re.split(r"\{[A-Za-z_]\w*\}", template)
        pattern = re.compile(r"(?:\{+[^{}]*\}+|[^/\"'\s{}]+)".join(re.escape(p) for p in parts))
        out += [(template, lit) for lit in _string_literals(text) if pattern.search(lit)]
    return out


def test_no_rule_file_types_a_path_that_the_lookup_holds():
    """The rule files take their ``output:`` from ``produced(...)``: a path typed again in any
    ``.smk`` file under workflow/rules (or the Snakefile) fails here."""
    templates = [path for keys in registry.templates().values() for path in keys.values()]
    typed = []
    for path in [REPO / "Snakefile", *RULE_FILES]:
        typed += [(path.name, *hit) for hit in typed_templates(path.read_text(), templates)]
    assert not typed, typed
    # and every rule of the lookup takes its outputs from it in a rule file
    text = "".join(path.read_text() for path in RULE_FILES)
    for rule in registry.templates():
        assert f'**produced("{rule}"' in text, rule


def test_the_rule_file_check_can_fail():
    templates = ["results/{exp}/dynamics/dynamics.npz", "results/{exp}/theory/{stage}.json"]
    assert typed_templates('    npz=f"results/{HEXP}/dynamics/dynamics.npz",\n', templates)
    assert typed_templates('x = "results/hessian_digits/theory/init.json"\n', templates)
    assert typed_templates('x = f"results/{{exp}}/theory/{{stage}}.json"\n', templates)
    assert not typed_templates('x = "results/report/claims.html"  # results/x/theory/init.json\n', templates)
    assert not typed_templates('**produced("dynamics", exp=HEXP),\n', templates)
