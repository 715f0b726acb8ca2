"""``advise``: which sites should fold on one accelerator, within a budget of dB.

How it works (docs/advice.md says it for users):

1. **The ends, on the authority.** ``off``, ``upstream`` and ``state-aware`` are compared on the TOSA reference model,
   lowered for the accelerator, and priced by Vela.
2. **Prices, checked.** Each site's price in cycles is first what its own rows save (``Comparison.tradeoff()``).
   Vela fuses activations into the operation before them, chains muls into convolutions and places tensors by what
   else is in memory, so rows can lie: the prices are trusted only where they add up (their sum equals ``off`` minus
   ``upstream`` within 1%). A site whose rows cannot explain its price, and every site when the sum does not add up,
   is lowered alone: its price is then ``off`` minus that lowering's cycles. When even those do not add up, no
   prediction is trusted and the sets the search may pick are priced by Vela on their own lowerings (at most
   ``PRICE_UP_TO``).
3. **The sets, on the simulation.** Each set is a variant of a rule that folds exactly it. Up to
   ``exhaustive_up_to`` sites every set is measured; beyond, each site alone and each site left alone, then a greedy
   walk from both ends, each step measured (a fold changes the qparams downstream: the measured dB, not a sum,
   decides).
4. **The pick, from measured points.** The most accurate set of the search is run on TOSA too (the budget counts from
   TOSA's own best); the candidates within the budget are confirmed on TOSA and Vela, cheapest first, while one of
   them could still beat the best measured point. The recommendation is the measured point (TOSA and Vela) within the
   budget that costs the fewest cycles, so no point measured on TOSA and Vela beats it on both cycles and dB.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import replace
from typing import Any
from collections.abc import Callable, Sequence

from .._base.errors import InspectorError, quoted
from .._base.formats import cycles as cycles_text
from .._cost.accelerators import accelerator_of
from .._decide import stages as _stages
from .._numbers.compare import compare, plan_of
from .._numbers.measures import Metric, metric_of as measure_of, metrics as measure_list
from .._numbers.quantization import quantization_of
from .._numbers.results import Variant
from .._numbers.variant_cache import can_predict, predicted_decisions
from .._rules.rules import get_rule
from .._targets import load as _load
from .keep import set_rule
from .records import CONFIRM_ENGINE, SEARCH_ENGINE, Advice, Against, Point, PriceCheck, SitePrice

EXHAUSTIVE_UP_TO = 4  # sites: up to 2**4 = 16 sets, each measured
CONFIRM_TRIES = 3  # candidates confirmed one by one at most, when the prices are trusted
PRICE_UP_TO = 8  # sets priced on their own lowering at most, when no prediction is trusted
ADDS_UP = 0.01  # the sites' prices must sum to off - upstream within this share of it
GUARD = "state-aware"  # the rule whose markers pick a set (PR #21234's marker)

Progress = Callable[[str, float], None]
# Advice prices every site in Vela's cycles: its default is an Ethos-U, where every other verb's is tosa-int (which
# has no cost). The reason is printed in ``advise --help``.
DEFAULT_ACCELERATOR = "ethos-u55-128"
WHY_ACCELERATOR = ("advice prices every site in Vela's cycles, which only an Ethos-U has (tosa-int, every other "
                   "verb's default, has none)")
Fold = frozenset  # a set of site ids, as the pass really folded them


def advise(
    target: Any,
    *,
    example_inputs: Any = None,
    accelerator: Any = DEFAULT_ACCELERATOR,
    budget_db: float | None = None,
    steps: int | None = None,
    quantization: Any = None,
    calibration: Sequence | None = None,
    workers: int | None = None,
    exhaustive_up_to: int = EXHAUSTIVE_UP_TO,
    progress: Progress | None = None,
    budget: tuple[str, float] | None = None,
) -> Advice:
    """The set of sites to fold that keeps the worst output's SQNR (at the worst step) within ``budget_db`` of
    the most accurate set measured, and buys the most cycles on ``accelerator`` (an Ethos-U: Vela prices it).
    ``budget=(measurement, amount)`` counts the budget in any measurement with a direction instead
    (``("sqnr", 1.0)`` is the default, ``("max-abs", 0.05)``, a registered one: ``inspector.metrics()``); the worst
    output at the worst step is the one that counts.

    The sets are searched on the simulation engine; the recommendation is a point measured on the TOSA reference
    model with Vela's cycles (as are ``upstream``, ``off`` and ``state-aware``), and no point measured so beats it
    on both cycles and dB. Every number says its engine, every cycle count whether Vela counted it or the sites'
    prices predict it (``Advice.check`` says whether the prices add up). ``Advice.markers`` are the markers with
    which ``compare(target, variants=[("state-aware", advice.markers)])`` folds exactly ``Advice.folded``;
    ``Advice.rule()`` keeps the recommendation as a rule file. The budget holds on the calibration inputs (the
    example inputs and their perturbed copies, or ``calibration``), not on a data set.

    Args:
        target: what ``analyze`` takes.
        example_inputs: as ``analyze``'s.
        accelerator: the Ethos-U whose cycles Vela counts; default ``ethos-u55-128`` (``WHY_ACCELERATOR``).
        budget_db: the SQNR in dB you accept losing against the most accurate set; default 1.
        steps: as ``compare``'s (a stream's length, else 20 for a model that carries state, else 1).
        quantization: as ``compare``'s; default ``a8w8``.
        calibration: as ``compare``'s.
        workers: as ``compare``'s.
        exhaustive_up_to: with at most this many sites every set is measured; above, a greedy walk.
        progress: ``progress(phase, fraction)``.
        budget: ``(measurement, amount)``: the budget in another measurement with a direction, instead of
            ``budget_db``.
    """
    started = time.perf_counter()
    chip = accelerator_of(accelerator)
    if not chip.costs:
        raise InspectorError(f"advise prices the fold in cycles, and {quoted(chip.name)} has no cost model: give an "
                             "Ethos-U, e.g. accelerator='ethos-u55-128' or 'ethos-u85-256'")
    metric, budget = _budget(budget, budget_db)
    oriented = 1.0 if metric.better == "higher" else -1.0  # every comparison below reads "higher is better"

    def _db(result) -> float | None:  # the budget's measurement at its worst output (and step), oriented
        worst = result.overall(metric.name) if result.error is None else None
        return None if worst is None else oriented * worst

    def value(score: float | None) -> float | None:  # back to the measurement's own sign
        return None if score is None else oriented * score
    if isinstance(exhaustive_up_to, bool) or not isinstance(exhaustive_up_to, int) or exhaustive_up_to < 0:
        raise InspectorError(f"exhaustive_up_to is a number of sites (0 or more), got {quoted(exhaustive_up_to)}")
    say = progress or (lambda phase, fraction: None)
    # loaded once: every compare below asks about the same model (a timm net's build and export is seconds)
    target = _load.load(target, example_inputs)
    steps = _stages.steps_for(target, steps)  # the one default of every verb unless given
    common = dict(steps=steps, calibration=calibration, quantization=quantization, accelerator=chip,
                  metrics=(metric.name,))
    notes: list[str] = []

    say("the ends on TOSA and Vela (off, upstream; state-aware beside them)", 0.0)
    # state-aware decides like upstream wherever the flow folds at tfa: then it is computed once (its decisions)
    ends = compare(target, variants=("off", "upstream", GUARD), workers=workers, engine=CONFIRM_ENGINE, **common)
    off, upstream, guarded = ends.result("off"), ends.result("upstream"), ends.result(GUARD)
    if off.error is not None or upstream.error is not None:
        raise InspectorError(f"advise needs off and upstream on TOSA: {(off.error or upstream.error)}")
    all_sites = tuple(s.site_id for s in off.sites)
    measured = _Measured(target, workers, common, notes, _db)
    measured.add([off, upstream, guarded])

    say("each site's price, checked against Vela's totals", 0.1)
    prices, check = _checked_prices(ends, measured, notes, say)

    say("what the guard reaches (state-aware, nothing marked)", 0.2)
    (free,) = compare(target, variants=[Variant(rule=get_rule(GUARD))], engine=SEARCH_ENGINE, **common).results
    _check(free)
    reachable = _folded(free)
    for site in _folded(upstream):
        if site not in reachable:
            notes.append(f"{site}: state-aware's guard skips it whatever the markers, so no set of markers folds it")
    simulated: dict[Fold, float | None] = {}  # the search's dB (simulation) of every set it measured
    asked_of: dict[str, tuple[str, ...]] = {}  # a set rule's name -> the sites it was asked to fold

    def add(results) -> None:
        for r in results:
            _check(r)
            folded = _folded(r)
            asked = asked_of.get(r.variant.rule.name)
            if asked is not None and set(asked) != set(folded):
                notes.append(f"folding {', '.join(asked) or 'nothing'} folded {', '.join(folded) or 'nothing'}: the "
                             "sites interact (a chained mul folds only after the one before it)")
            simulated.setdefault(Fold(folded), _db(r))

    def simulate(sets: list[tuple[str, ...]], phase: str, at: float) -> None:
        """Each set of sites to fold as a variant of its own rule (``keep.set_rule``) on the simulation engine."""
        say(phase, at)
        if sets:
            variants = [Variant(rule=set_rule(fold)) for fold in sets]
            asked_of.update({v.rule.name: tuple(fold) for v, fold in zip(variants, sets)})
            add(compare(target, variants=variants, engine=SEARCH_ENGINE, **common).results)

    n = len(reachable)
    add([free])
    if n <= exhaustive_up_to:
        search = "exhaustive"
        sets = [c for k in range(n + 1) for c in itertools.combinations(reachable, k)]
        simulate([s for s in sets if tuple(s) != reachable], f"every set of {n} sites (simulation)", 0.3)
    else:
        search = "greedy"
        ends_and_ones = [()] + [(s,) for s in reachable] + [tuple(x for x in reachable if x != s) for s in reachable]
        simulate(ends_and_ones, f"each of {n} sites alone and left alone (simulation)", 0.3)
        _greedy(reachable, prices, simulated, budget, lambda s: simulate([s], "a greedy step", 0.5))
    empty = simulated.get(Fold())
    alone = {s: simulated.get(Fold((s,))) for s in reachable}

    def predicted_cycles(fold: Fold) -> int | None:
        if off.cost is None or any(prices.get(s) is None for s in fold):
            return None
        return off.cost.cycles - sum(prices[s].cycles for s in fold)

    def estimate(fold: Fold) -> float:
        """The cycles the pick goes by: Vela's where a set was lowered, else the prediction."""
        if fold in measured:
            return measured.cycles(fold)
        p = predicted_cycles(fold)
        return math.inf if p is None else p

    say("the sets within the budget, measured on TOSA and Vela", 0.6)
    search_best = _best(simulated.values())
    within_search = [f for f, d in simulated.items() if d is not None and search_best is not None
                     and d >= search_best - budget]
    # the budget counts from TOSA's own best: the search's most accurate set runs on TOSA too
    anchor = [] if search_best is None else [max((f for f, d in simulated.items() if d == search_best), key=len)]
    candidates = sorted((f for f in within_search if f not in measured),
                        key=lambda f: (estimate(f), -(simulated[f] or -math.inf), len(f)))
    if check.adds_up:
        tries = 0
        first = [f for f in anchor if f not in measured]
        while candidates and tries < CONFIRM_TRIES:
            current = measured.pick(budget)
            nxt = candidates[0]
            if not first and current is not None and _no_better(estimate(nxt), simulated[nxt], current, measured):
                break
            candidates.pop(0)
            measured.run([nxt] + [f for f in first if f != nxt], "confirm on TOSA and Vela")
            first, tries = [], tries + 1
        measured.run(first, "the search's most accurate set on TOSA and Vela")
    else:
        batch = [f for f in anchor if f not in measured] + [f for f in candidates[:PRICE_UP_TO] if f not in anchor]
        if len(candidates) > PRICE_UP_TO:
            notes.append(f"{len(candidates) - PRICE_UP_TO} set(s) within the budget were not priced on their own "
                         f"lowering (at most {PRICE_UP_TO}): the recommendation is the best of those that were")
        measured.run(batch, "price the sets within the budget on their own lowering (TOSA and Vela)")
    pick = measured.pick(budget)
    if pick is None:
        raise InspectorError("no set of sites was measured on TOSA with numbers (every run failed): "
                             f"{'; '.join(notes[-CONFIRM_TRIES:]) or 'see compare errors'}")

    say("the markers of each set (state-aware)", 0.9)
    folds = list(dict.fromkeys([*simulated, *measured.folds()]))
    marked_by = _marked_by(target, {f: _markers_for(f, reachable) for f in folds}, common)
    tosa_best = measured.best()
    points = {}
    for fold in folds:
        sim = simulated.get(fold)
        predicted_db = (None if empty is None or any(alone.get(s) is None for s in fold)
                        else empty + sum(alone[s] - empty for s in fold))
        tosa_db = measured.db(fold) if fold in measured else None
        vela = measured.cycles(fold) if fold in measured else None
        predicted = predicted_cycles(fold)
        within = (tosa_db is not None and tosa_best is not None and tosa_db >= tosa_best - budget) if fold in measured \
            else (sim is not None and search_best is not None and sim >= search_best - budget)
        points[fold] = Point(folded=_ordered(fold, reachable, all_sites), markers=marked_by[fold],
                             cycles=vela if vela is not None else predicted, db=value(sim),
                             db_predicted=value(predicted_db), within=within, frontier=False,
                             tosa_db=value(tosa_db), vela_cycles=vela, predicted_cycles=predicted,
                             cycles_from="vela" if vela is not None else "predicted" if predicted is not None else None)
    points = _frontier(points, oriented)
    recommended = points[pick]
    site_prices = tuple(
        SitePrice(site=s, cycles=prices[s].cycles if s in prices else None,
                  how=prices[s].how if s in prices else "the installed pass does not fold it",
                  db_folded_alone=_change(value(alone.get(s)), value(empty)),
                  db_kept_alone=_change(value(simulated.get(Fold(x for x in reachable if x != s))),
                          value(simulated.get(Fold(reachable)))),
                  reachable=s in reachable)
        for s in all_sites)
    rec = measured.result(pick)
    against = tuple(Against(rule=r.variant.rule.name, folded=_folded(r), cycles=_cycles(r), tosa_db=value(_db(r)),
                            cycles_saved=None if _cycles(r) is None or _cycles(rec) is None else _cycles(r) - _cycles(rec),
                            db_change=_change(value(_db(rec)), value(_db(r))))
                    for r in (upstream, guarded, off) if r.error is None)
    if recommended.markers is None:
        notes.append("no markers pick the recommended set with state-aware (a marker skips every mul whose output "
                     "reaches the marked node): run it as Advice.rule()")
    notes.append("the budget holds on the calibration inputs (the example inputs and their perturbed copies, or "
                 "the calibration given), not on a data set")
    say("done", 1.0)
    return Advice(target=ends.target, accelerator=chip, budget_db=budget, steps=steps,
                  quantization=ends.results[0].quantization, search=search, sites=site_prices,
                  points=tuple(points.values()), recommended=recommended, best_db=value(tosa_best), against=against,
                  notes=tuple(dict.fromkeys(notes)),
                  seconds=time.perf_counter() - started, check=check, lowerings=len(measured), compiler=rec.cost.compiler,
                  metric=metric.name)


