"""Task kinds: what a worker runs, named by a registered kind, never by a module path a low layer would know.

The module that defines a task function registers it (``@task_kind("compare-variant")``) as it is
imported; a pool is handed the kind and sends the worker the kind and the module the parent found it in.
A worker that does not know the kind yet imports that module (named by the parent's registry, not by any
string here), which registers it. ``tests/test_house.py`` checks that every kind is a module-level
function of a layer above this one, and that no other code imports a module named at run time.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from .._base.errors import InspectorError, listing, quoted

# kind -> the function it runs: filled by the modules that define tasks, as they are imported.
_KINDS: dict[str, Callable] = {}


def task_kind(kind: str) -> Callable[[Callable], Callable]:
    """Register the decorated module-level function ``fn(payload, report)`` as the task ``kind``."""
    def register(fn: Callable) -> Callable:
        known = _KINDS.get(kind)
        if known is not None and (known.__module__, known.__qualname__) != (fn.__module__, fn.__qualname__):
            raise InspectorError(f"task kind {quoted(kind)} is registered twice: {known.__module__} and {fn.__module__}")
        _KINDS[kind] = fn
        return fn

    return register


def module_of(kind: str) -> str:
    """The module that registered ``kind`` in this process (a worker imports it if it does not know the kind)."""
    return function_of(kind).__module__


def function_of(kind: str, module: str | None = None) -> Callable:
    """The function of ``kind``; in a worker that has not imported it yet, ``module`` (the parent's) is imported."""
    fn = _KINDS.get(kind)
    if fn is None and module:
        importlib.import_module(module)  # the parent's registry named it: importing it registers the kind
        fn = _KINDS.get(kind)
    if fn is None:
        raise InspectorError(f"unknown task kind {quoted(kind)}; known: {listing(sorted(_KINDS)) or 'none'}")
    return fn


def kinds() -> dict[str, Callable]:
    """Every kind registered in this process, with its function."""
    return dict(_KINDS)


__all__ = ["function_of", "kinds", "module_of", "task_kind"]
