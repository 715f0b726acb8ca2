"""The advice's search against a table of sets whose cycles do not add up (no lowering: a stand-in for compare).

On the models measured so far Vela's cycles of a set equal off minus the prices of its sites lowered alone, but
nothing promises it (fused activations, cascades, memory placement). Here the stand-in's cycles interact and its
rows lie (0, 0 and a negative price, as a fused mul's rows did): the advice must see that the prices do not add
up, price the sets it may pick on their own "lowering", and recommend the best of the sets measured so; no
measured set may beat it on both cycles and dB. tests/test_advise.py checks the same against the real thing.
"""

from __future__ import annotations

import re
import sys
from types import SimpleNamespace

import pytest

import inspector
from inspector._advise import advise as advise_module
from inspector._numbers.compare import variants_of

SITES = ("s1", "s2", "s3")
# folded set -> (worst dB, cycles): the pair s1+s2 saves far more than its sites alone, everything less
TABLE = {
    (): (30.0, 1000), ("s1",): (30.5, 900), ("s2",): (29.0, 950), ("s3",): (30.2, 980),
    ("s1", "s2"): (29.8, 700), ("s1", "s3"): (30.6, 880), ("s2", "s3"): (29.1, 930), ("s1", "s2", "s3"): (29.5, 820),
}
ROWS = {"s1": 0, "s2": 0, "s3": -50}  # what the rows said


def _folds(variant) -> tuple[str, ...]:
    rule = variant.rule
    if rule.name == "off":
        return ()
    if rule.check is None:  # upstream, state-aware without markers: everything folds
        return tuple(s for s in SITES if s not in variant.markers)
    return tuple(s for s in SITES if rule.check(SimpleNamespace(site=s)) is None)


class _Result:
    def __init__(self, variant, engine):
        self.variant, self.engine, self.error, self.cost_error, self.quantization = variant, engine, None, None, "a8w8"
        folded = _folds(variant)
        self.db, cycles = TABLE[folded]
        self.sites = tuple(SimpleNamespace(site_id=s, folded_at="tfa" if s in folded else None) for s in SITES)
        self.cost = SimpleNamespace(cycles=cycles, compiler="Vela (a stand-in)") if engine == "tosa" else None
        # a second measurement where lower is better and that orders the sets as SQNR does
        self.metrics = (SimpleNamespace(value=lambda name: {"sqnr": self.db, "max-abs": 40.0 - self.db}.get(name)),)

    def worst(self):
        return SimpleNamespace(sqnr_db=self.db)

    def overall(self, name):
        return self.metrics[0].value(name)


class _Comparison:
    def __init__(self, results):
        self.results, self.target = results, "fake"

    def result(self, name):
        return next(r for r in self.results if r.variant.rule.name == name)

    def tradeoff(self):
        return SimpleNamespace(sites=[SimpleNamespace(site=s, bought=ROWS[s], how="rows") for s in SITES])


@pytest.fixture
def runs(monkeypatch):
    """The stand-in for compare; records every set run on each engine."""
    seen = {"tosa": [], "simulation": []}

    def compare(target, variants, *, engine="tosa", **_):
        results = [_Result(v, engine) for v in variants_of(variants, None)]
        seen[engine] += [tuple(s.site_id for s in r.sites if s.folded_at) for r in results]
        return _Comparison(results)

    monkeypatch.setattr(advise_module, "compare", compare)
    monkeypatch.setattr(advise_module._load, "load",
                        lambda target, inputs=None: SimpleNamespace(name="fake", steps=lambda steps: steps or 1))
    # the stand-in target has no graph for the default steps' resolver to read: one step unless told
    monkeypatch.setattr(advise_module._stages, "steps_for", lambda target, steps: target.steps(steps))
    monkeypatch.setattr(advise_module, "_marked_by", lambda target, wanted, common: dict.fromkeys(wanted))
    return seen