# ---------------------------------------------------------------- measured points (TOSA and Vela)


class _Measured:
    """The sets lowered for the accelerator, run on the TOSA reference model and priced by Vela: the only points
    the recommendation is picked from."""

    def __init__(self, target, workers, common, notes, score):
        self._target, self._workers, self._common, self._notes = target, workers, common, notes
        self._score = score  # the budget's measurement of a result, oriented: higher is better
        self._results: dict[Fold, Any] = {}

    def add(self, results) -> None:
        for r in results:
            if r.error is None and r.cost is not None:
                self._results.setdefault(Fold(_folded(r)), r)

    def run(self, sets: list[Fold], phase: str) -> None:
        """Each set in ``sets`` not yet measured, lowered with a rule that folds exactly it (side by side)."""
        sets = [f for f in dict.fromkeys(sets) if f not in self._results]
        if not sets:
            return
        results = compare(self._target, variants=[Variant(rule=set_rule(tuple(sorted(f)))) for f in sets],
                          workers=self._workers,
                          engine=CONFIRM_ENGINE, **self._common).results
        for fold, r in zip(sets, results):
            if r.error is not None or r.cost is None:
                self._notes.append(f"the TOSA and Vela run of {', '.join(sorted(fold)) or 'nothing folded'} "
                                   f"({phase}) failed: {r.error or r.cost_error}")
            elif Fold(_folded(r)) != fold:
                self._notes.append(f"folding {', '.join(sorted(fold)) or 'nothing'} on TOSA folded "
                                   f"{', '.join(_folded(r)) or 'nothing'}: the sites interact")
        self.add(results)

    def __contains__(self, fold) -> bool:
        return fold in self._results

    def __len__(self) -> int:
        return len(self._results)

    def folds(self) -> list[Fold]:
        return list(self._results)

    def result(self, fold: Fold):
        return self._results[fold]

    def cycles(self, fold: Fold) -> int:
        return self._results[fold].cost.cycles

    def db(self, fold: Fold) -> float | None:
        return self._score(self._results[fold])

    def best(self) -> float | None:
        return _best(self.db(f) for f in self._results)

    def pick(self, budget: float) -> Fold | None:
        """The measured set within ``budget`` dB of the best measured that costs the fewest cycles (then the most
        dB, then the fewest folds): no measured point beats it on both cycles and dB."""
        best = self.best()
        if best is None:
            return None
        within = [f for f in self._results if self.db(f) is not None and self.db(f) >= best - budget]
        return min(within, key=lambda f: (self.cycles(f), -self.db(f), len(f), sorted(f)))


