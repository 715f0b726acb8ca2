"""What is derived from one target once and kept with it, asked for by name.

A ``Target`` holds one ``Facts``: its stage graphs, a decider per stage, the fold decisions each
rule leads to on its tfa graph, and its models' initial buffers. Each is made by the module that
knows how (``_decide/stages.py``, ``_decide/decide.py``, ``_numbers/variant_cache.py``, ``load``),
which hands ``make`` in; this is only where they are kept: one bounded cache (``_base/cache.py``),
emptied by ``inspector.clear_cache()`` and gone with its target.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable

from .._base.cache import BoundedCache


class Facts:
    """What one target has derived so far, asked for by name; bounded."""

    def __init__(self, maxsize: int = 64) -> None:
        self._kept = BoundedCache(maxsize, "target facts")

    def stage_graph(self, stage: str, make: Callable[[], Any]) -> Any:
        """The target's graph at ``stage`` (a ``_decide.stages.StageGraph``), made once."""
        return self._kept.get_or_compute(("stage", stage), make)

    def has_stage_graph(self, stage: str) -> bool:
        """Whether the graph at ``stage`` is made already (a tfa graph makes fold predictions cheap)."""
        return ("stage", stage) in self._kept

    def keep_stage_graph(self, stage: str, graph: Any) -> None:
        """Keep ``graph`` as the target's graph at ``stage`` (a compare's run captured it on the way)."""
        self._kept.put(("stage", stage), graph)

    def decider(self, stage: str, make: Callable[[], Any]) -> Any:
        """The ``Decider`` of the target's graph at ``stage``, made once."""
        return self._kept.get_or_compute(("decider", stage), make)

    def keep_decider(self, stage: str, decider: Any) -> None:
        """Keep ``decider`` as the one at ``stage`` (its stage graph was captured again)."""
        self._kept.put(("decider", stage), decider)

    def decisions(self, rule: Hashable, markers: tuple, make: Callable[[], tuple]) -> tuple:
        """Where the pass folds under the rule of identity ``rule`` with ``markers``, made once."""
        return self._kept.get_or_compute(("decisions", rule, markers), make)

    def initial_buffers(self, make: Callable[[], dict]) -> dict:
        """Every buffer's initial value by module path, made once."""
        return self._kept.get_or_compute("initial buffers", make)

    def __len__(self) -> int:
        return len(self._kept)

    def clear(self) -> None:
        """Forget everything derived (it is made again when asked for)."""
        self._kept.clear()

    def __repr__(self) -> str:
        return f"<Facts: {len(self)}/{self._kept.maxsize}>"


__all__ = ["Facts"]
