"""Files written before a rule was called a rule in them (main 2c932db, format 1: "policy") still read, and
give the same results: a session, a comparison and an attribution kept as JSON, a sweep's folder.

The fixtures in tests/data/written_by_2c932db/ were written by that commit (a session saved by the widget
with a simulated comparison in it, that comparison's and its attribution's ``to_dict()``, and a sweep of two
samples with ``out=``); nothing in them was written by the code under test.
"""

from __future__ import annotations

import json
import shutil

import pytest

import inspector
from conftest import ROOT
from inspector._base import store as _store
from inspector._base.data import FORMAT
from inspector._sweep.records import SweepRow, SweepVariant

OLD = ROOT / "tests" / "data" / "written_by_2c932db"
SITE = "conv@models.py:149"


def _old(name: str) -> dict:
    return json.loads((OLD / name).read_text())


def test_the_fixtures_are_in_the_old_format():
    """What the readers must cope with: the old word, and no format field."""
    session, comparison, attribution, swept = (_old(n) for n in ("session.json", "comparison.json",
                                                                 "attribution.json", "sweep.json"))
    assert session["version"] == 1 and "policy" in session and "rule" not in session
    assert all("policy" in v["variant"] and "rule" not in v["variant"] for v in comparison["variants"])
    assert "format" not in comparison and all("policy" in v for v in attribution["variants"])
    assert "policies" in swept and all("policy" in r for r in swept["rows"])


def test_an_old_session_reads_and_saves_in_the_new_format(tmp_path):
    session = inspector.Session.read(OLD / "session.json")
    assert session.rule == "state-aware" and session.markers == (SITE,) and session.results_for[1] == "state-aware"
    labels = [r.variant.label for r in session.results.results]
    assert labels == ["off", "upstream", f"state-aware+marked({SITE})"]
    assert [r.variant.rule.name for r in session.results.results] == ["off", "upstream", "state-aware"]
    assert session.results.results[2].variant.rule is inspector.rules.get("state-aware")
    saved = json.loads(session.save(tmp_path / "again.json").read_text())
    assert saved["version"] == FORMAT and saved["rule"] == "state-aware" and "policy" not in saved
    assert all("rule" in v["variant"] and "policy" not in v["variant"] for v in saved["results"]["variants"])
    assert inspector.Session.read(tmp_path / "again.json") == session


def test_an_old_session_opens_the_same_screen():
    from widgets import FoldInspector

    app = FoldInspector.load_session(OLD / "session.json")
    assert app.last_error is None and app.analysis.rule.name == "state-aware" and app.analysis.markers == (SITE,)
    assert app.selected == SITE and app.comparison is not None
    old = _old("session.json")["results"]["variants"]
    assert [[m["sqnr_db"] for m in r.to_dict()["metrics"]] for r in app.comparison.results] == \
        [[m["sqnr_db"] for m in v["metrics"]] for v in old]


def test_an_old_comparison_reads_and_its_numbers_are_computed_again_the_same():
    """The comparison a user kept reads back, and the same question asked now gives its numbers."""
    old = _old("comparison.json")
    kept = inspector.Comparison.from_dict(old)
    assert [r.variant.label for r in kept.results] == [v["variant"]["label"] for v in old["variants"]]
    again = inspector.compare("sample:stateful_conv_mul", [r.variant for r in kept.results], steps=kept.steps,
                              engine="simulation", workers=1)
    assert again.calibration == kept.calibration
    for now, then in zip(again.results, kept.results):
        assert [m.sqnr_db for m in now.metrics] == [m.sqnr_db for m in then.metrics], now.variant.label
        assert now.folds == then.folds and [s.folded_at for s in now.sites] == [s.folded_at for s in then.sites]
    written = again.to_dict()
    assert written["format"] == FORMAT and all("rule" in v["variant"] for v in written["variants"])


def test_an_old_attribution_reads():
    old = _old("attribution.json")
    kept = inspector.Attribution.from_dict(old)
    assert [v.rule for v in kept.variants] == [v["policy"] for v in old["variants"]]
    assert kept.variant("state-aware").label == f"state-aware+marked({SITE})"
    assert all("rule" in v and "policy" not in v for v in kept.to_dict()["variants"])


def _old_entries() -> dict[str, dict]:
    """The sweep folder's entries as written (their signatures checked with the folder's own secret; the
    environment they were written in is another inspector's, so the store itself never answers with them)."""
    secret = (OLD / "sweep" / "secret").read_bytes()
    out = {}
    for path in sorted((OLD / "sweep" / "entries").glob("sweep-*.entry")):
        raw, name = path.read_bytes(), path.name.removesuffix(".entry")
        start = len(_store.MAGIC) + 32
        assert raw[len(_store.MAGIC):start] == _store.Store._mac(secret, name, raw[start:])
        size = int.from_bytes(raw[start:start + 8], "big")
        out[name] = json.loads(raw[start + 8:start + 8 + size])["data"]
    return out


def test_an_old_sweep_folders_records_read():
    """Every row and variant the old sweep kept reads back through this version's readers (rule, rule-off)."""
    entries = _old_entries()
    rows = [SweepRow.from_dict(e["row"]) for n, e in entries.items() if n.startswith("sweep-row-")]
    variants = [SweepVariant.from_dict({"target": "kept", **e["variant"]})
                for n, e in entries.items() if n.startswith("sweep-variant-")]
    assert len(rows) == 4 and len(variants) == 4
    old = _old("sweep.json")
    assert sorted((r.target, r.rule, r.folded) for r in rows) == \
        sorted((r["target"], r["policy"], tuple(r["folded"])) for r in old["rows"])
    assert sorted((v.variant, v.sqnr_db_last) for v in variants) == \
        sorted((v["variant"], v["sqnr_db_last"]) for v in old["variants"])
    legacy = SweepRow.from_dict({"target": "m", "stage": "tfa", "policy": "off", "sites": 1, "folded": [],
                                 "skipped": ["s"], "reasons": {"s": ["policy-off"]}})
    assert legacy.rule == "off" and legacy.reasons == {"s": ("rule-off",)}


@pytest.mark.own_store
def test_an_old_sweep_folder_gives_the_same_table(tmp_path):
    """A sweep run again into the old folder gives the table the old sweep wrote (its entries are another
    inspector's: computed again, and kept beside them)."""
    folder = tmp_path / "sweep"
    shutil.copytree(OLD / "sweep", folder)
    (folder / "secret").chmod(0o600)  # git keeps 0644; the store trusts only a private secret
    old = _old("sweep.json")
    result = inspector.sweep(["sample:stateful_conv_mul", "sample:conv_mul_chain"], rules=("upstream", "state-aware"),
                             stages=("tfa",), steps=2, engine="simulation", workers=1, out=folder)
    new = result.to_dict()
    assert new["format"] == FORMAT and new["rules"] == old["policies"]
    assert [(r["target"], r["rule"], r["folded"], r["reasons"]) for r in new["rows"]] == \
        [(r["target"], r["policy"], r["folded"], r["reasons"]) for r in old["rows"]]
    assert [(v["variant"], v["sqnr_db_last"], v["sqnr_db_worst"]) for v in new["variants"]] == \
        [(v["variant"], v["sqnr_db_last"], v["sqnr_db_worst"]) for v in old["variants"]]
    assert new["summary"] == old["summary"]
