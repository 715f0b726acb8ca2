"""``analyze``: find every conv->mul site, decide it with the real pass, explain every skip."""

from __future__ import annotations

import contextlib
import copy
import gc
import math
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any, Iterable

from torch.fx import GraphModule, Node

from . import _graph, _load, _region, _stages
from ._explain import Context, explain
from .errors import ExplanationMismatchWarning, InspectorError, listing, quoted
from ._policies import DEFAULT_VARIANTS, check_policy, guard_reach, marker_tuple, resolve_markers, run_pass
from .reasons import Reason, ReasonCode, Risk, RiskCode

# A re-decide whose changed clusters hold more nodes than this and a third of the graph runs the whole graph.
_WHOLE_RUN_NODES = 200
# max|s| / min|s| at or above which a scale is flagged ``wide-dynamic-range-scale``.
WIDE_RANGE_RATIO = 1e3


@dataclass(frozen=True)
class ScaleSummary:
    """What multiplies the conv output."""

    kind: str  # scalar (Python number) | scalar-tensor | channel | tensor | input-dependent
    shape: tuple[int, ...]  # () for a Python number
    dtype: str  # "float32", "int64", "python-float", ...
    min_abs: float | None  # smallest |s| (None when not a constant)
    max_abs: float | None  # largest |s|
    ratio: float | None  # max_abs / min_abs (inf when some s is 0; None when not a constant)

    def short(self) -> str:
        if self.min_abs is None:
            return f"{self.kind} {list(self.shape)}"
        if self.min_abs == self.max_abs:
            return f"{self.kind} {self.max_abs:.4g}"
        return f"{self.kind} {list(self.shape)} |s| {self.min_abs:.3g}..{self.max_abs:.3g}"

    def to_dict(self) -> dict:
        d = dict(vars(self))
        d["shape"] = list(self.shape)
        if self.ratio is not None and math.isinf(self.ratio):
            d["ratio"] = "inf"
        return d


@dataclass(frozen=True)
class Site:
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

    @property
    def folded(self) -> bool:
        return self.decision == "fold"

    @property
    def reason_codes(self) -> tuple[str, ...]:
        return tuple(r.code for r in self.reasons)

    @property
    def risk_codes(self) -> tuple[str, ...]:
        return tuple(r.code for r in self.risks)

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "conv": self.conv,
            "mul": self.mul,
            "conv_op": self.conv_op,
            "module_path": self.module_path,
            "location": self.location,
            "decision": self.decision,
            "reasons": [r.to_dict() for r in self.reasons],
            "risks": [r.to_dict() for r in self.risks],
            "scale": self.scale.to_dict(),
            "marked": self.marked,
            "chained_after": self.chained_after,
            "state_path": list(self.state_path),
            "state_boundary": self.state_boundary,
            "folded_weight": self.folded_weight,
            "folded_bias": self.folded_bias,
            "mismatch": self.mismatch,
        }


