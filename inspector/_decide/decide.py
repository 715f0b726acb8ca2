"""The decider: every site of one stage graph decided by the real pass, under any rule and markers.

A ``Decider`` owns one pristine stage graph and everything deciding it reuses: the layout of
its sites and clusters (``region.py``), the facts of each site that no rule changes (ids, scale,
where it is), the recurrent outputs, and two small bounded caches (the whole-graph after-graphs
and the regions focused pictures are drawn from). ``decide(rule, markers, base=previous)``
answers with a frozen ``Analysis``:

- the state guard is read once, on the pristine graph, with the markers applied without being
  written into it (``StateReach`` with ``also_marked``);
- with no ``base`` (or another rule) every site is explained and the installed pass runs on a
  private copy of the whole graph, told which muls the guard hides;
- from a ``base`` with the same rule, only the clusters whose path to a state boundary moved
  are explained again, and the installed pass runs on a region holding just those clusters
  (``_region.run``); every other site keeps its decision, which the pass, being local, would
  make again. A region that cannot stand alone, or a crash on it, runs the whole graph instead.

Either way one function, ``_build_sites``, turns (sites, explanations, what the pass did) into
``Site`` records; from a ``base``, only the records of the sites decided again or whose path to
state or markers changed are built, the others are the base's own (the guard's reach is read from
what no marker changes, kept in a ``_graph.ReachMemo``, and the markers' ancestors). The whole after-graph of a
region-decided analysis is built only when asked
for, and its decisions are then checked against the regions' (a disagreement is an internal
error, never a silent answer).
"""

from __future__ import annotations

import threading
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any
from collections.abc import Iterable

from torch.fx import GraphModule, Node

from .._sites import graph as _graph
from .._targets import load as _load
from .._targets.facts import Fact
from . import region as _region, stages as _stages
from .._cost import accelerators as _accelerators
from .._base.cache import BoundedCache
from .._base.copies import no_gc_pauses, private_copy
from .._sites.explain import Context, explain
from .._rules.rules import Rule, get_rule, marker_tuple, resolve_markers, rule_skips, run_pass, unknown_marker
from .._sites.scale import scale_summary
from .analysis import WIDE_RANGE_RATIO, Analysis, Site
from .._base.errors import ExplanationMismatchWarning, InspectorError
from .._sites.reasons import Reason, ReasonCode, Risk, RiskCode

# A re-decide whose changed clusters hold more nodes than this and a third of the graph runs the whole graph.
_WHOLE_RUN_NODES = 200


@dataclass(frozen=True, kw_only=True)
class Guard:
    """What the state guard saw in one analysis: the base from which the next toggle re-decides."""

    reach: _graph.StateReach  # what the rule's guard read on the pristine graph (never changed)
    state: _graph.StateReach  # which nodes reach any state boundary, in-place writes included (never changed)
    hidden: frozenset[str]  # every mul the guard (and a user's guard) hid from the pass, by name

    @classmethod
    def of(cls, muls: frozenset, reach: _graph.StateReach, state: _graph.StateReach,
           skips: dict = {}) -> Guard:  # noqa: B006 - only read, never kept or changed
        hidden = {n.name for hops in reach.next_hop.values() for n in hops if n in muls}
        return cls(reach=reach, state=state, hidden=frozenset(hidden) | frozenset(skips))


def moved(a: _graph.StateReach, b: _graph.StateReach, order: dict) -> set[Node]:
    """The nodes whose path to a state boundary differs between ``a`` and ``b`` (``order``: node ->
    position in the graph). One backward sweep over the nodes either reaches: a path differs where
    its next hop does, or where the rest of it does."""
    out: set[Node] = set()
    for kind in (_graph.MARKER, _graph.BUFFER, _graph.INPUT):
        x, y = a.next_hop.get(kind, {}), b.next_hop.get(kind, {})
        if x is y or x == y:
            continue
        changed: set[Node] = set()
        for n in sorted(x.keys() | y.keys(), key=order.__getitem__, reverse=True):
            p, q = x.get(n), y.get(n)
            if p is not q or (q is not None and q is not n and q in changed):
                changed.add(n)
        out |= changed
    return out


