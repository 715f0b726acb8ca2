"""The advice's records: each site's price, each set of sites measured, the recommendation and what confirmed it.

Data only (nothing runs here): ``advise.py`` measures and fills them; ``present`` draws them. Every dB says the
engine that measured it; every cycle count says whether Vela counted it or it is predicted from the sites' prices.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .._base.codec import Record
from .._base.data import dataframe
from .._base.errors import InspectorError
from .._base.display import draw
from .._cost.accelerators import Accelerator, accelerator_named
from .._numbers.engines import SIMULATION, TOSA, Engine, engine_of

SEARCH_ENGINE = SIMULATION  # what measures the sets (cheap); the TOSA reference model confirms
CONFIRM_ENGINE = TOSA


@dataclass(frozen=True, kw_only=True)
class SitePrice(Record):
    """One site's two prices: the cycles folding it buys, and what it does to the numbers in each direction."""

    site: str  # the site id
    cycles: int | None  # what folding it buys on Vela: its own rows, or off minus its lowering alone (Advice.check)
    how: str  # where ``cycles`` comes from, in words
    db_folded_alone: float | None  # worst dB folding only this site, minus nothing folded (simulation)
    db_kept_alone: float | None  # worst dB folding every other site, minus every site folded (simulation)
    reachable: bool = True  # state-aware with markers can fold it in the comparison's flow


@dataclass(frozen=True, kw_only=True)
class Point(Record):
    """One set of sites folded, measured: a point of the frontier (cycles against dB)."""

    folded: tuple[str, ...]  # the site ids folded (as the pass really decided them)
    markers: tuple[str, ...] | None  # the markers with which ("state-aware", markers) decides exactly ``folded``
    # (checked; None: no markers pick this set, as a marker skips every mul whose output reaches the marked node)
    cycles: int | None  # the cycles the frontier and the pick go by: Vela's where it compiled this set, else predicted
    db: float | None  # the worst output's SQNR at the worst step (the search's engine: simulation)
    db_predicted: float | None  # from the sites alone: nothing folded plus each folded site's effect
    within: bool = False  # within the budget of the most accurate point (TOSA's where measured, else the search's)
    frontier: bool = False  # no other point saves as many cycles with as many dB or more
    tosa_db: float | None = None  # the TOSA reference model's worst SQNR, where this set was lowered
    vela_cycles: int | None = None  # Vela's total, where it compiled this set
    predicted_cycles: int | None = None  # off's cycles minus the folded sites' prices (None: a price is unknown)
    cycles_from: str | None = None  # "vela" (measured) or "predicted": where ``cycles`` comes from

    json_derived = {"gap": lambda p: p.gap}  # for readers: how far the predictions were from the measurement
    json_order = ("folded", "markers", "cycles", "cycles_from", "predicted_cycles", "db", "db_predicted", "within",
                  "frontier", "tosa_db", "vela_cycles", "gap")

    @staticmethod
    def json_upgrade(d: dict) -> dict:
        """A point written before the prices were checked: ``cycles`` was always the prediction."""
        if "predicted_cycles" not in d and "cycles" in d:
            d = {**d, "predicted_cycles": d["cycles"]}
        if "cycles_from" not in d and "cycles" in d:
            d = {**d, "cycles_from": "predicted" if d["cycles"] is not None else None}
        return d

    @property
    def measured(self) -> bool:
        """Lowered for the accelerator: numbers from the TOSA reference model, cycles from Vela."""
        return self.vela_cycles is not None

    @property
    def gap(self) -> dict:
        """How far the predictions were from the measurement at this point, both ways: Vela minus the predicted
        cycles, TOSA minus the simulation's dB (None where a side is missing)."""
        return {"cycles": None if self.vela_cycles is None or self.predicted_cycles is None
                else self.vela_cycles - self.predicted_cycles,
                "db": None if self.tosa_db is None or self.db is None else self.tosa_db - self.db}


@dataclass(frozen=True, kw_only=True)
class PriceCheck(Record):
    """Whether the sites' prices add up: their sum against what ``upstream`` saves against ``off`` on Vela."""

    source: str  # "rows" (each site's own rows in Vela's table) or "lowered alone" (off minus the site alone)
    summed: int | None  # the prices of the sites upstream folds, summed (None: a price is unknown)
    totals: int  # off's cycles minus upstream's (Vela)
    adds_up: bool  # within 1%: then a set's cycles are predicted from the prices; else every set picked from was
    # priced by Vela on its own lowering
    how: str  # the same in words


@dataclass(frozen=True, kw_only=True)
class Against(Record):
    """The recommendation against one of the rules users run (``upstream``, ``off``), on TOSA and Vela."""

    rule: str
    folded: tuple[str, ...]
    cycles: int | None  # Vela
    tosa_db: float | None
    cycles_saved: int | None  # by the recommendation against this rule (negative: it spends more)
    db_change: float | None  # the recommendation's TOSA dB minus this rule's