class Analysis:
    """The sites of one model at one stage under one policy, with the graphs before and after.

    Cheap to re-decide: ``with_policy``, ``with_markers`` and ``toggle_marker`` reuse
    the exported stage graph; ``with_stage`` reuses the export.
    """

    def __init__(self, target, stage_graph, policy, markers, sites, before, after, timings, marked_names=(),
                 guard=None):
        self.target: _load.Target = target  # the private model, inputs and export
        self.stage_graph: _stages.StageGraph = stage_graph  # the pristine stage graph
        self.stage: str = stage_graph.stage
        self.policy: str = policy
        self.markers: tuple[str, ...] = tuple(markers)
        self.sites: tuple[Site, ...] = tuple(sites)
        self._before_pair = before if isinstance(before, tuple) else None
        self._before_factory = before if callable(before) else None  # builds the before pair on first use
        self._after_pair = after if isinstance(after, tuple) else None  # (graph module, program) after the pass
        self._after_factory = after if callable(after) else None  # runs the pass on the whole graph on first use
        self.timings: dict[str, float] = timings  # seconds per step
        self._marked_names: tuple[str, ...] = tuple(marked_names)  # the nodes the markers resolved to
        self._guard: _Guard | None = guard  # what the state guard hid: the base of the next re-decide
        self._regions: dict = {}  # (site id, hops) -> the pass's run on the region a focused picture shows

    # -- graphs
    @property
    def _before(self):
        """(graph module, program) the pass received, markers set; built on first use."""
        if self._before_pair is None:
            self._before_pair = self._before_factory()
        return self._before_pair

    @property
    def _after(self):
        """(graph module, program) after the pass ran on the whole graph; built on first use when
        this analysis was re-decided from regions (and checked against them, see ``_full_after``)."""
        if self._after_pair is None:
            self._after_pair = self._after_factory()
        return self._after_pair

    @property
    def before(self) -> GraphModule:
        """The graph the pass received (markers applied)."""
        return self._before[0]

    @property
    def after(self) -> GraphModule:
        """The graph after the real pass ran."""
        return self._after[0]

    @property
    def before_program(self):
        """The ExportedProgram behind ``before`` (None at tfa)."""
        return self._before[1]

    @property
    def after_program(self):
        """The ExportedProgram behind ``after`` (None at tfa)."""
        return self._after[1]

    def run_before(self, *inputs):
        """Float outputs of the before-graph (on a private copy; default: the example inputs)."""
        return _stages.run_graph(*_stages.copy_pair(self._before), inputs or self.target.inputs)

    def run_after(self, *inputs):
        """Float outputs of the after-graph (on a private copy; default: the example inputs)."""
        return _stages.run_graph(*_stages.copy_pair(self._after), inputs or self.target.inputs)

    # -- queries
    @property
    def notes(self) -> tuple[str, ...]:
        """Things the user should know about how the stage graph was obtained."""
        return self.stage_graph.notes

    @property
    def name(self) -> str:
        return self.target.name

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
        by_reason: dict[str, int] = {}
        for s in self.skipped:
            code = s.reasons[0].code if s.reasons else "?"
            by_reason[code] = by_reason.get(code, 0) + 1
        text = f"{len(self.sites)} site{'s' * (len(self.sites) != 1)}, {len(self.folded)} folded, {len(self.skipped)} skipped"
        if by_reason:
            text += " (" + ", ".join(f"{k}: {v}" for k, v in by_reason.items()) + ")"
        if self.mismatches:
            text += f"; {len(self.mismatches)} EXPLANATION MISMATCH"
        return text

    # -- re-deciding
    def with_policy(self, policy: str) -> "Analysis":
        return _decide(self.target, self.stage_graph, policy, self.markers)

    def with_markers(self, markers: Iterable[str]) -> "Analysis":
        return _decide(self.target, self.stage_graph, self.policy, marker_tuple(markers), prev=self)

    def toggle_marker(self, marker: str) -> "Analysis":
        """Add ``marker`` (a site id or node name) if absent, else remove it."""
        markers = [m for m in self.markers if m != marker]
        if len(markers) == len(self.markers):
            markers.append(marker)
        return self.with_markers(markers)

    def with_stage(self, stage: str) -> "Analysis":
        return analyze(self.target, stage=stage, policy=self.policy, markers=self.marker_ids)

    @property
    def configuration(self) -> tuple[str, str, tuple[str, ...]]:
        """``(stage, policy, marker ids)``: what reference results computed for this analysis are for."""
        return self.stage, self.policy, self.marker_ids

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
        from .compare import compare

        if markers is None:
            markers = self.marker_ids
        return compare(self.target, variants, markers=markers, **kwargs)

    # -- presentation
    def to_dict(self) -> dict:
        return {
            "target": self.name,
            "stage": self.stage,
            "policy": self.policy,
            "markers": list(self.markers),
            "summary": self.summary(),
            "notes": list(self.notes),
            "sites": [s.to_dict() for s in self.sites],
        }

    def _repr_mimebundle_(self, include=None, exclude=None):
        from ._present import analysis_html, analysis_text

        return {"text/plain": analysis_text(self), "text/html": analysis_html(self)}

    def __repr__(self) -> str:
        return f"<Analysis {self.name} stage={self.stage} policy={self.policy}: {self.summary()}>"

    def report(self, comparison=None, *, format: str = "html", out=None, results_for=None,
               full_traces: bool = False):
        """A report of this analysis (and ``comparison``, if given): ``html`` (one self-contained
        page), ``md`` (a GitHub comment) or ``json``; local paths redacted, stack traces with the
        user's frames only unless ``full_traces``. With ``out``, written there and the path returned."""
        from ._files import write_text
        from .report import report

        text = report(self, comparison, format=format, results_for=results_for, full_traces=full_traces)
        return write_text(out, text) if out is not None else text

    def to_model_explorer(self, folder, *, errors=None, step: int | None = None, which: str = "before"):
        """Write the whole graph and its overlays (decisions, state path, and with ``errors`` a
        variant of an attribution, the per-node SQNR) into ``folder`` for Google's Model Explorer.
        Needs the ``explorer`` extra. Returns an ``ExplorerFiles`` (paths, and the command that
        opens them); ``python -m inspector explorer TARGET --out DIR --serve`` serves them."""
        from .explorer import to_model_explorer

        return to_model_explorer(self, folder, errors=errors, step=step, which=which)

    # -- pictures
    def verdicts(self, which: str = "before", *, errors=None, step: int | None = None, focus: str | None = None,
                 hops: int = 2):
        """(graph module, ``render.Verdicts``): the ``before`` or ``after`` graph and what to say about it.

        ``errors`` adds the measured-error layer: a variant of an attribution
        (``attribution.variant("upstream")``) at ``step`` (default: the last), or a dict of
        records by node name. With ``focus`` (a site id) the after graph may be just the region
        around that site that a picture of ``hops`` shows, when this analysis was re-decided from
        regions: its ``Verdicts.region`` says what a picture of it may show.
        """
        from .render import WHICH, Region, Verdicts

        if which not in WHICH:
            raise InspectorError(f"unknown graph {quoted(which)}; choose one of: {', '.join(WHICH)}")
        if which == "after" and focus is not None and errors is None and self._after_pair is None:
            region = self._focus_region(focus, hops)
            if region is not None:
                facts = Region(region.complete, region.stand_ins, region.outside_users, region.synthetic,
                               _region.layout(self.stage_graph).held)
                return region.graph_module, Verdicts(
                    self.sites, True, region.program.graph_signature if region.program is not None else None,
                    tuple(self.caption(which)), marked=frozenset(self._marked_names), region=facts)
        if which == "after":
            gm, program = self._after
        else:  # the pristine stage graph; the markers the pass saw are named in the verdicts
            gm, program = self.stage_graph.graph_module, self.stage_graph.program
        signature = program.graph_signature if program is not None else None
        layer = {}
        if errors is not None and not isinstance(errors, dict):
            from .attribution import errors_by_node

            layer = errors_by_node(gm, errors, self.sites, after=which == "after", step=step)
        elif errors:
            layer = dict(errors)
        caption = tuple(self.caption(which))
        if errors is not None and hasattr(errors, "label"):
            caption += (f"coloured by SQNR of variant {errors.label}"
                        + (f" at step {step + 1}" if step is not None else ", last step"),)
        return gm, Verdicts(self.sites, which == "after", signature, caption, layer,
                            marked=frozenset(self._marked_names))

    def _focus_region(self, site_id: str, hops: int):
        """The installed pass's run on the region a focused picture of ``site_id`` shows (None: use the
        whole graph). Its decisions must be this analysis's, or it is not used."""
        from .render import HUB_DEGREE

        key = (site_id, hops)
        if key not in self._regions:
            self._regions[key] = None
            lay = _region.layout(self.stage_graph)
            i = next((s.index for s in self.sites if s.id == site_id), None)
            if i is not None and isinstance(hops, int) and not isinstance(hops, bool) and hops >= 0:
                c = lay.cands[i]
                names = _region.around(lay, (c.mul, c.conv), hops, HUB_DEGREE)
                try:
                    region = _region.run(self.stage_graph, names, self.policy, self._guard.hidden, self._marked_names)
                except (_region.RegionUnavailable, InspectorError):
                    region = None
                folded = set(region.folded) if region is not None else set()
                if region is not None and all((s.mul in folded) == s.folded for s in self.sites
                                              if s.mul in region.names):
                    self._regions[key] = region
        return self._regions[key]

    def caption(self, which: str | None) -> list[str]:
        """The lines above a picture of this analysis (``which`` None: the before | after pair)."""
        what = f"{which} the pass" if which else "before | after the pass"
        lines = [f"{self.name}: {self.stage}, policy {self.policy}, {what}", self.summary()]
        if self.markers:
            lines.append("markers: " + ", ".join(self.markers))
        return lines

    def render(self, which: str = "before", *, errors=None, step: int | None = None, **kw):
        """The ``before`` or ``after`` graph as a ``graphviz.Digraph`` (see ``inspector.render``);
        ``errors=attribution.variant(...)`` colours the nodes by their measured SQNR."""
        from .render import render

        return render(*self.verdicts(which, errors=errors, step=step), **kw)

    def render_pair(self, **kw):
        """Before and after side by side in one ``graphviz.Digraph`` (see ``inspector.render_pair``)."""
        from .render import render_pair

        return render_pair(self, **kw)

    def svg(self, which: str = "before", **kw) -> str:
        """The SVG text of ``render(which, **kw)``; needs graphviz's ``dot``."""
        from .render import svg

        return svg(self.render(which, **kw))


