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

from .._base.data import FORMAT, json_float
from .._base.display import draw

# The rows of a flow's decisions, in the order a reply shows them (``Decision.key``).
UPSTREAM = "upstream"  # the installed pass
STRUCTURAL = "structural check"  # state-aware without a marker: PR #21234's signature check alone
MARKER = "marker"  # state-aware, a marker on each site feeding state, set on the graph the pass receives
MARKER_ON_PROGRAM = "marker on the exported program"  # the same marker set where a model author sets it
STRICT = "state-aware-strict"  # this project's guard: in-place writes too


@dataclass(frozen=True)
class Decision:
    """What one rule decided in one flow: the sites it let the installed pass fold."""

    key: str  # UPSTREAM, STRUCTURAL, MARKER, MARKER_ON_PROGRAM or STRICT
    rule: str  # the rule that ran: upstream, state-aware (with markers), state-aware-strict
    folded: tuple[str, ...]  # the site ids folded in this flow
    skipped: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (site id, its reason codes) of the sites not folded
    how: str = ""  # what measured it: the real flow, or the installed pass on the graph the flow hands it

    def to_dict(self) -> dict:
        return {"key": self.key, "rule": self.rule, "folded": list(self.folded),
                "skipped": {s: list(r) for s, r in self.skipped}, "how": self.how}


@dataclass(frozen=True)
class Flow:
    """One flow of the installed executorch for one network: where the installed pass folds, and each rule's
    decision there."""

    name: str  # "INT" (quantized: every Ethos-U, tosa-int) or "FP" (TOSA-1.0+FP, nothing quantized)
    accelerator: str  # whose flow (the FP flow: tosa-fp)
    spec: str  # the TOSA specification it lowers for ("" if it failed before knowing)
    folds: dict  # upstream's folds per phase of the flow: {"tfa": n, "lowering": m}
    calibrated: bool  # the flow calibrates observers (INT); the FP flow quantizes nothing
    decisions: tuple[Decision, ...] = ()  # one per rule, in the order of the keys above
    notes: tuple[str, ...] = ()  # what the reader must know about this flow
    error: str | None = None  # why the flow could not be measured (one line; the other flows stand)

    def decision(self, key: str) -> Decision | None:
        """The decision of ``key`` (UPSTREAM, STRUCTURAL, ...) in this flow, or None when not measured."""
        return next((d for d in self.decisions if d.key == key), None)

    def to_dict(self) -> dict:
        return {"name": self.name, "accelerator": self.accelerator, "spec": self.spec, "folds": dict(self.folds),
                "calibrated": self.calibrated, "decisions": [d.to_dict() for d in self.decisions],
                "notes": list(self.notes), "error": self.error}


@dataclass(frozen=True)
class Figures:
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

    def value(self, name: str) -> float | None:
        """The task measure ``name`` over the run (None: not measured)."""
        return next((v for k, v in self.task if k == name), None)

    @property
    def mean_db(self) -> float | None:
        """The mean over the steps of the worst output's SQNR (None: not measured; an infinite step is left out)."""
        finite = [x for x in self.step_db if x is not None and math.isfinite(x)]
        return sum(finite) / len(finite) if finite else None

    def to_dict(self) -> dict:
        return {"label": self.label, "folded": list(self.folded), "cycles": self.cycles,
                "worst_db": json_float(self.worst_db), "last_db": json_float(self.last_db),
                "max_abs": json_float(self.max_abs), "mean_abs": json_float(self.mean_abs),
                "task": {k: json_float(v) for k, v in self.task}, "error": self.error,
                "mean_db": json_float(self.mean_db), "step_db": [json_float(x) for x in self.step_db]}


