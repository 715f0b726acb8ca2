"""What a sweep is made of: its constants, its progress bars, the frozen records of its tables
(``SweepModel``, ``SweepRow``, ``SweepVariant``, ``ChangedSite``) and the helpers its tables share."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Callable

from .._base.codec import Record, codec
from .._base.errors import InspectorError
from .._cost.accelerators import TOSA_INT, Accelerator, accelerator_named
from .._numbers.engines import TOSA, Engine, engine_of, engines

UNCHANGED_DB = 0.01  # an SQNR difference below this is "unchanged"
# The quantized (TOSA INT) flow folds in the quantizer's transform-for-annotation, before calibration,
# and finds nothing left to fold in lowering: its numbers follow the decisions at this stage only.
NUMBERS_STAGE = "tfa"

Progress = Callable[["tuple[SweepBar, ...]"], None]


@dataclass(frozen=True, kw_only=True)
class SweepBar:
    """One phase's progress (the CLI draws one bar per phase)."""

    phase: str  # "models analysed" or "variants compared"
    done: float  # tasks finished (fractions of running ones included)
    total: int  # tasks in this phase
    eta: float | None  # seconds left, estimated from this phase's pace (None: not known yet)

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


def sqnr_delta(value, base):
    if value is None or base is None:
        return None
    value, base = float(value), float(base)
    if math.isinf(value) and math.isinf(base) and value == base:
        return 0.0
    if math.isnan(value) or math.isnan(base):
        return None
    return value - base


def table_number(v) -> float:
    """A table cell: a float, NaN where there is no number (pandas keeps the column numeric)."""
    return float("nan") if v is None else float(v)


# ---------------------------------------------------------------- the records a Sweep holds
#
# Each writes exactly the JSON the sweep has always written (``to_dict``), and the two that are kept
# in the result store read it back (``from_dict``), checking every field: a record that does not read is
# computed again, never trusted.


def _bad(what: str, data) -> InspectorError:
    return InspectorError(f"not a sweep {what} record: {str(data)[:80]}")


def _text(data: dict, key: str, what: str, optional: bool = False):
    value = data.get(key)
    if isinstance(value, str) or (optional and value is None):
        return value
    raise _bad(what, data)


def _texts(value, what: str, data) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise _bad(what, data)


def _number(value, what: str, data) -> float | None:
    """A number as JSON holds it: a float, an int, null, or one of "inf", "-inf", "nan"."""
    if value is None:
        return None
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        return float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise _bad(what, data)


def _whole(value, what: str, data, optional: bool = False) -> int | None:
    if (value is None and optional) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise _bad(what, data)


def _mapping(value, what: str, data) -> dict:
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return dict(value)
    raise _bad(what, data)


@dataclass(frozen=True, kw_only=True)
class SweepModel(Record):
    """One model of a sweep: whether it was analysed, and what that cost."""

    target: str  # the model as named: sample:NAME, file.py:Class, a .pt2 path, a TOML entry's name
    error: str | None = None  # why it has no rows (one line); None when it was analysed
    fingerprint: str | None = None  # its program's fingerprint (keys its rows and variants in the store)
    timings: dict = field(default_factory=dict)  # seconds per phase of its analysis (load, stage tfa, ...)


@dataclass(frozen=True, kw_only=True)
class SweepRow:
    """One model at one stage under one rule: its sites and what the rule decided at each."""

    target: str  # the model
    stage: str  # aten, tfa or edge
    rule: str  # the rule's name
    sites: int | None = None  # sites found at this stage (None: the stage could not be decided)
    folded: tuple[str, ...] = ()  # ids of the sites the rule folds
    skipped: tuple[str, ...] = ()  # ids of the sites it skips
    reasons: dict = field(default_factory=dict)  # skipped site id -> its reason codes (a tuple)
    # site id -> {"module", "location", "mul"}: where each site is (kept in the store, not in the JSON)
    where: dict = field(default_factory=dict)
    error: str | None = None  # why this row has no decisions (one line)
    seconds: float | None = None  # time to decide (None on a row that failed)

    # Written by hand: the store's row has keys only for what the row has (a failed row no seconds, ``where``
    # only in the store's form), and its reader names the row in one InspectorError.
    def to_dict(self, where: bool = False) -> dict:
        """The row's JSON; ``where=True`` adds where each site is (the form the store keeps)."""
        decided = {"sites": self.sites, "folded": list(self.folded), "skipped": list(self.skipped),
                   "reasons": {k: list(v) for k, v in self.reasons.items()}}
        head = {"target": self.target, "stage": self.stage, "rule": self.rule}
        if self.error is not None:
            return {**head, "error": self.error, **decided}
        return {**head, **decided, **({"where": {k: dict(v) for k, v in self.where.items()}} if where else {}),
                "error": None, **({"seconds": self.seconds} if self.seconds is not None else {})}

    @classmethod
    def from_dict(cls, data) -> SweepRow:
        """A row as ``to_dict(where=True)`` wrote it (or a sweep of format 1, which said "policy"); InspectorError
        when it is not one."""
        if not isinstance(data, dict):
            raise _bad("row", data)
        data = renamed_rule(data)
        sites = _whole(data.get("sites"), "row", data, optional=True)
        reasons = _mapping(data.get("reasons", {}), "row", data)
        where = _mapping(data.get("where", {}), "row", data)
        if not all(isinstance(v, dict) for v in where.values()):
            raise _bad("row", data)
        return cls(target=_text(data, "target", "row"), stage=_text(data, "stage", "row"),
                   rule=_text(data, "rule", "row"), sites=sites, folded=_texts(data.get("folded", []), "row", data),
                   skipped=_texts(data.get("skipped", []), "row", data),
                   reasons={k: _texts(v, "row", data) for k, v in reasons.items()},
                   where={k: dict(v) for k, v in where.items()}, error=_text(data, "error", "row", optional=True),
                   seconds=_number(data.get("seconds"), "row", data))