def analyze(
    target: Any,
    example_inputs: Any = None,
    *,
    stage: str = "edge",
    policy: str = "upstream",
    markers: Iterable[str] = (),
) -> Analysis:
    """Find, decide and explain every conv->mul site of ``target`` at ``stage`` under ``policy``.

    ``target`` is an ``nn.Module`` (with ``example_inputs``, or its own
    ``example_inputs()``), an ``ExportedProgram``, a sample name (``"sample:NAME"``),
    a path to a ``.pt2`` file, or ``"path/to/file.py:ClassName"``. ``markers`` are
    site ids or node names to mark ``carried_quant_state``. The decision at every
    site is what the installed ``FoldScalarMulIntoConvPass`` did on a private copy.
    The caller's model is never modified.
    """
    _stages.check_stage(stage)
    check_policy(policy)
    t0 = time.perf_counter()
    loaded = _load.load(target, example_inputs)
    t1 = time.perf_counter()
    stage_graph = _stages.stage_graph_of(loaded, stage)
    t2 = time.perf_counter()
    result = _decide(loaded, stage_graph, policy, marker_tuple(markers))
    result.timings = {"load": t1 - t0, "stage": t2 - t1, **result.timings}
    return result


def analyze_graph(graph_module, *, policy: str = "upstream", markers: Iterable[str] = (),
                  name: str = "graph") -> Analysis:
    """Decide the sites of ``graph_module`` exactly as the pass receives it at ``tfa`` (weights as
    ``get_attr``), without exporting: for graphs built or transformed by hand. The caller's graph
    module is never modified (the pass runs on private copies). Comparisons need a model: use
    ``analyze`` for those."""
    from torch.fx import GraphModule

    if not isinstance(graph_module, GraphModule):
        raise InspectorError(f"analyze_graph takes a torch.fx.GraphModule, got a {type(graph_module).__name__}")
    check_policy(policy)
    target = _load.Target(name, None, ())
    stage_graph = _stages.StageGraph.of_tfa_graph(copy.deepcopy(graph_module))
    return _decide(target, stage_graph, policy, marker_tuple(markers))


