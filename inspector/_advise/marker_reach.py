"""Which carried-state marker reaches the fold pass: measured per flow and per place a model author can set it.

PR #21234's pass reads a marker in ``node.meta["carried_quant_state"]`` of the graph it receives. A model author
can only set it on what they hold after ``torch.export``: the exported program's nodes, or the nodes of
``ep.module()``; in the top-level meta key the PR reads, or in ``meta["custom"]`` (the user annotations torch
carries through re-tracing). Between that and the pass lie ExecuTorch's own steps: in the INT flow ``ep.module()``,
``prepare_pt2e`` (its transform-for-annotation calls the pass), then ``convert_pt2e``, a re-export and
``to_edge_transform_and_lower`` (which calls it again); in the FP flow, ``to_edge_transform_and_lower`` alone
(its lowering call). ``marker_reach(target)`` runs each flow once per placement through the project's flow runner
(``_doors/arm_flow.py``), marks a private copy of every site's mul, and reads the meta of the nodes at each step
and of the graph every fold call receives (an observer of the pass's ``call``). The pass runs as the rule ``off``:
no site folds, so each site's mul is still there for the calls after transform-for-annotation (the graph a call
receives does not depend on which pass class the pass manager builds; what an earlier fold removes would).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from .._base.errors import InspectorError, first_line, listing
from .._cost.accelerators import INT, TOSA_FP, TOSA_INT, accelerator_of
from .._decide import stages as _stages
from .._decide.decide import analyze
from .._doors.arm_flow import ArmFlow, Observer, Stop
from .._rules.rules import rule_pass_class
from .._sites import graph as _graph
from .._targets import load as _load

KEY = _graph.CARRIED_STATE_KEY
# Where a model author can put the marker, after export (a module attribute before export reaches no node).
TOP_PROGRAM = "top-level on the program"
CUSTOM_PROGRAM = "custom on the program"
TOP_MODULE = "top-level on ep.module()"
CUSTOM_MODULE = "custom on ep.module()"
PLACEMENTS = (TOP_PROGRAM, CUSTOM_PROGRAM, TOP_MODULE, CUSTOM_MODULE)
# The marker the model's own export already carries (``torch.fx.traceback.annotate`` in ``forward``, exported under
# ``torch.fx.traceback.preserve_node_meta()``, puts it in meta["custom"]): nothing is set; only when asked for.
AS_EXPORTED = "as exported"
WHERE = {  # each placement as the author writes it
    TOP_PROGRAM: f'node.meta["{KEY}"] = True on the mul of ep.graph',
    CUSTOM_PROGRAM: f'node.meta["custom"]["{KEY}"] = True on the mul of ep.graph',
    TOP_MODULE: f'node.meta["{KEY}"] = True on the mul of m = ep.module() (re-exported for the FP flow)',
    CUSTOM_MODULE: f'node.meta["custom"]["{KEY}"] = True on the mul of m = ep.module() (re-exported for the FP flow)',
    AS_EXPORTED: "whatever the exported program's nodes already carry (nothing is set)",
}
DEFAULT_ACCELERATORS = (TOSA_INT.name, TOSA_FP.name)


@dataclass(frozen=True, kw_only=True)
class MarkerPoint:
    """The marked sites' muls at one point of a flow: which form of the marker they still carry."""

    point: str  # "set" (where the author set it), "start" (what the flow starts from: ep.module() in the INT flow,
    # the program lowered in the FP flow), "tfa" (a fold call), "converted", "re-exported", "lowering" (a fold call)
    found: int  # how many of the marked sites' muls this graph has (site ids are the same at every stage)
    top_level: bool | None  # every one found carries the top-level key (what PR #21234 reads); None: none found
    custom: bool | None  # every one found carries it in meta["custom"]; None: none found
    marked: tuple[str, ...]  # every node of the graph that carries the marker in either form