# The one reason code renamed with the word (format 1 of the sweep's records wrote it).
_OLD_REASONS = {"policy-off": "rule-off"}


def renamed_rule(data: dict) -> dict:
    """A record of format 1 (its rule under "policy", the reason code "policy-off") as this format writes it."""
    if "policy" not in data or "rule" in data:
        return data
    data = {("rule" if k == "policy" else k): v for k, v in data.items()}
    if isinstance(data.get("reasons"), dict):
        data["reasons"] = {site: [_OLD_REASONS.get(c, c) for c in codes] if isinstance(codes, list) else codes
                           for site, codes in data["reasons"].items()}
    return data


def _engine(data: dict) -> Engine:
    """The registered engine a variant's JSON names (InspectorError on a name no engine has)."""
    name = _text(data, "engine", "variant")
    if name not in engines:
        raise _bad("variant", data)
    return engines.get(name)


# A variant's measured fields, in the order of its JSON; a variant that did not run has none of them.
_MEASURED = ("worst_step", "max_abs_error", "last_step", "outputs", "folds", "folded", "not_delegated", "timings",
             "tosa_spec", "cached")


@dataclass(frozen=True, kw_only=True)
class SweepVariant:
    """One variant of one model on the TOSA INT reference model (or the simulation): its numbers,
    or why it has none."""

    target: str  # the model
    variant: str  # the variant's label (its rule, markers, quantization)
    rule: str  # its rule's name
    steps: int  # recurrent steps compared
    stage: str = NUMBERS_STAGE  # the stage whose decisions its numbers follow
    engine: Engine = TOSA  # what computed the numbers: the TOSA reference model or the simulation
    markers: tuple[str, ...] = ()  # carried-state markers of the variant
    quantization: str = "a8w8"  # the quantization it ran under
    overrides: dict = field(default_factory=dict)  # node -> "float" or a quantization name
    sqnr_db_last: float | None = None  # SQNR at the last step (dB), the worst output's
    sqnr_db_worst: float | None = None  # SQNR at the worst step (dB), the worst output's
    worst_step: int | None = None  # the step of sqnr_db_worst
    max_abs_error: float | None = None  # max |quantized - float| over outputs and steps
    last_step: int | None = None  # the last step compared (0-based)
    outputs: tuple = ()  # per output: output, sqnr_db_last, sqnr_db_worst, worst_step, max_abs_error, ...
    folds: dict = field(default_factory=dict)  # muls the pass folded per stage ({"tfa": n, "lowering": n})
    folded: tuple[str, ...] = ()  # ids of the sites it folded
    not_delegated: int = 0  # nodes left outside the TOSA delegate
    timings: dict = field(default_factory=dict)  # seconds per phase ({} when shared or answered from a cache)
    tosa_spec: str = "TOSA-1.0+INT"  # the TOSA specification it was lowered for
    cached: bool = False  # answered by a warm worker or the result store
    error: str | None = None  # why it has no numbers (one line); its measured fields are then absent
    shared_with: str | None = None  # the variant whose result it shares (equal fold decisions)
    confirmed: bool | None = None  # in a confirmed simulated sweep: run on the TOSA reference (None: not asked)
    accelerator: Accelerator = TOSA_INT  # what it was lowered for
    cycles: int | None = None  # on an NPU: Vela's total cycles (its estimate); None: no cost
    npu_ops: int | None = None  # on an NPU: Vela's NPU operations
    compiler: str | None = None  # on an NPU: the compiler settings of those cycles (``Cost.compiler``)
    measures: dict = field(default_factory=dict)  # the task's own measurements (accuracy, decision-mismatch@T):
    # name -> its value over the run, the worst output's (``VariantResult.overall``)

    def __post_init__(self) -> None:  # names (as its JSON writes them) are looked up once, here
        object.__setattr__(self, "engine", engine_of(self.engine))
        object.__setattr__(self, "accelerator", accelerator_named(self.accelerator))

    # Written by hand: a variant's measured keys are there only when it ran (a failed one has none, a
    # confirmed one says so), as sweeps of format 1 to 3 wrote them; its reader names the variant in one InspectorError.
    def to_dict(self) -> dict:
        d = {"target": self.target, "stage": self.stage, "engine": self.engine.name, "variant": self.variant,
             "rule": self.rule, "markers": list(self.markers), "quantization": self.quantization,
             "overrides": dict(self.overrides), "steps": self.steps, "sqnr_db_last": self.sqnr_db_last,
             "sqnr_db_worst": self.sqnr_db_worst}
        if self.error is None:
            d.update({k: getattr(self, k) for k in _MEASURED})
            d.update(outputs=[dict(o) for o in self.outputs], folds=dict(self.folds), folded=list(self.folded),
                     timings=dict(self.timings), error=None, shared_with=self.shared_with)
        else:
            d["error"] = self.error
        if self.confirmed is not None:
            d["confirmed"] = self.confirmed
        d.update(accelerator=self.accelerator.name, cycles=self.cycles, npu_ops=self.npu_ops, compiler=self.compiler)
        if self.measures:
            d["measures"] = dict(self.measures)
        return d

    @classmethod
    def from_dict(cls, data) -> SweepVariant:
        """A variant as ``to_dict`` wrote it (or a sweep of format 1); InspectorError when it is not one. Its engine
        is the registered one it names; its accelerator too, or a stand-in for one this process does not know
        (``accelerators.accelerator_named``)."""
        if not isinstance(data, dict):
            raise _bad("variant", data)
        data = renamed_rule(data)
        error = _text(data, "error", "variant", optional=True)
        fields = dict(target=_text(data, "target", "variant"), variant=_text(data, "variant", "variant"),
                      rule=_text(data, "rule", "variant"), steps=_whole(data.get("steps"), "variant", data),
                      stage=_text(data, "stage", "variant"),
                      engine=_engine(data), markers=_texts(data.get("markers"), "variant", data),
                      quantization=_text(data, "quantization", "variant"),
                      overrides=_mapping(data.get("overrides"), "variant", data),
                      sqnr_db_last=_number(data.get("sqnr_db_last"), "variant", data),
                      sqnr_db_worst=_number(data.get("sqnr_db_worst"), "variant", data), error=error)
        if data.get("confirmed") is not None:
            if not isinstance(data["confirmed"], bool):
                raise _bad("variant", data)
            fields["confirmed"] = data["confirmed"]
        written = _text({"a": data.get("accelerator", TOSA_INT.name)}, "a", "variant")
        fields.update(accelerator=accelerator_named(written),
                      cycles=_whole(data.get("cycles"), "variant", data, optional=True),
                      npu_ops=_whole(data.get("npu_ops"), "variant", data, optional=True),
                      compiler=_text(data, "compiler", "variant", optional=True),
                      measures={_text({"k": k}, "k", "variant"): _number(v, "variant", data)
                                for k, v in _mapping(data.get("measures", {}), "variant", data).items()})
        if error is not None:
            return cls(**fields)
        if any(k not in data for k in _MEASURED) or not isinstance(data["outputs"], list) \
                or not all(isinstance(o, dict) for o in data["outputs"]) or not isinstance(data["cached"], bool):
            raise _bad("variant", data)
        return cls(**fields, worst_step=_whole(data["worst_step"], "variant", data, optional=True),
                   max_abs_error=_number(data["max_abs_error"], "variant", data),
                   last_step=_whole(data["last_step"], "variant", data, optional=True),
                   outputs=tuple(data["outputs"]), folds=_mapping(data["folds"], "variant", data),
                   folded=_texts(data["folded"], "variant", data),
                   not_delegated=_whole(data["not_delegated"], "variant", data),
                   timings=_mapping(data["timings"], "variant", data), tosa_spec=_text(data, "tosa_spec", "variant"),
                   cached=data["cached"], shared_with=_text(data, "shared_with", "variant", optional=True))


