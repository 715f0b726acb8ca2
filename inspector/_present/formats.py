"""How every number a user reads is written, once: dB, quantization steps, seconds; the plot's
ceiling for an infinite SQNR; JSON's floats; one Markdown table; one HTML page; GitHub's comment
limit. Reports, the CLI, the sweep, ``bits`` and the widget's tables all call these, so a number
reads the same everywhere and a change is made here only.
"""

from __future__ import annotations

import html
import math

MISSING = "–"  # a number that is not there (not run, failed, not measured)
GITHUB_COMMENT_LIMIT = 65_536  # characters in one GitHub comment
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
    return format(value, spec)


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


def json_float(v: float):
    """JSON has no inf or NaN: they are written as the strings "inf", "-inf", "nan"."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def jsonable(data):
    """``data`` with every float JSON can hold (``json_float``), tuples as lists."""
    if isinstance(data, float):
        return json_float(data)
    if isinstance(data, dict):
        return {k: jsonable(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [jsonable(v) for v in data]
    return data


def markdown_table(header, rows) -> list[str]:
    """A GitHub Markdown table as lines: the header, the rule, one line per row. Cells are written
    as given: escaping model-derived text (``report.md_code``) is the caller's."""
    return (["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
            + ["| " + " | ".join(row) + " |" for row in rows])


_STYLE = ("body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}svg{max-width:100%;height:auto}"
          "pre{background:#f6f8fa;padding:6px}")


def page(title: str, body: str, style: str = "") -> str:
    """A self-contained HTML page around ``body`` (already HTML); ``title`` is escaped here."""
    return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>\n"
            f"<style>{_STYLE}{style}</style></head>\n<body>{body}\n</body></html>\n")


def dataframe(kind: str, tables: dict):
    """The pandas DataFrame of one of a record's tables: ``tables`` maps each table's name to a
    function giving its rows (dicts, the columns of the record's JSON rows); an unknown name is a
    one-line error naming the choices."""
    import pandas as pd

    from ..errors import InspectorError, quoted

    if kind not in tables:
        raise InspectorError(f"unknown table {quoted(kind)}; choose {' or '.join(tables)}")
    return pd.DataFrame.from_records(tables[kind]())
