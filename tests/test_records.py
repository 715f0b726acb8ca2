"""Records are built by keyword and read back by one codec (inspector/_base/codec.py).

Every record the inspector writes (found by scanning the package, not listed here) survives
``to_dict -> json -> from_dict`` unchanged; a record that gains a field still reads the dicts written before it;
and no call in the core or the widget builds a class from more than three positional arguments, where a new
field would shift a value into the wrong slot without an error.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import json
import pathlib
import pkgutil
import types
import typing
from dataclasses import dataclass

import pytest

import inspector
from inspector._base import codec
from inspector._base.codec import Record
from inspector._base.data import FORMAT
from inspector._cost.accelerators import Accelerator, accelerators
from inspector._numbers.engines import SIMULATION, Engine
from inspector._rules.rules import Rule, rules

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_POSITIONAL = 3  # more than this many positional arguments to a class is refused (test_no_class_is_built_...)


def _modules():
    for info in pkgutil.walk_packages(inspector.__path__, "inspector."):
        yield importlib.import_module(info.name)


def _records() -> list[type]:
    """Every record with a dict form in the inspector (a ``Record``), and every dataclass its fields hold."""
    found = {obj for module in _modules() for obj in vars(module).values()
             if isinstance(obj, type) and dataclasses.is_dataclass(obj) and issubclass(obj, Record)}
    todo = list(found)
    while todo:
        for f in codec._spec(todo.pop()).fields:
            for hint in _leaves(f.hint):
                if isinstance(hint, type) and dataclasses.is_dataclass(hint) and hint not in found \
                        and codec._registered(hint) is None:
                    found.add(hint)
                    todo.append(hint)
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


def _leaves(hint):
    args = typing.get_args(hint)
    return [hint] if not args else [x for a in args for x in _leaves(a)]


# Values a record checks when it is made or read (a registered name, a choice of the screen): the rest is built
# from the field's type alone.
CHECKED = {
    "Variant": {"overrides": (("conv@models.py:1", "float"),), "quantization": "a8w8"},
    "Session": {"stage": "tfa", "rule": "upstream", "variants": ("upstream", "off"), "quantizations": ("a8w8",),
                "accelerator": "tosa-int", "graph_view": "before", "graph_scope": "whole",
                "results_for": ("tfa", "upstream", ("m",))},
    "Comparison": {"steps": 1},  # its reader checks every (step, output) is there: one step, output 0 at step 0
    "Metrics": {"output": 0, "step": 0, "values": (("sqnr", 30.5), ("max-abs", 0.25))},
    "Advice": {"metric": "sqnr"},
    "Layer": {"access_cycles": (("sram", 3), ("dram", 4))},  # per memory, in the order of MEMORIES
    "Cost": {"traffic": (("sram", 5),), "memory_used": (("dram", 6),)},
}


def _value(hint, owner: str, depth: int = 0):
    """A value of type ``hint`` that is not the field's default (so that writing it is exercised)."""
    if hint is typing.Any or hint is object:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return _value(next(a for a in args if a is not type(None)), owner, depth)
    if hint is Engine:
        return SIMULATION
    if isinstance(hint, type) and issubclass(hint, Accelerator):
        return accelerators.get("ethos-u55-128")
    if hint is Rule:
        return rules.get("state-aware")
    if hint is bool:
        return True
    if hint is int:
        return 7
    if hint is float:
        return float("inf") if depth % 2 else -2.5  # inf: JSON cannot hold it, the codec writes "inf"
    if hint is str:
        return f"{owner.lower()}-text"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return list(hint)[-1]
    if isinstance(hint, type) and issubclass(hint, pathlib.PurePath):
        return hint("/tmp/records/x.json")
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, depth + 1)
    if hint is tuple or hint is dict:
        return hint()
    if origin is tuple:
        if codec._pairs_of(hint) is not None:
            return (("k", _value(codec._pairs_of(hint), owner, depth + 1)),)
        if len(args) == 2 and args[1] is Ellipsis:
            return (_value(args[0], owner, depth + 1),)
        return tuple(_value(a, owner, depth + 1) for a in args)
    if origin is dict:
        return {"k": _value(args[1], owner, depth + 1)}
    raise AssertionError(f"no test value for {hint!r} in {owner}")


def _build(cls: type, depth: int = 0):
    values = {}
    for f in codec._spec(cls).fields:
        if not f.how.kept:
            continue  # not in the dict form: the record read back has its default
        values[f.name] = CHECKED.get(cls.__name__, {}).get(f.name, _value(f.hint, cls.__name__, depth))
    return cls(**values)


RECORDS = _records()


def test_the_scan_finds_the_records():
    names = {c.__name__ for c in RECORDS}
    assert {"Comparison", "VariantResult", "Variant", "Cost", "Layer", "Advice", "Point", "Attribution", "Bits",
            "Journey", "Session", "Verdict", "QParams", "SiteOutcome"} <= names, names
    assert len(RECORDS) >= 40


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: f"{c.__module__.rsplit('.', 1)[-1]}.{c.__qualname__}")
def test_every_record_round_trips(cls):
    record = _build(cls)
    data = codec.to_dict(record) if not hasattr(cls, "to_dict") else record.to_dict()
    text = json.dumps(data, allow_nan=False)  # JSON-ready: no inf or nan left as numbers
    read = (cls.from_dict if hasattr(cls, "from_dict") else lambda d: codec.from_dict(cls, d))(json.loads(text))
    assert read == record
    again = read.to_dict() if hasattr(read, "to_dict") else codec.to_dict(read)
    assert again == data  # what is written but not compared (a digest kept for outputs not kept) survives too


