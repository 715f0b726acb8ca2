"""``journey``: one site followed through the installed Arm pipeline, pass by pass.

The run is the flow's own (``_numbers.flow``): on a private copy of the target, ``prepare_pt2e``
with the variant's TOSA quantizer (its own steps fuse conv + BatchNorm, then the Arm
transform-for-annotation pipeline runs), calibration, ``convert_pt2e``, re-export and
``to_edge_transform_and_lower`` with the TOSA partitioner, under the variant's fold rule. The
pipeline is the installed one, unchanged: the ``Follower`` only watches it through the pipeline
door (``_doors.pipeline``). Numbers are read where they can be had without another run of the
pipeline: float eager, the prepared graph in float (observers passed through), the converted
program (quantize/dequantize simulation in PyTorch) and, with ``tosa=True``, the TOSA reference
model on the lowered program.
"""

from __future__ import annotations

import hashlib
import copy
import math
import time
from dataclasses import replace
from typing import Any
from collections.abc import Callable, Iterable

import torch
from torch.fx import GraphModule, Interpreter

from .._base import quiet as _quiet
from .._base.copies import no_gc_pauses
from .._decide import stages as _stages
from .._decide.decide import Decider, analyze
from .._doors import pipeline as _pipeline
from .._doors.arm_flow import ArmFlow, Observer
from .._numbers import flow as _flow
from .._numbers.quantization import DEFAULT, Plan, quantizations
from .._base.formats import cycles, db
from .._cost.accelerators import accelerator_of
from .._rules.rules import FoldLog, get_rule, rule_pass_class
from .._targets import load as _load
from .._base.errors import InspectorError, describe, listing, quoted
from .follow import Follower
from .records import Ending, Journey, Point

FUSE = "prepare_pt2e: fuse conv + BatchNorm"
ANNOTATE = "prepare_pt2e: annotate, insert observers"
CONVERT = "convert_pt2e: observers become quantize/dequantize"
FOLD_WEIGHTS = "convert_pt2e: quantized weights folded into constants"
REEXPORT = "torch.export: re-export"
TO_EDGE = "to_edge: edge dialect"
PARTITION = "partition: the TOSA delegate's part"
# The point after convert_pt2e, where the converted program's quantize/dequantize simulation runs (a point's name,
# not the engine: journey().point(SIMULATED))
SIMULATED = "simulation"


def journey(target: Any, *, site: str | int | None = None, variant: str = "upstream",
            example_inputs: Any = None, stage: str | None = None, tosa: bool = False,
            all_passes: bool = False, accelerator: Any = None) -> Journey:
    """Follow one site of ``target`` through the installed Arm pipeline under the fold rule ``variant``.

    ``site`` is a site id, its index, or its mul's name (``None``: the model's only site); the
    site is found at ``stage`` (default: where the accelerator's flow folds, ``tfa``: the graph the fold sees in
    transform-for-annotation; ``lowering`` for ``tosa-fp``), and its decision there is the journey's.
    Every pass the pipeline runs is listed in ``Journey.passes``; the steps that touched the site
    (its conv, mul, scale, weight, bias, or what stands for them later) in ``Journey.steps``, with
    what each did (every pass with ``all_passes=True``). ``tosa=True`` also runs the lowered
    program on the TOSA reference model for the last number. ``accelerator`` is what the pipeline lowers
    for (see ``compare``); on an Ethos-U the journey ends with what Vela made of the site (an NPU operation of
    its own, fused into another, or gone into the conv), its cycles Vela's estimate. The pipeline is the
    installed one: observing it changes nothing it runs.

    Args:
        target: what ``analyze`` takes.
        site: a site id, its index, or its mul's name; default: the model's only site.
        variant: the fold rule the pipeline runs under; default ``upstream``.
        example_inputs: as ``analyze``'s.
        stage: where the site is found; default: where the accelerator's flow folds.
        tosa: also run the lowered program on the TOSA reference model for the last number; default False.
        all_passes: list what every pass did, not only the passes that touched the site; default False.
        accelerator: what the pipeline lowers for; default ``tosa-int``.
    """
    started = time.perf_counter()
    rule = get_rule(variant)
    chip = accelerator_of(accelerator)
    stage = _stages.default_stage(chip) if stage is None else _stages.check_stage(stage)
    _stages.stage_key(stage, chip)  # a stage the accelerator's flow does not have: one line, before any work
    loaded = _load.load(target, example_inputs)
    # The collector paused from the site's analysis on, as while a stage graph is built: the journey's own
    # heap (graphs, snapshots) made each full collection inside the ~200 passes walk it again (1.2-1.5x a
    # compare worker's lowering), and the collections around the pipeline were a tenth of a small sample's
    # journey. (Loading, an export whose garbage could be large on a real network, is left outside.)
    with no_gc_pauses():
        return _journey(rule, loaded, site, stage, tosa, all_passes, started, chip)