def _no_better(estimate: float, sim_db: float | None, current: Fold, measured: _Measured) -> bool:
    """The next candidate cannot beat the current pick: it is predicted to cost more cycles, or as many with no
    more dB."""
    cycles = measured.cycles(current)
    return estimate > cycles or (estimate == cycles and (sim_db or -math.inf) <= (measured.db(current) or -math.inf))


# ---------------------------------------------------------------- prices


class _Price:
    def __init__(self, cycles, how):
        self.cycles, self.how = cycles, how


def _checked_prices(ends, measured: _Measured, notes: list, say) -> tuple[dict, PriceCheck]:
    """Each site ``upstream`` folds, priced: by its own rows where they add up to ``off - upstream``; else by its
    own lowering (``off`` minus the set of that site alone), checked the same way. ``PriceCheck`` says which."""
    off, upstream = ends.result("off"), ends.result("upstream")
    folds = _folded(upstream)
    totals = off.cost.cycles - upstream.cost.cycles
    rows = {p.site: p for p in ends.tradeoff().sites}
    prices = {s: _Price(rows[s].bought if s in rows else None, rows[s].how if s in rows else "no row") for s in folds}
    if _adds_up(prices, folds, totals):
        summed = sum(prices[s].cycles for s in folds)
        return prices, PriceCheck(source="rows", summed=summed, totals=totals, adds_up=True,
                                  how=f"each site's own rows: they sum to {cycles_text(summed)} = off - upstream "
                                  f"({cycles_text(totals)})")
    rows_sum = _sum(prices, folds)
    # rows that cannot explain a price are checked first (the fewest lowerings), then every site
    unexplained = [s for s in folds if prices[s].cycles is None]
    for group in ([unexplained] if unexplained else []) + [list(folds)]:
        say(f"{len(group)} site(s) lowered alone to check their prices (TOSA and Vela)", 0.15)
        measured.run([Fold((s,)) for s in group], "a site alone, to check its price")
        for s in group:
            if Fold((s,)) in measured:
                prices[s] = _Price(off.cost.cycles - measured.cycles(Fold((s,))),
                                   f"off minus the lowering of this site alone (Vela): its rows said "
                                   f"{cycles_text(rows[s].bought) if s in rows else 'nothing'}")
            else:
                prices[s] = _Price(None, "its lowering alone did not fold it alone (or failed): no price")
        if _adds_up(prices, folds, totals):
            summed = sum(prices[s].cycles for s in folds)
            notes.append(f"the sites' own rows did not add up to off - upstream ({cycles_text(rows_sum)} against "
                         f"{cycles_text(totals)}): {len(group)} site(s) were priced by their own lowering")
            return prices, PriceCheck(source="lowered alone", summed=summed, totals=totals, adds_up=True,
                                      how=f"{len(group)} site(s) lowered alone: the prices sum to {cycles_text(summed)} "
                                      f"= off - upstream ({cycles_text(totals)}); the rows summed to "
                                      f"{cycles_text(rows_sum)}")
    summed = _sum(prices, folds)
    notes.append(f"the sites' prices do not add up (alone they sum to {cycles_text(summed)}, off - upstream is "
                 f"{cycles_text(totals)}): Vela prices each set the advice may pick on its own lowering")
    return prices, PriceCheck(source="lowered alone", summed=summed, totals=totals, adds_up=False,
                              how=f"no price adds up: the sites lowered alone sum to {cycles_text(summed)}, the rows to "
                              f"{cycles_text(rows_sum)}, off - upstream is {cycles_text(totals)}; every set picked "
                              "from was priced by Vela on its own lowering")