@dataclass(frozen=True, kw_only=True)
class MarkerReach:
    """One flow x placement: whether the marker set there is on the site's mul the fold pass receives."""

    accelerator: str  # the accelerator whose flow ran (tosa-int: the INT flow; tosa-fp: the FP flow)
    flow: str  # "INT" or "FP"
    call: str  # which fold call: "tfa" (inside prepare_pt2e) or "lowering" (inside to_edge_transform_and_lower)
    placement: str  # one of PLACEMENTS
    where: str  # the placement as the author writes it
    sites: tuple[str, ...]  # the sites whose mul was marked
    reached: bool  # the marker, in either form, is on every marked site's mul in the graph this call receives
    pr_reads: bool  # ... in the top-level key, which PR #21234's is_carried_quant_state reads
    received: MarkerPoint | None  # what the pass saw in this call (None: the call never ran)
    trail: tuple[MarkerPoint, ...]  # every point read in this run, in flow order (the other calls included)
    calls: int  # how many times this call ran (one per TOSA partition in lowering)
    error: str | None = None  # why this flow could not run (the other records stand)


def marker_reach(target: Any, *, sites: Iterable[str] | None = None,
                 accelerators: Iterable[str] = DEFAULT_ACCELERATORS,
                 placements: Iterable[str] = PLACEMENTS) -> tuple[MarkerReach, ...]:
    """Per flow x placement, whether a carried-state marker set there reaches the fold pass.

    Args:
        target: what ``inspector.analyze`` takes (a module with inputs, a program, ``sample:NAME``, ...).
        sites: the site ids to mark (default: every site of the exported program).
        accelerators: whose flows run (default ``tosa-int``, the INT flow, and ``tosa-fp``, the FP flow).
        placements: where the marker is set (default: every one of ``PLACEMENTS``; ``AS_EXPORTED`` reads the marker
            the model's own export carries).

    Returns one record per (flow, fold call, placement): the INT flow gives a ``tfa`` and a ``lowering`` record,
    the FP flow a ``lowering`` record.
    """
    chips = [accelerator_of(name) for name in accelerators]  # every name checked before any work
    loaded = _load.load(target)
    found = [s.id for s in analyze(loaded, stage="aten").sites]
    chosen = tuple(found if sites is None else sites)
    unknown = [s for s in chosen if s not in found]
    if unknown or not chosen:
        raise InspectorError(f"{loaded.name}: no site {listing(unknown)} in the exported program; its sites: "
                             f"{listing(found) or 'none'}" if unknown else f"{loaded.name} has no site to mark")
    bad = [p for p in placements if p not in WHERE]
    if bad:
        raise InspectorError(f"unknown placement {listing(bad)}; known: {listing(WHERE)}")
    out: list[MarkerReach] = []
    for chip in chips:
        quantized = _stages.quantized(chip)
        calls = ("tfa", "lowering") if quantized else ("lowering",)
        for placement in placements:
            try:
                trail, counts = _run(loaded, chip, quantized, placement, chosen)
                error = None
            except InspectorError as exc:
                trail, counts, error = (), {}, first_line(exc)
            for call in calls:
                received = next((p for p in trail if p.point == call), None)
                out.append(MarkerReach(
                    accelerator=chip.name, flow="INT" if quantized else "FP", call=call, placement=placement,
                    where=WHERE[placement], sites=chosen,
                    reached=received is not None and bool(received.top_level or received.custom),
                    pr_reads=received is not None and bool(received.top_level),
                    received=received, trail=trail, calls=counts.get(call, 0), error=error))
    return tuple(out)


# ---------------------------------------------------------------- one run


def _run(loaded: _load.Target, chip, quantized: bool, placement: str, sites: tuple[str, ...]):
    """Run ``chip``'s flow with the marker set at ``placement``; (the points read, fold calls per kind)."""
    custom = placement in (CUSTOM_PROGRAM, CUSTOM_MODULE)
    on_module = placement in (TOP_MODULE, CUSTOM_MODULE)
    reader = _Reader(sites, quantized)
    program = copy.deepcopy(loaded.exported)
    prepare_module = None
    if placement == AS_EXPORTED:
        reader.points.append(_read("set", program.graph, sites))
    elif not on_module:
        reader.points.append(_mark(program.graph, sites, custom))
    elif quantized:  # the author marks ep.module(), and hands that module to prepare_pt2e
        def prepare_module(p):
            module = p.module(check_guards=False)
            reader.points.append(_mark(module.graph, sites, custom))
            return module
    else:  # the FP flow lowers a program: the marked module is exported again, as the author would
        module = program.module(check_guards=False)
        reader.points.append(_mark(module.graph, sites, custom))
        program = torch.export.export(module, copy.deepcopy(loaded.inputs))
    inputs = loaded.inputs

    def one_call(prepared):
        with torch.no_grad():
            prepared(*copy.deepcopy(inputs))

    flow = ArmFlow(spec=chip.spec(INT if quantized else ""),
                   quantizer=(lambda: _stages.quantizer_for(chip)) if quantized else None,
                   fold_pass=rule_pass_class("off"), prepare_module=prepare_module,
                   calibrate=one_call if quantized else None, until="lower", label=placement)
    flow.run_on(program, inputs, (reader,))
    return tuple(reader.points), reader.calls


