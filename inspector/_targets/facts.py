"""What is derived from one target once and kept with it, under names whose types their makers declare.

A ``Target`` holds one ``Facts``. What it keeps is named by a ``Fact[T]``, declared (with the type ``T``
of what it holds) by the module that makes it, which hands ``make`` in; this module only keeps them, in
one bounded cache (``_base/cache.py``), emptied by ``inspector.clear_cache()`` and gone with its target.
So nothing here holds an object of a higher layer under ``Any``: each fact's type is its maker's. What a
target keeps (docs/design.md, "How the core is built"):

- ``stages.STAGE_GRAPH``: ``Fact[StageGraph]``, per stage, the graph the pass sees (``_decide/stages.py``);
- ``decide.DECIDER``: ``Fact[Decider]``, per stage, the decider of that graph (``_decide/decide.py``);
- ``variant_cache.DECISIONS``: ``Fact[tuple]``, per (rule identity, markers), the sites the pass folds at tfa;
- ``load.INITIAL_BUFFERS``: ``Fact[dict[str, Tensor]]``, every buffer's initial value (``_targets/load.py``).
"""

from __future__ import annotations

from typing import Generic, TypeVar
from collections.abc import Callable, Hashable

from .._base.cache import BoundedCache

T = TypeVar("T")


class Fact(Generic[T]):
    """The name of one kind of thing a target derives, with the type of what it holds (``Fact[StageGraph]``)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<Fact {self.name}>"


class Facts:
    """What one target has derived so far, each under its ``Fact`` and a key; bounded."""

    def __init__(self, maxsize: int = 64) -> None:
        self._kept = BoundedCache(maxsize, "target facts")

    def get(self, fact: Fact[T], key: Hashable, make: Callable[[], T]) -> T:
        """What ``fact`` holds under ``key``, made once by ``make``."""
        return self._kept.get_or_compute((fact.name, key), make)

    def has(self, fact: Fact[T], key: Hashable) -> bool:
        """Whether ``fact`` holds something under ``key`` already."""
        return (fact.name, key) in self._kept

    def keep(self, fact: Fact[T], key: Hashable, value: T) -> None:
        """Keep ``value`` as what ``fact`` holds under ``key`` (made on the way by something else)."""
        self._kept.put((fact.name, key), value)

    def __len__(self) -> int:
        return len(self._kept)

    def clear(self) -> None:
        """Forget everything derived (it is made again when asked for)."""
        self._kept.clear()

    def __repr__(self) -> str:
        return f"<Facts: {len(self)}/{self._kept.maxsize}>"


__all__ = ["Fact", "Facts"]