def _ending_at(toggled: Iterable[Node], reaches: Iterable[_graph.StateReach]) -> set[Node]:
    """The toggled markers' nodes and every node whose path to a boundary, of any kind, runs
    through one of them (walked upstream). A toggled marker may move no path and still change
    what a path ends at: a marker on a write into state names that boundary, and one on a node
    its meta marks already moves nothing."""
    tables = [hops for r in reaches for hops in r.next_hop.values()]
    out: set[Node] = set()
    for node in toggled:
        for hops in tables:
            seen, stack = {node}, [node]
            while stack:
                m = stack.pop()
                for p in m.all_input_nodes:
                    if p not in seen and hops.get(p) is m:
                        seen.add(p)
                        stack.append(p)
            out |= seen
    return out


@dataclass(frozen=True, kw_only=True)
class _Static:
    """What a site is, whatever the rule and markers: read once per stage graph."""

    id: str
    mul: str
    conv: str
    conv_op: str
    module_path: str
    location: str
    scale: Any  # ScaleSummary
    chained_after: str | None
    path: tuple[str, ...]  # the views or RESCALEs between conv (or the earlier mul) and mul


@dataclass(frozen=True, kw_only=True)
class _Outcome:
    """What one decide did: the sites it decided now, their explanations, and what the pass did."""

    explained: dict  # site index -> the explainer's reasons
    folded: frozenset[str]  # mul names the installed pass folded (among the decided sites)
    reads: dict  # conv name -> (weight, bias) node names it reads after the pass