def _journey(rule, loaded, site, stage: str, tosa: bool, all_passes: bool, started: float, chip) -> Journey:
    analysis, unkept = _analysis(loaded, stage, rule, chip)
    chosen = _find_site(analysis, site)
    named = _named_in_the_export(loaded, chosen, stage, rule)  # the nodes the pipeline starts from
    plan = Plan.of(quantizations.get(DEFAULT), (), chip)
    quantized = _stages.quantized(chip)
    follower = Follower({named.conv: ("conv",), named.mul: ("mul", "output")}, all_passes=all_passes)
    notes: list[str] = []
    initial = loaded.initial_buffers()
    watching = _Watching(loaded, chosen, named, stage, follower, initial,
                         keep_tfa=unkept if quantized and not chip.costs else None)
    flow = ArmFlow(spec=plan.spec, quantizer=plan.quantizer if quantized else None,
                   fold_pass=rule_pass_class(rule, (), FoldLog()),
                   calibrate=(lambda prepared: _flow.calibrate(prepared, _flow.choose_calibration(loaded, None, 1),
                                                               loaded)) if quantized else None,
                   reset=lambda module: _flow.reset_state(module, initial), locations=chip.costs,
                   run=_tosa_run(loaded) if tosa else None)
    state = flow.run_on(loaded.exported, loaded.inputs, (watching,))
    lowered, rejected, points = state.lowered, state.rejected, watching.points
    program = lowered.exported_program()
    if tosa:
        points.append(_tosa_point(state.outputs, watching.eager_out))
    notes.extend(follower.notes)
    ending = _ending(follower, program, rejected)
    cost = None
    if chip.costs:
        try:
            with _quiet.captured_fds():
                cost = chip.cost(lowered, {named.mul: (chosen.id, "mul"), named.conv: (chosen.id, "conv")})
            ending = replace(ending, vela=_what_vela_made(cost, chosen))
        except InspectorError as exc:
            notes.append(f"Vela: {exc}")
    if stage != "tfa" or not quantized:
        notes.append(f"the site's decision is the pass's at {stage} on {chip.name}: {chosen.decision}"
                     + (f" ({', '.join(chosen.reason_codes)})" if chosen.reason_codes else ""))
    return Journey(target=loaded.name, site=chosen.id, variant=rule.name, decision=chosen.decision, conv=named.conv,
                   mul=named.mul,
                   passes=tuple(follower.passes), steps=tuple(follower.steps), untouched=follower.untouched, ending=ending,
                   numbers=tuple(points),
                   moved=_moved(points, follower.steps), notes=tuple(notes), seconds=time.perf_counter() - started,
                   program_digest=program_digest(lowered), site_record=chosen, accelerator=chip, cost=cost)


def _what_vela_made(cost, site) -> str:
    """What Vela made of the site on the accelerator, in one sentence (its cycles are Vela's estimate)."""
    mul = [layer for layer in cost.layers if layer.site == site.id and layer.role == "mul"]
    conv = [layer for layer in cost.layers if layer.site == site.id and layer.role == "conv"]
    convs = f"its conv is {len(conv)} operation(s), {cycles(sum(x.cycles for x in conv))} cycles"
    if mul and all(x.cycles == 0 for x in mul):
        return (f"on {cost.accelerator}, Vela chained the mul into another operation (its row costs 0 cycles); "
                f"{convs} (Vela's estimate)")
    if mul:
        return (f"on {cost.accelerator}, the mul is an NPU operation of its own: "
                f"{', '.join(x.operator for x in mul)}, {cycles(sum(x.cycles for x in mul))} cycles of the model's "
                f"{cycles(cost.cycles)}; {convs} (Vela's estimate)")
    return (f"on {cost.accelerator}, the mul is gone: no operation of Vela's comes from it (the conv absorbed the "
            f"scale); {convs} of the model's {cycles(cost.cycles)} (Vela's estimate)")