def _decide(target, stage_graph, policy: str, markers: tuple[str, ...], prev: Analysis | None = None) -> Analysis:
    """Decide every site; from ``prev`` (same stage graph and policy, other markers) only the
    clusters whose guard changed are run again, on a region (see ``_redecide``)."""
    check_policy(policy)
    with _no_gc_pauses():
        if prev is not None and prev._guard is not None and prev.stage_graph is stage_graph \
                and prev.policy == policy and policy != "off":
            result = _redecide(prev, markers)
            if result is not None:
                return result
        return _decide_now(target, stage_graph, policy, markers)


@dataclass(frozen=True)
class _Guard:
    """What the state guard saw in one analysis: the base from which the next toggle re-decides."""

    hops: dict  # boundary kind -> {node name: next node name on its path to that boundary}
    hidden: frozenset[str]  # every mul the guard hid from the pass, by name

    @classmethod
    def of(cls, graph_nodes, reach) -> "_Guard":
        hops = {k: {n.name: m.name for n, m in h.items()} for k, h in reach.next_hop.items()}
        return cls(hops, frozenset(n.name for n in graph_nodes if _graph.is_mul(n) and reach.kinds(n)))

    def moved(self, other: "_Guard", names_last_first: list[str]) -> set[str]:
        """The nodes whose path to a state boundary differs between the two guards (one backward sweep:
        a path differs where its next hop does, or where the rest of it does)."""
        out: set[str] = set()
        for kind in (_graph.MARKER, _graph.BUFFER, _graph.INPUT):
            a, b = self.hops.get(kind, {}), other.hops.get(kind, {})
            if a == b:
                continue
            changed: set[str] = set()
            for name in names_last_first:
                x, y = a.get(name), b.get(name)
                if x != y or (y is not None and y != name and y in changed):
                    changed.add(name)
            out |= changed
        return out