@dataclass(frozen=True)
class OnAccelerator:
    """One network on one accelerator: upstream, skipping the carried-state sites, and the fold after calibration."""

    accelerator: str  # the accelerator's name
    compiler: str  # the compiler settings Vela's cycles were made under ("" without an NPU)
    upstream: Figures  # the installed pass as it is
    skipped: Figures | None  # state-aware with a marker on every site feeding state (None: no such site)
    stale: Figures | None  # upstream's fold applied after calibration: not a 1.5.1 flow (None: see stale_note)
    stale_note: str = ""  # why there is no such variant, or what it is
    observed: tuple = ()  # stale.ObservedSite per site: what the observers of the INT flow calibrate
    graphs: Any = field(default=None, repr=False, compare=False)  # stale.Calibrated: the calibrated graphs (None: none)

    def to_dict(self) -> dict:
        return {"accelerator": self.accelerator, "compiler": self.compiler, "upstream": self.upstream.to_dict(),
                "skipped": self.skipped.to_dict() if self.skipped else None,
                "stale": self.stale.to_dict() if self.stale else None, "stale_note": self.stale_note,
                "observed": [o.to_dict() for o in self.observed]}


@dataclass(frozen=True)
class Published:
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

    def to_dict(self) -> dict:
        return {"target": self.target, "source": self.source, "url": self.url, "engine": self.engine,
                "frames": self.frames, "max_abs": self.max_abs, "mean_abs": self.mean_abs,
                "threshold": self.threshold, "decisions_changed": self.decisions_changed}


@dataclass(frozen=True)
class Network:
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

    def to_dict(self) -> dict:
        return {"target": self.target, "steps": self.steps, "calibration": self.calibration, "stream": self.stream,
                "sites": list(self.sites), "state_sites": list(self.state_sites),
                "flows": [f.to_dict() for f in self.flows], "accelerators": [a.to_dict() for a in self.accelerators],
                "float_task": {k: json_float(v) for k, v in self.float_task},
                "published": self.published.to_dict() if self.published else None}


@dataclass(frozen=True)
class Verdict:
    """What PR #21234's guard does and costs in the installed executorch, measured on each network: ``answer()`` in
    words from these numbers, ``to_markdown()`` the reply for the pull request."""

    networks: tuple[Network, ...]
    accelerators: tuple[str, ...]  # the INT accelerators measured, in order
    versions: tuple[tuple[str, str], ...] = ()  # (package, version) of the stack that measured it
    quantization: str = "a8w8"  # what every INT variant ran under
    # Where the installed pass manager builds the fold pass: (file relative to executorch, line, the line's code)
    pointers: tuple[tuple[str, int, str], ...] = ()
    guard: str = ""  # what produced the structural-check and marker columns (the PR's pass file, or the re-implementation)
    marker_reach: tuple = ()  # marker_reach.MarkerReach records: where a marker a model author sets reaches the pass

    def network(self, target: str) -> Network:
        """The network named ``target`` (as given, or its name)."""
        for n in self.networks:
            if target in (n.target, n.target.removeprefix("sample:")):
                return n
        raise KeyError(f"no network {target!r}; networks: {', '.join(n.target for n in self.networks)}")

    def answer(self) -> list[str]:
        """The verdict in sentences, each built from the numbers above."""
        return draw("verdict_answer", self)

    def to_dict(self) -> dict:
        return {"format": FORMAT, "kind": "verdict", "accelerators": list(self.accelerators),
                "versions": dict(self.versions), "quantization": self.quantization,
                "pointers": [{"file": f, "line": n, "code": c} for f, n, c in self.pointers], "guard": self.guard,
                "marker_reach": [{"flow": r.flow, "call": r.call, "placement": r.placement, "where": r.where,
                                  "reached": r.reached, "pr_reads": r.pr_reads, "error": r.error}
                                 for r in self.marker_reach],
                "networks": [n.to_dict() for n in self.networks]}

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


__all__ = ["Decision", "Figures", "Flow", "MARKER", "MARKER_ON_PROGRAM", "Network", "OnAccelerator", "Published",
           "STRICT", "STRUCTURAL", "UPSTREAM", "Verdict"]