@dataclass(frozen=True, kw_only=True)
class ChangedSite(Record):
    """A site whose decision differs between a sweep's rules, at one stage of one model."""

    target: str  # the model
    stage: str  # the stage the decisions differ at
    site: str  # the site's id
    decisions: dict  # rule -> "fold", "skip" or "absent", the rules in the sweep's order
    reasons: dict  # rule -> the reason codes it skips the site for (a list)
    module: str = ""  # the site's module path
    location: str = ""  # file:line of the mul
    # At tfa, where the quantized flow folds: rule -> its model's SQNR at the last step, and rule ->
    # that minus the baseline's (None: no numbers here)
    sqnr_db_last: dict | None = field(default=None, metadata=codec(omit=True))
    sqnr_delta_db: dict | None = field(default=None, metadata=codec(omit=True))
    # On an NPU accelerator (the sweep's first that has a cost): rule -> its model's cycles (Vela's estimate),
    # and rule -> that minus the baseline's: what the rule change costs (+) or saves (-) in cycles
    cycles: dict | None = field(default=None, metadata=codec(omit=True))
    cycles_delta: dict | None = field(default=None, metadata=codec(omit=True))


def sqnr_by_rule(variants, accelerator: Accelerator | None = None) -> dict[str, dict[str, float]]:
    """model -> rule -> SQNR at the last step, from the variants that ran without markers (on ``accelerator``
    only, if given: a sweep over several accelerators has a number per accelerator)."""
    out: dict[str, dict[str, float]] = {}
    for v in variants:
        if v.error is None and not v.markers and (accelerator is None or v.accelerator == accelerator):
            out.setdefault(v.target, {}).setdefault(v.rule, v.sqnr_db_last)
    return out