def _every_boundary(policy: str, guard: _graph.StateReach, graph, signature, also_marked=()) -> _graph.StateReach:
    """Which nodes reach any state boundary, in-place writes included: what the strict guard reads."""
    if policy == "state-aware-strict":
        return guard
    return _graph.state_reach(graph, signature, in_place_writes=True, also_marked=also_marked)


def _state_of(reach, node) -> tuple[str | None, list, str]:
    """(the first boundary kind ``node`` reaches, its path there, that boundary's description)."""
    kind = next(iter(reach.kinds(node)), None)
    path = reach.path(kind, node) if kind else []
    return kind, path, reach.boundary.get(path[-1], "") if path else ""


@contextlib.contextmanager
def _no_gc_pauses():
    """The private copy and the pass allocate tens of thousands of objects, and the cyclic
    collector would walk the whole heap several times meanwhile: about 30% of a re-decide at
    10,000 nodes. Nothing here needs a garbage cycle collected before the call returns; the
    collector runs again as soon as it does (it is process-wide: restored as it was)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _decide_now(target, stage_graph, policy: str, markers: tuple[str, ...]) -> Analysis:
    t0 = time.perf_counter()
    gm, program = stage_graph.fresh_copy()
    graph = gm.graph
    # Markers only touch node meta, so the candidates found before marking are the sites.
    cands = _graph.candidates(graph)
    ids = _graph.site_ids(cands)
    found, unknown = resolve_markers(graph, markers, cands, ids)
    if unknown:
        known = listing(ids) or "no sites"
        raise InspectorError(
            f"unknown marker {quoted(unknown[0])} at stage {stage_graph.stage}: give a site id ({known}) or a node name of this graph"
        )
    for node in found.values():
        _graph.set_marker(node)
    signature = program.graph_signature if program is not None else None
    reach = guard_reach(policy, graph, signature)
    ctx = Context(stage_graph.stage, policy, program, reach, set(), {n: i for i, n in enumerate(graph.nodes)})
    explained = explain(ctx, cands)
    guard = _Guard.of(graph.nodes, reach)
    # Every boundary, whatever the policy: for risks and for drawing the path to state.
    all_reach = _every_boundary(policy, reach, graph, signature)
    recurrent = _recurrent_reach(graph, signature, target.recurrent)
    # Everything that needs the pre-fold graph is read now: the pass runs on this same copy
    # (the explainer only reads), and the marked before-graph is rebuilt lazily on demand.
    scales = [_scale_summary(c, program) for c in cands]
    kinds, paths, boundaries = zip(*(_state_of(all_reach, c.mul) for c in cands)) if cands else ((), (), ())
    pre = [(c.mul.name, c.conv.name, _graph.op_name(c.conv), _graph.module_path(c.conv), _graph.location(c.mul),
            _graph.marked(c.mul), c.via.name if c.via is not None else None) for c in cands]
    marked_names = tuple(n.name for n in found.values())
    t1 = time.perf_counter()

    run = run_pass(gm, program, policy, markers, stage_graph.stage)
    t2 = time.perf_counter()

    folded = set(run.folded)
    after_convs = {n.name: n for n in gm.graph.nodes if _graph.is_conv(n)}
    weight_users: dict[str, list[int]] = {}
    sites = []
    for i, (c, site_id, reasons) in enumerate(zip(cands, ids, explained)):
        mul, conv, conv_op, mod_path, where, is_marked, via = pre[i]
        decision = "fold" if mul in folded else "skip"
        reasons, mismatch = _checked(site_id, decision, reasons)
        risks = _risks(c, scales[i], decision, kinds[i], boundaries[i], recurrent, is_marked)
        conv_after = after_convs.get(conv)
        fw = fb = None
        if decision == "fold" and conv_after is not None:
            fw = _arg_name(conv_after, 1)
            fb = _arg_name(conv_after, 2)
            if fw is not None:
                weight_users.setdefault(fw, []).append(i)
        sites.append(Site(
            id=site_id, index=i, mul=mul, conv=conv, conv_op=conv_op, module_path=mod_path, location=where,
            scale=scales[i], decision=decision, reasons=tuple(reasons) if decision == "skip" else (),
            risks=tuple(risks), marked=is_marked, chained_after=via, state_path=tuple(n.name for n in paths[i]),
            state_boundary=boundaries[i], folded_weight=fw, folded_bias=fb, mismatch=mismatch,
        ))
    sites = _flag_reused_weights(sites, weight_users, program)
    timings = {"explain": t1 - t0, "fold": t2 - t1, "sites": time.perf_counter() - t2}
    before = lambda: _marked_copy(stage_graph, marked_names)  # noqa: E731
    return Analysis(target, stage_graph, policy, markers, sites, before, (gm, program), timings, marked_names,
                    guard)


def _redecide(prev: Analysis, markers: tuple[str, ...]) -> Analysis | None:
    """``prev`` with other markers, re-deciding only the clusters whose guard changed.

    The guard is read on the whole pristine graph (the markers applied without touching it),
    and the installed pass runs on a region holding just the changed clusters
    (``_region.run``); every other site keeps ``prev``'s decision, which the pass, being local,
    would make again. The after-graph of the whole run is built only when asked for. None
    when the whole graph must run instead: an unknown marker (it reports the error), a region
    that cannot stand alone, or a crash of the pass (it reports it as on the whole graph).
    """
    t0 = time.perf_counter()
    stage_graph, policy = prev.stage_graph, prev.policy
    lay = _region.layout(stage_graph)
    graph, program = stage_graph.graph_module.graph, stage_graph.program
    signature = program.graph_signature if program is not None else None
    found, unknown = resolve_markers(graph, markers, lay.cands, lay.ids)
    if unknown:
        return None
    marked = set(found.values())
    reach = guard_reach(policy, graph, signature, also_marked=marked)
    guard = _Guard.of(lay.muls, reach)
    moved = prev._guard.moved(guard, lay.last_first)  # a site whose guard path moved has new reasons
    changed = sorted({lay.cluster_of[i] for i, c in enumerate(lay.cands) if c.mul.name in moved})
    names = _region.cluster_names(lay, changed)
    if len(names) > _WHOLE_RUN_NODES and len(names) > len(lay.order) // 3:
        return None  # a big part of a big graph changed (another policy, say): the whole run is as cheap
    changed_set = set(changed)
    redo = [i for i, k in enumerate(lay.cluster_of) if k in changed_set]
    ctx = Context(stage_graph.stage, policy, program, reach, set(), lay.order)
    explained = dict(zip(redo, explain(ctx, [lay.cands[i] for i in redo])))
    t1 = time.perf_counter()
    region = None
    if redo:
        try:
            region = _region.run(stage_graph, names, policy, guard.hidden)
        except (_region.RegionUnavailable, InspectorError):
            return None
    t2 = time.perf_counter()

    all_reach = _every_boundary(policy, reach, graph, signature, marked)
    recurrent = _recurrent_reach(graph, signature, prev.target.recurrent)
    folded = set(region.folded) if region is not None else set()
    reads = region.folded_args() if region is not None else {}
    weight_users: dict[str, list[int]] = {}
    sites = []
    for i, (c, old) in enumerate(zip(lay.cands, prev.sites)):
        kind, path, boundary = _state_of(all_reach, c.mul)
        is_marked = c.mul in marked or _graph.marked(c.mul)
        fields = dict(marked=is_marked, state_path=tuple(n.name for n in path), state_boundary=boundary)
        if i in explained:
            decision = "fold" if c.mul.name in folded else "skip"
            reasons, mismatch = _checked(old.id, decision, explained[i])
            fw, fb = reads.get(c.conv.name, (None, None)) if decision == "fold" else (None, None)
            fields.update(decision=decision, reasons=tuple(reasons) if decision == "skip" else (), mismatch=mismatch,
                          folded_weight=fw, folded_bias=fb)
        decision = fields.get("decision", old.decision)
        fields["risks"] = tuple(_risks(c, old.scale, decision, kind, boundary, recurrent, is_marked))
        site = replace(old, **fields)
        if site.folded and site.folded_weight is not None:
            weight_users.setdefault(site.folded_weight, []).append(i)
        sites.append(site)
    sites = _flag_reused_weights(sites, weight_users, program)
    timings = {"explain": t1 - t0, "fold": t2 - t1, "sites": time.perf_counter() - t2}
    marked_names = tuple(n.name for n in found.values())
    before = lambda: _marked_copy(stage_graph, marked_names)  # noqa: E731
    result = Analysis(prev.target, stage_graph, policy, markers, sites, before, None, timings, marked_names,
                      guard)
    result._after_factory = lambda: _full_after(result)
    return result


def _checked(site_id: str, decision: str, reasons: list) -> tuple[list, str | None]:
    """The explainer's reasons against the pass's decision: (reasons to show, the mismatch if any)."""
    predicted = "skip" if reasons else "fold"
    if predicted == decision:
        return reasons, None
    mismatch = (f"the installed pass chose {decision} but the explainer predicted {predicted}"
                + (f" ({', '.join(r.code for r in reasons)})" if reasons else ""))
    warnings.warn(f"site {site_id}: {mismatch}", ExplanationMismatchWarning, stacklevel=4)
    if decision == "skip":
        reasons = [Reason.of(ReasonCode.EXPLANATION_MISMATCH, mismatch)]
    return reasons, mismatch


def _full_after(analysis: Analysis):
    """The whole-graph run of ``analysis`` (re-decided from regions): its after-graph, once its
    decisions are checked to be the regions' (the locality the regions rest on, checked again)."""
    full = _decide_now(analysis.target, analysis.stage_graph, analysis.policy, analysis.markers)
    got = [(s.decision, s.folded_weight, s.folded_bias) for s in analysis.sites]
    want = [(s.decision, s.folded_weight, s.folded_bias) for s in full.sites]
    if got != want:
        bad = next(a.id for a, x, y in zip(analysis.sites, got, want) if x != y)
        raise InspectorError(f"internal error: site {bad} was decided differently on its region than on the whole "
                             "graph; please report it with this model (inspector.report)")
    return full._after