def test_every_record_is_built_by_keyword():
    """A record's fields are keyword-only, but for the few a user writes positionally in the docs
    (``Variant("upstream")``, ``Skip("code", "why")``, ``Accelerator(name, help, ...)``, ``Stream(frames)``)."""
    positional = {c.__name__: [f.name for f in dataclasses.fields(c) if f.init and not f.kw_only] for c in RECORDS}
    assert {k: v for k, v in positional.items() if v} == {"Variant": ["rule"]}


# ---------------------------------------------------------------- a record that gains a field


@dataclass(frozen=True, kw_only=True)
class Reading(Record):
    """A record as first written."""

    name: str
    value: float
    where: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, kw_only=True)
class ReadingWithUnit(Record):
    """The same record, a field added in the middle (where a positional call would shift ``value``)."""

    name: str
    unit: str = "dB"
    value: float
    where: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, kw_only=True)
class ReadingWithSource(Record):
    """The same record, a field added that has no default: an old dict cannot say it."""

    name: str
    source: str
    value: float
    where: tuple[tuple[str, int], ...] = ()


def test_a_new_field_keeps_the_round_trip_and_reads_old_dicts():
    old = Reading(name="sqnr", value=31.5, where=(("conv", 2),)).to_dict()
    assert old == {"name": "sqnr", "value": 31.5, "where": {"conv": 2}}
    new = ReadingWithUnit(name="sqnr", unit="steps", value=31.5, where=(("conv", 2),))
    assert ReadingWithUnit.from_dict(json.loads(json.dumps(new.to_dict()))) == new
    assert ReadingWithUnit.from_dict(old) == ReadingWithUnit(name="sqnr", value=31.5, where=(("conv", 2),))
    assert ReadingWithUnit.from_dict(old).unit == "dB"  # the default, and ``value`` stays the value
    with pytest.raises(TypeError):
        ReadingWithUnit("sqnr", "dB", 31.5)  # the point: positions are refused


def test_an_old_dict_without_a_needed_field_is_refused_in_one_line():
    old = Reading(name="sqnr", value=31.5).to_dict()
    with pytest.raises(KeyError) as caught:
        ReadingWithSource.from_dict(old)
    assert str(caught.value) == "'source'" and "\n" not in str(caught.value)


def test_a_wrong_field_is_refused_naming_it():
    with pytest.raises(TypeError, match=r"^Reading\.value: expected a number, got list$"):
        Reading.from_dict({"name": "sqnr", "value": [1]})
    with pytest.raises(ValueError, match="unknown key 'unit'"):  # a dict of a newer record is not read as this one
        Reading.from_dict({"name": "sqnr", "value": 1.0, "unit": "dB"})
    with pytest.raises(KeyError, match="'value'"):  # a dict of something else: the first field it lacks
        Reading.from_dict({"name": "sqnr", "valu": 1.0})


def test_a_newer_format_is_refused_in_one_line():
    comparison = _build(inspector.Comparison)
    data = comparison.to_dict()
    assert data["format"] == FORMAT and list(data)[0] == "format"
    with pytest.raises(inspector.InspectorError, match=f"in format {FORMAT + 1}, which this inspector does not"):
        inspector.Comparison.from_dict({**data, "format": FORMAT + 1})
    assert inspector.Comparison.from_dict({k: v for k, v in data.items() if k != "format"}) == comparison  # 1


# ---------------------------------------------------------------- no class built from many positions


def positional_calls(source: str, limit: int = MAX_POSITIONAL) -> list[tuple[int, str, int]]:
    """(line, name, count) of each call of a capitalised name (a class) with more than ``limit`` positional
    arguments (a starred argument counts as many: it is positional and its length unseen)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        count = sum(limit + 1 if isinstance(a, ast.Starred) else 1 for a in node.args)
        if name[:1].isupper() and count > limit:
            found.append((node.lineno, name, count))
    return found


def test_no_class_is_built_from_more_than_three_positional_arguments():
    found = [f"{path.relative_to(ROOT)}:{line}: {name} with {count}"
             for folder in ("inspector", "widgets") for path in sorted((ROOT / folder).rglob("*.py"))
             for line, name, count in positional_calls(path.read_text())]
    assert found == [], "build records by keyword:\n" + "\n".join(found)


def test_the_positional_scan_catches_a_planted_call():
    planted = ("from inspector._cost.records import Layer\n"
               "def make(rows):\n"
               "    ok = Layer(delegate=0, name='a', operator='Conv2D', target='NPU', cycles=1, npu_cycles=1,\n"
               "               access_cycles=(), macs=0, node=None)\n"
               "    small = Fraction(1, 2)\n"
               "    return ok, small, Layer(0, 'a', 'Conv2D', 'NPU', 1, 1, (), 0, None), Cost(*rows)\n")
    assert positional_calls(planted) == [(6, "Layer", 9), (6, "Cost", 4)]
