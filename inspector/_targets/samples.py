"""Sample models by name (``sample:NAME`` targets): a small registry the core owns.

The core never imports a sample package. Packages add their samples through the
entry point group ``fold_inspector.samples``: each entry point names a callable
that receives ``register`` and calls it once per sample (this project's
``sample_models`` does, see pyproject.toml). ``register`` may also be called
directly, e.g. from a notebook.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from ..errors import InspectorError, listing, quoted

ENTRY_POINT_GROUP = "fold_inspector.samples"


@dataclass(frozen=True)
class SampleEntry:
    """One registered sample."""

    name: str  # what follows "sample:" in a target
    factory: Callable  # builds a fresh model with fixed weights and ``example_inputs()``
    description: str  # one line: what it teaches


_ENTRIES: dict[str, SampleEntry] = {}
_DEFAULT: list[str] = []
_LOCK = threading.RLock()
_DISCOVERED = False


def register(name: str, factory: Callable, description: str = "", *, default: bool = False) -> None:
    """Make ``factory()`` available as ``sample:NAME``; ``default`` makes it the demo's sample."""
    if not isinstance(name, str) or not name.isidentifier():
        raise InspectorError(f"a sample name is an identifier, got {quoted(name)}")
    with _LOCK:
        _ENTRIES[name] = SampleEntry(name, factory, description)
        if default:
            _DEFAULT[:] = [name]


def _discover() -> None:
    global _DISCOVERED
    with _LOCK:
        if _DISCOVERED:
            return
        _DISCOVERED = True
        from importlib.metadata import entry_points

        for point in entry_points(group=ENTRY_POINT_GROUP):
            point.load()(register)


def names() -> list[str]:
    """Every registered sample name, in registration (teaching) order."""
    _discover()
    with _LOCK:
        return list(_ENTRIES)


def entry(name: str) -> SampleEntry:
    _discover()
    with _LOCK:
        found = _ENTRIES.get(name)
    if found is None:
        raise InspectorError(f"unknown sample {quoted(name)}; known samples: {listing(names()) or 'none'}")
    return found


def get(name: str):
    """A fresh instance of sample ``name``."""
    return entry(name).factory()


def describe(name: str) -> str:
    return entry(name).description


def default() -> str:
    """The sample the demo shows."""
    _discover()
    with _LOCK:
        if _DEFAULT:
            return _DEFAULT[0]
    if not names():
        raise InspectorError("no sample models are installed; pip install -e . registers the built-in ones")
    return names()[0]