def _marked_copy(stage_graph, marked_names: tuple[str, ...]):
    """A private copy of the stage graph with the markers set, as the pass received it."""
    gm, program = stage_graph.fresh_copy()
    by_name = {n.name: n for n in gm.graph.nodes}
    for name in marked_names:
        _graph.set_marker(by_name[name])
    return gm, program


def _arg_name(node: Node, i: int) -> str | None:
    return node.args[i].name if len(node.args) > i and isinstance(node.args[i], Node) else None


def _scale_summary(c: _graph.Candidate, program) -> ScaleSummary:
    s = c.scale
    if isinstance(s, (int, float)) and not isinstance(s, bool):
        v = abs(float(s))
        return ScaleSummary("scalar", (), f"python-{type(s).__name__}", v, v, 1.0 if v else math.inf)
    tensor = _graph.constant_tensor(s, program)
    if tensor is None:
        meta = _graph.value_meta(s)
        shape = tuple(int(d) for d in meta.shape) if meta is not None else ()
        dtype = str(meta.dtype).replace("torch.", "") if meta is not None else "unknown"
        return ScaleSummary("input-dependent", shape, dtype, None, None, None)
    from ._explain import channel_broadcast

    shape = tuple(int(d) for d in tensor.shape)
    dtype = str(tensor.dtype).replace("torch.", "")
    a = tensor.detach().abs().double().flatten()
    lo, hi = (float(a.min()), float(a.max())) if a.numel() else (0.0, 0.0)
    ratio = hi / lo if lo > 0 else (math.inf if hi > 0 else 1.0)
    if tensor.numel() == 1:
        kind = "scalar-tensor"
    elif channel_broadcast(c.conv, shape) is None:
        kind = "channel"
    else:
        kind = "tensor"
    return ScaleSummary(kind, shape, dtype, lo, hi, ratio)


