"""One registry shape for what a user can add by name: rules, quantizations, samples.

Each is a ``Registry``: ``names()``, ``describe(name)``, ``get(name)``, ``register(...)``,
``unregister(name)``, ``name in registry`` and ``for name in registry``, all read live (a thing
registered later shows in every list, help and picker built from it). Plugins arrive through a
Python entry point group, read once on first use. Not a cache: nothing is ever evicted.
"""

from __future__ import annotations

import threading
from typing import Any, Generic, TypeVar
from collections.abc import Callable, Iterator

from .errors import InspectorError, listing, quoted

T = TypeVar("T")


class Registry(Generic[T]):
    """Things of one kind by name, in registration order.

    ``make(*args, **kwargs)`` turns what ``register`` is given into the record kept (it checks
    and raises one line); the record has a ``name``. ``line(record)`` is its one-line help.
    ``build(record)`` is what ``get`` returns (default: the record). ``fixed(record)`` keeps a
    record from being replaced or unregistered (built-ins). ``discover(register)`` reads the
    plugins once. ``missing(name)`` may find a name the registry does not hold yet (or None).
    """

    def __init__(self, what: str, *, make: Callable[..., T], line: Callable[[T], str],
                 build: Callable[[T], Any] | None = None, fixed: Callable[[T], bool] = lambda r: False,
                 discover: Callable[[Registry[T]], None] | None = None,
                 missing: Callable[[str], T | None] | None = None, hint: str = "") -> None:
        self.what = what  # "rule", "quantization", "sample": how errors name a thing of this kind
        self._make, self._line, self._build, self._fixed = make, line, build, fixed
        self._discover, self._missing, self._hint = discover, missing, hint
        self._items: dict[str, T] = {}
        self._lock = threading.RLock()
        self._discovered = discover is None

    def _ready(self) -> None:
        with self._lock:
            if self._discovered:
                return
            self._discovered = True
        self._discover(self)

    def register(self, *args, replace: bool = False, **kwargs) -> T:
        """Add a thing (``make``'s arguments); a name taken by another thing needs ``replace=True``."""
        record = self._make(*args, **kwargs)
        with self._lock:
            old = self._items.get(record.name)
            if old is not None and old != record and (self._fixed(old) or not replace):
                raise InspectorError(f"a {self.what} named {quoted(record.name)} is registered already; choose "
                                     "another name" + ("" if self._fixed(old) else " or pass replace=True"))
            self._items[record.name] = record
        return record

    def unregister(self, name: str) -> None:
        """Forget ``name`` (built-ins stay)."""
        with self._lock:
            record = self._items.get(name)
            if record is not None and not self._fixed(record):
                del self._items[name]

    def names(self) -> tuple[str, ...]:
        """Every registered name, in registration order."""
        self._ready()
        with self._lock:
            return tuple(self._items)

    def entry(self, name: str) -> T:
        """The record registered as ``name`` (raises one line naming the choices)."""
        self._ready()
        with self._lock:
            record = self._items.get(name) if isinstance(name, str) else None
        if record is None and self._missing is not None and isinstance(name, str):
            record = self._missing(name)
        if record is None:
            raise InspectorError(f"unknown {self.what} {quoted(name)}; choose one of: {listing(self.names()) or 'none'}"
                                 + (f", {self._hint}" if self._hint else ""))
        return record

    def get(self, name: str):
        """What ``name`` names (for a sample: a fresh model)."""
        record = self.entry(name)
        return self._build(record) if self._build is not None else record

    def describe(self, name: str) -> str:
        """``name``'s one-line help, read now."""
        return self._line(self.entry(name))

    def help(self) -> dict[str, str]:
        """Every name with its one-line help, read now."""
        return {name: self.describe(name) for name in self.names()}

    def __contains__(self, name: object) -> bool:
        self._ready()
        with self._lock:
            return isinstance(name, str) and name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"<{self.what}s: {', '.join(self.names())}>"


class Named:
    """A registered record that reads as its name (engines, accelerators): ``str()`` is the name, so text and
    f-strings read as they did when records held names; it equals its name, as a ``StrEnum`` member does, so a
    script that compared the name a record used to hold keeps working; between records every field counts. The
    inspector's own code asks a record's properties and never compares a name (tests/test_house.py checks).
    A subclass is a ``@dataclass(frozen=True, eq=False)`` with a ``name``."""

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            return other == self.name
        if type(other) is not type(self):
            return NotImplemented
        return vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash(self.name)