def program_digest(lowered) -> str:
    """A digest of a lowered program: every TOSA delegate's flatbuffer and the program around them."""

    program = lowered.exported_program()
    h = hashlib.sha256(program.graph_module.code.encode())
    for name, module in sorted(program.graph_module.named_children()):
        data = getattr(module, "processed_bytes", None)
        if isinstance(data, (bytes, bytearray)):
            h.update(name.encode())
            h.update(bytes(data))
    return h.hexdigest()


class _Watching(Observer):
    """The journey's view of ExecuTorch's Arm flow: the follower watches every pass (the pipeline door), is told
    which of the flow's steps runs now, and the numbers are read between steps (float eager before prepare, the
    prepared graph in float after it, the quantize/dequantize simulation after convert)."""

    def __init__(self, loaded, chosen, named, stage: str, follower: Follower, initial, keep_tfa) -> None:
        self.loaded, self.chosen, self.named, self.stage = loaded, chosen, named, stage
        self.follower, self.initial, self.keep_tfa = follower, initial, keep_tfa
        self.points: list[Point] = []
        self.eager_site: dict = {}
        self.eager_out: list = []

    def scope(self):
        return _pipeline.observing(self.follower)

    def after(self, step: str, state) -> None:
        follower, loaded = self.follower, self.loaded
        if step == "export" and state.module is None:  # the FP flow (tosa-fp): the export is lowered as it is
            self._eager(copy.deepcopy(state.program).module(check_guards=False))
            follower.start(state.program.graph_module)
            follower.program = state.program
            follower.phase = "to_edge"
            follower.expect(TO_EDGE, "to_edge")
        elif step == "export":
            self._eager(state.module)
            follower.start(state.module)
            follower.phase = "prepare"
            follower.expect(FUSE, "prepare")
        elif step == "prepare":
            if self.keep_tfa is not None and not _stages.has_stage_graph(loaded, "tfa"):
                _stages.keep_stage_graph(loaded, "tfa", self.keep_tfa)  # prepare_pt2e went through
            follower.settle(ANNOTATE, "prepare", state.prepared)
            self.points.append(_point("after transform-for-annotation", "torch (float, observers passed through)",
                                      state.prepared, loaded, follower, self.eager_site, self.eager_out,
                                      skip_observers=True))
            _flow.reset_state(state.prepared, self.initial)
        elif step == "calibrate":
            follower.phase = "convert"
            follower.expect(CONVERT, "convert")
        elif step == "convert":
            follower.settle(FOLD_WEIGHTS, "convert", state.converted)
            self.points.append(_point(SIMULATED, "torch (quantize/dequantize simulation)", state.converted, loaded,
                                      follower, self.eager_site, self.eager_out, through_qdq=True))
            _flow.reset_state(state.converted, self.initial)
        elif step == "re-export":
            follower.settle(REEXPORT, "re-export", state.reexported.graph_module)
            follower.program = state.reexported
            follower.phase = "to_edge"
            follower.expect(TO_EDGE, "to_edge")

    def _eager(self, module) -> None:
        """The site's and the model's float values on the module the flow starts from (its state put back)."""
        named = self.named
        if not ({named.conv, named.mul} & {n.name for n in module.graph.nodes}):
            raise InspectorError(f"site {quoted(self.chosen.id)} has no node in the exported program "
                                 f"(conv {named.conv}, mul {named.mul} at {self.stage}); try stage='aten'")
        self.eager_site, self.eager_out = _values(module, self.loaded.inputs, (named.mul,))
        _flow.reset_state(module, self.initial)
        self.points.append(Point(point="float eager", engine="torch (float)",
                                 site_max_abs=0.0 if self.eager_site else None,
                                 site_sqnr_db=math.inf if self.eager_site else None, output_max_abs=0.0, output_sqnr_db=math.inf))


def _analysis(loaded, stage: str, rule, chip):
    """The sites at ``stage`` under ``rule`` (in ``chip``'s flow), and the tfa stage graph found for them if it is not
    kept yet.

    A journey runs ``prepare_pt2e`` itself right after: the graph the fold receives is captured by one
    stopped at the fold (a third of a whole capture), kept as the target's once the journey's own
    ``prepare_pt2e`` went through (``_decide.stages.tfa_graph_until_fold``)."""
    if stage != "tfa" or chip.costs or _stages.has_stage_graph(loaded, "tfa"):
        return analyze(loaded, stage=stage, rule=rule, accelerator=chip), None
    graph = _stages.tfa_graph_until_fold(loaded.exported)
    return Decider(loaded, graph).decide(rule, ()), graph