def _recurrent_reach(graph, signature, recurrent: dict) -> dict[Node, int]:
    """Nodes reaching a user output declared recurrent -> that output's index."""
    if not recurrent:
        return {}
    out = next((n for n in reversed(graph.nodes) if n.op == "output"), None)
    if out is None:
        return {}
    values = list(out.args[0]) if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    if signature is not None:
        from torch.export.graph_signature import OutputKind

        values = [v for v, spec in zip(values, signature.output_specs) if spec.kind == OutputKind.USER_OUTPUT]
    reach: dict[Node, int] = {}
    for idx in recurrent:
        if 0 <= idx < len(values) and isinstance(values[idx], Node):
            reach.setdefault(values[idx], idx)
    for n in reversed(list(graph.nodes)):
        for u in n.users:
            if u in reach and n not in reach:
                reach[n] = reach[u]
    return reach


def _risks(c, scale: ScaleSummary, decision: str, kind, boundary: str, recurrent: dict, marked: bool) -> list[Risk]:
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
            "mark the site to let the state-aware policies protect it",
        ))
    return risks


def _flag_reused_weights(sites: list[Site], weight_users: dict[str, list[int]], program) -> list[Site]:
    """Flag folds whose convs read one scaled weight after the pass (names a shared weight twice).

    With an exported program the installed pass names the scaled weight after the
    original one and returns an existing placeholder of that name, so two folds of
    one shared weight both read the first scale (chained muls on one conv are fine:
    they are one conv).
    """
    if program is None:
        return sites
    for weight, idxs in weight_users.items():
        convs = {sites[i].conv for i in idxs}
        if len(convs) < 2:
            continue
        names = ", ".join(sites[i].mul for i in idxs)
        for i in idxs:
            risk = Risk.of(RiskCode.FOLDED_WEIGHT_REUSED, f"{names} all fold into {weight}, scaled once")
            sites[i] = replace(sites[i], risks=sites[i].risks + (risk,))
    return sites
