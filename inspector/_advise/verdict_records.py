"""The verdict's records: per network, where each flow of executorch 1.5.1 folds, what each rule decides there, and
what skipping the carried-state sites costs on each accelerator; figures a pull request published, set beside ours.

Data only (nothing runs here): ``verdict.py`` measures and fills them; ``present/verdict.py`` writes the words,
tables and the Markdown reply from them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from .._base.codec import Record, as_objects, codec
from .._base.data import read_int, read_list, read_str
from .._base.display import draw

# The rows of a flow's decisions, in the order a reply shows them (``Decision.key``).
UPSTREAM = "upstream"  # the installed pass
STRUCTURAL = "structural check"  # state-aware without a marker: PR #21234's signature check alone
MARKER = "marker"  # state-aware, a marker on each site feeding state, set on the graph the pass receives
MARKER_ON_PROGRAM = "marker on the exported program"  # the same marker set where a model author sets it
STRICT = "state-aware-strict"  # this project's guard: in-place writes too


@dataclass(frozen=True, kw_only=True)
class Decision(Record):
    """What one rule decided in one flow: the sites it let the installed pass fold."""

    key: str  # UPSTREAM, STRUCTURAL, MARKER, MARKER_ON_PROGRAM or STRICT
    rule: str  # the rule that ran: upstream, state-aware (with markers), state-aware-strict
    folded: tuple[str, ...]  # the site ids folded in this flow
    skipped: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (site id, its reason codes) of the sites not folded
    how: str = ""  # what measured it: the real flow, or the installed pass on the graph the flow hands it


@dataclass(frozen=True, kw_only=True)
class Flow(Record):
    """One flow of the installed executorch for one network: where the installed pass folds, and each rule's
    decision there."""

    name: str  # "INT" (quantized: every Ethos-U, tosa-int) or "FP" (TOSA-1.0+FP, nothing quantized)
    accelerator: str  # whose flow (the FP flow: tosa-fp)
    spec: str  # the TOSA specification it lowers for ("" if it failed before knowing)
    folds: dict[str, int]  # upstream's folds per phase of the flow: {"tfa": n, "lowering": m}
    calibrated: bool  # the flow calibrates observers (INT); the FP flow quantizes nothing
    decisions: tuple[Decision, ...] = ()  # one per rule, in the order of the keys above
    notes: tuple[str, ...] = ()  # what the reader must know about this flow
    error: str | None = None  # why the flow could not be measured (one line; the other flows stand)

    def decision(self, key: str) -> Decision | None:
        """The decision of ``key`` (UPSTREAM, STRUCTURAL, ...) in this flow, or None when not measured."""
        return next((d for d in self.decisions if d.key == key), None)


@dataclass(frozen=True, kw_only=True)
class Figures(Record):
    """One variant's numbers on one accelerator: Vela's cycles and the TOSA reference model's errors."""

    label: str  # the variant as a reply names it
    folded: tuple[str, ...]  # the sites it folded (at tfa)
    cycles: int | None  # Vela's total estimate (None: no NPU, or no cost)
    worst_db: float | None  # the worst output's SQNR at its worst step
    last_db: float | None  # the worst output's SQNR at the last step
    max_abs: float | None  # max |quantized - float| over every output and step
    mean_abs: float | None  # mean |quantized - float| over every output and step (the mean of the per-step means)
    task: tuple[tuple[str, float | None], ...] = ()  # the task's measures over the run (accuracy %, decision shares)
    error: str | None = None  # why this variant has no numbers
    step_db: tuple[float | None, ...] = ()  # the worst output's SQNR at each step, in order

    json_derived = {"mean_db": lambda f: f.mean_db}  # for readers: the mean over the steps
    json_order = ("label", "folded", "cycles", "worst_db", "last_db", "max_abs", "mean_abs", "task", "error", "mean_db",
                  "step_db")

    def value(self, name: str) -> float | None:
        """The task measure ``name`` over the run (None: not measured)."""
        return next((v for k, v in self.task if k == name), None)

    @property
    def mean_db(self) -> float | None:
        """The mean over the steps of the worst output's SQNR (None: not measured; an infinite step is left out)."""
        finite = [x for x in self.step_db if x is not None and math.isfinite(x)]
        return sum(finite) / len(finite) if finite else None


@dataclass(frozen=True, kw_only=True)
class OnAccelerator(Record):
    """One network on one accelerator: upstream, skipping the carried-state sites, and the fold after calibration."""

    accelerator: str  # the accelerator's name
    compiler: str  # the compiler settings Vela's cycles were made under ("" without an NPU)
    upstream: Figures  # the installed pass as it is
    skipped: Figures | None  # state-aware with a marker on every site feeding state (None: no such site)
    stale: Figures | None  # upstream's fold applied after calibration: not a 1.5.1 flow (None: see stale_note)
    stale_note: str = ""  # why there is no such variant, or what it is
    # stale.ObservedSite per site: what the observers of the INT flow calibrate
    observed: tuple = field(default=(), metadata=codec(read=lambda v: _observed(v)))
    graphs: Any = field(default=None, repr=False, compare=False,
                        metadata=codec(kept=False))  # stale.Calibrated: the calibrated graphs (None: none)


