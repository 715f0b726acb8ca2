"""pyproject.toml's ranges, the locks in constraints/ and environment.yml agree, and the venv holds its set.

pyproject.toml gives ranges: what `pip install .` accepts in an environment that already has executorch and
torch. Each lock in constraints/ is one exact set inside those ranges, the one make installs with
`pip install -c LOCK` (constraints/py3.11.txt for make, the tests, CI and every figure in docs;
constraints/oldest-executorch.txt for the corner CI also checks). environment.yml pins the same versions as
the Python 3.11 lock. These files are edited by hand or written by `make lock`; these tests catch a range
that lets torch go, a lock outside the ranges, a corner that is no longer the corner, and a venv that
drifted from what it was installed with.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the tomli backport, a dependency there
    import tomli as tomllib

REPO_ROOT = Path(__file__).resolve().parents[1]
LOCKS = REPO_ROOT / "constraints"
MAIN_LOCK = LOCKS / "py3.11.txt"  # make's, the tests', CI's and the docs' set
OLDEST_LOCK = LOCKS / "oldest-executorch.txt"  # the corner CI checks: the oldest executorch on the newest Python

# `name==version` and nothing else: no ranges, extras or markers.
EXACT_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!-]+)$")

# The heart of the stack: the venv must hold these at the lock's versions, or inside the ranges.
CORE_PACKAGES = ["torch", "executorch", "tosa-tools"]


def _pyproject() -> dict:
    with open(REPO_ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _environment() -> dict:
    with open(REPO_ROOT / "environment.yml", encoding="utf-8") as f:
        return yaml.safe_load(f)


def _requirements() -> list[Requirement]:
    """Every requirement of pyproject.toml: the dependencies and every extra."""
    project = _pyproject()["project"]
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        lines += extra
    return [Requirement(line) for line in lines]


def _requirements_for(python: str) -> dict[str, Requirement]:
    """Canonical name -> requirement, for the requirements whose marker holds on Python `python` (X.Y)."""
    env = {"python_version": python, "python_full_version": f"{python}.0"}
    return {canonicalize_name(r.name): r for r in _requirements() if r.marker is None or r.marker.evaluate(env)}


def _pins(lines: list[str]) -> dict[str, str]:
    """Canonical name -> version; fails on anything that is not an exact pin or is listed twice."""
    pins: dict[str, str] = {}
    for line in lines:
        match = EXACT_PIN.match(line.strip())
        assert match, f"{line!r} is not an exact `name==version` pin"
        name = canonicalize_name(match["name"])
        assert name not in pins, f"{name} is listed twice"
        pins[name] = match["version"]
    return pins


def _read_lock(text: str) -> tuple[str | None, dict[str, str]]:
    """A lock's Python (its `# python: X.Y` line) and its pins."""
    lines = [line.strip() for line in text.splitlines()]
    pythons = [line.split(":", 1)[1].strip() for line in lines if line.startswith("# python:")]
    return (pythons[0] if pythons else None), _pins([line for line in lines if line and not line.startswith("#")])


def _lock(path: Path) -> tuple[str, dict[str, str]]:
    python, pins = _read_lock(path.read_text(encoding="utf-8"))
    assert python, f"{path.name} does not say which Python it is for (a `# python: X.Y` line)"
    return python, pins


def _conda_dependencies() -> list[str]:
    """The plain (non-pip) conda dependency strings."""
    return [dep for dep in _environment()["dependencies"] if isinstance(dep, str)]


def _environment_pip_section() -> list[str]:
    sections = [dep["pip"] for dep in _environment()["dependencies"] if isinstance(dep, dict) and "pip" in dep]
    assert len(sections) == 1, f"environment.yml should have exactly one pip: section, found {len(sections)}"
    return [str(entry).strip() for entry in sections[0]]


def _conda_name(dep: str) -> str:
    return re.split(r"[=<>!~\s]", dep.strip(), maxsplit=1)[0]


def _supported_minors() -> list[str]:
    """The Python 3.X releases requires-python admits, oldest first."""
    requires = SpecifierSet(_pyproject()["project"]["requires-python"])
    return [f"3.{minor}" for minor in range(0, 30) if Version(f"3.{minor}.0") in requires]


def _lower_bound(spec: SpecifierSet) -> Version:
    bounds = [Version(s.version) for s in spec if s.operator in (">=", "==")]
    assert bounds, f"{spec} has no lower bound"
    return max(bounds)


def test_every_dependency_is_a_bounded_range():
    for requirement in _requirements():
        operators = {s.operator for s in requirement.specifier}
        assert operators & {">=", "=="}, f"{requirement} has no lower bound"
        assert operators & {"<", "<=", "=="}, f"{requirement} has no upper bound"


def test_torch_is_held_to_the_release_executorch_is_built_for():
    # An unbounded torch makes pip pull the newest one, a multi-GB CUDA build.
    torch = _requirements_for("3.11")["torch"].specifier
    assert "2.13.0" in torch
    assert "2.14.0" not in torch and "2.12.1" not in torch