class Decider:
    """Decides every site of one pristine stage graph; owns what deciding it again reuses."""

    def __init__(self, target, stage_graph, accelerator: _accelerators.Accelerator = _accelerators.TOSA_INT) -> None:
        self.target = target  # the private model, inputs and export (``_load.Target``)
        self.stage_graph = stage_graph  # the pristine stage graph (never run the pass on it)
        self.accelerator = accelerator  # whose flow hands the pass this graph (tfa, lowering; the same at aten, edge)
        self._lock = threading.Lock()
        self._layout: _region.Layout | None = None
        self._memo: _graph.ReachMemo | None = None
        self._statics: tuple[_Static, ...] | None = None
        self._ids: dict[str, str] | None = None
        self._recurrent: dict | None = None
        # (rule, marked node names) -> (graph module, program) after the pass ran on the whole graph.
        self._afters = BoundedCache(2, f"after-graphs ({stage_graph.stage})")
        # (rule, marked node names, site id, hops) -> the pass's run on the region a focused picture shows.
        self._regions = BoundedCache(32, f"focus regions ({stage_graph.stage})")

    @property
    def stage(self) -> str:
        return self.stage_graph.stage

    def at_stage(self, stage: str) -> Decider:
        """The decider of the same model at ``stage``, for the same accelerator (its export is reused)."""
        if stage == self.stage:
            return self
        if self.target.exported is None:
            _stages.check_stage(stage)
            raise InspectorError(f"{self.target.name} is a bare graph: it has only the tfa stage")
        return decider_of(self.target, stage, self.accelerator)

    @property
    def layout(self) -> _region.Layout:
        """Sites, clusters and node tables of the pristine graph (built on first use)."""
        with self._lock:
            if self._layout is None:
                self._layout = _region.build_layout(self.stage_graph)
            return self._layout

    def _signature(self):
        program = self.stage_graph.program
        return program.graph_signature if program is not None else None

    @property
    def memo(self) -> _graph.ReachMemo:
        """What the state reach reads of the pristine graph whatever the markers (built on first use)."""
        lay = self.layout
        with self._lock:
            if self._memo is None:
                self._memo = _graph.ReachMemo(self.stage_graph.graph_module.graph, self._signature(), lay.order)
            return self._memo

    def _statics_of(self, lay: _region.Layout) -> tuple[_Static, ...]:
        if self._statics is None:
            program = self.stage_graph.program
            self._statics = tuple(
                _Static(id=i, mul=c.mul.name, conv=c.conv.name, conv_op=_graph.op_name(c.conv),
                        module_path=_graph.module_path(c.conv),
                        location=_graph.location(c.mul), scale=scale_summary(c, program),
                        chained_after=c.via.name if c.via is not None else None,
                        path=tuple(n.name for n in c.path))
                for c, i in zip(lay.cands, lay.ids))
        return self._statics

    def _recurrent_reach(self) -> dict[Node, int]:
        if self._recurrent is None:
            self._recurrent = _graph.recurrent_reach(self.stage_graph.graph_module.graph, self._signature(),
                                                     self.target.recurrent)
        return self._recurrent

    # ---------------------------------------------------------------- deciding

    def decide(self, rule: str | Rule, markers: Iterable[str] = (), base=None):
        """Every site under ``rule`` with ``markers`` (site ids or node names): an ``Analysis``.

        ``base``: an earlier answer of this decider; with the same rule, only the sites whose
        guard changed are decided again."""
        rule = get_rule(rule)
        markers = marker_tuple(markers)
        with no_gc_pauses():
            t0 = time.perf_counter()
            lay, memo = self.layout, self.memo
            graph, signature = self.stage_graph.graph_module.graph, self._signature()
            found, unknown = resolve_markers(graph, markers, lay.cands, lay.ids, by_name=lay.by_name)
            if unknown:
                raise unknown_marker(unknown[0], self.stage, lay.ids)
            marked = tuple(dict.fromkeys(found.values()))
            marked_names = tuple(n.name for n in marked)
            reach = rule.reach(graph, signature, also_marked=marked, memo=memo)
            all_reach = _every_boundary(rule, reach, graph, signature, marked, memo)
            skips = rule_skips(rule, graph, self.stage_graph.program, self.stage, lay.cands, lay.ids, all_reach,
                               marked)
            guard = Guard.of(lay.mul_set, reach, all_reach, skips)
            toggled = [] if base is None or base.decider is not self else \
                [lay.by_name[name] for name in set(base.marked).symmetric_difference(marked_names)]
            redo = self._changed_sites(rule, base, guard, lay, toggled)
            outcome, t1 = None, time.perf_counter()
            if redo is not None:
                outcome = self._on_region(rule, reach, skips, guard, lay, redo, marked_names)
            if outcome is None:
                base = None
                outcome = self._on_whole_graph(rule, reach, skips, guard, lay, marked_names)
            t2 = time.perf_counter()
            rebuild = None
            if base is not None:  # the other sites keep their records unless their path to state moved
                rebuild = set(outcome.explained) | self._state_moved(base, guard, toggled, lay)
            sites = _build_sites(self._statics_of(lay), lay, rule, outcome, all_reach, self._recurrent_reach(),
                                 set(marked), base.sites if base is not None else None, self.stage_graph.program,
                                 rebuild)
            timings = {"explain": t1 - t0, "fold": t2 - t1, "sites": time.perf_counter() - t2}
        return Analysis.of(self.target, self, rule, markers, tuple(sites), marked_names, guard,
                           from_regions=redo is not None and base is not None, timings=timings)

    def _changed_sites(self, rule: Rule, base, guard: Guard, lay, toggled: list[Node]) -> list[int] | None:
        """The sites to decide again from ``base`` (None: decide every site on the whole graph);
        ``toggled``: the nodes marked in one of the two answers only."""
        if base is None or base.decider is not self or base.rule != rule or not rule.folds or rule.is_users:
            return None  # a user's guard or pass may read anything: it is asked about every site again
        paths = moved(base.guard.reach, guard.reach, lay.order)  # a site whose guard path moved has new reasons
        paths |= _ending_at(toggled, (base.guard.reach, guard.reach))
        changed = {lay.cluster_of[lay.site_of[n]] for n in paths if n in lay.site_of}
        names = _region.cluster_names(lay, changed)
        if len(names) > _WHOLE_RUN_NODES and len(names) > len(lay.order) // 3:
            return None  # a big part of a big graph changed: the whole run is as cheap
        return sorted(i for k in changed for i in lay.members[k])

    def _state_moved(self, base, guard: Guard, toggled: list[Node], lay) -> set[int]:
        """The sites whose state path, or whose markers, differ from ``base``'s: their risks and
        paths are read again."""
        nodes = moved(base.guard.state, guard.state, lay.order) | _ending_at(toggled, (base.guard.state, guard.state))
        return {lay.site_of[n] for n in nodes if n in lay.site_of}

    def _explain(self, rule: Rule, reach, skips, lay, indices: list[int]) -> dict[int, list]:
        ctx = Context(stage=self.stage, rule=rule.name, folds=rule.folds, program=self.stage_graph.program,
                      reach=reach, predicted_fold=set(), order=lay.order, skips=skips)
        return dict(zip(indices, explain(ctx, [lay.cands[i] for i in indices])))

    def _site_ids(self, lay) -> dict[str, str]:
        if self._ids is None:
            self._ids = {c.mul.name: i for c, i in zip(lay.cands, lay.ids)}
        return self._ids

    def _on_whole_graph(self, rule: Rule, reach, skips, guard: Guard, lay, marked_names) -> _Outcome:
        """Explain every site and run the installed pass on a private copy of the whole graph."""
        explained = self._explain(rule, reach, skips, lay, list(range(len(lay.cands))))
        gm, program = self.stage_graph.fresh_copy()
        if marked_names:  # the pass receives the graph marked, as a user's marked graph would be
            by_name = {n.name: n for n in gm.graph.nodes}
            for name in marked_names:
                _graph.set_marker(by_name[name])
        run = run_pass(gm, program, rule, stage=self.stage, hidden=guard.hidden, site_ids=self._site_ids(lay))
        self._afters.put((rule, marked_names), (gm, program))
        return _Outcome(explained=explained, folded=frozenset(run.folded), reads=_conv_reads(gm))

    def _on_region(self, rule: Rule, reach, skips, guard: Guard, lay, redo: list[int],
                   marked_names) -> _Outcome | None:
        """Explain the sites ``redo`` and run the pass on the region of their clusters (None: it cannot
        stand in for the whole graph, or the pass raised there: the whole graph runs and says so)."""
        explained = self._explain(rule, reach, skips, lay, redo)
        if not redo:
            return _Outcome(explained=explained, folded=frozenset(), reads={})
        names = _region.cluster_names(lay, {lay.cluster_of[i] for i in redo})
        try:
            region = _region.run(self.stage_graph, lay, names, rule, guard.hidden, site_ids=self._site_ids(lay))
        except (_region.RegionUnavailable, InspectorError):
            return None
        return _Outcome(explained=explained, folded=frozenset(region.folded), reads=region.folded_args())

    # ---------------------------------------------------------------- graphs of an answer

    def before(self, analysis):
        """(graph module, program): a private copy of the stage graph with the markers set, as the
        pass received it."""
        gm, program = self.stage_graph.fresh_copy()
        by_name = {n.name: n for n in gm.graph.nodes}
        for name in analysis.marked:
            _graph.set_marker(by_name[name])
        return gm, program

    def after(self, analysis):
        """(graph module, program) after the pass ran on the whole graph (kept in a small cache;
        for an analysis decided on regions, run now and checked against them)."""
        key = (analysis.rule, analysis.marked)
        pair = self._afters.get(key)
        if pair is not None:
            return pair
        full = self.decide(analysis.rule, analysis.markers)
        got = [(s.decision, s.folded_weight, s.folded_bias) for s in analysis.sites]
        want = [(s.decision, s.folded_weight, s.folded_bias) for s in full.sites]
        if got != want:
            bad = next(a.id for a, x, y in zip(analysis.sites, got, want) if x != y)
            raise InspectorError(f"internal error: site {bad} was decided differently on its region than on the "
                                 "whole graph; please report it with this model (inspector.reproducer)")
        return self._afters.get(key) or self.after(full)

    def has_after(self, analysis) -> bool:
        """Whether the whole after-graph of ``analysis`` is at hand (no run needed to draw from it)."""
        return (analysis.rule, analysis.marked) in self._afters

    def focus_region(self, analysis, site_id: str, hops: int):
        """The installed pass's run on the region a focused picture of ``site_id`` shows (None: draw
        from the whole graph; ``present/pictures.py`` draws). Its decisions must be ``analysis``'s,
        or it is not used."""
        key = (analysis.rule, analysis.marked, site_id, hops)
        if key in self._regions:
            return self._regions.get(key)
        region = None
        lay = self.layout
        i = next((s.index for s in analysis.sites if s.id == site_id), None)
        if i is not None and isinstance(hops, int) and not isinstance(hops, bool) and hops >= 0:
            c = lay.cands[i]
            names = _region.around(lay, (c.mul, c.conv), hops, _graph.HUB_DEGREE)
            try:
                region = _region.run(self.stage_graph, lay, names, analysis.rule, analysis.guard.hidden,
                                     analysis.marked, site_ids=self._site_ids(lay))
            except (_region.RegionUnavailable, InspectorError):
                region = None
            folded = set(region.folded) if region is not None else set()
            if region is not None and not all((s.mul in folded) == s.folded for s in analysis.sites
                                              if s.mul in region.names):
                region = None
            if region is not None:
                region = _region.for_drawing(region)
        self._regions.put(key, region)
        return region

    def pristine_region(self, site_id: str, hops: int):
        """The part of the pristine stage graph a focused picture of ``site_id`` shows, copied out as
        it is (None: draw from the whole graph). Whatever the rule and markers: kept by site and hops."""
        key = ("before", site_id, hops)
        if key in self._regions:
            return self._regions.get(key)
        region = None
        lay = self.layout
        i = next((k for k, sid in enumerate(lay.ids) if sid == site_id), None)
        if i is not None and isinstance(hops, int) and not isinstance(hops, bool) and hops >= 0:
            c = lay.cands[i]
            try:
                names = _region.around(lay, (c.mul, c.conv), hops, _graph.HUB_DEGREE)
                region = _region.pristine(self.stage_graph, lay, names)
            except _region.RegionUnavailable:
                region = None
        self._regions.put(key, region)
        return region