def _sum(prices: dict, folds) -> int | None:
    values = [prices[s].cycles for s in folds]
    return None if any(v is None for v in values) else sum(values)


def _adds_up(prices: dict, folds, totals: int) -> bool:
    """The prices of the sites upstream folds sum to what upstream saves against off, within ``ADDS_UP``."""
    summed = _sum(prices, folds)
    return summed is not None and abs(summed - totals) <= ADDS_UP * abs(totals)


# ---------------------------------------------------------------- pieces


def _marked_by(loaded: _load.Target, wanted: dict, common: dict) -> dict:
    """Per set, its markers if ``("state-aware", markers)`` folds exactly that set, else None. Markers change only
    where the pass folds, so the check is the real pass deciding on the tfa graph of the accelerator's quantizer,
    as compare predicts a variant's decisions (about 0.1 s a set on nf_resnet26, against 1 s for a simulated
    run); a model whose decisions cannot be predicted so (overrides, a graph not captured) is run instead."""
    default = quantization_of(common["quantization"])
    variants = {fold: Variant(rule=get_rule(GUARD), markers=m) for fold, m in wanted.items() if m is not None}
    plans = {fold: plan_of(loaded, v, default, common["accelerator"]) for fold, v in variants.items()}
    out, run = {fold: None for fold in wanted}, []
    for fold, v in variants.items():
        if can_predict(loaded, plans[fold]):
            (_, tfa), _ = predicted_decisions(loaded, v, plans[fold])
            out[fold] = wanted[fold] if set(tfa) == set(fold) else None
        else:
            run.append(fold)
    if run:
        picked = compare(loaded, variants=[variants[f] for f in run], engine=SEARCH_ENGINE, **common).results
        out.update({f: (wanted[f] if r.error is None and set(_folded(r)) == set(f) else None)
                    for f, r in zip(run, picked)})
    return out


