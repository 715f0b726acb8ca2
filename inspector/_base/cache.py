"""Every cache the core keeps, with one owner: this module.

Three kinds, all bounded, registered here when made, so that ``inspector.clear_cache()``
(``clear_all``) empties every one of them:

- ``BoundedCache``: a least-recently-used map of at most ``maxsize`` entries, keyed by
  everything that determines the value (never by less: see ``hashing.program_fingerprint``).
- ``FactTable``: facts about a small, fixed set of keys (op overloads) read on hot paths; a
  plain dict emptied whole when it would pass its bound.
- ``WeakCache``: values derived from an object this process holds elsewhere (a program's
  constant table), living exactly as long as that object. Its values must not refer to their
  key, or the entry would never die: ``put`` checks it.

The registry holds its caches weakly: a cache owned by an object (a target's facts, a decider's
after-graphs) dies with its owner.
"""

from __future__ import annotations

import gc
import types
import collections
import threading
import weakref
from typing import Any, TypeVar
from collections.abc import Callable, Hashable

V = TypeVar("V")
_MISSING = object()
_ALL: weakref.WeakSet[Any] = weakref.WeakSet()  # every cache made, held weakly (the owner of them all)
_ALL_LOCK = threading.Lock()


def _register(cache) -> None:
    with _ALL_LOCK:
        _ALL.add(cache)


def caches() -> list:
    """Every cache alive now (for ``clear_all`` and the tests that measure them)."""
    with _ALL_LOCK:
        return list(_ALL)


# What holds results outside this process's caches, emptied with them: the warm worker
# processes of ``_workers/pool.py`` (their own caches die with them). Filled once, at import.
_ALSO_CLEARED: list = []


def also_clear(stop) -> None:
    """Have ``clear_all`` call ``stop()`` too (for results kept outside this process)."""
    if stop not in _ALSO_CLEARED:
        _ALSO_CLEARED.append(stop)


# What empties the result store on disk (``_base.store`` registers it at import), for ``disk=True``.
_DISK: list = []


def also_clear_disk(clear) -> None:
    """Have ``clear_all(disk=True)`` call ``clear()`` too (for results kept on disk)."""
    if clear not in _DISK:
        _DISK.append(clear)


def clear_all(*, disk: bool = False) -> None:
    """Empty every cache of the core (comparison results, loaded targets, stage graphs, ...), and stop the warm
    worker processes, whose caches would otherwise answer the next sweep.

    Args:
        disk: also empty the result store on disk (``_base.store``), which other processes and later sessions
            read; default False.
    """
    for cache in caches():
        cache.clear()
    for stop in list(_ALSO_CLEARED):
        stop()
    for clear in list(_DISK) if disk else ():
        clear()


class _Locked:
    """What the locked caches share: a name, a lock, entries, their count and ``clear``; registered."""

    def __init__(self, name: str, entries) -> None:
        self.name = name
        self._entries = entries
        self._lock = threading.RLock()
        _register(self)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}: {len(self)}>"


class BoundedCache(_Locked):
    """A least-recently-used map holding at most ``maxsize`` entries; safe to share between threads."""

    def __init__(self, maxsize: int, name: str = "cache") -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be at least 1, got {maxsize}")
        self.maxsize = maxsize
        super().__init__(name, collections.OrderedDict())

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            value = self._entries.get(key, _MISSING)
            if value is _MISSING:
                return default
            self._entries.move_to_end(key)
            return value

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def get_or_compute(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The cached value for ``key``, computing and storing it on a miss.

        ``compute`` runs outside the lock (it may be slow and may itself use caches);
        if two threads miss at once both compute and the later one is kept.
        """
        value = self.get(key, _MISSING)
        if value is _MISSING:
            value = compute()
            self.put(key, value)
        return value

    def __repr__(self) -> str:
        return f"<BoundedCache {self.name}: {len(self)}/{self.maxsize}>"


class FactTable:
    """Facts about a few keys, read many times on hot paths: a dict with a bound, emptied whole when
    full (the keys are op overloads, a few dozen in a process, so it is never full in practice)."""

    def __init__(self, maxsize: int, name: str = "facts") -> None:
        self.maxsize = maxsize
        self.name = name
        self._entries: dict = {}
        _register(self)

    def get(self, key: Hashable, default: Any = None) -> Any:
        return self._entries.get(key, default)  # one dict read: atomic under the GIL

    def put(self, key: Hashable, value: Any) -> None:
        if len(self._entries) >= self.maxsize:
            self._entries = {}  # replaced, not cleared: a reader holding the old dict stays valid
        self._entries[key] = value

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries = {}

    def __repr__(self) -> str:
        return f"<FactTable {self.name}: {len(self)}/{self.maxsize}>"


class WeakCache(_Locked):
    """Values keyed by live objects, each entry gone when its key is (bounded by the live keys)."""

    def __init__(self, name: str = "weak cache") -> None:
        super().__init__(name, weakref.WeakKeyDictionary())

    def get(self, key: Any, default: Any = None) -> Any:
        with self._lock:
            return self._entries.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        if _holds(value, key):
            raise ValueError(f"{self.name}: a value that holds its own key would never be freed")
        with self._lock:
            self._entries[key] = value


def _holds(value: Any, key: Any, depth: int = 5, budget: int = 10_000) -> bool:
    """Whether ``value`` refers to ``key`` within ``depth`` references (closures and containers;
    modules and classes are not followed)."""

    seen: set[int] = set()
    frontier = [value]
    for _ in range(depth):
        nxt = []
        for obj in frontier:
            if isinstance(obj, types.FunctionType):  # what it closes over, not its module's globals
                refs = [*(obj.__closure__ or ()), *(obj.__defaults__ or ())]
            else:
                refs = gc.get_referents(obj)
            for ref in refs:
                if ref is key:
                    return True
                if id(ref) in seen or isinstance(ref, (types.ModuleType, type)) or len(seen) > budget:
                    continue
                seen.add(id(ref))
                nxt.append(ref)
        frontier = nxt
    return False
