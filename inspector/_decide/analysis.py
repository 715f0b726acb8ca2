"""``analyze``: find every conv->mul site, decide it with the real pass, explain every skip.

``Site`` and ``Analysis`` are the answer, frozen records; the deciding is ``_decide.Decider``'s
(``analyze`` lives there too), which every re-decide of an answer asks again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from collections.abc import Iterable, Mapping

from torch.fx import GraphModule

from .._targets import load as _load
from . import stages as _stages
from .._rules.rules import DEFAULT_VARIANTS, Rule, marker_tuple
from .._base.codec import Record
from .._base.data import FORMAT, dataframe
from .._sites.scale import ScaleSummary
from .._base.errors import InspectorError, listing, quoted
from .._sites.reasons import Reason, Risk
from .._base.display import draw

# max|s| / min|s| at or above which a scale is flagged ``wide-dynamic-range-scale``.
WIDE_RANGE_RATIO = 1e3


@dataclass(frozen=True, kw_only=True)
class Site(Record):
    """One mul fed by a convolution, with the real pass's decision and why."""

    id: str  # stable across stages and runs: "<conv module>@<file>:<line>[#k]"
    index: int  # position among the sites, in graph order
    mul: str  # mul node name at this stage
    conv: str  # conv node name at this stage
    conv_op: str  # e.g. "aten.conv2d.default"
    module_path: str  # the conv's module path ("" at the root)
    location: str  # "file.py:line" of the mul in user code ("" if unknown)
    scale: ScaleSummary  # what multiplies the conv output
    decision: str  # "fold" or "skip": what the installed pass really did
    reasons: tuple[Reason, ...]  # why it was skipped, the pass's first reason first (empty if folded)
    risks: tuple[Risk, ...]  # warnings that do not change the decision
    marked: bool  # the mul itself carries the carried-state marker
    chained_after: str | None  # the earlier mul on the same conv (``conv(x) * a * b``), if any
    state_path: tuple[str, ...]  # node names from the mul to the state boundary it reaches (empty if none)
    state_boundary: str  # what that boundary is ("buffer 'state' ...", "marker on mul")
    folded_weight: str | None  # weight node the conv reads after the fold (None if not folded)
    folded_bias: str | None  # bias node the conv reads after the fold
    mismatch: str | None  # set when the explainer disagrees with the pass: never expected
    path: tuple[str, ...] = ()  # nodes between conv and mul: views, or RESCALEs in a quantized graph (empty: direct)

    # the order a reader scans a site in (its position among the sites last: a list of sites is in that order)
    json_order = ("id", "conv", "mul", "conv_op", "module_path", "location", "decision", "reasons", "risks", "scale",
                  "marked", "chained_after", "state_path", "state_boundary", "folded_weight", "folded_bias",
                  "mismatch", "path", "index")

    @property
    def folded(self) -> bool:
        return self.decision == "fold"

    @property
    def reason_codes(self) -> tuple[str, ...]:
        return tuple(r.code for r in self.reasons)

    @property
    def risk_codes(self) -> tuple[str, ...]:
        return tuple(r.code for r in self.risks)