# What a target keeps of this module's making: the decider of its graph at each stage.
DECIDER: Fact[Decider] = Fact("decider")


def decider_of(target, stage: str, chip: _accelerators.Accelerator = _accelerators.TOSA_INT) -> Decider:
    """The decider of ``target``'s graph at ``stage`` in ``chip``'s flow (the resolved accelerator, default
    ``tosa-int``; one per target, stage and accelerator, kept with the target)."""
    key = _stages.stage_key(stage, chip)
    stage_graph = _stages.stage_graph_of(target, stage, chip)
    decider = target.facts.get(DECIDER, key, lambda: Decider(target, stage_graph, chip))
    if decider.stage_graph is not stage_graph:  # the stage graph was captured again (a compare's own run)
        decider = Decider(target, stage_graph, chip)
        target.facts.keep(DECIDER, key, decider)
    return decider


# ---------------------------------------------------------------- sites


def _build_sites(statics, lay, rule: Rule, outcome: _Outcome, all_reach, recurrent: dict, marked: set,
                 base_sites, program, rebuild: set[int] | None = None) -> list:
    """The ``Site`` records of one decide: the sites in ``outcome.explained`` as the pass just
    decided them, every other one as in ``base_sites``; state, markers and risks for all.
    ``rebuild``: the sites to build (the others are ``base_sites``' records, which nothing they
    are made of changed); None: every site."""
    indices = range(len(lay.cands)) if rebuild is None else sorted(rebuild)
    sites: list = [None] * len(lay.cands) if rebuild is None else list(base_sites)
    for i in indices:
        c, st = lay.cands[i], statics[i]
        kind, path, boundary = _state_of(all_reach, c.mul)
        is_marked = c.mul in marked or _graph.marked(c.mul)
        if i in outcome.explained and rule.pass_class is not None:
            decision = "fold" if c.mul.name in outcome.folded else "skip"
            reasons, mismatch = _pass_rule_reasons(rule, decision, outcome.explained[i]), None
            fw, fb = outcome.reads.get(c.conv.name, (None, None)) if decision == "fold" else (None, None)
            reasons = tuple(reasons) if decision == "skip" else ()
        elif i in outcome.explained:
            decision = "fold" if c.mul.name in outcome.folded else "skip"
            reasons, mismatch = _checked(st.id, decision, outcome.explained[i])
            fw, fb = outcome.reads.get(c.conv.name, (None, None)) if decision == "fold" else (None, None)
            reasons = tuple(reasons) if decision == "skip" else ()
        else:
            old = base_sites[i]
            decision, reasons, mismatch = old.decision, old.reasons, old.mismatch
            fw, fb = old.folded_weight, old.folded_bias
        risks = _risks(c, st.scale, decision, kind, boundary, recurrent, is_marked)
        if rule.guarded and rule.guard.top_level_markers:
            risks += _markers_the_pr_ignores(all_reach, c.mul, marked)
        if rule.pass_class is not None and decision == "fold" and i in outcome.explained and outcome.explained[i]:
            codes = ", ".join(r.code for r in outcome.explained[i])
            risks.append(Risk.of(RiskCode.RULE_PASS_FOLDED, f"the installed pass would skip it ({codes})"))
        site = Site(
            id=st.id, index=i, mul=st.mul, conv=st.conv, conv_op=st.conv_op, module_path=st.module_path,
            location=st.location, scale=st.scale, decision=decision, reasons=reasons, risks=tuple(risks),
            marked=is_marked, chained_after=st.chained_after, state_path=tuple(n.name for n in path),
            state_boundary=boundary, folded_weight=fw, folded_bias=fb, mismatch=mismatch, path=st.path,
        )
        sites[i] = site
    return _flag_reused_weights(sites, indices, lay, program)


