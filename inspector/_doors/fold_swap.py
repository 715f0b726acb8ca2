"""Which fold pass the Arm pass manager builds, chosen per run by a context variable.

The pass manager looks up ``FoldScalarMulIntoConvPass`` in its module's globals each time it
builds a pipeline (transform-for-annotation and TOSA lowering). Once per process, the first
time a run asks for another pass, that name is bound to ``Dispatching``: a subclass of the
installed pass whose construction builds the class the *current context* names, and the
installed pass itself when the context names none. The binding is never undone and never
redone, so no run holds a process-wide switch or a lock: each thread, each background job
of the widget and each worker process sees only the pass of its own ``swapped_fold_pass``
scope (``contextvars``: a new thread starts with an empty context, so it builds the
installed pass until it opens a scope of its own).

Why the one permanent binding is safe: outside every scope ``Dispatching(...)`` returns an
instance of the installed class itself, built with the same arguments, so code that never
uses the inspector runs exactly the installed pass; ``isinstance`` against the installed
class holds for every pass built, wrapped or not.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator

from . import executorch as _executorch

_NAME = "FoldScalarMulIntoConvPass"
_ACTIVE: contextvars.ContextVar[type | None] = contextvars.ContextVar("inspector_fold_pass", default=None)
_INSTALL = threading.Lock()  # held only while the name is bound, once per process


def _install() -> None:
    """Bind the pass manager's name to the dispatching class (once; later calls return at once)."""
    module = _executorch.pass_manager_module()
    if getattr(getattr(module, _NAME), "_inspector_dispatching", False):
        return
    with _INSTALL:
        if getattr(getattr(module, _NAME), "_inspector_dispatching", False):
            return
        installed = _executorch.fold_pass_class()

        class Dispatching(installed):  # type: ignore[misc, valid-type]
            """Builds the fold pass the current context names (the installed one by default)."""

            _inspector_dispatching = True

            def __new__(cls, *args, **kwargs):
                chosen = _ACTIVE.get() or installed
                # Not an instance of Dispatching, so Python does not call __init__ a second time.
                return chosen(*args, **kwargs)

        Dispatching.__name__ = Dispatching.__qualname__ = f"{installed.__name__}[dispatching]"
        setattr(module, _NAME, Dispatching)


@contextlib.contextmanager
def swapped_fold_pass(pass_class: type) -> Iterator[type]:
    """In this scope (this thread or task only), the Arm pass manager builds ``pass_class``
    instead of the installed pass."""
    _install()
    token = _ACTIVE.set(pass_class)
    try:
        yield pass_class
    finally:
        _ACTIVE.reset(token)


def active_fold_pass() -> type:
    """The class the pass manager would build here and now (the installed one outside any scope)."""
    return _ACTIVE.get() or _executorch.fold_pass_class()
