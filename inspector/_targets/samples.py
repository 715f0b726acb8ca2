"""Sample models by name (``sample:NAME`` targets): a small registry the core owns.

The core never imports a sample package. Packages add their samples through the
entry point group ``fold_inspector.samples``: each entry point names a callable
that receives ``register`` and calls it once per sample (this project's
``sample_models`` does, see pyproject.toml). ``register`` may also be called
directly, e.g. from a notebook.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from dataclasses import dataclass
from collections.abc import Callable

from .._base.registry import Registry
from .._base.errors import InspectorError, quoted

ENTRY_POINT_GROUP = "fold_inspector.samples"


@dataclass(frozen=True, kw_only=True)
class SampleEntry:
    """One registered sample."""

    name: str  # what follows "sample:" in a target
    factory: Callable  # builds a fresh model with fixed weights and ``example_inputs()``
    description: str  # one line: what it teaches


_DEFAULT: list[str] = []  # the demo's sample, once one was registered with default=True


def _entry(name: str, factory: Callable, description: str = "", *, default: bool = False) -> SampleEntry:
    if not isinstance(name, str) or not name.isidentifier():
        raise InspectorError(f"a sample name is an identifier, got {quoted(name)}")
    if default:
        _DEFAULT[:] = [name]
    return SampleEntry(name=name, factory=factory, description=description)


def _discover(registry) -> None:
    for point in entry_points(group=ENTRY_POINT_GROUP):
        point.load()(register)


# Every sample by name; ``samples.get(name)`` is a fresh instance of it.
samples = Registry("sample", make=_entry, line=lambda e: e.description, build=lambda e: e.factory(),
                   discover=_discover)


def register(name: str, factory: Callable, description: str = "", *, default: bool = False) -> None:
    """Make ``factory()`` available as ``sample:NAME``; ``default`` makes it the demo's sample."""
    samples.register(name, factory, description, default=default, replace=True)


def default() -> str:
    """The sample the demo shows."""
    names = samples.names()
    if _DEFAULT:
        return _DEFAULT[0]
    if not names:
        raise InspectorError("no sample models are installed; pip install -e . registers the built-in ones")
    return names[0]
