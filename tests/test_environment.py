"""pyproject.toml, environment.yml and the lock agree."""

import tomllib

import yaml
from packaging.requirements import Requirement


def test_environment_yml_lists_the_same_packages_as_pyproject(root):
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["test"]
    env = yaml.safe_load((root / "environment.yml").read_text())
    pip = [r for r in next(d["pip"] for d in env["dependencies"] if isinstance(d, dict)) if not r.startswith("-")]
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    assert "python=3.11" in conda

    def norm(reqs):
        return {Requirement(r).name.lower(): str(Requirement(r).specifier) for r in reqs}

    assert norm(pip) == norm(wanted)


def test_lock_pins_every_dependency_within_its_range(root):
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    pins = {}
    for line in (root / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    for r in project["dependencies"] + project["optional-dependencies"]["test"]:
        req = Requirement(r)
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{name} missing from requirements.lock"
        assert req.specifier.contains(pins[name]), f"{name}=={pins[name]} outside {req.specifier}"
    assert pins["torch"] == "2.14.1" and pins["torchvision"] == "0.29.1"


def _lock_pins(root) -> dict:
    pins = {}
    for line in (root / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


def test_environment_yml_installs_the_lock(root):
    """conda installs the lock's exact versions (``-r requirements.lock`` in the pip section), and
    every range environment.yml names holds the lock's pin (else pip would refuse the pair)."""
    env = yaml.safe_load((root / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-r requirements.lock" in pip
    pins = _lock_pins(root)
    assert len(pins) > 100 and all(v for v in pins.values()), "every lock line is NAME==VERSION"
    for r in (r for r in pip if not r.startswith("-")):
        req = Requirement(r)
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"environment.yml lists {name}, which requirements.lock does not pin"
        assert req.specifier.contains(pins[name]), f"environment.yml: {r} excludes the lock's {name}=={pins[name]}"
