"""One cache rule for the whole core: a bounded, thread-safe, least-recently-used map.

Every cache in the inspector is one of these, keyed by everything that determines
the cached value (never by less: see ``_hashing.program_fingerprint``).
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Hashable, TypeVar

V = TypeVar("V")
_MISSING = object()


class BoundedCache:
    """A least-recently-used map holding at most ``maxsize`` entries; safe to share between threads."""

    def __init__(self, maxsize: int, name: str = "cache") -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be at least 1, got {maxsize}")
        self.maxsize = maxsize
        self.name = name
        self._entries: "collections.OrderedDict[Hashable, Any]" = collections.OrderedDict()
        self._lock = threading.RLock()

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
        return f"<BoundedCache {self.name}: {len(self)}/{self.maxsize}>"