def _named_in_the_export(loaded, chosen, stage: str, rule):
    """The site as the exported program names it (the pipeline starts from its nodes): at ``lowering`` the
    delegate renamed them, so the same site id is looked up at ``aten``."""
    if stage != "lowering":
        return chosen
    aten = analyze(loaded, stage="aten", rule=rule)
    found = next((s for s in aten.sites if s.id == chosen.id), None)
    if found is None:
        raise InspectorError(f"site {quoted(chosen.id)} of the lowering graph is no site of the exported program, "
                             "so the journey cannot start from it; follow it from stage tfa")
    return found


def _find_site(analysis, site):
    sites = analysis.sites
    if not sites:
        raise InspectorError(f"{analysis.target} has no conv->mul site")
    if site is None:
        if len(sites) == 1:
            return sites[0]
        raise InspectorError(f"{analysis.target} has {len(sites)} sites; name one: {listing(s.id for s in sites)}")
    if isinstance(site, int) and not isinstance(site, bool):
        if 0 <= site < len(sites):
            return sites[site]
        raise InspectorError(f"no site {site}: {analysis.target} has {len(sites)} (0 to {len(sites) - 1})")
    for s in sites:
        if site in (s.id, s.mul):
            return s
    if isinstance(site, str) and site.isdigit():
        return _find_site(analysis, int(site))
    raise InspectorError(f"no site {quoted(site)}; sites: {listing(s.id for s in sites)}")


# ---------------------------------------------------------------- numbers


class _Recorder(Interpreter):
    """Runs a graph module and keeps the values of the named nodes; observers pass values through."""

    def __init__(self, module: GraphModule, wanted: Iterable[str], skip_observers: bool = False) -> None:
        super().__init__(module)
        self.wanted = set(wanted)
        self.values: dict[str, Any] = {}
        self.skip_observers = skip_observers

    def run_node(self, n):
        value = super().run_node(n)
        if n.name in self.wanted and isinstance(value, torch.Tensor):
            self.values[n.name] = value.detach().clone()
        return value

    def call_module(self, target, args, kwargs):
        if self.skip_observers and hasattr(self.fetch_attr(target), "calculate_qparams"):
            return args[0]  # an observer: the value as it is, its statistics untouched
        return super().call_module(target, args, kwargs)


def _values(module: GraphModule, inputs: tuple, wanted: Iterable[str], skip_observers: bool = False):
    recorder = _Recorder(module, wanted, skip_observers)
    with torch.no_grad():
        out = recorder.run(*copy.deepcopy(inputs))
    return recorder.values, _flow.flat_outputs(out)


def _point(name: str, engine: str, module: GraphModule, target, follower: Follower, eager_site: dict,
           eager_out: list, *, skip_observers: bool = False, through_qdq: bool = False) -> Point:
    output_node = next((n for n, r in follower.roles.items() if "output" in r), None)
    wanted = {output_node} if output_node else set()
    if through_qdq and output_node:
        wanted |= _qdq_after(module, output_node)
    try:
        values, outs = _values(module, target.inputs, wanted, skip_observers)
    except Exception as exc:  # noqa: BLE001 - a number missing is said, the journey goes on
        return Point(point=name, engine=engine, site_max_abs=None, site_sqnr_db=None, output_max_abs=None,
                     output_sqnr_db=None, note=f"could not run: {describe(exc)}")
    reference = next(iter(eager_site.values()), None)
    value = None
    note = f"site output is {output_node}" if output_node else "no node stands for the site's output"
    if through_qdq and output_node:
        after = [n for n in _qdq_after(module, output_node) if n in values]
        if after:
            value, note = values[after[-1]], f"site output is {after[-1]} (after quantize/dequantize of {output_node})"
    if value is None and output_node:
        value = values.get(output_node)
    site_max, site_db = _compare(value, reference)
    out_max, out_db = _compare(outs[0] if outs else None, eager_out[0] if eager_out else None)
    return Point(point=name, engine=engine, site_max_abs=site_max, site_sqnr_db=site_db, output_max_abs=out_max,
                 output_sqnr_db=out_db, note=note)


def _qdq_after(module: GraphModule, name: str) -> set[str]:
    """The quantize and the dequantize right after node ``name`` (what the next op reads)."""
    node = next((n for n in module.graph.nodes if n.name == name), None)
    out: list[str] = []
    while node is not None:
        nxt = next((u for u in node.users if u.op == "call_function"
                    and any(q in str(u.target) for q in ("quantize_per_tensor", "dequantize_per_tensor"))), None)
        if nxt is None or len(out) >= 2:
            break
        out.append(nxt.name)
        node = nxt
    return set(out[-1:]) if out else set()