@pytest.mark.parametrize("lock", sorted(LOCKS.glob("*.txt")), ids=lambda p: p.name)
def test_every_lock_pins_every_dependency_inside_its_range(lock):
    python, pins = _lock(lock)
    assert python in _supported_minors(), f"{lock.name} is for Python {python}, outside requires-python"
    for name, requirement in _requirements_for(python).items():
        assert name in pins, f"{lock.name} does not pin {name}"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{lock.name} pins {name}=={pins[name]}, outside pyproject.toml's {requirement}"
        )
    # The lock names torch's public version: ==2.13.0 still takes a CPU wheel (2.13.0+cpu) where there is one.
    assert Version(pins["torch"]).local is None, f"{lock.name} pins torch=={pins['torch']}: write the public version"


def test_the_main_lock_is_python_3_11_and_the_corner_is_the_corner():
    main_python, _ = _lock(MAIN_LOCK)
    assert main_python == "3.11"
    python, pins = _lock(OLDEST_LOCK)
    assert python == _supported_minors()[-1], "the corner's Python is not the newest requires-python admits"
    executorch = _requirements_for(python)["executorch"].specifier
    assert Version(pins["executorch"]) == _lower_bound(executorch), (
        f"the corner pins executorch {pins['executorch']}, the oldest pyproject.toml admits is {_lower_bound(executorch)}"
    )


def test_environment_yml_pins_the_main_locks_versions():
    python, lock = _lock(MAIN_LOCK)
    entries = [entry for entry in _environment_pip_section() if not entry.startswith("-")]
    pins = _pins(entries)
    direct = set(_requirements_for(python))
    assert set(pins) == direct, (
        f"environment.yml's pip section should list pyproject.toml's dependencies: "
        f"missing {sorted(direct - set(pins))}, extra {sorted(set(pins) - direct)}"
    )
    differ = {name: (version, lock.get(name)) for name, version in pins.items() if lock.get(name) != version}
    assert not differ, f"environment.yml and {MAIN_LOCK.name} differ (environment.yml, lock): {differ}"
    assert [dep for dep in _conda_dependencies() if _conda_name(dep) == "python"] == [f"python={python}"]


def test_environment_yml_installs_the_project_itself():
    assert "-e ." in _environment_pip_section()


def test_python_version_agrees():
    assert _supported_minors() == ["3.10", "3.11", "3.12", "3.13"]
    running = Version(".".join(map(str, sys.version_info[:3])))
    requires_python = SpecifierSet(_pyproject()["project"]["requires-python"])
    assert running in requires_python, f"running Python {running} is outside requires-python {requires_python}"


def test_make_looks_for_every_supported_python_and_pins_the_locks_torch():
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    candidates = re.search(r"^PYTHON_CANDIDATES := (.*)$", makefile, re.M)
    assert candidates, "the Makefile has no PYTHON_CANDIDATES"
    assert candidates[1].split() == [f"python{v}" for v in reversed(_supported_minors())] + ["python3"]
    torch_pin = re.search(r"^TORCH_PIN := torch==(\S+)$", makefile, re.M)
    assert torch_pin, "the Makefile has no TORCH_PIN"
    assert torch_pin[1] == _lock(MAIN_LOCK)[1]["torch"]


def test_graphviz_is_a_conda_dependency():
    # The conda package provides `dot`; the pip `graphviz` package is only the Python binding.
    assert "graphviz" in {_conda_name(dep) for dep in _conda_dependencies()}


def _installed_lock() -> tuple[str | None, dict[str, str]] | None:
    """The lock make installed this venv with (its stamp is a copy), or None: no stamp, or no lock."""
    stamp = Path(sys.prefix) / ".installed"
    text = stamp.read_text(encoding="utf-8") if stamp.is_file() else ""
    python, pins = _read_lock(text)
    return (python, pins) if pins else None


def _installed(package: str) -> Version:
    return Version(importlib.metadata.version(package))


def test_the_venv_holds_the_lock_it_was_installed_with():
    installed = _installed_lock()
    if installed is None:
        pytest.skip("not a venv make installed from a lock: test_core_packages_are_inside_the_ranges checks it")
    python, pins = installed
    assert python == "%d.%d" % sys.version_info[:2], f"the venv was installed from the lock for Python {python}"
    drifted = {}
    for name, version in pins.items():
        try:
            have = _installed(name)
        except importlib.metadata.PackageNotFoundError:
            drifted[name] = (version, None)
            continue
        # The CPU torch wheel is versioned `2.13.0+cpu`; `==2.13.0` accepts it, so compare the public part.
        if have.public != Version(version).public:
            drifted[name] = (version, str(have))
    assert not drifted, f"the venv drifted from its lock (locked, installed): {drifted}"


@pytest.mark.parametrize("package", CORE_PACKAGES)
def test_core_packages_are_inside_the_ranges(package):
    requirement = _requirements_for("%d.%d" % sys.version_info[:2])[canonicalize_name(package)]
    installed = _installed(package)
    assert requirement.specifier.contains(installed.public, prereleases=True), (
        f"{package} {installed} is installed, pyproject.toml asks for {requirement.specifier}"
    )