@dataclass(frozen=True, eq=False, kw_only=True)
class Analysis:
    """The sites of one model at one stage under one rule and markers: a frozen answer.

    Cheap to re-decide: ``with_rule``, ``with_markers`` and ``toggle_marker`` ask the same
    decider (which keeps the exported stage graph); ``with_stage`` reuses the export. The graphs
    before and after the pass are built on first use.
    """

    target: _load.Target = field(repr=False)  # the private model, inputs and export
    decider: Any = field(repr=False)  # the _decide.Decider that decided it, and decides it again
    rule: Rule  # the fold rule that decided
    markers: tuple[str, ...]  # the markers as given (site ids or node names)
    sites: tuple[Site, ...]  # every conv->mul site, in graph order
    marked: tuple[str, ...] = ()  # the node names the markers resolved to
    guard: Any = field(default=None, repr=False)  # what the state guard hid: the base of a re-decide
    from_regions: bool = False  # decided on regions from an earlier answer (the after-graph is built when asked)
    timings: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))  # seconds per step, read-only
    headline: str = field(default="", repr=False)  # summary(), made once by ``of`` (asked for by every caption)

    @classmethod
    def of(cls, target, decider, rule: Rule, markers: tuple[str, ...], sites: tuple[Site, ...],
           marked: tuple[str, ...] = (), guard: Any = None, *, from_regions: bool = False,
           timings: Mapping[str, float] | None = None) -> Analysis:
        """The answer of one decide, with what it would otherwise compute again and again made now:
        its timings read-only, its one-line summary."""
        return cls(target=target, decider=decider, rule=rule, markers=markers, sites=sites, marked=marked, guard=guard,
                   from_regions=from_regions,
                   timings=MappingProxyType(dict(timings or {})), headline=summarize(sites))

    # -- what it is about
    @property
    def stage(self) -> str:
        return self.decider.stage

    @property
    def stage_graph(self) -> _stages.StageGraph:
        """The pristine stage graph the sites were found on (never run the pass on it)."""
        return self.decider.stage_graph

    @property
    def accelerator(self):
        """Whose flow hands the pass this graph (``tfa``, ``lowering``; an ``Accelerator``); at ``aten`` and
        ``edge`` every flow's."""
        return self.decider.accelerator

    @property
    def stage_note(self) -> str | None:
        """What this stage's graph is in the flow a user ships, when an answer must say it (``edge``,
        ``lowering``)."""
        return _stages.stage_note(self.stage, self.accelerator)

    @property
    def notes(self) -> tuple[str, ...]:
        """Things the user should know about this stage's graph and how it was obtained."""
        note = self.stage_note
        return self.target.notes + ((note,) if note else ()) + self.stage_graph.notes

    @property
    def name(self) -> str:
        return self.target.name

    # -- graphs
    @property
    def before(self) -> GraphModule:
        """The graph the pass received (a private copy, markers applied)."""
        return self.decider.before(self)[0]

    @property
    def before_program(self):
        """The ExportedProgram behind ``before`` (None at tfa)."""
        return self.decider.before(self)[1]

    @property
    def after(self) -> GraphModule:
        """The graph after the real pass ran on the whole graph."""
        return self.decider.after(self)[0]

    @property
    def after_program(self):
        """The ExportedProgram behind ``after`` (None at tfa)."""
        return self.decider.after(self)[1]

    def run_before(self, *inputs):
        """Float outputs of the before-graph (on a private copy; default: the example inputs)."""
        self._check_runs()
        return _stages.run_graph(*self.decider.before(self), inputs or self.target.inputs)

    def run_after(self, *inputs):
        """Float outputs of the after-graph (on a private copy; default: the example inputs)."""
        self._check_runs()
        return _stages.run_graph(*_stages.copy_pair(self.decider.after(self)), inputs or self.target.inputs)

    def _check_runs(self) -> None:
        if self.stage == "lowering":
            raise InspectorError("the lowering graph is the TOSA delegate's part of the program, mid-lowering: it does "
                                 "not run on the model's inputs in PyTorch; compare runs the lowered program on the "
                                 "TOSA reference model")

    # -- queries
    def site(self, site_id: str) -> Site:
        for s in self.sites:
            if s.id == site_id:
                return s
        raise InspectorError(f"no site {quoted(site_id)}; sites: {listing(s.id for s in self.sites) or 'none'}")

    @property
    def folded(self) -> tuple[Site, ...]:
        return tuple(s for s in self.sites if s.folded)

    @property
    def skipped(self) -> tuple[Site, ...]:
        return tuple(s for s in self.sites if not s.folded)

    @property
    def mismatches(self) -> tuple[Site, ...]:
        return tuple(s for s in self.sites if s.mismatch)

    def summary(self) -> str:
        """One line: "3 sites, 1 folded, 2 skipped (conv-has-other-users: 2)"."""
        return self.headline or summarize(self.sites)

    # -- re-deciding
    def with_rule(self, rule: str | Rule) -> Analysis:
        """The same model, stage and markers under another rule."""
        return self.decider.decide(rule, self.markers)

    def with_markers(self, markers: Iterable[str]) -> Analysis:
        return self.decider.decide(self.rule, marker_tuple(markers), base=self)

    def toggle_marker(self, marker: str) -> Analysis:
        """Add ``marker`` (a site id or node name) if absent, else remove it."""
        markers = [m for m in self.markers if m != marker]
        if len(markers) == len(self.markers):
            markers.append(marker)
        return self.with_markers(markers)

    def with_stage(self, stage: str) -> Analysis:
        """The same model, rule and markers at ``stage`` (for the same accelerator)."""
        return self.decider.at_stage(stage).decide(self.rule, self.marker_ids)

    @property
    def configuration(self) -> tuple[str, str, tuple[str, ...]]:
        """``(stage, rule name, marker ids)``: what reference results computed for this analysis are for."""
        return self.stage, self.rule.name, self.marker_ids

    @property
    def marker_ids(self) -> tuple[str, ...]:
        """The markers with site muls named by site id: node names differ between stages, site ids do not."""
        ids = {s.mul: s.id for s in self.sites}
        return tuple(ids.get(m, m) for m in self.markers)

    # -- numbers
    def compare(self, variants=DEFAULT_VARIANTS, *, markers=None, **kwargs):
        """Quantize and run each variant on the TOSA INT reference model (see ``inspector.compare``).

        ``markers`` defaults to this analysis's markers (as site ids).
        """
        from .._numbers.compare import compare  # a convenience of the record: the verb sits above it

        return compare(self.target, variants=variants, markers=self.marker_ids if markers is None else markers,
                       **kwargs)

    # -- presentation
    # Written by hand: an analysis holds a live target and decider; its dict is a report (the model's name,
    # stage, summary), never read back as an Analysis.
    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "target": self.name,
            "stage": self.stage,
            "accelerator": self.accelerator.name,
            "rule": self.rule.to_dict(),
            "markers": list(self.markers),
            "summary": self.summary(),
            "notes": list(self.notes),
            "sites": [s.to_dict() for s in self.sites],
        }

    def to_dataframe(self):
        """A pandas DataFrame, one row per site: the columns of ``to_dict()["sites"]``."""
        return dataframe("sites", {"sites": lambda: [s.to_dict() for s in self.sites]})

    def _repr_mimebundle_(self, include=None, exclude=None):
        return draw("bundle", self)

    def __repr__(self) -> str:
        return f"<Analysis {self.name} stage={self.stage} rule={self.rule.name}: {self.summary()}>"

    # -- drawn by the presentation (``present/drawing.py``)
    def report(self, comparison=None, *, format: str = "html", out=None, results_for=None,
               full_traces: bool = False, advice=None, widening=None):
        """A report of this analysis (and ``comparison``, if given): ``html`` (one self-contained
        page), ``md`` (a GitHub comment) or ``json``; local paths redacted, stack traces with the
        user's frames only unless ``full_traces``; ``advice`` (``inspector.advise``) adds which sites should fold,
        ``widening`` (``inspector.widen``) which layers need more bits. With ``out``, written there and the path
        returned."""
        return draw("report", self, comparison, format=format, out=out, results_for=results_for,
                              full_traces=full_traces, advice=advice, widening=widening)

    def to_model_explorer(self, folder, *, errors=None, step: int | None = None, which: str = "before", cost=None):
        """Write the whole graph and its overlays (decisions, state path, with ``errors`` a variant of an
        attribution, the per-node SQNR, and with ``cost`` a variant result's ``Cost``, Vela's cycles per node)
        into ``folder`` for Google's Model Explorer.
        Needs the ``explorer`` extra. Returns an ``ExplorerFiles`` (paths, and the command that
        opens them); ``python -m inspector explorer TARGET --out DIR --serve`` serves them."""
        return draw("to_model_explorer", self, folder, errors=errors, step=step, which=which, cost=cost)

    def verdicts(self, which: str = "before", *, errors=None, step: int | None = None, focus: str | None = None,
                 hops: int = 2, hide: Iterable[str] = ("constants",)):
        """(graph module, ``Verdicts``): the ``before`` or ``after`` graph and what to say about it,
        ready for ``inspector.present.render``.

        ``errors`` adds the measured-error layer: a variant of an attribution
        (``attribution.variant("upstream")``) at ``step`` (default: the last), or a dict of
        records by node name. With ``focus`` (a site id) and ``hops``, the after graph may be just
        the part of it that a picture focused there shows (drawn the same as the whole graph).
        """
        return draw("verdicts", self, which, errors=errors, step=step, focus=focus, hops=hops, hide=hide)

    def caption(self, which: str | None) -> list[str]:
        """The lines above a picture of this analysis (``which`` None: the before | after pair)."""
        return draw("caption", self, which)

    def render(self, which: str = "before", *, errors=None, step: int | None = None, focus: str | None = None,
               hops: int = 2, hide: Iterable[str] = ("constants",), **kw):
        """The ``before`` or ``after`` graph as a ``graphviz.Digraph`` (see ``inspector.present.render``);
        ``errors=attribution.variant(...)`` colours the nodes by their measured SQNR."""
        return draw("render", self, which, errors=errors, step=step, focus=focus, hops=hops, hide=hide, **kw)

    def render_pair(self, *, focus: str | None = None, hops: int = 2, hide: Iterable[str] = ("constants",), **kw):
        """Before and after side by side in one ``graphviz.Digraph`` (see ``inspector.present.render_pair``)."""
        return draw("render_pair", self, focus=focus, hops=hops, hide=hide, **kw)

    def svg(self, which: str = "before", **kw) -> str:
        """The SVG text of ``render(which, **kw)``; needs graphviz's ``dot``."""
        return draw("svg", self, which, **kw)


def summarize(sites: Iterable[Site]) -> str:
    """One line for ``sites``: "3 sites, 1 folded, 2 skipped (conv-has-other-users: 2)"."""
    sites = tuple(sites)
    skipped = [s for s in sites if not s.folded]
    by_reason: dict[str, int] = {}
    for s in skipped:
        code = s.reasons[0].code if s.reasons else "?"
        by_reason[code] = by_reason.get(code, 0) + 1
    text = f"{len(sites)} site{'s' * (len(sites) != 1)}, {len(sites) - len(skipped)} folded, {len(skipped)} skipped"
    if by_reason:
        text += " (" + ", ".join(f"{k}: {v}" for k, v in by_reason.items()) + ")"
    mismatches = sum(1 for s in sites if s.mismatch)
    if mismatches:
        text += f"; {mismatches} EXPLANATION MISMATCH"
    return text
