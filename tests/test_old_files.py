"""Files written before a rule was called a rule in them (main 2c932db, format 1: "policy") still read, and
give the same results on the release they were computed on: a session, a comparison and an attribution kept as
JSON, a sweep's folder.

The fixtures in tests/data/written_by_2c932db/ were written by that commit (a session saved by the widget
with a simulated comparison in it, that comparison's and its attribution's ``to_dict()``, and a sweep of two
samples with ``out=``); nothing in them was written by the code under test. They name the executorch they were
computed on (the comparison in its upstream rule's source, the sweep's entries in their environment): the main
lock's. Computed again on that release series their numbers must be exactly the same; on another release the
variants, sites and decisions must be, while the numbers are that release's own (executorch 1.4's quantized
stateful_conv_mul is much worse, in ExecuTorch's own flow too), named as such and checked to differ.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

import inspector
from conftest import INSTALLED_EXECUTORCH, MAIN_EXECUTORCH, ROOT, release_of
from inspector._base import store as _store
from inspector._base.data import FORMAT
from inspector._sweep.records import SweepRow, SweepVariant

OLD = ROOT / "tests" / "data" / "written_by_2c932db"
SITE = "conv@models.py:149"


def _old(name: str) -> dict:
    return json.loads((OLD / name).read_text())


def _release_named(text: str) -> str:
    """The executorch release a record names: "the installed pass (executorch 1.5.1)", "...|executorch 1.5.1|..."."""
    found = re.findall(r"\bexecutorch ([0-9][^\s|)]*)", text)
    assert len(set(found)) == 1, f"not one executorch release named in {text!r}"
    return found[0]


def _on_the_release_of(version: str) -> bool:
    """Whether the installed executorch is of the release series ``version`` is (where its numbers are exact)."""
    return release_of(INSTALLED_EXECUTORCH) == release_of(version)


def test_the_fixtures_are_in_the_old_format():
    """What the readers must cope with: the old word, and no format field."""
    session, comparison, attribution, swept = (_old(n) for n in ("session.json", "comparison.json",
                                                                 "attribution.json", "sweep.json"))
    assert session["version"] == 1 and "policy" in session and "rule" not in session
    assert all("policy" in v["variant"] and "rule" not in v["variant"] for v in comparison["variants"])
    assert "format" not in comparison and all("policy" in v for v in attribution["variants"])
    assert "policies" in swept and all("policy" in r for r in swept["rows"])


def test_the_fixtures_name_the_main_locks_executorch():
    """The comparison and the sweep's entries were computed on the main lock's executorch: CI's whole suite, on
    that lock, checks their numbers exactly."""
    assert _release_named(_old("comparison.json")["rules"]["upstream"]["source"]) == MAIN_EXECUTORCH
    assert {_release_named(env) for env, _ in _entries(OLD / "sweep").values()} == {MAIN_EXECUTORCH}


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


def test_an_old_comparison_reads_and_its_numbers_are_computed_again():
    """The comparison a user kept reads back, and the same question asked now gives its variants, sites and
    decisions; on the release it was computed on, exactly its numbers; on another release, numbers that name
    that release and differ from the kept ones."""
    old = _old("comparison.json")
    written_with = _release_named(old["rules"]["upstream"]["source"])
    kept = inspector.Comparison.from_dict(old)
    assert [r.variant.label for r in kept.results] == [v["variant"]["label"] for v in old["variants"]]
    again = inspector.compare("sample:stateful_conv_mul", variants=[r.variant for r in kept.results], steps=kept.steps,
                              engine="simulation", workers=1)
    assert again.calibration == kept.calibration
    assert [r.variant.label for r in again.results] == [r.variant.label for r in kept.results]
    for now, then in zip(again.results, kept.results):
        assert now.folds == then.folds, now.variant.label
        assert [(s.site_id, s.folded_at) for s in now.sites] == [(s.site_id, s.folded_at) for s in then.sites]
        assert [(m.step, m.output) for m in now.metrics] == [(m.step, m.output) for m in then.metrics]
    written = again.to_dict()
    assert written["format"] == FORMAT and all("rule" in v["variant"] for v in written["variants"])
    assert _release_named(written["rules"]["upstream"]["source"]) == INSTALLED_EXECUTORCH

    def sqnr(c):
        return [[m.sqnr_db for m in r.metrics] for r in c.results]

    if _on_the_release_of(written_with):
        for now, then in zip(again.results, kept.results):
            assert [m.sqnr_db for m in now.metrics] == [m.sqnr_db for m in then.metrics], now.variant.label
    else:
        assert sqnr(again) != sqnr(kept), \
            (f"executorch {INSTALLED_EXECUTORCH} gives exactly the numbers {written_with} wrote: the release "
             "difference is gone, so check them exactly on both")


def test_an_old_attribution_reads():
    old = _old("attribution.json")
    kept = inspector.Attribution.from_dict(old)
    assert [v.rule for v in kept.variants] == [v["policy"] for v in old["variants"]]
    assert kept.variant("state-aware").label == f"state-aware+marked({SITE})"
    assert all("rule" in v and "policy" not in v for v in kept.to_dict()["variants"])


def _entries(folder) -> dict[str, tuple[str, dict]]:
    """A sweep folder's sweep entries as written: name -> (the environment that wrote it, its data), each
    signature checked with the folder's own secret (read here, not through the store, which never answers
    with another environment's entries)."""
    secret = (folder / "secret").read_bytes()
    out = {}
    for path in sorted((folder / "entries").glob("sweep-*.entry")):
        raw, name = path.read_bytes(), path.name.removesuffix(".entry")
        start = len(_store.MAGIC) + 32
        assert raw[len(_store.MAGIC):start] == _store.Store._mac(secret, name, raw[start:])
        size = int.from_bytes(raw[start:start + 8], "big")
        header = json.loads(raw[start + 8:start + 8 + size])
        out[name] = (header["environment"], header["data"])
    return out