def _pass_rule_reasons(rule: Rule, decision: str, reasons: list) -> list:
    """Why a rule's own pass class skipped a site: the installed rules' reasons where they skip it
    too, else ``rule-pass-skipped`` (never an explanation mismatch: it is another pass)."""
    if decision == "fold" or reasons:
        return reasons
    return [Reason.of(ReasonCode.RULE_PASS_SKIPPED, f"{rule.pass_class.__qualname__} (rule {rule.name!r}) did not fold it")]


def _markers_the_pr_ignores(all_reach, mul: Node, marked: set) -> list:
    """A marker the mul reaches that sits in meta["custom"] only (and was not set by this run):
    the guard as PR #21234 proposes it reads the top-level key and would not see it."""
    path = all_reach.path(_graph.MARKER, mul) if _graph.MARKER in all_reach.kinds(mul) else []
    if path and path[-1] not in marked and _graph.marked_in_custom_only(path[-1]):
        return [Risk.of(RiskCode.MARKER_IGNORED_BY_PR, f"{path[-1].name} carries the marker in meta['custom'] only")]
    return []


def _conv_reads(gm) -> dict[str, tuple[str | None, str | None]]:
    """conv name -> (weight, bias) node names it reads in ``gm``."""
    return {n.name: tuple(a.name if isinstance(a, Node) else None for a in n.args[1:3])
            for n in gm.graph.nodes if _graph.is_conv(n)}