@pytest.mark.parametrize("budget", [0.0, 1.0, 2.0, 100.0])
def test_prices_that_do_not_add_up_make_the_advice_price_its_picks_on_their_own_lowering(runs, budget):
    advice = inspector.advise("fake", accelerator="ethos-u55-128", budget_db=budget)
    assert advice.check.source == "lowered alone" and not advice.check.adds_up  # 170 alone against 180 in all
    lowered = {frozenset(f) for f in runs["tosa"]}
    best = max(TABLE[tuple(sorted(f))][0] for f in lowered)
    within = [f for f in lowered if TABLE[tuple(sorted(f))][0] >= best - budget]
    fewest = min(TABLE[tuple(sorted(f))][1] for f in within)
    r = advice.recommended
    assert r.measured and r.vela_cycles == fewest
    # the true best within the budget, over every set of the table (all 8 fit within the cap here)
    true_best = max(db for db, _ in TABLE.values())
    assert r.vela_cycles == min(c for db, c in TABLE.values() if db >= true_best - budget)
    assert not any(c <= r.vela_cycles and db >= r.tosa_db and (c < r.vela_cycles or db > r.tosa_db)
                   for db, c in (TABLE[tuple(sorted(f))] for f in lowered))
    for p in advice.points:  # a lowered point's cycles are Vela's; the others say they are predicted
        assert p.cycles_from == ("vela" if frozenset(p.folded) in lowered else "predicted")
    assert advice.lowerings == len(lowered)


def test_prices_that_add_up_are_trusted_and_the_pick_is_confirmed_once(runs, monkeypatch):
    additive = {f: (db, 1000 - sum({"s1": 100, "s2": 50, "s3": 20}[s] for s in f)) for f, (db, _) in TABLE.items()}
    monkeypatch.setattr(sys.modules[__name__], "TABLE", additive)
    monkeypatch.setattr(sys.modules[__name__], "ROWS", {"s1": 100, "s2": 50, "s3": 20})
    advice = inspector.advise("fake", accelerator="ethos-u55-128", budget_db=1.0)
    assert advice.check.source == "rows" and advice.check.adds_up and advice.check.summed == 170
    # the ends, then the search's most accurate set and the cheapest candidate within the budget: nothing else
    assert advice.lowerings <= 4
    best = max(db for db, _ in additive.values())
    assert advice.recommended.vela_cycles == min(c for db, c in additive.values() if db >= best - 1.0) == 850


@pytest.mark.parametrize("budget", [0.0, 1.0, 2.0])
def test_a_budget_in_a_measurement_where_lower_is_better_picks_as_its_mirror_in_sqnr(runs, budget):
    """max-abs here is 40 - SQNR: a budget of x in it is a budget of x dB, so the advice must be the same set."""
    by_sqnr = inspector.advise("fake", accelerator="ethos-u55-128", budget=("sqnr", budget))
    by_error = inspector.advise("fake", accelerator="ethos-u55-128", budget=("max-abs", budget))
    assert by_error.folded == by_sqnr.folded and by_error.metric == "max-abs" and by_error.budget == ("max-abs", budget)
    assert by_error.recommended.tosa_db == pytest.approx(40.0 - by_sqnr.recommended.tosa_db)
    assert by_error.best_db == pytest.approx(40.0 - by_sqnr.best_db)


@pytest.mark.parametrize("kwargs, message", [
    (dict(budget=("cycles", 1.0)), "a cost"),
    (dict(budget=("nope", 1.0)), "unknown measurement 'nope'"),
    (dict(budget=("sqnr", -1.0)), "budget_db is how many dB"),
    (dict(budget="sqnr"), "budget is (a measurement's name, an amount)"),
    (dict(budget=("sqnr", 1.0), budget_db=1.0), "give the budget once"),
])
def test_a_bad_budget_is_one_line(runs, kwargs, message):
    with pytest.raises(inspector.InspectorError, match=re.escape(message)) as info:
        inspector.advise("fake", accelerator="ethos-u55-128", **kwargs)
    assert "\n" not in str(info.value)