@dataclass(frozen=True, kw_only=True)
class Advice(Record):
    """Which sites should fold on one accelerator, within a budget of dB: measured, then confirmed on TOSA."""

    target: str
    accelerator: Accelerator  # what every set was lowered for and priced on
    budget_db: float
    steps: int
    quantization: str
    search: str  # "exhaustive" (every set measured) or "greedy" (from both ends, each step measured)
    sites: tuple[SitePrice, ...]
    points: tuple[Point, ...]  # every set measured, in the order measured
    recommended: Point
    best_db: float | None  # the most accurate measured point's TOSA dB (the budget is counted from it)
    against: tuple[Against, ...]  # upstream, state-aware and off, on TOSA and Vela
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    # role -> the Engine that played it
    engines: dict[str, Engine] = field(default_factory=lambda: {"search": SEARCH_ENGINE, "confirm": CONFIRM_ENGINE})
    check: PriceCheck | None = None  # whether the sites' prices add up (None: written before they were checked)
    lowerings: int = 0  # the sets lowered for the accelerator, run on TOSA and priced by Vela (the ends included)
    compiler: str = ""  # what priced every cycle: Vela's version, the NPU, system config and memory mode (Cost.compiler)
    metric: str = "sqnr"  # the budget's measurement (inspector.metrics): every point's db, tosa_db and best_db are its
    # values (dB for sqnr), the budget_db an amount of it

    json_kind = "advice"
    json_format = "advice"
    # for readers: the recommendation's sites and markers, and how far its predictions were from the measurement
    json_derived = {"folded": lambda a: a.folded, "markers": lambda a: a.markers,
                    "prediction_gap": lambda a: a.prediction_gap}
    json_order = ("kind", "format", "target", "accelerator", "budget_db", "steps", "quantization", "search", "engines",
                  "folded", "markers", "best_db", "recommended", "sites", "points", "against", "prediction_gap",
                  "check", "lowerings", "compiler", "metric", "notes", "seconds")

    def __post_init__(self) -> None:  # names (as a file writes them) are looked up once, here
        object.__setattr__(self, "accelerator", accelerator_named(self.accelerator))
        object.__setattr__(self, "engines", {role: engine_of(e) for role, e in self.engines.items()})

    @property
    def budget(self) -> tuple[str, float]:
        """(the budget's measurement, the amount of it the advice could lose)."""
        return self.metric, self.budget_db

    @property
    def folded(self) -> tuple[str, ...]:
        """The site ids the recommendation folds."""
        return self.recommended.folded

    @property
    def markers(self) -> tuple[str, ...] | None:
        """The markers with which ``compare(model, [("state-aware", advice.markers)])`` folds exactly ``folded``
        (checked by running it; None when no markers can: then ``variant()`` is the advice's own rule)."""
        return self.recommended.markers

    @property
    def frontier(self) -> tuple[Point, ...]:
        """The points no other point beats on both cycles and dB, fewest cycles first."""
        return tuple(sorted((p for p in self.points if p.frontier), key=lambda p: (p.cycles is None, p.cycles or 0)))

    def price(self, site: str) -> SitePrice:
        for s in self.sites:
            if s.site == site:
                return s
        raise InspectorError(f"no site {site!r} in this advice; its sites: {', '.join(s.site for s in self.sites)}")

    def versus(self, rule: str) -> Against:
        for a in self.against:
            if a.rule == rule:
                return a
        raise InspectorError(f"the advice was not set against {rule!r}; it was set against "
                             f"{', '.join(a.rule for a in self.against)}")

    @property
    def prediction_gap(self) -> dict:
        """How far the search's numbers were from what confirmed them at the recommended point: TOSA minus the
        simulation (dB), Vela minus the prediction from the prices (cycles), the simulation minus the sum of the
        sites alone (dB)."""
        r = self.recommended
        return {**r.gap, "db_from_sites": None if r.db is None or r.db_predicted is None else r.db - r.db_predicted}

    def variant(self):
        """The variant that folds exactly the recommended set: ``("state-aware", markers)``, or, when no markers
        pick it, a variant of the rule that folds exactly it (unregistered; ``rule()`` keeps one)."""
        if self.markers is not None:
            return ("state-aware", self.markers)
        from .keep import set_rule  # the file writer sits beside this record
        return set_rule(self.folded)

    def rule(self, name: str | None = None, path: str | Path | None = None):
        """A rule to keep: written to ``path`` (default ``advice_<accelerator>.py`` in the working folder) as a
        guard that folds exactly the recommended set, registered, and loadable again with ``--rule FILE:NAME``."""
        from .keep import keep  # the file writer sits beside this record; reached only when a rule is kept
        return keep(self, name, path)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def to_dataframe(self, kind: str = "sites"):
        """A pandas DataFrame: ``"sites"`` (each site's prices), ``"points"`` (every set measured) or
        ``"against"`` (the recommendation against upstream and off)."""
        return dataframe(kind, {"sites": lambda: [s.to_dict() for s in self.sites],
                                "points": lambda: [dict(p.to_dict(), folded=", ".join(p.folded),
                                                        markers=None if p.markers is None else ", ".join(p.markers))
                                                   for p in self.points],
                                "against": lambda: [dict(a.to_dict(), folded=", ".join(a.folded))
                                                    for a in self.against]})

    def plot(self, ax=None, current: tuple[str, ...] | None = None):
        """The frontier: cycles against dB, one point per set measured, the recommendation and the budget marked
        (``current``: a set of site ids measured, drawn as the current decisions)."""
        return draw("plot", self, ax=ax, current=current)

    def to_markdown(self, limit: int | None = None) -> str:
        """A reply for an issue or a pull request: local paths redacted, within GitHub's comment limit."""
        return draw("markdown", self, limit=limit)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return draw("bundle", self)

    def __repr__(self) -> str:
        return (f"<Advice {self.target} on {self.accelerator} within {self.budget_db:g} dB: fold "
                f"{len(self.folded)} of {len(self.sites)} sites ({self.search}, {len(self.points)} sets measured)>")


__all__ = ["Advice", "Against", "Point", "PriceCheck", "SitePrice"]