def _every_boundary(rule: Rule, guard: _graph.StateReach, graph, signature, also_marked=(),
                    memo=None) -> _graph.StateReach:
    """Which nodes reach any state boundary, in-place writes included: for risks and for drawing the
    path to state, whatever the rule (a guard that reads in-place writes has read exactly this)."""
    if rule.guarded and rule.guard.in_place_writes:
        return guard
    return _graph.state_reach(graph, signature, in_place_writes=True, also_marked=also_marked, memo=memo)


def _state_of(reach, node) -> tuple[str | None, list, str]:
    """(the first boundary kind ``node`` reaches, its path there, that boundary's description)."""
    kind = next(iter(reach.kinds(node)), None)
    path = reach.path(kind, node) if kind else []
    return kind, path, reach.boundary.get(path[-1], "") if path else ""


def _checked(site_id: str, decision: str, reasons: list) -> tuple[list, str | None]:
    """The explainer's reasons against the pass's decision: (reasons to show, the mismatch if any)."""
    predicted = "skip" if reasons else "fold"
    if predicted == decision:
        return reasons, None
    mismatch = (f"the installed pass chose {decision} but the explainer predicted {predicted}"
                + (f" ({', '.join(r.code for r in reasons)})" if reasons else ""))
    warnings.warn(f"site {site_id}: {mismatch}", ExplanationMismatchWarning, stacklevel=5)
    if decision == "skip":
        reasons = [Reason.of(ReasonCode.EXPLANATION_MISMATCH, mismatch)]
    return reasons, mismatch


def _risks(c, scale, decision: str, kind, boundary: str, recurrent: dict, marked: bool) -> list[Risk]:
    risks = []
    if scale.ratio is not None and scale.ratio >= WIDE_RANGE_RATIO * (1 - 1e-6):  # float32 1/0.001 is 999.9999
        risks.append(Risk.of(
            RiskCode.WIDE_DYNAMIC_RANGE_SCALE,
            f"max|s|/min|s| = {scale.ratio:.3g} (|s| from {scale.min_abs:.3g} to {scale.max_abs:.3g}); "
            f"threshold {WIDE_RANGE_RATIO:g}",
            scale.ratio,
        ))
    if decision == "fold" and kind is not None:
        risks.append(Risk.of(RiskCode.FEEDS_CARRIED_STATE, f"{c.mul.name} reaches {boundary}"))
    if c.mul in recurrent and not marked:
        idx = recurrent[c.mul]
        risks.append(Risk.of(
            RiskCode.FEEDS_RECURRENT_OUTPUT,
            f"{c.mul.name} reaches output {idx}, which the model feeds back on the next call; "
            "mark the site to let the state-aware rules protect it",
        ))
    return risks


