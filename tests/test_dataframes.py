"""pandas is the notebook user's table: every result record's ``to_dataframe()`` has its JSON's rows
as rows and its JSON's fields as columns."""

from __future__ import annotations

import math

import pytest

import inspector
from inspector import Bits, Sweep
from inspector._numbers.bits import BitsChange
from inspector._sweep.records import SweepModel, SweepRow, SweepVariant
from inspector._base.data import jsonable


def _same(frame, rows, lead=()):
    """The frame has one row per JSON row, the JSON row's fields as columns (after ``lead``), and the
    same values once written as JSON (the frame keeps inf and NaN as floats)."""
    assert len(frame) == len(rows) and rows, "compare on a record with rows"
    assert list(frame.columns) == [*lead, *rows[0]], (list(frame.columns), list(rows[0]))
    for record, row in zip(frame.to_dict("records"), rows):
        # pandas writes a missing cell (None) as NaN in some columns; the JSON says null
        cells = {k: None if row[k] is None and isinstance(record[k], float) and math.isnan(record[k]) else record[k]
                 for k in row}
        assert jsonable(cells) == jsonable(row)


def test_analysis():
    analysis = inspector.analyze("sample:stateful_conv_mul")
    _same(analysis.to_dataframe(), analysis.to_dict()["sites"])


def test_bits():
    changes = (BitsChange(change="fold off", kind="model", node=None, variant="off", sqnr_db=31.5, recovered_db=1.5),
               BitsChange(change="keep in float", kind="entry point", node="mul", variant="float mul",
                          sqnr_db=math.inf, recovered_db=math.inf),
               BitsChange(change="16-bit activations", kind="model", node=None, variant="a16w8", sqnr_db=None,
                          recovered_db=None, error="one-line failure"))
    bits = Bits(target="m", steps=3, baseline="upstream", baseline_sqnr_db=30.0, changes=changes)
    _same(bits.to_dataframe(), bits.to_dict()["changes"])


def _sweep() -> Sweep:
    rows = (SweepRow(target="m", stage="tfa", rule="upstream", sites=1, folded=("s",)),
            SweepRow(target="m", stage="tfa", rule="rule", sites=1, skipped=("s",),
                     reasons={"s": ("feeds-buffer-mutation",)}))
    variants = tuple(SweepVariant(target="m", variant=p, rule=p, steps=3, sqnr_db_last=v, sqnr_db_worst=v,
                                  timings={"run": 1.0})
                     for p, v in (("upstream", 38.7), ("rule", math.inf)))
    return Sweep(rules=("upstream", "rule"), stages=("tfa",), steps=3, models=(SweepModel(target="m"),), rows=rows,
                 variants=variants)


def test_sweep():
    sweep = _sweep()
    data = sweep.to_dict()
    # variants: the JSON's rows without what is not a cell (timings, outputs)
    _same(sweep.to_dataframe("variants"), [{k: v for k, v in r.items() if k not in ("timings", "outputs")}
                                               for r in data["variants"]])
    # rows: one per JSON row, the site lists counted, the rule's SQNR beside it
    frame = sweep.to_dataframe("rows")
    assert [(r["target"], r["stage"], r["rule"]) for r in frame.to_dict("records")] == \
        [(r["target"], r["stage"], r["rule"]) for r in data["rows"]]
    assert list(frame["folded"]) == [len(r["folded"]) for r in data["rows"]]
    assert list(frame["sqnr_db_last"]) == [38.7, math.inf]
    changed = sweep.to_dataframe("changed")
    assert len(changed) == len(data["changed"]) == 1 and changed["site"][0] == data["changed"][0]["site"]


@pytest.fixture(scope="module")
def compared():
    comparison = inspector.compare("sample:conv_mul_scalar", variants=("off", "upstream"), steps=1, workers=1)
    return comparison, inspector.attribution(comparison)


@pytest.mark.requires_tosa
def test_comparison(compared):
    comparison, _ = compared
    data = comparison.to_dict()
    _same(comparison.to_dataframe(), [m for v in data["variants"] for m in v["metrics"]], lead=("variant",))
    assert list(comparison.to_dataframe()["variant"]) == [v["variant"]["label"] for v in data["variants"]
                                                         for _ in v["metrics"]]
    _same(comparison.to_dataframe("variants"), data["variants"])


@pytest.mark.requires_tosa
def test_attribution(compared):
    _, attribution = compared
    data = attribution.to_dict()
    for kind in ("nodes", "entry_points"):
        frame = attribution.to_dataframe(kind)
        _same(frame, [n for v in data["variants"] for n in v[kind]], lead=("variant",))
        assert list(frame["variant"]) == [v["label"] for v in data["variants"] for _ in v[kind]]
    _same(attribution.to_dataframe("sites"), data["sites"])
    with pytest.raises(inspector.InspectorError, match="unknown table"):
        attribution.to_dataframe("edges")
