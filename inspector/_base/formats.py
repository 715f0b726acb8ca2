"""How every number a user reads is written, once: dB, quantization steps, errors, seconds, cycles and the
compiler settings they were made under; the plot's ceiling for an infinite SQNR. Records' own sentences (a
summary, an answer), the presentation (``present``: tables, pages, Markdown, plots), the CLI and the widget
all call these, so a number reads the same everywhere and a change is made here only. An exact match
(infinite SQNR) is written ``inf``.
"""

from __future__ import annotations

import math

MISSING = "–"  # a number that is not there (not run, failed, not measured)
GITHUB_COMMENT_LIMIT = 65_536  # characters in one GitHub comment (what a Markdown reply is bounded by)
PLOT_LIMIT_DB = 200.0  # an exact match has infinite SQNR; a plot draws it at this ceiling (and -inf at its negative)


def db(value) -> str:
    """An SQNR or a difference of SQNRs in dB, without the unit: ``12.35``, ``inf``, ``-inf``, ``nan``,
    ``–`` for no number."""
    return _written(value, ".2f", "inf")


def db_change(value) -> str:
    """A change in dB, always signed: ``+1.25``, ``-0.50``, ``+inf``, ``-inf``, ``nan``, ``–``."""
    return _written(value, "+.2f", "+inf")


def quantization_steps(value) -> str:
    """A distance in quantization steps (the simulation against the reference model)."""
    return _written(value, ".2f", "inf")


def _written(value, spec: str, infinity: str) -> str:
    if value is None:
        return MISSING
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return infinity if value > 0 else "-inf"
    text = format(value, spec)
    # a value that rounds to zero is zero, never "-0.00" (a change too small to show has no direction)
    return format(0.0, spec) if text.lstrip("+-").strip("0.") == "" else text


def error(value) -> str:
    """An error a user reads (max |quantized - float|, a largest change): three significant digits."""
    if value is None:
        return MISSING
    return format(float(value), ".3g")


def cycles(value) -> str:
    """A count of cycles (Vela's estimate) a user reads: ``88,840``; ``–`` for none."""
    if value is None:
        return MISSING
    return f"{int(value):,}"


def cycles_change(value) -> str:
    """A change in cycles, always signed: ``+32,768``, ``-7,970``, ``–``."""
    if value is None:
        return MISSING
    return f"{int(value):+,}"


def compiler(vela_version: str, npu: str, system_config: str, memory_mode: str) -> str:
    """The compiler settings a cycle count was made under, once per table that shows cycles:
    ``Vela 5.1.0 · ethos-u85-256 · Ethos_U85_SYS_DRAM_Mid · Sram_Only`` (a version not recorded, by a cost
    written before it was kept, reads ``Vela (version not recorded)``)."""
    return " · ".join((f"Vela {vela_version}" if vela_version else "Vela (version not recorded)", npu,
                       system_config, memory_mode))


def share(value) -> str:
    """A fraction as a percentage a user reads: ``27.0%``; ``–`` for none."""
    if value is None:
        return MISSING
    return f"{float(value):.1%}"


def seconds(value) -> str:
    """A duration a user reads: ``0.4 s``, ``12 s``."""
    if value is None:
        return MISSING
    value = float(value)
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def plot_db(value) -> float:
    """An SQNR (or a difference) as a plot draws it: infinities at +-``PLOT_LIMIT_DB``, no number
    as NaN (matplotlib leaves it out)."""
    if value is None:
        return math.nan
    value = float(value)
    if math.isnan(value):
        return math.nan
    return max(-PLOT_LIMIT_DB, min(PLOT_LIMIT_DB, value))
