"""Swap the fold pass the Arm pass manager instantiates, for the duration of one run only.

The pass manager looks up ``FoldScalarMulIntoConvPass`` in its module's globals
each time it builds a pipeline (transform-for-annotation and TOSA lowering), so
replacing that name inside a scope governs the fold in every stage it runs in.
A process-wide re-entrant lock makes concurrent runs wait for each other instead
of seeing each other's pass; the original is restored on every exit path.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from . import _executorch

_NAME = "FoldScalarMulIntoConvPass"
_LOCK = threading.RLock()


@contextlib.contextmanager
def swapped_fold_pass(pass_class: type) -> Iterator[type]:
    """Make the Arm pass manager build ``pass_class`` instead of the installed pass, in this scope."""
    module = _executorch.pass_manager_module()
    with _LOCK:
        original = getattr(module, _NAME)
        setattr(module, _NAME, pass_class)
        try:
            yield pass_class
        finally:
            setattr(module, _NAME, original)


def active_fold_pass() -> type:
    """The class the pass manager would instantiate right now (the installed one outside any scope)."""
    return getattr(_executorch.pass_manager_module(), _NAME)