def _markers_for(fold: Fold, reachable: tuple[str, ...]) -> tuple[str, ...] | None:
    """The markers that leave every reachable site outside ``fold`` unfolded (None: ``fold`` has a site the guard
    never folds, so no markers pick it)."""
    if not fold <= set(reachable):
        return None
    return tuple(s for s in reachable if s not in fold)


def _budget(budget, budget_db) -> tuple[Metric, float]:
    """The budget's measurement and how much of it the user accepts losing: ``budget=(name, amount)``, or
    ``budget_db`` (SQNR in dB), or the default of 1 dB of SQNR."""
    if budget is not None and budget_db is not None:
        raise InspectorError("give the budget once: budget=(measurement, amount) or budget_db=, not both")
    if budget is None:
        budget = ("sqnr", 1.0 if budget_db is None else budget_db)
    if isinstance(budget, (str, bytes)) or not isinstance(budget, (tuple, list)) or len(budget) != 2:
        raise InspectorError(f"budget is (a measurement's name, an amount), e.g. ('sqnr', 1.0), got {quoted(budget)}")
    metric, amount = measure_of(budget[0]), budget[1]
    if metric.kind != "output" or metric.better == "none":
        raise InspectorError(f"a budget is counted in a measurement of the outputs with a direction; "
                             f"{quoted(metric.name)} is {'a cost' if metric.kind != 'output' else 'without one'}: "
                             f"choose one of {', '.join(m.name for m in measure_list('output') if m.better != 'none')}")
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount) or amount < 0:
        what = "how many dB of SQNR you accept losing" if metric.name == "sqnr" else \
            f"how much {metric.name} you accept losing"
        raise InspectorError(f"{'budget_db' if metric.name == 'sqnr' else 'the budget'} is {what} (a number, 0 or "
                             f"more), got {quoted(amount)}")
    return metric, float(amount)