class _Reader(Observer):
    """Reads the marked sites' muls where the flow starts, after each quantizing step, and in every fold call;
    stops the flow once the last TOSA partition's lowering call has been read."""

    def __init__(self, sites: tuple[str, ...], quantized: bool) -> None:
        self.sites, self.quantized = sites, quantized
        self.points: list[MarkerPoint] = []
        self.calls = {"tfa": 0, "lowering": 0}

    def after(self, step: str, state) -> None:
        if step == "export":  # what prepare_pt2e receives (INT), or what is lowered (FP)
            self.points.append(_read("start", (state.module if self.quantized else state.program).graph, self.sites))
        elif step == "convert":
            self.points.append(_read("converted", state.converted.graph, self.sites))
        elif step == "re-export":
            self.points.append(_read("re-exported", state.reexported.graph, self.sites))

    def fold_call(self, state, graph_module, program) -> None:
        call = "tfa" if program is None else "lowering"
        self.calls[call] += 1
        point = _read(call, graph_module.graph, self.sites)
        previous = next((i for i, p in enumerate(self.points) if p.point == call), None)
        if previous is None:
            self.points.append(point)
        elif point.found:  # several lowering calls (one per partition): keep the one holding the sites
            self.points[previous] = _merged(self.points[previous], point)
        if call == "lowering" and state.partitions and self.calls["lowering"] >= state.partitions[0]:
            raise Stop()  # the last partition's call: nothing after it reaches the pass


def _mark(graph, sites: tuple[str, ...], custom: bool) -> MarkerPoint:
    """Set the marker on the sites' muls of ``graph`` (in ``meta["custom"]`` or the top-level key); what it holds
    then (the point "set")."""
    muls = _site_muls(graph, sites)
    if len(muls) != len(sites):
        raise InspectorError(f"the graph to mark has {len(muls)} of the sites {listing(sites)}")
    for mul in muls:
        if custom:
            meta = mul.meta.get("custom")
            mul.meta["custom"] = {**(meta if isinstance(meta, dict) else {}), KEY: True}
        else:
            mul.meta[KEY] = True
    return _read("set", graph, sites)


def _site_muls(graph, sites: tuple[str, ...]) -> list:
    cands = _graph.candidates(graph)
    return [c.mul for c, i in zip(cands, _graph.site_ids(cands)) if i in sites]


def _read(point: str, graph, sites: tuple[str, ...]) -> MarkerPoint:
    muls = _site_muls(graph, sites)
    marked = tuple(n.name for n in graph.nodes if _graph.marked(n))
    if not muls:
        return MarkerPoint(point=point, found=0, top_level=None, custom=None, marked=marked)
    return MarkerPoint(point=point, found=len(muls), top_level=all(_graph.marked(m, top_level_only=True) for m in muls),
                       custom=all(_in_custom(m) for m in muls),
                       marked=marked)


def _in_custom(node) -> bool:
    custom = node.meta.get("custom")
    return isinstance(custom, dict) and bool(custom.get(KEY))


def _merged(a: MarkerPoint, b: MarkerPoint) -> MarkerPoint:
    """Two lowering calls' readings as one: the sites found in either (a site lives in one partition)."""
    if not a.found:
        return MarkerPoint(point=a.point, found=b.found, top_level=b.top_level, custom=b.custom,
                           marked=a.marked + b.marked)
    return MarkerPoint(point=a.point, found=a.found + b.found, top_level=bool(a.top_level and b.top_level),
                       custom=bool(a.custom and b.custom), marked=a.marked + b.marked)
