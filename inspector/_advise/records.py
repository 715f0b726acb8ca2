"""The advice's records: each site's price, each set of sites measured, the recommendation and what confirmed it.

Data only (nothing runs here): ``advise.py`` measures and fills them; ``present`` draws them. Every dB says the
engine that measured it; every cycle count says whether Vela counted it or it is predicted from the sites' prices.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .._base.data import check_format, dataframe, json_float, FORMAT
from .._base.errors import InspectorError
from .._base.display import draw
from .._cost.accelerators import Accelerator, accelerator_named
from .._numbers.engines import SIMULATION, TOSA, engine_of

SEARCH_ENGINE = SIMULATION  # what measures the sets (cheap); the TOSA reference model confirms
CONFIRM_ENGINE = TOSA


@dataclass(frozen=True)
class SitePrice:
    """One site's two prices: the cycles folding it buys, and what it does to the numbers in each direction."""

    site: str  # the site id
    cycles: int | None  # what folding it buys on Vela: its own rows, or off minus its lowering alone (Advice.check)
    how: str  # where ``cycles`` comes from, in words
    db_folded_alone: float | None  # worst dB folding only this site, minus nothing folded (simulation)
    db_kept_alone: float | None  # worst dB folding every other site, minus every site folded (simulation)
    reachable: bool = True  # state-aware with markers can fold it in the comparison's flow

    def to_dict(self) -> dict:
        return {"site": self.site, "cycles": self.cycles, "how": self.how,
                "db_folded_alone": _json(self.db_folded_alone), "db_kept_alone": _json(self.db_kept_alone),
                "reachable": self.reachable}

    @classmethod
    def from_dict(cls, d: dict) -> "SitePrice":
        return cls(d["site"], d["cycles"], d["how"], _float(d["db_folded_alone"]), _float(d["db_kept_alone"]),
                   bool(d.get("reachable", True)))