def _check(result) -> None:
    if result.error is not None:
        raise InspectorError(f"advise could not measure {result.variant.label}: {result.error}")


def _folded(result) -> tuple[str, ...]:
    return tuple(s.site_id for s in result.sites if s.folded_at)


def _ordered(fold, reachable, all_sites) -> tuple[str, ...]:
    """A set's site ids in graph order."""
    order = list(dict.fromkeys([*reachable, *all_sites]))
    return tuple(sorted(fold, key=lambda s: (order.index(s) if s in order else len(order), s)))


def _best(values) -> float | None:
    return max((d for d in values if d is not None and not math.isnan(d)), default=None)


def _cycles(result) -> int | None:
    return None if result.cost is None else result.cost.cycles


def _change(value, base) -> float | None:
    return None if value is None or base is None else value - base


def _frontier(points: dict, oriented: float = 1.0) -> dict:
    """Mark the points no other point beats on both cycles and the budget's measurement (each by its best figures:
    Vela's and TOSA's where measured; ``oriented`` -1 for a measurement where lower is better)."""
    def figures(p: Point):
        known = p.tosa_db if p.tosa_db is not None else p.db
        return p.cycles, (None if known is None else oriented * known)

    out = {}
    for fold, p in points.items():
        c, d = figures(p)
        known = c is not None and d is not None
        beaten = known and any(q is not p and all(x is not None for x in figures(q)) and figures(q)[0] <= c and
                               figures(q)[1] >= d and (figures(q)[0] < c or figures(q)[1] > d)
                               for q in points.values())
        out[fold] = replace(p, frontier=known and not beaten)
    return out