@dataclass(frozen=True, kw_only=True)
class Published(Record):
    """Figures a pull request published for a network, set beside ours (read from its description, never computed
    here: another engine, another recording)."""

    target: str  # the network they are set beside ("sample:silero_vad")
    source: str  # "PR #22172"
    url: str  # where they were published
    engine: str  # what produced them, in words
    frames: int  # how many output frames they compared
    max_abs: float  # max |error| they report
    mean_abs: float  # mean |error| they report
    threshold: float  # the decision threshold they counted mismatches at
    decisions_changed: int  # the mismatches they report at that threshold

    @property
    def measure(self) -> str:
        """The measurement that counts their mismatches here (``decision-mismatch@0.55``)."""
        return f"decision-mismatch@{self.threshold:g}"


@dataclass(frozen=True, kw_only=True)
class Network(Record):
    """One network's verdict: its sites, each flow, each accelerator's numbers."""

    target: str  # the network's name
    steps: int  # steps (frames, calls) every variant ran
    calibration: str  # how the quantizer was calibrated
    stream: str  # the stream every step was fed a frame of ("" without one)
    sites: tuple[str, ...]  # every conv->mul site at tfa
    state_sites: tuple[str, ...]  # the sites whose mul output reaches carried state (the markers' sites)
    flows: tuple[Flow, ...]  # the INT flow per accelerator, then the FP flow
    accelerators: tuple[OnAccelerator, ...]  # the numbers per accelerator
    float_task: tuple[tuple[str, float | None], ...] = ()  # the float model's own task measures (accuracy %)
    published: Published | None = None  # figures a pull request published for it

    def flow(self, name: str, accelerator: str | None = None) -> Flow | None:
        """The flow ``name`` ("INT" or "FP"), on ``accelerator`` (default: the first measured)."""
        return next((f for f in self.flows if f.name == name and accelerator in (None, f.accelerator)), None)

    def on(self, accelerator: str) -> OnAccelerator | None:
        """This network's numbers on ``accelerator`` (its name), or None."""
        return next((a for a in self.accelerators if a.accelerator == accelerator), None)


@dataclass(frozen=True, kw_only=True)
class Verdict(Record):
    """What PR #21234's guard does and costs in the installed executorch, measured on each network: ``answer()`` in
    words from these numbers, ``to_markdown()`` the reply for the pull request."""

    networks: tuple[Network, ...]
    accelerators: tuple[str, ...]  # the INT accelerators measured, in order
    versions: tuple[tuple[str, str], ...] = ()  # (package, version) of the stack that measured it
    quantization: str = "a8w8"  # what every INT variant ran under
    # Where the installed pass manager builds the fold pass: (file relative to executorch, line, the line's code)
    pointers: tuple[tuple[str, int, str], ...] = field(default=(), metadata=as_objects(
        "file", "line", "code", read=(read_str, read_int, read_str)))
    guard: str = ""  # what produced the structural-check and marker columns (the PR's pass file, or the re-implementation)
    # marker_reach.MarkerReach records: where a marker a model author sets reaches the pass. The reply keeps a row
    # of each (what was asked and what was seen), not its trail of every point read: a verdict is written for a
    # reviewer and not read back, so this field is written only.
    marker_reach: tuple = field(default=(), metadata=codec(write=lambda v: [
        {"flow": r.flow, "call": r.call, "placement": r.placement, "where": r.where, "reached": r.reached,
         "pr_reads": r.pr_reads, "error": r.error} for r in v]))

    json_kind = "verdict"
    json_format = "verdict"
    json_order = ("format", "kind", "accelerators", "versions", "quantization", "pointers", "guard", "marker_reach",
                  "networks")

    def network(self, target: str) -> Network:
        """The network named ``target`` (as given, or its name)."""
        for n in self.networks:
            if target in (n.target, n.target.removeprefix("sample:")):
                return n
        raise KeyError(f"no network {target!r}; networks: {', '.join(n.target for n in self.networks)}")

    def answer(self) -> list[str]:
        """The verdict in sentences, each built from the numbers above."""
        return draw("verdict_answer", self)

    def to_json(self) -> str:
        """``to_dict()`` as strict JSON."""
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def to_markdown(self, limit: int | None = None) -> str:
        """The reply a reviewer can paste into the pull request (local paths redacted, within GitHub's limit)."""
        return draw("markdown", self, limit=limit)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return draw("bundle", self)

    def __repr__(self) -> str:
        return f"<Verdict on {', '.join(n.target for n in self.networks)}: {', '.join(self.accelerators)}>"


def _observed(v) -> tuple:
    """The observed sites of a verdict read back (stale.ObservedSite; imported here: it runs the flow)."""
    from .._numbers.stale import ObservedSite  # lazy: stale runs the flow, and these records sit below it

    return tuple(ObservedSite.from_dict(x) for x in read_list(v))


__all__ = ["Decision", "Figures", "Flow", "MARKER", "MARKER_ON_PROGRAM", "Network", "OnAccelerator", "Published",
           "STRICT", "STRUCTURAL", "UPSTREAM", "Verdict"]
