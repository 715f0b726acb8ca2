"""What a sweep's rows are made of: its constants, its progress bars, and the small helpers its
tables share."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

UNCHANGED_DB = 0.01  # an SQNR difference below this is "unchanged"
# The quantized (TOSA INT) flow folds in the quantizer's transform-for-annotation, before calibration,
# and finds nothing left to fold in lowering: its numbers follow the decisions at this stage only.
NUMBERS_STAGE = "tfa"

Progress = Callable[["tuple[SweepBar, ...]"], None]


@dataclass(frozen=True)
class SweepBar:
    """One phase's progress (the CLI draws one bar per phase)."""

    phase: str  # "models analysed" or "variants compared"
    done: float  # tasks finished (fractions of running ones included)
    total: int  # tasks in this phase
    eta: float | None  # seconds left, estimated from this phase's pace (None: not known yet)

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


def sqnr_delta(value, base):
    if value is None or base is None:
        return None
    value, base = float(value), float(base)
    if math.isinf(value) and math.isinf(base) and value == base:
        return 0.0
    if math.isnan(value) or math.isnan(base):
        return None
    return value - base


def table_number(v) -> float:
    """A table cell: a float, NaN where there is no number (pandas keeps the column numeric)."""
    return float("nan") if v is None else float(v)