def _greedy(reachable, prices, simulated, budget, measure_set) -> None:
    """From every site folded, leave out the site whose leaving-out recovers the most dB per cycle it costs,
    until the set is within the budget of the best measured; from nothing folded, add the site that loses the
    least dB per cycle it buys while the set stays within it. Every step is measured."""

    def db(fold):
        return simulated.get(Fold(fold))

    def best():
        return _best(simulated.values()) if _best(simulated.values()) is not None else -math.inf

    def cost(s):
        return max(prices[s].cycles or 0, 1) if s in prices else 1

    fold = list(reachable)
    while fold and (db(fold) is None or db(fold) < best() - budget):
        base = db(fold) if db(fold) is not None else -math.inf
        gains = {s: ((db([x for x in fold if x != s]) or base) - base) / cost(s) for s in fold}
        leave = max(fold, key=lambda s: (gains[s], -cost(s)))
        fold.remove(leave)
        if db(fold) is None:
            measure_set(tuple(s for s in reachable if s in fold))
    fold = []
    empty = db(())
    while len(fold) < len(reachable):
        rest = [s for s in reachable if s not in fold]
        losses = {s: ((empty if empty is not None else 0) - (db([s]) if db([s]) is not None else -math.inf)) / cost(s)
                  for s in rest}
        add = min(rest, key=lambda s: (losses[s], -cost(s)))
        trial = fold + [add]
        if db(trial) is None:
            measure_set(tuple(s for s in reachable if s in trial))
        if db(trial) is None or db(trial) < best() - budget:
            break
        fold = trial


__all__ = ["DEFAULT_ACCELERATOR", "EXHAUSTIVE_UP_TO", "WHY_ACCELERATOR", "advise"]
