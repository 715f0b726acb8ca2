"""Records as data: JSON's floats, JSON-ready values, and a record's tables as pandas DataFrames.

Writing a record's numbers for a reader (dB, seconds, tables, pages) is the presentation's
(``_base/formats.py``, and the presentation, ``_present``); this is what every record needs to be data: its ``to_dict()`` and its
``to_dataframe()``.
"""

from __future__ import annotations

import math

from ..errors import InspectorError, quoted

# The format of the JSON documents the inspector writes (analyses, comparisons, attributions, bits, sweeps):
# 2 since a rule is called a rule in them ("rule", "rules"); format 1 said "policy", "policies", and
# every reader still reads it (docs/words.md).
FORMAT = 2


def check_format(data: dict, what: str) -> int:
    """The format ``data`` says it is written in (1 when it does not say); one line for a newer one."""
    found = data.get("format", 1)
    if isinstance(found, bool) or not isinstance(found, int) or not 1 <= found <= FORMAT:
        raise InspectorError(f"this {what} is in format {quoted(found)}, which this inspector does not read "
                             f"(it reads formats 1 to {FORMAT}): update fold-inspector")
    return found


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


def dataframe(kind: str, tables: dict):
    """The pandas DataFrame of one of a record's tables: ``tables`` maps each table's name to a
    function giving its rows (dicts, the columns of the record's JSON rows); an unknown name is a
    one-line error naming the choices."""
    import pandas as pd  # lazy: pandas is only for the notebook user's tables

    if kind not in tables:
        raise InspectorError(f"unknown table {quoted(kind)}; choose {' or '.join(tables)}")
    return pd.DataFrame.from_records(tables[kind]())


__all__ = ["FORMAT", "check_format", "dataframe", "json_float", "jsonable"]