def _flag_reused_weights(sites: list, built: Iterable[int], lay, program) -> list:
    """Flag folds whose convs read one scaled weight after the pass (names a shared weight twice),
    among the sites ``built`` now (the others carry their flag already).

    With an exported program the installed pass names the scaled weight after the
    original one and returns an existing placeholder of that name, so two folds of
    one shared weight both read the first scale (chained muls on one conv are fine:
    they are one conv). Convs sharing a weight are one cluster: only the clusters of the
    sites built now are looked at.
    """
    if program is None:
        return sites
    built = set(built)
    weight_users: dict[str, list[int]] = {}
    for i in sorted({j for b in built for j in lay.members[lay.cluster_of[b]]}):
        if sites[i].folded and sites[i].folded_weight is not None:
            weight_users.setdefault(sites[i].folded_weight, []).append(i)
    for weight, idxs in weight_users.items():
        convs = {sites[i].conv for i in idxs}
        if len(convs) < 2:
            continue
        names = ", ".join(sites[i].mul for i in idxs)
        for i in idxs:
            if i in built:
                risk = Risk.of(RiskCode.FOLDED_WEIGHT_REUSED, f"{names} all fold into {weight}, scaled once")
                sites[i] = replace(sites[i], risks=sites[i].risks + (risk,))
    return sites


def analyze(
    target: Any,
    *,
    example_inputs: Any = None,
    stage: str | None = None,
    rule: str | Rule = "upstream",
    markers: Iterable[str] = (),
    accelerator: Any = None,
) -> Analysis:
    """Find, decide and explain every conv->mul site of ``target`` at ``stage`` under ``rule``.

    The decision at every site is what the installed ``FoldScalarMulIntoConvPass`` did on a private copy; the
    caller's model is never modified.

    Args:
        target: an ``nn.Module`` (with ``example_inputs``, or its own ``example_inputs()``), an
            ``ExportedProgram``, ``"sample:NAME"``, a ``.pt2`` path, ``"path/to/file.py:ClassName"`` or
            ``"timm:NAME@SIZE"``.
        example_inputs: what a module is called with (a tuple of tensors, a tensor, or a stream); default: the
            module's own ``example_inputs()``.
        stage: which graph the pass receives (``inspector.STAGES``); default: where ``accelerator``'s flow folds,
            ``tfa`` for every quantized accelerator, ``lowering`` for ``tosa-fp``.
        rule: a rule's name (``inspector.rules``) or a ``Rule``; default ``upstream``, the installed pass.
        markers: site ids or node names to mark ``carried_quant_state``; default none.
        accelerator: whose flow hands the pass the ``tfa`` and ``lowering`` graphs (``inspector.accelerators``);
            default ``tosa-int``.
    """
    chip = _accelerators.accelerator_of(accelerator)
    stage = _stages.default_stage(chip) if stage is None else _stages.check_stage(stage)
    _stages.stage_key(stage, chip)  # a stage the accelerator's flow does not have: one line, before any work
    rule = get_rule(rule)
    markers = marker_tuple(markers)
    t0 = time.perf_counter()
    loaded = _load.load(target, example_inputs)
    t1 = time.perf_counter()
    decider = decider_of(loaded, stage, chip)
    t2 = time.perf_counter()
    result = decider.decide(rule, markers)
    return replace(result, timings={"load": t1 - t0, "stage": t2 - t1, **result.timings})


def analyze_graph(graph_module, *, rule: str | Rule = "upstream", markers: Iterable[str] = (),
                  name: str = "graph") -> Analysis:
    """Decide the sites of ``graph_module`` exactly as the pass receives it at ``tfa``, without exporting.

    For graphs built or transformed by hand; the caller's graph module is never modified (the pass runs on
    private copies). Comparisons need a model: use ``analyze`` for those.

    Args:
        graph_module: a ``torch.fx.GraphModule`` with its weights as ``get_attr`` (the graph at ``tfa``).
        rule: a rule's name (``inspector.rules``) or a ``Rule``; default ``upstream``.
        markers: site ids or node names to mark ``carried_quant_state``; default none.
        name: what the analysis calls the graph in its tables; default ``"graph"``.
    """
    if not isinstance(graph_module, GraphModule):
        raise InspectorError(f"analyze_graph takes a torch.fx.GraphModule, got a {type(graph_module).__name__}")
    rule = get_rule(rule)
    target = _load.Target(name=name, exported=None, inputs=())
    stage_graph = _stages.StageGraph.of_tfa_graph(private_copy(graph_module))
    return Decider(target, stage_graph).decide(rule, marker_tuple(markers))
