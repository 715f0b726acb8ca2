"""What every lowering repeats in torch.export's decompositions, done once.

``to_edge_transform_and_lower`` calls ``ExportedProgram.run_decompositions`` three times (the TOSA partitioner's
flow), and each call does two things that do not depend on the program at all:

- it lists every CompositeImplicitAutograd operator that may be preserved (``_collect_all_valid_cia_ops``, five
  listings a lowering: one per call, two more when ExecuTorch's decomposition table materialises). A listing walks
  each of the ~40 operator namespaces, and for *each* namespace asks the C++ dispatcher for every CIA registration
  and touches each of its ~840 operators again (``_materialize_cpp_cia_ops``): ~40 materialisations where one
  does the work, the others find every operator already there. About 45 ms a listing where 5 ms is the walk.
- it registers a Python kernel on ~22 dispatch keys for each of ~560 operators and takes them off again
  (``_override_composite_implicit_decomp``). Each registration goes through ``OperatorBase.py_impl``, which builds a
  new closure over (operator, key) and evaluates its ``Callable[_P, _T]`` annotations (typing generics, no cache):
  most of the ~60 ms the registrations take.

In a ``shared_decompositions()`` scope, torch's own functions still run, in the same order, on the same tables:

- a listing materialises the dispatcher's operators on its first namespace only; the later calls of the same
  listing return at once. Nothing is kept between listings, so an operator registered or removed since the last
  one is seen exactly as torch sees it (tests/test_lowering_shared.py registers and destroys one).
- ``py_impl(operator, key)`` hands back the registration closure it built the first time for that operator and
  key (a ``FactTable`` of at most ``_CLOSURES_MAX``, keyed by the operator's identity and the key; the closure holds
  the operator, so an identity is never reused while its entry lives). The closure reads everything it checks and
  writes (the operator's kernel table, its dispatch cache) when it is called, so a kept one registers exactly what a
  new one would; torch's context manager then takes every kernel off again as it always does.

Both rest on what the three torch functions and ``py_impl`` do, so they apply only where their sources are the
ones read and measured here (``VERIFIED``: sha256 of each function's source, with the torch release it came
from); anywhere else (another torch, a function moved, a source not installed) the scope does nothing and torch runs
as it is, which ``status()`` says in one line. The replacements are bound for the scope only (every thread
meanwhile shares them, which computes the same) and put back when the last scope ends: after it, torch's
modules, classes and operator tables are as they were (tests/test_lowering_shared.py checks each, and that a user's
own ``run_decompositions`` then gives the same program). What a lowering produces is the same, byte for byte
(the same test, against ExecuTorch's own call). The TOSA door's ``lower`` opens the scope.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import inspect
import threading
from dataclasses import dataclass, field
from collections.abc import Iterator
from typing import Any

import torch

from . import executorch as _executorch
from .._base.cache import FactTable
from .._base.errors import InspectorError

_UTILS = "torch._export.utils"
# Where torch.export imported the listing by name: each must be rebound, not only its home.
_LISTING_USERS = ("torch._export.utils", "torch.export.exported_program", "torch.export.decomp_utils")

# sha256 of inspect.getsource(...) of each function the shortcut relies on, as read and measured (torch 2.13.0,
# the same in the venvs of executorch 1.4.0, 1.4.1, 1.5.0 and 1.5.1). A torch whose sources differ gets no shortcut.
VERIFIED: dict[tuple[str, str], frozenset[str]] = {
    (_UTILS, "_collect_all_valid_cia_ops"): frozenset({"1d09a99ea79bd377"}),
    (_UTILS, "_collect_all_valid_cia_ops_for_namespace"): frozenset({"c26d5cd619830773"}),
    (_UTILS, "_materialize_cpp_cia_ops"): frozenset({"51472f6b4e2c3782"}),
    ("torch._ops", "OperatorBase.py_impl"): frozenset({"8173bd205b783783"}),
}
_CLOSURES_MAX = 1 << 16  # ~560 operators x ~22 keys are used; a plain dict emptied whole past this


@dataclass(frozen=True, kw_only=True)
class Status:
    """Whether the shortcut applies in this process, and why not when it does not."""

    active: bool  # the scope binds the shortcut (False: torch runs as it is)
    reason: str  # one line: what was checked, or which assumption does not hold
    # the very functions verified, by (module, qualname): bound over only while they are still the current ones
    verified: tuple[tuple[tuple[str, str], Any], ...] = field(default=(), repr=False, compare=False)


def _source_digest(function) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:16]


def _resolve(module: str, qualname: str):
    """The function ``qualname`` of ``module`` as defined there (a class's own, never an inherited one)."""
    owner: Any = _executorch._import(module)
    for part in qualname.split("."):
        owner = vars(owner)[part]
    return owner


_STATUS = FactTable(1, "decomposition shortcut status")  # checked once (again after clear_cache)


def status() -> Status:
    """Checked once per process: every function the shortcut relies on is where it was, with the source that was
    verified, and the listing is imported by name where torch.export uses it."""
    found = _STATUS.get("status")
    if found is None:
        found = _check()
        _STATUS.put("status", found)
    return found


def clear_status() -> None:
    """Forget the check (a test that changes torch under the shortcut checks it again)."""
    _STATUS.clear()


def _check() -> Status:
    verified = []
    try:
        for (module, qualname), digests in VERIFIED.items():
            function = _resolve(module, qualname)
            digest = _source_digest(function)
            if digest not in digests:
                return Status(active=False, reason=f"{module}.{qualname} in torch {torch.__version__} is not the "
                                                   f"source verified (sha256 {digest}): the decompositions run as "
                                                   "torch runs them")
            verified.append(((module, qualname), function))
        listing = _resolve(_UTILS, "_collect_all_valid_cia_ops")
        for module in _LISTING_USERS:
            if getattr(_executorch._import(module), "_collect_all_valid_cia_ops", None) is not listing:
                return Status(active=False, reason=f"{module} does not use torch._export.utils' listing of "
                                                   "CompositeImplicitAutograd operators: no shortcut")
    except (InspectorError, AttributeError, KeyError, OSError, TypeError) as exc:  # moved, renamed, or no source
        return Status(active=False, reason=f"torch's decomposition internals are not where they were verified "
                                           f"({type(exc).__name__}: {exc}): no shortcut")
    return Status(active=True, reason=f"torch {torch.__version__}: each listing of CompositeImplicitAutograd "
                                      "operators materialises them once, py_impl reuses its closures",
                  verified=tuple(verified))


# ---------------------------------------------------------------- the listing

# Inside one listing: [whether the dispatcher's operators were materialised in it yet]; None outside any listing.
_LISTED: contextvars.ContextVar[list | None] = contextvars.ContextVar("inspector_cia_listing", default=None)


def _listing(original):
    @functools.wraps(original)
    def listing(*args, **kwargs):
        token = _LISTED.set([False])
        try:
            return original(*args, **kwargs)
        finally:
            _LISTED.reset(token)

    listing._inspector_original = original
    return listing


def _materializing(original):
    @functools.wraps(original)
    def materialize(*args, **kwargs):
        listed = _LISTED.get()
        if listed is None or not listed[0]:  # outside a listing, or its first namespace: torch's own work
            result = original(*args, **kwargs)
            if listed is not None:
                listed[0] = True
            return result
        return None  # this listing materialised every operator already; this thread only read torch.ops since

    materialize._inspector_original = original
    return materialize


# ---------------------------------------------------------------- py_impl

_CLOSURES = FactTable(_CLOSURES_MAX, "py_impl registration closures")


def _reusing(original):
    dispatch_key = torch._C.DispatchKey

    @functools.wraps(original)
    def py_impl(self, k):
        if type(k) is not dispatch_key:  # a mode or a transform: torch's own path, nothing kept
            return original(self, k)
        # by identity: hashing an operator is a Python call; the kept closure holds the operator, so while its entry
        # lives no other operator can have that identity
        key = (id(self), int(k))
        inner = _CLOSURES.get(key)
        if inner is None:
            inner = original(self, k)
            _CLOSURES.put(key, inner)
        return inner

    py_impl._inspector_original = original
    return py_impl


# ---------------------------------------------------------------- the scope

_SHARING = threading.Lock()
_SHARERS = 0  # scopes open now, in every thread
_BOUND: tuple[tuple[Any, str, Any, Any], ...] = ()  # (owner, name, torch's value, ours) while a scope is open


def _bindings(state: Status) -> tuple[tuple[Any, str, Any, Any], ...]:
    """What the scope binds, or () when torch's functions are no longer the ones verified (another tool wrapped or
    replaced one since: its wrapper is then called as it is, never skipped)."""
    utils = _executorch._import(_UTILS)
    if any(_resolve(module, qualname) is not function for (module, qualname), function in state.verified) \
            or any(getattr(_executorch._import(m), "_collect_all_valid_cia_ops", None)
                   is not utils._collect_all_valid_cia_ops for m in _LISTING_USERS):
        return ()
    listing = _listing(utils._collect_all_valid_cia_ops)
    bound = [(_executorch._import(m), "_collect_all_valid_cia_ops", utils._collect_all_valid_cia_ops, listing)
             for m in _LISTING_USERS]
    bound.append((utils, "_materialize_cpp_cia_ops", utils._materialize_cpp_cia_ops,
                  _materializing(utils._materialize_cpp_cia_ops)))
    base = torch._ops.OperatorBase
    bound.append((base, "py_impl", base.__dict__["py_impl"], _reusing(base.__dict__["py_impl"])))
    return tuple(bound)


def _current(owner, name: str):
    return owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)


@contextlib.contextmanager
def shared_decompositions() -> Iterator[Status]:
    """In this scope torch.export's decompositions skip the work that does not depend on the program (see the
    module's docstring); outside it, and wherever ``status()`` says the assumptions do not hold, torch is as it is.
    Yields the ``Status``."""
    global _SHARERS, _BOUND
    state = status()
    if not state.active:
        yield state
        return
    with _SHARING:
        _SHARERS += 1
        if _SHARERS == 1:
            _BOUND = _bindings(state)
            for owner, name, _, ours in _BOUND:
                setattr(owner, name, ours)
    try:
        yield state
    finally:
        with _SHARING:
            _SHARERS -= 1
            if _SHARERS == 0:
                for owner, name, theirs, ours in _BOUND:
                    if _current(owner, name) is ours:  # another's binding made meanwhile stays theirs
                        setattr(owner, name, theirs)
                _BOUND = ()