@dataclass(frozen=True)
class Point:
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

    def to_dict(self) -> dict:
        return {"folded": list(self.folded), "markers": None if self.markers is None else list(self.markers),
                "cycles": self.cycles, "cycles_from": self.cycles_from, "predicted_cycles": self.predicted_cycles,
                "db": _json(self.db), "db_predicted": _json(self.db_predicted), "within": self.within,
                "frontier": self.frontier, "tosa_db": _json(self.tosa_db), "vela_cycles": self.vela_cycles,
                "gap": {k: _json(v) if isinstance(v, float) else v for k, v in self.gap.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "Point":
        # written before the prices were checked: ``cycles`` was always the prediction
        predicted = d["predicted_cycles"] if "predicted_cycles" in d else d["cycles"]
        return cls(tuple(d["folded"]), None if d["markers"] is None else tuple(d["markers"]), d["cycles"],
                   _float(d["db"]), _float(d["db_predicted"]), bool(d["within"]), bool(d["frontier"]),
                   _float(d["tosa_db"]), d["vela_cycles"], predicted,
                   d.get("cycles_from", "predicted" if d["cycles"] is not None else None))


@dataclass(frozen=True)
class PriceCheck:
    """Whether the sites' prices add up: their sum against what ``upstream`` saves against ``off`` on Vela."""

    source: str  # "rows" (each site's own rows in Vela's table) or "lowered alone" (off minus the site alone)
    summed: int | None  # the prices of the sites upstream folds, summed (None: a price is unknown)
    totals: int  # off's cycles minus upstream's (Vela)
    adds_up: bool  # within 1%: then a set's cycles are predicted from the prices; else every set picked from was
    # priced by Vela on its own lowering
    how: str  # the same in words

    def to_dict(self) -> dict:
        return {"source": self.source, "summed": self.summed, "totals": self.totals, "adds_up": self.adds_up,
                "how": self.how}

    @classmethod
    def from_dict(cls, d: dict) -> "PriceCheck":
        return cls(str(d["source"]), d["summed"], int(d["totals"]), bool(d["adds_up"]), str(d["how"]))


@dataclass(frozen=True)
class Against:
    """The recommendation against one of the rules users run (``upstream``, ``off``), on TOSA and Vela."""

    rule: str
    folded: tuple[str, ...]
    cycles: int | None  # Vela
    tosa_db: float | None
    cycles_saved: int | None  # by the recommendation against this rule (negative: it spends more)
    db_change: float | None  # the recommendation's TOSA dB minus this rule's

    def to_dict(self) -> dict:
        return {"rule": self.rule, "folded": list(self.folded), "cycles": self.cycles, "tosa_db": _json(self.tosa_db),
                "cycles_saved": self.cycles_saved, "db_change": _json(self.db_change)}

    @classmethod
    def from_dict(cls, d: dict) -> "Against":
        return cls(d["rule"], tuple(d["folded"]), d["cycles"], _float(d["tosa_db"]), d["cycles_saved"],
                   _float(d["db_change"]))


@dataclass(frozen=True)
class Advice:
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
    engines: dict = field(default_factory=lambda: {"search": SEARCH_ENGINE, "confirm": CONFIRM_ENGINE})
    check: PriceCheck | None = None  # whether the sites' prices add up (None: written before they were checked)
    lowerings: int = 0  # the sets lowered for the accelerator, run on TOSA and priced by Vela (the ends included)
    compiler: str = ""  # what priced every cycle: Vela's version, the NPU, system config and memory mode (Cost.compiler)
    metric: str = "sqnr"  # the budget's measurement (inspector.metrics): every point's db, tosa_db and best_db are its
    # values (dB for sqnr), the budget_db an amount of it

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

    def rule(self, name: str | None = None, path: "str | Path | None" = None):
        """A rule to keep: written to ``path`` (default ``advice_<accelerator>.py`` in the working folder) as a
        guard that folds exactly the recommended set, registered, and loadable again with ``--rule FILE:NAME``."""
        from .keep import keep  # the file writer sits beside this record; reached only when a rule is kept
        return keep(self, name, path)

    def to_dict(self) -> dict:
        return {"kind": "advice", "format": FORMAT, "target": self.target, "accelerator": self.accelerator.name,
                "budget_db": self.budget_db, "steps": self.steps, "quantization": self.quantization,
                "search": self.search, "engines": {role: e.name for role, e in self.engines.items()},
                "folded": list(self.folded),
                "markers": None if self.markers is None else list(self.markers), "best_db": _json(self.best_db),
                "recommended": self.recommended.to_dict(), "sites": [s.to_dict() for s in self.sites],
                "points": [p.to_dict() for p in self.points], "against": [a.to_dict() for a in self.against],
                "prediction_gap": {k: _json(v) if isinstance(v, float) else v for k, v in self.prediction_gap.items()},
                "check": None if self.check is None else self.check.to_dict(), "lowerings": self.lowerings,
                "compiler": self.compiler, "metric": self.metric,
                "notes": list(self.notes), "seconds": self.seconds}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict) -> "Advice":
        check_format(d, "advice")
        if d.get("kind") != "advice":
            raise InspectorError(f"not an advice (kind {d.get('kind')!r}): give what Advice.to_dict() wrote")
        return cls(d["target"], d["accelerator"], float(d["budget_db"]), int(d["steps"]), d["quantization"],
                   d["search"], tuple(SitePrice.from_dict(s) for s in d["sites"]),
                   tuple(Point.from_dict(p) for p in d["points"]), Point.from_dict(d["recommended"]),
                   _float(d["best_db"]), tuple(Against.from_dict(a) for a in d["against"]), tuple(d["notes"]),
                   float(d.get("seconds", 0.0)), dict(d.get("engines", {})),
                   None if d.get("check") is None else PriceCheck.from_dict(d["check"]), int(d.get("lowerings", 0)),
                   str(d.get("compiler", "")), str(d.get("metric", "sqnr")))

    def to_dataframe(self, kind: str = "sites"):
        """A pandas DataFrame: ``"sites"`` (each site's prices), ``"points"`` (every set measured) or
        ``"against"`` (the recommendation against upstream and off)."""
        return dataframe(kind, {"sites": lambda: [s.to_dict() for s in self.sites],
                                "points": lambda: [dict(p.to_dict(), folded=", ".join(p.folded),
                                                        markers=None if p.markers is None else ", ".join(p.markers))
                                                   for p in self.points],
                                "against": lambda: [dict(a.to_dict(), folded=", ".join(a.folded))
                                                    for a in self.against]})

    def plot(self, ax=None, current: "tuple[str, ...] | None" = None):
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


def _json(v):
    return None if v is None else json_float(v)


def _float(v):
    if v is None:
        return None
    if isinstance(v, str):
        return float(v)  # json_float writes inf/nan as strings
    return float(v)


__all__ = ["Advice", "Against", "Point", "PriceCheck", "SitePrice"]
