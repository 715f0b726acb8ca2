"""Write the lock of the running environment: every package fold-inspector[test,explorer,ray,timm] needs.

    .venv/bin/python constraints/freeze.py > constraints/py3.11.txt      (what `make lock` does)

Only the project's own dependency closure is written, read from the installed metadata, so a tool someone
installed by hand into the venv does not end up in the lock. torch is written without its local version
(`2.13.0`, not `2.13.0+cpu`): `torch==2.13.0` still takes a CPU wheel where pip can find one (the local
version sorts higher), and the same lock installs where only PyPI's build exists.
"""

from __future__ import annotations

import importlib.metadata
import sys

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

PROJECT = "fold-inspector"
EXTRAS = ("test", "explorer", "ray", "timm")


def closure(project: str, extras: tuple[str, ...]) -> dict[str, str]:
    """Canonical name -> installed version of the project's dependencies, transitively (markers evaluated)."""
    found: dict[str, str] = {}
    todo = [(project, set(extras))]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, wanted = todo.pop()
        key = (canonicalize_name(name), frozenset(wanted))
        if key in seen:
            continue
        seen.add(key)
        dist = importlib.metadata.distribution(name)
        for line in dist.requires or ():
            req = Requirement(line)
            envs = [{"extra": extra} for extra in wanted] or [{"extra": ""}]
            if req.marker is not None and not any(req.marker.evaluate(env) for env in envs):
                continue
            try:
                version = importlib.metadata.version(req.name)
            except importlib.metadata.PackageNotFoundError:
                sys.exit(f"{req.name} (needed by {name}) is not installed: install the project first")
            found[canonicalize_name(req.name)] = version
            todo.append((req.name, set(req.extras)))
    found.pop(canonicalize_name(project), None)
    return found


def least_patch(names: list[str]) -> tuple[str, list[str]] | None:
    """The first release of the running Python's minor that every package's Requires-Python admits, and the
    packages that ask for it; None when X.Y.0 will do."""
    major, minor = sys.version_info[:2]
    asks: dict[str, SpecifierSet] = {}
    for name in names:
        requires = importlib.metadata.metadata(name).get("Requires-Python")
        if requires:
            asks[f"{name} {importlib.metadata.version(name)}"] = SpecifierSet(requires)
    for patch in range(0, 100):
        release = f"{major}.{minor}.{patch}"
        if all(spec.contains(release, prereleases=True) for spec in asks.values()):
            if patch == 0:
                return None
            previous = f"{major}.{minor}.{patch - 1}"
            return release, sorted(who for who, spec in asks.items() if not spec.contains(previous, prereleases=True))
    sys.exit(f"no Python {major}.{minor}.x satisfies every locked package's Requires-Python")


def main() -> None:
    pins = closure(PROJECT, EXTRAS)
    executorch = pins["executorch"]
    python = "%d.%d" % sys.version_info[:2]
    print(f"# A lock of fold-inspector[test,explorer,ray,timm]: Python {python}, executorch {executorch}. Written by")
    print("# constraints/freeze.py; make installs with `pip install -c` this file (tests/test_environment_pins.py")
    print("# checks it against pyproject.toml's ranges and environment.yml).")
    print(f"# python: {python}")
    least = least_patch(sorted(pins))
    if least:
        print(f"# python-min: {least[0]} ({', '.join(least[1])} asks for it)")
    for name in sorted(pins):
        version = Version(pins[name]).public if name == "torch" else pins[name]
        print(f"{name}=={version}")


if __name__ == "__main__":
    main()
