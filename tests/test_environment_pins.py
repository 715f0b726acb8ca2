"""pyproject.toml and environment.yml pin the same stack, and it is the one installed.

The two files are edited by hand; these tests catch a pin changed in one and
not the other, an unpinned dependency, and a venv that drifted from the pins.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO_ROOT = Path(__file__).resolve().parents[1]

# `name==version` and nothing else: no ranges, extras or markers.
EXACT_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!-]+)$")

# The heart of the stack: the venv must hold exactly these versions.
CORE_PACKAGES = ["torch", "executorch", "tosa-tools"]


def _pyproject() -> dict:
    with open(REPO_ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _environment() -> dict:
    with open(REPO_ROOT / "environment.yml", encoding="utf-8") as f:
        return yaml.safe_load(f)


def _pyproject_requirements() -> list[str]:
    project = _pyproject()["project"]
    extras = project["optional-dependencies"]
    return list(project["dependencies"]) + list(extras["test"]) + list(extras["explorer"]) + list(extras["ray"]) + list(extras["timm"])


def _conda_dependencies() -> list[str]:
    """The plain (non-pip) conda dependency strings."""
    return [dep for dep in _environment()["dependencies"] if isinstance(dep, str)]


def _environment_pip_section() -> list[str]:
    sections = [dep["pip"] for dep in _environment()["dependencies"] if isinstance(dep, dict) and "pip" in dep]
    assert len(sections) == 1, f"environment.yml should have exactly one pip: section, found {len(sections)}"
    return [str(entry).strip() for entry in sections[0]]


def _environment_pip_requirements() -> list[str]:
    """The pip section without pip options such as `-e .`."""
    return [entry for entry in _environment_pip_section() if not entry.startswith("-")]


def _pins(requirements: list[str]) -> dict[str, str]:
    """Canonical name -> version; fails on anything that is not an exact pin or is listed twice."""
    pins: dict[str, str] = {}
    for requirement in requirements:
        match = EXACT_PIN.match(requirement.strip())
        assert match, f"{requirement!r} is not an exact `name==version` pin"
        name = canonicalize_name(match["name"])
        assert name not in pins, f"{name} is listed twice"
        pins[name] = match["version"]
    return pins


def _conda_name(dep: str) -> str:
    return re.split(r"[=<>!~\s]", dep.strip(), maxsplit=1)[0]


def test_every_pyproject_dependency_is_an_exact_pin():
    # An unpinned torch makes pip pull a multi-GB CUDA build.
    pins = _pins(_pyproject_requirements())
    assert pins["torch"] == "2.13.0"


def test_every_environment_pip_dependency_is_an_exact_pin():
    _pins(_environment_pip_requirements())


def test_pyproject_pins_appear_identically_in_environment_yml():
    in_pyproject = set(_pyproject_requirements())
    in_environment = set(_environment_pip_requirements())
    only_pyproject = sorted(in_pyproject - in_environment)
    only_environment = sorted(in_environment - in_pyproject)
    assert not only_pyproject and not only_environment, (
        f"pins differ: only in pyproject.toml {only_pyproject}, only in environment.yml {only_environment}"
    )


def test_environment_yml_installs_the_project_itself():
    assert "-e ." in _environment_pip_section()


def test_python_version_agrees():
    requires_python = SpecifierSet(_pyproject()["project"]["requires-python"])
    assert Version("3.11.0") in requires_python
    assert Version("3.10.14") not in requires_python
    assert Version("3.12.0") not in requires_python

    pythons = [dep for dep in _conda_dependencies() if _conda_name(dep) == "python"]
    assert pythons == ["python=3.11"]

    running = Version(".".join(map(str, sys.version_info[:3])))
    assert running in requires_python, f"running Python {running} is outside requires-python {requires_python}"


def test_graphviz_is_a_conda_dependency():
    # The conda package provides `dot`; the pip `graphviz` package is only the Python binding.
    assert "graphviz" in {_conda_name(dep) for dep in _conda_dependencies()}


@pytest.mark.parametrize("package", CORE_PACKAGES)
def test_installed_version_matches_pin(package):
    pinned = _pins(_pyproject_requirements())[canonicalize_name(package)]
    installed = Version(importlib.metadata.version(package))
    # The CPU torch wheel is versioned `2.13.0+cpu`; `==2.13.0` accepts it, so compare the public part.
    assert installed.public == pinned, f"{package} {installed} is installed, pyproject.toml pins {pinned}"
