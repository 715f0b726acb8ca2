"""Records as data: JSON's floats, JSON-ready values, and a record's tables as pandas DataFrames.

Writing a record's numbers for a reader (dB, seconds, tables, pages) is the presentation's
(``_base/formats.py``, and the presentation, ``present``); this is what every record needs to be data: its ``to_dict()`` and its
``to_dataframe()``.
"""

from __future__ import annotations

import math

from .errors import InspectorError, quoted

# The one save-format version of everything the inspector writes: JSON documents (analyses, comparisons,
# attributions, bits, sweeps, advice), sessions and the sweep's records in a result store. 3: a comparison's
# measurements by name (a user's measurement under its own key), a cost's Vela version, an advice's price check;
# 2: a rule is called a rule ("rule", "rules"); 1 said "policy", "policies". Every reader reads 1 to FORMAT
# (docs/words.md).
FORMAT = 3
READS = tuple(range(1, FORMAT + 1))  # the versions every reader reads


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


# The field readers of every record's ``from_dict``: each raises TypeError on a field of the wrong kind,
# so a file that is not what it says is refused, field by field.


def read_float(v) -> float:
    """A number (or the strings JSON writes for inf, -inf and nan)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise TypeError(f"expected a number, got {type(v).__name__}")
    return float(v)  # float("inf") / float("-inf") / float("nan") read the strings back


def read_int(v) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"expected an integer, got {type(v).__name__}")
    return v


def read_str(v, optional: bool = False) -> str | None:
    if v is None and optional:
        return None
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {type(v).__name__}")
    return v


def read_list(v) -> list:
    if not isinstance(v, list):
        raise TypeError(f"expected a list, got {type(v).__name__}")
    return v


def read_fields(d, cls, extra=frozenset()) -> dict:
    """``d`` is an object with exactly the fields of the dataclass ``cls`` (and ``extra``, written for readers)."""
    if not isinstance(d, dict):
        raise TypeError(f"expected an object, got {type(d).__name__}")
    if set(d) != set(cls.__dataclass_fields__) | set(extra):
        raise ValueError(f"not the fields of a {cls.__name__}")
    return d


def renamed(data: dict, key: str, old: str):
    """``data[key]``, or in a file written before the key was renamed (format 1), ``data[old]``."""
    return data[key] if key in data or old not in data else data[old]


__all__ = ["FORMAT", "READS", "check_format", "dataframe", "json_float", "jsonable", "read_fields", "read_float", "read_int",
           "read_list", "read_str", "renamed"]
