"""Watching the Arm pass pipeline run, without changing what runs.

Every pass of the Arm backend, in transform-for-annotation and in the TOSA lowering, is called
through ``ArmPass.__call__`` (torch.fx's ``PassBase.__call__`` for the passes that are not Arm
passes): the pass managers call each scheduled pass with the graph module and take its
``PassResult``. Once per process, the first time a journey asks, those two methods are bound
to a wrapper that hands the pass, its input and its result to the observer of the *current
context* (``contextvars``: this thread or background job only), and calls the installed method
itself in every case. Outside an ``observing`` scope the wrapper calls the installed method at
once, so code that never asks sees the installed pipeline; inside one, the same passes run in
the same order on the same graphs: the observer only reads them, never copies a model, and an
observer that fails is noted, never raised into the pipeline.

ExecuTorch's ``register_pass_insertions_after`` would also see every pass, but it is one global
registry, and a pass it names must be in the pipeline or the pass manager raises; the wrapper
needs neither. The names it binds are checked once (``REQUIRED``), as the other doors do.
"""

from __future__ import annotations

import contextlib
import inspect
import contextvars
import threading
from typing import Any, Protocol
from collections.abc import Iterator

from . import executorch as _executorch

_PASS_BASE = "torch.fx.passes.infra.pass_base"
_ARM_PASS = "executorch.backends.arm._passes.arm_pass"
_PASS_MANAGER = "executorch.backends.arm._passes.arm_pass_manager"

REQUIRED: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (_PASS_BASE, "PassBase", ("__call__",)),
    (_ARM_PASS, "ArmPass", ("__call__", "get_name")),
    (_PASS_MANAGER, "ArmPassManager", ("transform_for_annotation_pipeline", "transform_to_backend_pipeline")),
)

_ACTIVE: contextvars.ContextVar[Observer | None] = contextvars.ContextVar("inspector_pass_observer", default=None)
_INSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("inspector_inside_pass", default=False)
_PIPELINE: contextvars.ContextVar[str] = contextvars.ContextVar("inspector_arm_pipeline", default="")
_INSTALL = threading.Lock()  # held only while the methods are bound, once per process


class Observer(Protocol):
    """What an ``observing`` scope is told about each outermost pass call (never a nested one)."""

    def before(self, pass_: Any, graph_module: Any) -> None: ...  # the pass is about to run

    def after(self, pass_: Any, graph_module: Any, result: Any) -> None: ...  # it returned ``result``

    def failed(self, exc: Exception) -> None: ...  # the observer itself raised: note it, go on


def _wrap(original):
    def __call__(self, graph_module, *args, **kwargs):
        observer = _ACTIVE.get()
        if observer is None or _INSIDE.get():  # not watching, or a pass run inside a pass
            return original(self, graph_module, *args, **kwargs)
        _tell(observer, "before", self, graph_module)
        token = _INSIDE.set(True)
        try:
            result = original(self, graph_module, *args, **kwargs)
        finally:
            _INSIDE.reset(token)
        _tell(observer, "after", self, graph_module, result)
        return result

    __call__._inspector_observing = True  # type: ignore[attr-defined]
    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    __call__.__doc__ = original.__doc__
    return __call__


# The Arm pass manager's two pipelines, by the name a journey gives them.
PIPELINES = {"transform_for_annotation_pipeline": "transform-for-annotation",
             "transform_to_backend_pipeline": "lowering"}


def _wrap_pipeline(original, name: str):
    def pipeline(self, *args, **kwargs):
        if _ACTIVE.get() is None:
            return original(self, *args, **kwargs)
        token = _PIPELINE.set(name)
        try:
            return original(self, *args, **kwargs)
        finally:
            _PIPELINE.reset(token)

    pipeline._inspector_observing = True  # type: ignore[attr-defined]
    pipeline.__wrapped__ = original  # type: ignore[attr-defined]
    pipeline.__name__ = original.__name__
    pipeline.__doc__ = original.__doc__
    return pipeline


def current_pipeline() -> str:
    """Which of the Arm pass manager's pipelines is running here: ``transform-for-annotation``,
    ``lowering``, or "" (outside both, or outside an ``observing`` scope)."""
    return _PIPELINE.get()


def _tell(observer: Observer, what: str, *args) -> None:
    try:
        getattr(observer, what)(*args)
    except Exception as exc:  # noqa: BLE001 - watching must never change which models run
        try:
            observer.failed(exc)
        except Exception:  # noqa: BLE001 - an observer failing to hear of its failure still changes no run
            pass


def _classes() -> tuple[type, type, type]:
    _executorch.check_once(REQUIRED)
    return (_executorch._import(_PASS_BASE).PassBase, _executorch._import(_ARM_PASS).ArmPass,
            _executorch._import(_PASS_MANAGER).ArmPassManager)


def _install() -> None:
    """Bind the wrappers (once; later calls return at once)."""
    pass_base, arm_pass, manager = _classes()
    if getattr(manager.__dict__["transform_to_backend_pipeline"], "_inspector_observing", False):
        return
    with _INSTALL:
        for cls in (pass_base, arm_pass):
            method = cls.__dict__["__call__"]
            if not getattr(method, "_inspector_observing", False):
                cls.__call__ = _wrap(method)
        for method_name, name in PIPELINES.items():  # the flag checked above is set last
            method = manager.__dict__[method_name]
            if not getattr(method, "_inspector_observing", False):
                setattr(manager, method_name, _wrap_pipeline(method, name))


@contextlib.contextmanager
def observing(observer: Observer) -> Iterator[Observer]:
    """In this scope (this thread or task only), ``observer`` hears about every pass the Arm pipeline
    (and any other torch.fx pass) runs."""
    _install()
    token = _ACTIVE.set(observer)
    try:
        yield observer
    finally:
        _ACTIVE.reset(token)


def pass_name(pass_: Any) -> str:
    """A pass's name as the Arm pass manager prints it; a fold rule's wrapper is named by the installed pass."""
    for cls in type(pass_).__mro__:  # FoldScalarMulIntoConvPass[upstream] -> FoldScalarMulIntoConvPass
        if "[" not in cls.__name__:
            return cls.__name__
    return type(pass_).__name__


def program_of(pass_: Any) -> Any:
    """The exported program a lowering pass holds (the Arm pass manager hands it the current one), or None."""
    return getattr(pass_, "exported_program", None)


def fold_pass_registrations() -> tuple[tuple[str, int, str], ...]:
    """Where the installed pass manager builds the fold pass: ``(file, line, code)`` per construction of
    ``FoldScalarMulIntoConvPass(...)`` in its source (the file relative to the executorch package), read from the
    installed file itself, so a reply's code pointers are those of the executorch that measured it."""
    module = _executorch.pass_manager_module()
    path = inspect.getsourcefile(module)
    if path is None:
        return ()
    relative = "/".join(module.__name__.split(".")[1:]) + ".py"  # executorch is a namespace package: no root file
    with open(path, encoding="utf-8") as source:
        lines = source.read().splitlines()
    return tuple((relative, i + 1, line.strip().rstrip(","))
                 for i, line in enumerate(lines) if "FoldScalarMulIntoConvPass(" in line)