def _compare(value, reference) -> tuple[float | None, float | None]:
    if value is None or reference is None or value.shape != reference.shape:
        return None, None
    err = value.double() - reference.double()
    return float(err.abs().max()) if err.numel() else 0.0, _flow.sqnr(reference.double(), err)


def _tosa_run(target) -> Callable:
    """The flow's run step for the journey's last point: the lowered program once on the target's inputs, on the
    TOSA reference model (the flow resets its state and dispatches the delegate there). A crash is kept as the
    point's note, not raised: the journey goes on to its ending and Vela."""
    def run(module):
        try:
            with torch.no_grad():
                return _flow.flat_outputs(module(*copy.deepcopy(target.inputs)))
        except Exception as exc:  # noqa: BLE001 - a note on the point; the journey goes on
            return exc
    return run


def _tosa_point(outs, eager_out: list) -> Point:
    if isinstance(outs, Exception):
        return Point(point="TOSA", engine="TOSA reference model", site_max_abs=None, site_sqnr_db=None,
                     output_max_abs=None, output_sqnr_db=None, note=f"could not run: {describe(outs)}")
    out_max, out_db = _compare(outs[0] if outs else None, eager_out[0] if eager_out else None)
    return Point(point="TOSA", engine="TOSA reference model", site_max_abs=None, site_sqnr_db=None,
                 output_max_abs=out_max, output_sqnr_db=out_db,
                 note="the delegate runs whole: the site's own output is not visible, the model's is")


def _moved(points: list[Point], steps) -> tuple[str, ...]:
    """For each boundary between two points, how far the numbers moved and which steps lay between."""
    spans = {"after transform-for-annotation": ("prepare", "transform-for-annotation"),
             SIMULATED: ("prepare", "convert"),
             "TOSA": ("re-export", "to_edge", "lowering")}
    out = []
    for prev, cur in zip(points, points[1:]):
        a, b = (prev.site_sqnr_db, cur.site_sqnr_db) if cur.site_sqnr_db is not None else \
            (prev.output_sqnr_db, cur.output_sqnr_db)
        what = "site output" if cur.site_sqnr_db is not None else "model output"
        if a is None or b is None:
            continue
        phases = spans.get(cur.point, ())
        changed = [s.name for s in steps if s.phase in phases and any(
            c.kind in ("constant-changed", "removed") for c in s.changes)]
        if cur.point == SIMULATED:
            changed = ["quantization (observers, convert_pt2e)"]
        if b == a or (math.isinf(a) and math.isinf(b)):
            out.append(f"{prev.point} -> {cur.point}: {what} unchanged")
            continue
        by = ", ".join(dict.fromkeys(changed)) or "no step that changed the site's constants"
        err = cur.site_max_abs if cur.site_sqnr_db is not None else cur.output_max_abs
        out.append(f"{prev.point} -> {cur.point}: {what} "
                   + ("exact" if b == math.inf else f"{db(b)} dB against float (max |err| {err:.3g})")
                   + f"; moved by {by}")
    return tuple(out)


# ---------------------------------------------------------------- the ending


def _ending(follower: Follower, program, rejected: dict[str, str]) -> Ending:
    lowered_run = any(phase == "lowering" for phase, _ in follower.passes)
    ops = tuple((role, node, op) for role, (node, op) in sorted(follower.final.items()))
    outside = {n.name: n for n in program.graph.nodes if n.op == "call_function"}
    left = [(name, r) for name, r in follower.roles.items() if name in outside]
    if left:
        names = ", ".join(f"{n} ({_flow.is_qdq(outside[n]) and 'q/dq' or outside[n].target})" for n, _ in left)
        why = "; ".join(f"{n}: {rejected[n]}" for n, _ in left if n in rejected)
        return Ending(where="outside", ops=ops, around=follower.final_around,
                      detail=f"left the delegate: {names} run outside it" + (f" ({why})" if why else ""))
    if lowered_run and ops:
        tosa_ops = ", ".join(f"{role} -> {op} ({node})" for role, node, op in ops)
        around = f"; next to it: {', '.join(follower.final_around)}" if follower.final_around else ""
        return Ending(where="delegate", ops=ops, around=follower.final_around,
                      detail=f"in the TOSA program: {tosa_ops}{around}")
    return Ending(where="unknown", ops=ops, around=follower.final_around,
                  detail="the site's nodes could not be followed to the end")
