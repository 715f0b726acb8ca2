"""``advise``: which sites should fold on one accelerator, within a budget of dB.

How it works (docs/advice.md says it for users):

1. ``off`` and ``upstream`` are compared on the TOSA reference model, lowered for the accelerator, and priced by
   Vela: each site's price in cycles is its mul's own rows where nothing folds (``Comparison.tradeoff()``); a site
   whose mul Vela fused away gets an equal share of what the totals leave unexplained, and says so.
2. Sets of sites are measured on the simulation engine, each as ``("state-aware", markers)``: the markers are the
   sites left unfolded, so every set measured is a variant a user can run. Up to ``exhaustive_up_to`` sites every
   set is measured; beyond, each site alone and each site left alone, then a greedy walk from both ends, each
   step measured (a fold changes the qparams downstream: the measured dB, not a sum, decides).
3. The budget is counted from the most accurate set measured; among the sets within it, the one that saves the
   most cycles (predicted from the prices) is recommended, and confirmed on the TOSA reference model with Vela's
   cycles. If TOSA puts it outside the budget, the next candidate is confirmed instead (said in the notes).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
import math
import time
from typing import Any, Callable, Sequence

from .._base.formats import db as db_text
from .._cost.accelerators import accelerator_of
from .._numbers.compare import compare, plan_of
from .._numbers.quantization import quantization_of
from .._numbers.variant_cache import can_predict, predicted_decisions
from .._targets import load as _load
from .._numbers.results import Variant
from .._rules.rules import get_rule
from .._base.errors import InspectorError, quoted
from .keep import set_rule
from .records import Advice, Against, Point, SitePrice

EXHAUSTIVE_UP_TO = 4  # sites: up to 2**4 = 16 sets, each measured
CONFIRM_TRIES = 3  # candidates confirmed on TOSA at most, when the first falls outside the budget there
GUARD = "state-aware"  # the rule whose markers pick a set (PR #21234's marker)

Progress = Callable[[str, float], None]


def advise(
    target: Any,
    example_inputs: Any = None,
    *,
    accelerator: Any = "ethos-u55-128",
    budget_db: float = 1.0,
    steps: int = 1,
    quantization: Any = None,
    calibration: Sequence | None = None,
    workers: int | None = None,
    exhaustive_up_to: int = EXHAUSTIVE_UP_TO,
    progress: Progress | None = None,
) -> Advice:
    """The set of sites to fold that keeps the worst output's SQNR (at the worst step) within ``budget_db`` of
    the most accurate set found, and buys the most cycles on ``accelerator`` (an Ethos-U: Vela prices it).

    The sets are measured on the simulation engine and the recommendation, ``upstream`` and ``off`` on the TOSA
    reference model with Vela's cycles; every number says its engine. ``Advice.markers`` are the markers with
    which ``compare(target, [("state-aware", advice.markers)])`` folds exactly ``Advice.folded``;
    ``Advice.rule()`` keeps the recommendation as a rule file. The budget holds on the calibration inputs (the
    example inputs and their perturbed copies, or ``calibration``), not on a data set.
    """
    started = time.perf_counter()
    chip = accelerator_of(accelerator)
    if not chip.costs:
        raise InspectorError(f"advise prices the fold in cycles, and {quoted(chip.name)} has no cost model: give an "
                             "Ethos-U, e.g. accelerator='ethos-u55-128' or 'ethos-u85-256'")
    budget = _budget(budget_db)
    if isinstance(exhaustive_up_to, bool) or not isinstance(exhaustive_up_to, int) or exhaustive_up_to < 0:
        raise InspectorError(f"exhaustive_up_to is a number of sites (0 or more), got {quoted(exhaustive_up_to)}")
    say = progress or (lambda phase, fraction: None)
    # loaded once: every compare below asks about the same model (a timm net's build and export is seconds)
    target = _load.load(target, example_inputs)
    common = dict(steps=steps, calibration=calibration, quantization=quantization, accelerator=chip)

    say("the ends on TOSA and Vela (off, upstream; state-aware beside them)", 0.0)
    # state-aware decides like upstream wherever the flow folds at tfa: then it is computed once (its decisions)
    ends = compare(target, ("off", "upstream", GUARD), workers=workers, engine="tosa", **common)
    off, upstream, guarded = ends.result("off"), ends.result("upstream"), ends.result(GUARD)
    if off.error is not None or upstream.error is not None:
        raise InspectorError(f"advise needs off and upstream on TOSA: {(off.error or upstream.error)}")
    all_sites = tuple(s.site_id for s in off.sites)
    folds_upstream = _folded(upstream)
    notes = []

    asked_of: dict[str, tuple[str, ...]] = {}  # a set rule's name -> the sites it was asked to fold

    def measure(sets: list[tuple[str, ...]], phase: str, at: float) -> list:
        """Each set of sites to fold as a variant of its own rule (``keep.set_rule``) on the simulation engine."""
        say(phase, at)
        if not sets:
            return []
        variants = [Variant(set_rule(fold)) for fold in sets]
        asked_of.update({v.rule.name: tuple(fold) for v, fold in zip(variants, sets)})
        return compare(target, variants, engine="simulation", **common).results

    say("what the guard reaches (state-aware, nothing marked)", 0.2)
    (free,) = compare(target, [Variant(get_rule(GUARD))], engine="simulation", **common).results
    _check(free)
    reachable = _folded(free)
    for site in folds_upstream:
        if site not in reachable:
            notes.append(f"{site}: state-aware's guard skips it whatever the markers, so no set here folds it")
    prices = _prices(ends, reachable, notes)
    points: dict[tuple[str, ...], Point] = {}
    measured_db: dict[tuple[str, ...], float | None] = {}
    def add(results) -> None:
        for r in results:
            _check(r)
            folded = _folded(r)
            asked = asked_of.get(r.variant.rule.name)
            if asked is not None and set(asked) != set(folded):
                notes.append(f"folding {', '.join(asked) or 'nothing'} folded {', '.join(folded) or 'nothing'}: the "
                             "sites interact (a chained mul folds only after the one before it)")
            if folded not in measured_db:
                measured_db[folded] = _db(r)

    def markers_for(fold: Sequence[str]) -> tuple[str, ...]:
        return tuple(s for s in reachable if s not in fold)

    n = len(reachable)
    add([free])
    if n <= exhaustive_up_to:
        search = "exhaustive"
        sets = [c for k in range(n + 1) for c in itertools.combinations(reachable, k)]
        add(measure([s for s in sets if tuple(s) != reachable], f"every set of {n} sites (simulation)", 0.4))
    else:
        search = "greedy"
        ends_and_ones = [()] + [(s,) for s in reachable] + [tuple(x for x in reachable if x != s) for s in reachable]
        add(measure(ends_and_ones, f"each of {n} sites alone and left alone (simulation)", 0.4))
        _greedy(reachable, prices, measured_db, budget, lambda s: add(measure([s], "a greedy step", 0.6)))
    empty = measured_db.get(())
    alone = {s: measured_db.get((s,)) for s in reachable}

    def predicted_db(fold: tuple[str, ...]) -> float | None:
        if empty is None or any(alone.get(s) is None for s in fold):
            return None
        return empty + sum(alone[s] - empty for s in fold)

    off_cycles = off.cost.cycles if off.cost is not None else None
    best = max((d for d in measured_db.values() if d is not None and not math.isnan(d)), default=None)
    # The markers that pick each set with state-aware, checked: a marker skips every mul whose output reaches
    # the marked node (PR #21234's rule), so some sets have none.
    say("the markers of each set (state-aware)", 0.6)
    wanted = {fold: markers_for(fold) for fold in measured_db}
    marked_by = _marked_by(target, wanted, common)
    for fold, db in measured_db.items():
        cycles = None if off_cycles is None else off_cycles - sum(prices[s].cycles or 0 for s in fold)
        within = best is not None and db is not None and db >= best - budget
        points[fold] = Point(_ordered(fold, reachable), marked_by[fold], cycles, db, predicted_db(fold), within)
    points = _frontier(points)
    site_prices = tuple(
        SitePrice(s, prices[s].cycles if s in prices else None, prices[s].how if s in prices else
                  "the installed pass does not fold it", _change(alone.get(s), empty),
                  _change(measured_db.get(tuple(x for x in reachable if x != s)), measured_db.get(reachable)),
                  s in reachable)
        for s in all_sites)

    candidates = sorted((p for p in points.values() if p.within), key=_preference)
    if not candidates:
        raise InspectorError("no set of sites was measured with numbers (every variant failed): see compare's errors")
    recommended, confirmed, tosa_seen = None, {}, []
    for i, candidate in enumerate(candidates[:CONFIRM_TRIES]):
        say(f"confirm {len(candidate.folded)} folded on TOSA and Vela", 0.7 + 0.1 * i)
        check = compare(target, [Variant(set_rule(candidate.folded))], workers=workers, engine="tosa",
                        **common).results[0]
        if check.error is not None:
            notes.append(f"the TOSA run of {', '.join(candidate.folded) or 'nothing folded'} failed: {check.error}")
            continue
        confirmed[candidate.folded] = check
        # the budget on TOSA counts from TOSA's own numbers (engines are not mixed): the ends and this run
        tosa_best = max(d for d in [_db(off), _db(upstream), _db(guarded), _db(check), *tosa_seen] if d is not None)
        tosa_seen.append(_db(check))
        if _db(check) is not None and _db(check) >= tosa_best - budget:
            recommended = candidate
            break
        notes.append(f"TOSA put {', '.join(candidate.folded) or 'nothing folded'} at {db_text(_db(check))} dB, outside "
                     f"the budget of {db_text(tosa_best)} dB - {budget:g}: the next candidate was confirmed")
    if recommended is None:
        raise InspectorError("no candidate set held its budget on the TOSA reference model: "
                             f"{'; '.join(notes[-CONFIRM_TRIES:])}")
    for r in (off, upstream):
        confirmed.setdefault(_folded(r), r)
    points = {fold: _confirmed(p, confirmed.get(fold)) for fold, p in points.items()}
    recommended = points[recommended.folded if recommended.folded in points else tuple(sorted(recommended.folded))]
    rec = confirmed[_key(recommended.folded, points)]
    against = tuple(Against(r.variant.rule.name, _folded(r), _cycles(r), _db(r),
                            None if _cycles(r) is None or _cycles(rec) is None else _cycles(r) - _cycles(rec),
                            None if _db(r) is None or _db(rec) is None else _db(rec) - _db(r))
                    for r in (upstream, guarded, off) if r.error is None)
    if recommended.markers is None:
        notes.append("no markers pick the recommended set with state-aware (a marker skips every mul whose output "
                     "reaches the marked node): run it as Advice.rule()")
    notes.append("the budget holds on the calibration inputs (the example inputs and their perturbed copies, or "
                 "the calibration given), not on a data set")
    say("done", 1.0)
    return Advice(ends.target, chip.name, budget, steps, ends.results[0].quantization, search, site_prices,
                  tuple(points.values()), recommended, best, against, tuple(dict.fromkeys(notes)),
                  time.perf_counter() - started)


# ---------------------------------------------------------------- pieces


def _marked_by(loaded: _load.Target, wanted: dict, common: dict) -> dict:
    """Per set, its markers if ``("state-aware", markers)`` folds exactly that set, else None. Markers change only
    where the pass folds, so the check is the real pass deciding on the tfa graph of the accelerator's quantizer,
    as compare predicts a variant's decisions (about 0.1 s a set on nf_resnet26, against 1 s for a simulated
    run); a model whose decisions cannot be predicted so (overrides, a graph not captured) is run instead."""
    default = quantization_of(common["quantization"])
    variants = {fold: Variant(get_rule(GUARD), m) for fold, m in wanted.items()}
    plans = {fold: plan_of(loaded, v, default, common["accelerator"]) for fold, v in variants.items()}
    out, run = {}, []
    for fold, v in variants.items():
        if can_predict(loaded, plans[fold]):
            (_, tfa), _ = predicted_decisions(loaded, v, plans[fold])
            out[fold] = wanted[fold] if set(tfa) == set(fold) else None
        else:
            run.append(fold)
    if run:
        picked = compare(loaded, [variants[f] for f in run], engine="simulation", **common).results
        out.update({f: (wanted[f] if r.error is None and set(_folded(r)) == set(f) else None)
                    for f, r in zip(run, picked)})
    return {fold: out[fold] for fold in wanted}


def _budget(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InspectorError(f"budget_db is how many dB of SQNR you accept losing (a number, 0 or more), "
                             f"got {quoted(value)}")
    return float(value)


def _check(result) -> None:
    if result.error is not None:
        raise InspectorError(f"advise could not measure {result.variant.label}: {result.error}")


def _folded(result) -> tuple[str, ...]:
    return tuple(s.site_id for s in result.sites if s.folded_at)


def _ordered(fold, reachable) -> tuple[str, ...]:
    return tuple(s for s in reachable if s in fold) + tuple(s for s in fold if s not in reachable)


def _key(fold, points) -> tuple[str, ...]:
    return next(k for k in points if set(k) == set(fold))


def _db(result) -> float | None:
    worst = result.worst() if result.error is None else None
    return None if worst is None else worst.sqnr_db


def _cycles(result) -> int | None:
    return None if result.cost is None else result.cost.cycles


def _change(value, base) -> float | None:
    return None if value is None or base is None else value - base


class _Price:
    def __init__(self, cycles, how):
        self.cycles, self.how = cycles, how


def _prices(ends, reachable, notes) -> dict:
    """Each folded site's price in cycles (Vela, where nothing folds), the unexplained rest shared."""
    trade = ends.tradeoff()
    off, upstream = trade.variant("off"), trade.variant("upstream")
    prices = {p.site: _Price(p.bought, p.how) for p in trade.sites if p.site in upstream.folded}
    unknown = [s for s, p in prices.items() if p.cycles is None]
    if unknown and off.cycles is not None and upstream.cycles is not None:
        rest = off.cycles - upstream.cycles - sum(p.cycles for p in prices.values() if p.cycles is not None)
        share = max(rest, 0) // len(unknown)
        for s in unknown:
            prices[s] = _Price(share, f"no row of its own: an equal share of the {rest} cycles upstream saves beyond "
                                      "the sites with rows (a prediction)")
        notes.append(f"{len(unknown)} site(s) have no mul row in Vela's table: their price is a share of the totals")
    return prices