def cycles_by_rule(variants, accelerator: Accelerator) -> dict[str, dict[str, int]]:
    """model -> rule -> Vela's total cycles on ``accelerator``, from the variants that ran without markers."""
    out: dict[str, dict[str, int]] = {}
    for v in variants:
        if v.error is None and not v.markers and v.accelerator == accelerator and v.cycles is not None:
            out.setdefault(v.target, {}).setdefault(v.rule, v.cycles)
    return out


def costed_accelerator(variants) -> Accelerator | None:
    """The first accelerator some variant has cycles on (None: no variant was priced)."""
    return next((v.accelerator for v in variants if v.error is None and v.cycles is not None), None)


def compilers(variants) -> dict[Accelerator, str]:
    """accelerator -> the compiler settings its cycles were made under (``Cost.compiler``), for every accelerator
    some variant has cycles on; a variant written before the settings were kept says they were not recorded."""
    out: dict[str, str] = {}
    for v in variants:
        if v.error is None and v.cycles is not None:
            out.setdefault(v.accelerator, v.compiler or f"{v.accelerator} (compiler settings not recorded)")
    return out


def changed_sites(rules, rows, variants) -> tuple[ChangedSite, ...]:
    """Every site whose decision differs between the rules, per model and stage. Only a change at
    tfa carries SQNR figures: the quantized flow folds there, so a change at aten or edge alone does
    not reach its numbers."""
    by_model: dict[tuple[str, str], dict[str, SweepRow]] = {}
    for row in rows:
        if row.error is None:
            by_model.setdefault((row.target, row.stage), {})[row.rule] = row
    sqnr = sqnr_by_rule(variants, variants[0].accelerator if variants else None)
    priced = costed_accelerator(variants)
    spent = cycles_by_rule(variants, priced) if priced else {}
    out = []
    for (target, stage), mine in by_model.items():
        if len(mine) < 2:
            continue
        order = [p for p in rules if p in mine]
        site_ids = dict.fromkeys(s for p in order for s in (*mine[p].folded, *mine[p].skipped))
        for site in site_ids:
            decisions = {p: ("fold" if site in mine[p].folded else "skip" if site in mine[p].skipped else "absent")
                         for p in order}
            if len(set(decisions.values())) < 2:
                continue
            where = next((mine[p].where[site] for p in order if site in mine[p].where), {})
            numbers = {}
            if sqnr.get(target) and stage == NUMBERS_STAGE:
                values = sqnr[target]
                base = values.get(rules[0])
                numbers = dict(sqnr_db_last={p: values.get(p) for p in order},
                               sqnr_delta_db={p: sqnr_delta(values.get(p), base) for p in order[1:]})
            if spent.get(target) and stage == NUMBERS_STAGE:
                counts = spent[target]
                base_cycles = counts.get(rules[0])
                numbers.update(cycles={p: counts.get(p) for p in order},
                               cycles_delta={p: (counts[p] - base_cycles if p in counts and base_cycles is not None
                                                 else None) for p in order[1:]})
            out.append(ChangedSite(target=target, stage=stage, site=site, decisions=decisions,
                                   reasons={p: list(mine[p].reasons.get(site, [])) for p in order},
                                   module=where.get("module", ""), location=where.get("location", ""), **numbers))
    return tuple(out)
