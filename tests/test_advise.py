"""Which sites should fold (issue 43): the advice against every set measured directly.

On models with up to four sites the recommendation must be, among all 2^N sets each compared on the TOSA
reference model with Vela's cycles (``("state-aware", markers)``), one that saves the most cycles within the
budget; its numbers must equal a fresh TOSA comparison of its variant; the rule it keeps must load again in a new
process and fold exactly its sites.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

from pathlib import Path

import pytest

import inspector
from inspector._advise.keep import set_rule
from inspector._base.formats import cycles_change, db_change
from inspector._front import cli
from inspector.present.advice import headline

pytestmark = pytest.mark.requires_tosa

U55 = "ethos-u55-128"
U85 = "ethos-u85-256"
DATA = Path(__file__).parent / "data"
THREE = f"{DATA / 'three_sites.py'}:ThreeSites"
HELD_OUT = DATA / "held_out_advice.py"  # models the advice's code never saw: activations, residuals, a chain
# Models of up to three sites: one stateful (folding its one site is what keeps the state accurate), three sites that
# fold each on its own, and the held-out shapes (muls feeding relu, relu6, sigmoid, a residual add; after depthwise,
# 3x3 and 1x1 convs; a chain), on both Ethos-U families (the u85 chains a mul into its conv's operation).
CASES = [("sample:stateful_wide_scale", U55, 3), (THREE, U55, 1), (f"{HELD_OUT}:ReluReluNone", U55, 1),
         (f"{HELD_OUT}:ClampResidualSigmoid", U55, 1), (f"{HELD_OUT}:ChainAndWideScale", U55, 1),
         (f"{HELD_OUT}:ResidualTanhResidual", U85, 1)]


def _all_sets(target: str, steps: int, sites: tuple[str, ...], accelerator: str = U55):
    """Every set of ``sites`` measured directly: one TOSA comparison, each set a variant of a rule that folds
    exactly it (a file of its own; markers cannot pick every set: a marker skips each mul that reaches it). The sets
    as the pass really folded them (a chained mul folds only after the one before it)."""
    sets = [fold for k in range(len(sites) + 1) for fold in itertools.combinations(sites, k)]
    c = inspector.compare(target, variants=[set_rule(fold) for fold in sets], steps=steps, accelerator=accelerator)
    out = {}
    for r in c.results:
        assert r.error is None and r.cost is not None, r.error
        out[frozenset(s.site_id for s in r.sites if s.folded_at)] = (r.worst().sqnr_db, r.cost.cycles)
    return out


@pytest.mark.parametrize("target, accelerator, steps", CASES,
                         ids=["stateful_wide_scale", "three_sites", "relu_relu_none", "clamp_residual_sigmoid",
                              "chain_and_wide_scale", "residual_tanh_residual_u85"])
def test_the_advice_is_the_best_set_among_every_set_measured_directly(target, accelerator, steps):
    """The recommendation is what the real thing says is best: of all 2^N sets lowered and run on TOSA with Vela's
    cycles, the fewest cycles within the budget of the most accurate, and no set measured beats it on both axes."""
    first = inspector.advise(target, accelerator=accelerator, budget_db=0.0, steps=steps)
    sites = tuple(s.site for s in first.sites if s.reachable)
    assert 1 <= len(sites) <= 4 and first.search == "exhaustive"
    measured = _all_sets(target, steps, sites, accelerator)
    best = max(db for db, _ in measured.values())
    # the prices are read from the rows only where the rows add up to what upstream saves against off (Vela's own
    # table of the two ends), else each site is lowered alone
    ends = inspector.compare(target, variants=("off", "upstream"), steps=steps, accelerator=accelerator)
    folds = [s.site_id for s in ends.result("upstream").sites if s.folded_at]
    rows = sum(p.bought or 0 for p in ends.tradeoff().sites if p.site in folds)
    totals = ends.result("off").cost.cycles - ends.result("upstream").cost.cycles
    assert first.check.source == ("rows" if abs(rows - totals) <= 0.01 * abs(totals) else "lowered alone")
    for budget in (0.0, 1.0):
        advice = first if budget == 0.0 else inspector.advise(target, accelerator=accelerator, budget_db=budget,
                                                              steps=steps)
        within = {fold: (db, c) for fold, (db, c) in measured.items() if db >= best - budget}
        fewest = min(c for _, c in within.values())
        r = advice.recommended
        print(f"{target} on {accelerator} within {budget} dB: advice folds {advice.folded} at {r.vela_cycles} cycles, "
              f"{r.tosa_db:.3f} dB; the best within costs {fewest}; prices: {advice.check.how}")
        assert r.vela_cycles == fewest and r.tosa_db >= best - budget
        assert (r.tosa_db, r.vela_cycles) == measured[frozenset(advice.folded)]  # the same run, the same digits
        dominating = [fold for fold, (db, c) in measured.items()
                      if c <= r.vela_cycles and db >= r.tosa_db and (c < r.vela_cycles or db > r.tosa_db)]
        assert dominating == []
        # every point the advice lowered is the real thing's figure; every point says where its cycles come from
        for p in advice.points:
            assert p.cycles_from == ("vela" if p.measured else "predicted" if p.cycles is not None else None)
            if p.measured:
                assert (p.tosa_db, p.vela_cycles) == measured[frozenset(p.folded)], p.folded
                assert p.gap["cycles"] == (None if p.predicted_cycles is None else p.vela_cycles - p.predicted_cycles)
        if advice.check.adds_up:  # trusted prices sum to what upstream saves against off, within 1%
            assert abs(advice.check.summed - advice.check.totals) <= 0.01 * abs(advice.check.totals)
        # compare with the advice's markers (where markers can pick it) or its variant folds exactly its set
        variants = [advice.variant()] + ([("state-aware", advice.markers)] if advice.markers is not None else [])
        for r in inspector.compare(target, variants=variants, steps=steps, accelerator=accelerator).results:
            assert tuple(s.site_id for s in r.sites if s.folded_at) == advice.folded, r.variant.label
    # every point says what it is: the sets measured are distinct, the frontier is among them
    assert len({p.folded for p in first.points}) == len(first.points)
    assert first.frontier and all(p in first.points for p in first.frontier)


@pytest.mark.own_store  # the point is a fresh TOSA run
def test_the_advices_numbers_equal_a_fresh_tosa_compare_of_its_variant_to_the_digit():
    advice = inspector.advise(THREE, accelerator=U55, budget_db=0.0)
    inspector.clear_cache()
    for variant in [advice.variant()] + ([("state-aware", advice.markers)] if advice.markers is not None else []):
        (r,) = inspector.compare(THREE, variants=[variant], accelerator=U55).results
        assert r.worst().sqnr_db == advice.recommended.tosa_db
        assert r.cost.cycles == advice.recommended.vela_cycles
    # upstream and off as the advice set them against: Vela and TOSA, the same digits
    ends = inspector.compare(THREE, variants=("off", "upstream"), accelerator=U55)
    for rule in ("off", "upstream"):
        x = advice.versus(rule)
        assert (x.cycles, x.tosa_db) == (ends.result(rule).cost.cycles, ends.result(rule).worst().sqnr_db)
    # each site's price both ways is what the sets measured say; the prices are Vela's rows of off
    nothing = next(p for p in advice.points if not p.folded)
    everything = next(p for p in advice.points if len(p.folded) == 3)
    for price in advice.sites:
        alone = next(p for p in advice.points if p.folded == (price.site,))
        rest = next(p for p in advice.points if set(p.folded) == {s.site for s in advice.sites} - {price.site})
        assert price.db_folded_alone == pytest.approx(alone.db - nothing.db)
        assert price.db_kept_alone == pytest.approx(rest.db - everything.db)
        assert price.cycles == next(t.bought for t in ends.tradeoff().sites if t.site == price.site) > 0


def test_the_summary_reads_as_the_advice_against_each_rule():
    """Cycles and dB both read "the advice minus the rule": fewer cycles negative, more dB positive, no "-0.00"."""
    advice = inspector.advise(THREE, accelerator=U55, budget_db=0.0)
    text = headline(advice)
    r = advice.recommended
    for rule in ("upstream", "off"):
        x = advice.versus(rule)
        assert (f"against {rule}: {cycles_change(r.vela_cycles - x.cycles)} cycles, "
                f"{db_change(r.tosa_db - x.tosa_db)} dB") in text
    assert advice.versus("off").cycles > r.vela_cycles and "against off: -" in text
    assert "-0.00" not in text and "-0.00" not in advice.to_markdown()


def test_the_record_round_trips_and_draws(tmp_path):
    advice = inspector.advise("sample:stateful_wide_scale", accelerator=U55, budget_db=1.0, steps=3)
    back = inspector.Advice.from_dict(json.loads(advice.to_json()))
    assert back == advice
    assert set(advice.to_dataframe("sites").columns) >= {"site", "cycles", "db_folded_alone", "db_kept_alone"}
    assert len(advice.to_dataframe("points")) == len(advice.points)
    fig = advice.plot()
    assert fig.axes[0].get_xlabel().startswith("cycles on ethos-u55-128")
    md = advice.to_markdown()
    assert advice.folded[0] in md and "TOSA" in md and os.path.expanduser("~") not in md
    assert len(advice.to_markdown(limit=1500)) <= 1500
    bundle = advice._repr_mimebundle_()
    assert "fi-advice" in bundle["text/html"] and "which sites should fold" in bundle["text/plain"]
    # every cycle names its compiler: the Vela that priced the recommendation, with its settings
    (rec,) = inspector.compare("sample:stateful_wide_scale", variants=[advice.variant()], steps=3,
                               accelerator=U55).results
    assert advice.compiler == rec.cost.compiler and advice.compiler.startswith("Vela ")
    assert all(advice.compiler in text for text in (md, bundle["text/plain"], bundle["text/html"]))
    with pytest.raises(inspector.InspectorError, match="not an advice"):
        inspector.Advice.from_dict({"format": 2, "kind": "comparison"})


def test_a_kept_rule_loads_again_in_a_new_process_and_folds_exactly_the_advice(tmp_path):
    advice = inspector.advise(THREE, accelerator=U55, budget_db=0.0)
    kept = advice.rule(name="kept-advice", path=tmp_path / "kept.py")
    assert kept.name == "kept-advice" and "kept-advice" in inspector.rules
    spec = f"{tmp_path / 'kept.py'}:kept_advice"
    code = ("import inspector, json; r = inspector.compare(%r, variants=[%r], accelerator='ethos-u55-128', "
            "workers=1).results[0]; print(json.dumps([s.site_id for s in r.sites if s.folded_at]))" % (THREE, spec))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == list(advice.folded)


def test_the_cli_prints_the_advice_and_json(capsys, tmp_path):
    assert cli.main(["advise", "sample:stateful_wide_scale", "--steps", "3", "--budget-db", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "advice" and data["accelerator"] == U55 and data["engines"] == {
        "search": "simulation", "confirm": "tosa"}
    rule_file = tmp_path / "kept.py"
    assert cli.main(["advise", "sample:stateful_wide_scale", "--steps", "3", "--keep-rule", str(rule_file)]) == 0
    captured = capsys.readouterr()
    assert "which sites should fold" in captured.out and "fold: " + data["folded"][0] in captured.out
    assert rule_file.exists() and "--rule" in captured.err


@pytest.mark.parametrize("argv, message", [
    (["--accelerator", "tosa-int"], "has no cost model"),
    (["--budget-db", "-1"], "budget_db is how many dB"),
])
def test_bad_advice_input_is_one_line(capsys, argv, message):
    assert cli.main(["advise", "sample:conv_mul_scalar", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_advise_refuses_an_accelerator_without_cost():
    with pytest.raises(inspector.InspectorError, match="no cost model") as info:
        inspector.advise("sample:conv_mul_scalar", accelerator="tosa-int")
    assert "\n" not in str(info.value)


def test_greedy_beyond_the_exhaustive_bound_measures_each_step():
    """Three sites with the bound at 0: each site alone and left alone, then greedy steps, each measured."""
    advice = inspector.advise(THREE, accelerator=U55, budget_db=0.0, exhaustive_up_to=0)
    n = sum(s.reachable for s in advice.sites)
    assert advice.search == "greedy" and n == 3
    assert all(s.db_folded_alone is not None and s.db_kept_alone is not None for s in advice.sites if s.reachable)
    assert len(advice.points) >= 2 * n + 2  # nothing, everything, each site alone and each left alone
    assert advice.recommended.within and advice.recommended.tosa_db >= advice.best_db - 0.05
    assert advice.recommended.vela_cycles is not None


def test_the_report_includes_the_advice(capsys):
    """The issue report (md, html, json) carries which sites should fold, from the CLI as from Python."""
    assert cli.main(["report", "sample:stateful_wide_scale", "--stage", "tfa", "--advise", "--accelerator", U55,
                     "--steps", "3", "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert "Which sites should fold" in md and "Fold 1 of 1 site(s) on ethos-u55-128" in md
    advice = inspector.advise("sample:stateful_wide_scale", accelerator=U55, budget_db=1.0, steps=3)
    analysis = inspector.analyze("sample:stateful_wide_scale", stage="tfa")
    page = analysis.report(format="html", advice=advice)
    assert "<h2>Which sites should fold</h2>" in page and "fi-advice" in page
    data = json.loads(analysis.report(format="json", advice=advice))
    assert data["advice"]["folded"] == list(advice.folded)
    assert cli.main(["report", "sample:conv_mul_scalar", "--advise"]) == 2  # tosa-int has no cycles
    assert "no cost model" in capsys.readouterr().err


def test_a_sweep_advises_each_model_and_says_what_the_rules_give_up(capsys):
    models = ["sample:stateful_wide_scale", THREE]
    s = inspector.sweep(models, rules=("upstream", "state-aware"), steps=1, accelerators=(U55,), advise_db=0.0)
    assert len(s.advice) == len(models) and s.advice[0].target == "sample:stateful_wide_scale"
    for model, a in zip(models, s.advice):  # each as advise gives it on its own
        alone = inspector.advise(model, accelerator=U55, budget_db=0.0, steps=1)
        assert (a.folded, a.recommended.tosa_db, a.recommended.vela_cycles) == (
            alone.folded, alone.recommended.tosa_db, alone.recommended.vela_cycles)
        assert {x.rule for x in a.against} == {"upstream", "state-aware", "off"}
    md = s.format("md")
    assert "Which sites should fold (the advice)" in md and "`state-aware` gives up" in md
    assert json.loads(s.format("json"))["advice"][0]["kind"] == "advice"
    with pytest.raises(inspector.InspectorError, match="give an Ethos-U"):
        inspector.sweep(models, rules=("upstream",), steps=1, advise_db=1.0)
    assert cli.main(["sweep", "sample:stateful_wide_scale", "--steps", "1", "--accelerators", U55,
                     "--advise-db", "0", "--format", "md"]) == 0
    assert "Which sites should fold (the advice)" in capsys.readouterr().out