def _preference(p: Point):
    """Most cycles saved (fewest cycles) first, then the most dB, then the fewest folds."""
    return (p.cycles if p.cycles is not None else math.inf, -(p.db if p.db is not None else -math.inf), len(p.folded))


def _frontier(points: dict) -> dict:
    out = {}
    for fold, p in points.items():
        beaten = any(q is not p and q.cycles is not None and p.cycles is not None and q.db is not None and
                     p.db is not None and q.cycles <= p.cycles and q.db >= p.db and
                     (q.cycles < p.cycles or q.db > p.db) for q in points.values())
        out[fold] = replace(p, frontier=not beaten and p.cycles is not None and p.db is not None)
    return out


def _confirmed(p: Point, result) -> Point:
    if result is None:
        return p
    return replace(p, tosa_db=_db(result), vela_cycles=_cycles(result))


def _greedy(reachable, prices, measured_db, budget, measure_set) -> None:
    """From every site folded, leave out the site whose leaving-out recovers the most dB per cycle it costs,
    until the set is within the budget of the best measured; from nothing folded, add the site that loses the
    least dB per cycle it buys while the set stays within it. Every step is measured."""

    def db(fold):
        return measured_db.get(tuple(s for s in reachable if s in fold))

    def best():
        return max((d for d in measured_db.values() if d is not None), default=-math.inf)

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


__all__ = ["EXHAUSTIVE_UP_TO", "advise"]