def test_an_old_sweep_folders_records_read():
    """Every row and variant the old sweep kept reads back through this version's readers (rule, rule-off)."""
    entries = {name: data for name, (_, data) in _entries(OLD / "sweep").items()}
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
    """A sweep run again into the old folder gives the rows and decisions the old sweep wrote (its entries are
    another inspector's: computed again, and kept beside them, each new one naming the executorch it ran on);
    on the release it was computed on, exactly its numbers; on another release, numbers that differ."""
    folder = tmp_path / "sweep"
    shutil.copytree(OLD / "sweep", folder)
    (folder / "secret").chmod(0o600)  # git keeps 0644; the store trusts only a private secret
    old = _old("sweep.json")
    kept = _entries(folder)
    (written_with,) = {_release_named(env) for env, _ in kept.values()}
    result = inspector.sweep(["sample:stateful_conv_mul", "sample:conv_mul_chain"], rules=("upstream", "state-aware"),
                             stages=("tfa",), steps=2, engine="simulation", workers=1, out=folder)
    new = result.to_dict()
    assert new["format"] == FORMAT and new["rules"] == old["policies"]
    assert [(r["target"], r["rule"], r["folded"], r["reasons"]) for r in new["rows"]] == \
        [(r["target"], r["policy"], r["folded"], r["reasons"]) for r in old["rows"]]
    assert [(v["target"], v["variant"]) for v in new["variants"]] == [(v["target"], v["variant"]) for v in old["variants"]]
    assert new["summary"] == old["summary"]
    assert result.reused == 0
    # The sweep's table names no release; each entry it kept in the folder does, in its environment.
    fresh = {name: env for name, (env, _) in _entries(folder).items() if name not in kept}
    assert fresh and {_release_named(env) for env in fresh.values()} == {INSTALLED_EXECUTORCH}

    def sqnr(d):
        return [(v["variant"], v["sqnr_db_last"], v["sqnr_db_worst"]) for v in d["variants"]]

    if _on_the_release_of(written_with):
        assert sqnr(new) == sqnr(old)
    else:
        assert sqnr(new) != sqnr(old), \
            (f"executorch {INSTALLED_EXECUTORCH} gives exactly the numbers {written_with} wrote: the release "
             "difference is gone, so check them exactly on both")
