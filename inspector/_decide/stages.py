"""Stage graphs: the graph the fold pass sees at ``aten``, ``tfa``, ``edge`` and ``lowering``.

A ``StageGraph`` is built once per (model, stage, and for ``tfa`` and ``lowering`` the accelerator whose flow
hands the pass that graph) and never modified: every decision runs the pass on a deep copy, so toggling
markers or switching rules re-decides without re-exporting or lowering again.

Which flow hands the pass each graph, and when (``STAGE_HELP``, docs/words.md): the INT flow of every quantized
accelerator folds in ``tfa``, before calibration, and hands the lowering call a quantized graph; the FP flow
(``tosa-fp``) quantizes nothing and folds in ``lowering``; ``aten`` and ``edge`` are the programs every flow
starts from, which no INT flow hands the pass.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import torch
from torch.fx import GraphModule

from .._doors import executorch as _executorch
from .._base.errors import InspectorError, describe, first_line, listing, quoted
from .._base.copies import no_gc_pauses, private_copy
from .._base.limits import MAX_STEPS
from .._cost import accelerators as _accelerators
from .._doors.arm_flow import ArmFlow, FlowStepError, Observer, Stop
from .._rules.rules import FoldLog, rule_pass_class
from .._sites import graph as _graph
from .._targets.facts import Fact
from .._doors import tosa as _tosa

STAGES = ("aten", "tfa", "edge", "lowering")
# Each stage in one line: which flow hands the pass this graph, and when (the CLI's --stage, the widget's picker).
STAGE_HELP = {
    "aten": "the torch.export program every flow starts from; no flow hands the pass this graph",
    "tfa": "the INT flow's (tosa-int, every Ethos-U): the graph prepare_pt2e's transform-for-annotation folds on, "
           "before calibration (weights as get_attr); where the INT flow folds",
    "edge": "the float to_edge program: the FP flow's graph before the backend's own passes; no INT flow hands "
            "the pass this graph",
    "lowering": "the graph the pass receives inside to_edge_transform_and_lower for the accelerator: quantized in "
                "the INT flow (after convert_pt2e and re-export), float in the FP flow (tosa-fp), where that flow folds",
}

# What every answer at a stage says about it, besides STAGE_HELP (None: nothing to add).
_EDGE_NOTE = ("edge shows the FP flow's float program before the backend's own passes: no INT flow hands the pass "
              "this graph (the INT flow folds at tfa, before calibration; stage lowering with tosa-fp is where the "
              "FP flow folds)")


def stage_note(stage: str, chip: _accelerators.Accelerator = _accelerators.TOSA_INT) -> str | None:
    """The line every answer at ``stage`` carries: what this graph is in the flow the user ships (``chip``, the
    resolved accelerator, as everywhere below: a verb resolves its accelerator once, at its entry)."""
    if stage == "edge":
        return _EDGE_NOTE
    if stage == "lowering":
        if quantized(chip):
            return (f"lowering on {chip.name}: the quantized graph the pass receives inside "
                    "to_edge_transform_and_lower (after convert_pt2e and re-export); its muls multiply integers, "
                    "so nothing here is left for the pass to fold")
        return (f"lowering on {chip.name}: the float graph the pass receives inside to_edge_transform_and_lower, "
                "with the TOSA delegate's exported program: where the FP flow folds, and the only call where the "
                "pass has a graph signature for PR #21234's structural guard to read")
    return None


def quantized(accelerator) -> bool:
    """Whether ``accelerator``'s flow quantizes (the TOSA INT profile) or stays float (``tosa-fp``)."""
    return "INT" in accelerator.spec(_accelerators.INT).split("+")[1:]


# A model that carries state and has no stream of its own runs this many steps unless told: one step shows no carried
# state, twenty show it compound. ``default_steps`` is the one default of every verb, the CLI, the widget and verdict.
STATE_STEPS = 20
STEPS_HELP = (f"a stream's length (at most {MAX_STEPS}), else {STATE_STEPS} for a model that carries state, else 1")


def carries_state(target) -> bool:
    """The model carries state between calls: a written buffer or input, or a ``RECURRENT`` declaration."""
    program = target.exported
    return bool(target.recurrent) or bool(_graph.state_writes(program.graph, program.graph_signature))


def default_steps(target) -> int:
    """The steps a run of ``target`` (a loaded target) takes unless told: ``STEPS_HELP``."""
    if target.stream is not None:
        return min(len(target.stream), MAX_STEPS)
    return STATE_STEPS if carries_state(target) else 1


def steps_for(target, steps: int | None) -> int:
    """``steps`` as given (checked against the target's stream), else ``default_steps(target)``."""
    return default_steps(target) if steps is None else target.steps(steps)


def default_stage(chip: _accelerators.Accelerator = _accelerators.TOSA_INT) -> str:
    """Where ``chip``'s flow folds: ``tfa`` for every quantized accelerator, ``lowering`` for the FP profile."""
    return "tfa" if quantized(chip) else "lowering"


def stage_key(stage: str, chip: _accelerators.Accelerator = _accelerators.TOSA_INT) -> str:
    """The name a target keeps its graph at ``stage`` under: the stage, and for ``tfa`` and ``lowering`` the
    accelerator whose flow hands it over (``tfa@ethos-u55-128``, ``lowering@tosa-fp``; the default ``tosa-int``
    is the stage alone). ``aten`` and ``edge`` are the same graph for every accelerator."""
    check_stage(stage)
    if stage == "tfa":
        if not quantized(chip):
            raise InspectorError(f"the FP flow ({chip.name}) quantizes nothing, so transform-for-annotation never runs "
                                 f"and it has no tfa stage; choose one of: {', '.join(s for s in STAGES if s != 'tfa')}")
        return "tfa" if not chip.costs else f"tfa@{chip.name}"  # as a comparison's plan keeps it (Plan.tfa_key)
    if stage == "lowering":
        return "lowering" if chip == _accelerators.TOSA_INT else f"lowering@{chip.name}"
    return stage


def check_stage(stage: str) -> str:
    """``stage`` if it names a stage, else one line listing the stages."""
    if not isinstance(stage, str) or stage not in STAGES:
        raise InspectorError(f"unknown stage {quoted(stage)}; choose one of: {', '.join(STAGES)}")
    return stage


@dataclass(frozen=True, kw_only=True)
class StageGraph:
    """The pristine graph the pass receives at one stage (never run the pass on it directly)."""

    stage: str  # aten | tfa | edge | lowering
    graph_module: GraphModule  # the graph, with weights as placeholders (aten, edge, lowering) or get_attr (tfa)
    program: Any  # the ExportedProgram at aten, edge and lowering (the delegate's), None at tfa
    notes: tuple[str, ...] = ()  # what went wrong around the capture, or happened before it, that the user should know

    @classmethod
    def of_tfa_graph(cls, graph_module: GraphModule) -> StageGraph:
        """A tfa stage graph from a GraphModule built elsewhere (generated models, tests), held lazily."""
        return cls(stage="tfa", graph_module=_executorch.lazy_graph_module(graph_module), program=None)

    def fresh_copy(self) -> tuple[GraphModule, Any]:
        """A private (graph module, program) pair the pass may rewrite."""
        return copy_pair((self.graph_module, self.program))


def copy_pair(pair: tuple[GraphModule, Any]) -> tuple[GraphModule, Any]:
    """A private copy of a (graph module, program) pair the pass may rewrite; the copied program owns
    the copied module.

    With a program (aten, edge) the pass adds new constants and never writes into the old ones, so
    the copy shares the parameters and lifted constants (graph, signature and dicts are copied):
    copying 1,000 nodes' weights on every re-decide was most of its time. Buffers are copied:
    running the program writes its state into them. Without a program (tfa) the pass writes
    scaled weights into the get_attr tensors in place, so everything is copied.
    """
    gm, program = pair
    if program is None:
        return private_copy(gm), None
    signature = program.graph_signature
    tensors = [program.state_dict.get(t) for t in signature.inputs_to_parameters.values()]
    tensors += list(program.constants.values())
    shared = {id(t): t for t in tensors if isinstance(t, torch.Tensor)}
    # a buffer the flow computed (executorch 1.4's lowering leaves some with a grad_fn) cannot be deep-copied: a leaf
    shared.update({id(t): t.detach().clone() for t in program.state_dict.values()
                   if isinstance(t, torch.Tensor) and not t.is_leaf and id(t) not in shared})
    program = copy.deepcopy(program, shared)
    return program.graph_module, program


def run_graph(gm: GraphModule, program: Any, inputs: tuple):
    """Execute a stage graph (tfa graph module or exported program) in float."""
    with torch.no_grad():
        if program is not None:
            return program.module(check_guards=False)(*inputs)
        return gm(*inputs)


# What a target keeps of this module's making: its graph at each stage.
STAGE_GRAPH: Fact[StageGraph] = Fact("stage graph")


def stage_graph_of(target, stage: str, chip: _accelerators.Accelerator = _accelerators.TOSA_INT) -> StageGraph:
    """The stage graph of a loaded target at ``stage`` (for ``tfa`` and ``lowering``: in ``chip``'s flow,
    default ``tosa-int``), built once per target and reused."""
    key = stage_key(stage, chip)
    if stage == "tfa" and key != "tfa":
        return tfa_graph_for(target, key, lambda: quantizer_for(chip))

    def make() -> StageGraph:
        try:
            with no_gc_pauses():
                if stage == "lowering":
                    return _capture_lowering(target, chip)
                return build(target.exported, stage)
        except InspectorError:
            raise
        except Exception as exc:  # torch/executorch failing on this model: one line
            raise InspectorError(
                f"building the {stage} graph of {target.name} failed: {describe(exc)}; try another stage"
            ) from exc

    return target.facts.get(STAGE_GRAPH, key, make)


def quantizer_for(accelerator):
    """The quantizer ``accelerator``'s INT flow quantizes with, under the default quantization (symmetric int8,
    per-channel weights: a comparison's ``a8w8``)."""
    return accelerator.quantizer(accelerator.spec(_accelerators.INT), _executorch.symmetric_quantization_config())


def tfa_graph_for(target, key: str, quantizer: Callable[[], Any]) -> StageGraph:
    """The graph the fold receives in ``quantizer()``'s transform-for-annotation, kept as ``key`` (``"tfa"`` is the
    default quantizer's, ``stage_graph_of(target, "tfa")``; an accelerator's own quantizer may run other passes)."""
    if key == "tfa":
        return stage_graph_of(target, "tfa")

    def make() -> StageGraph:
        with no_gc_pauses():
            graph_module, program, notes = _capture_tfa_graph(target.exported, quantizer())
            return StageGraph(stage="tfa", graph_module=graph_module, program=program, notes=notes)

    return target.facts.get(STAGE_GRAPH, key, make)


def has_stage_graph(target, stage: str) -> bool:
    """Whether ``target``'s graph at ``stage`` (or a tfa graph kept as ``tfa@NAME``) is made already (a tfa graph
    makes fold predictions cheap)."""
    return target.facts.has(STAGE_GRAPH, stage)


def keep_stage_graph(target, stage: str, graph: StageGraph) -> None:
    """Keep ``graph`` as ``target``'s graph at ``stage`` (a compare's or a journey's run captured it on the way)."""
    target.facts.keep(STAGE_GRAPH, stage, graph)


def build(exported: torch.export.ExportedProgram, stage: str) -> StageGraph:
    """The stage graph for ``exported`` (which is itself left untouched) at ``aten``, ``edge`` or ``tfa`` (the
    default accelerator's; ``lowering`` needs the target's inputs: ``stage_graph_of``)."""
    check_stage(stage)
    if stage == "lowering":
        raise InspectorError("the lowering graph is captured from a target (its inputs calibrate the INT flow): "
                             "use stage_graph_of(target, 'lowering', accelerator)")
    # aten and edge: a copy sharing the weights, which neither to_edge nor the pass writes into (the
    # pass adds new constants; see copy_pair); a deep copy was a second copy of every weight.
    if stage == "aten":
        program = _executorch.lazy_program(copy_pair((exported.graph_module, exported))[1])
        return StageGraph(stage=stage, graph_module=program.graph_module, program=program)
    if stage == "edge":
        program = _executorch.lazy_program(_executorch.to_edge(copy_pair((exported.graph_module, exported))[1]))
        return StageGraph(stage=stage, graph_module=program.graph_module, program=program)
    graph_module, program, notes = _capture_tfa_graph(exported)
    return StageGraph(stage=stage, graph_module=graph_module, program=program, notes=notes)


_NEVER_RAN = ("the quantizer's transform-for-annotation pipeline never ran the fold pass; "
              "this executorch version is not supported (see pyproject.toml)")
_FAILED_BEFORE = "the quantizer's transform-for-annotation failed before the fold pass ran: "


def _capture_tfa_graph(exported, quantizer=None) -> tuple[GraphModule, None, tuple[str, ...]]:
    """Run the quantizer's real ``prepare_pt2e`` and keep the graph the fold receives there.

    ``prepare_pt2e`` fuses BatchNorm into the preceding conv before it calls the
    quantizer's transform-for-annotation, and other passes run before the fold in
    that pipeline, so neither ``ep.module()`` nor transform-for-annotation alone is
    the same graph (a ``bn(conv(x)) * s`` is a site only after the fusion). The
    capture runs the pass under the rule ``off``, so the rest of the pipeline sees an
    unfolded graph that is then discarded. ExecuTorch's Arm flow (``_doors.arm_flow``) up to ``prepare``.
    """

    log = FoldLog(snapshots=True)
    quantizer = quantizer if quantizer is not None else _executorch.tosa_int_quantizer()
    notes: tuple[str, ...] = ()
    try:
        ArmFlow(spec=_tosa.SPEC, quantizer=lambda: quantizer, fold_pass=rule_pass_class("off", log=log),
                until="prepare", capture_output=False).run_on(exported, ())
    except FlowStepError as exc:  # a failure after the fold leaves the capture valid
        if exc.step != "prepare":  # the model itself (its module's code) failed: the stage graph's own one line
            raise exc.__cause__ or exc  # noqa: B904 - the model's own error as it came; `from` would rewrite its chain
        if not log.runs:
            raise InspectorError(_FAILED_BEFORE + first_line(exc.__cause__ or exc)) from exc
        notes = (f"the quantizer's prepare_pt2e failed after the fold pass ran "
                 f"(this model will not quantize as is): {first_line(exc.__cause__ or exc)}",)
    graph = tfa_graph_of(log)
    if graph is None:
        raise InspectorError(_NEVER_RAN)
    return graph, None, notes


class _UntilFold(Observer):
    """Keeps the graph the fold pass receives in transform-for-annotation, and stops the flow there."""

    def __init__(self) -> None:
        self.received: list[GraphModule] = []

    def fold_call(self, state, graph_module, program) -> None:
        if program is None:  # prepare_pt2e runs the pass in transform-for-annotation only
            self.received.append(graph_module)  # private to the capture; nothing runs on it after the stop
            raise Stop()


def tfa_graph_until_fold(exported) -> StageGraph:
    """The tfa stage graph of ``exported``, from a ``prepare_pt2e`` stopped as the fold pass receives it.

    The same graph ``build`` captures (the steps before the fold are the installed ones, unchanged),
    for a caller that runs the whole ``prepare_pt2e`` itself right after: a journey, whose own run
    says whether the rest of it goes through. The passes after the fold, annotation and observers
    are two thirds of a capture; skipping them costs the note a whole capture can give (``prepare_pt2e``
    failing after the fold), so the graph is not kept as the target's: the caller keeps it once its
    own ``prepare_pt2e`` went through.
    """
    until = _UntilFold()
    try:  # (the collector is the caller's to pause, as for ``build``)
        ArmFlow(spec=_tosa.SPEC, quantizer=_executorch.tosa_int_quantizer, fold_pass=_executorch.fold_pass_class(),
                until="prepare", capture_output=False).run_on(exported, (), (until,))
    except FlowStepError as exc:  # a failure before the fold
        if exc.step != "prepare":  # the model itself (its module's code) failed: the stage graph's own one line
            raise exc.__cause__ or exc  # noqa: B904 - the model's own error as it came; `from` would rewrite its chain
        raise InspectorError(_FAILED_BEFORE + first_line(exc.__cause__ or exc)) from exc
    if not until.received:
        raise InspectorError(_NEVER_RAN)
    return StageGraph(stage="tfa", graph_module=_executorch.lazy_graph_module(until.received[0]), program=None)


class _LastPartition(Observer):
    """Keeps (a copy of) every graph the fold pass receives in a lowering call, and stops the flow as it receives the
    last partition's (the passes after it, and the serialization, are not needed)."""

    def __init__(self) -> None:
        self.received: list[tuple[GraphModule, Any]] = []

    def fold_call(self, state, graph_module, program) -> None:
        if program is None:  # transform-for-annotation: the installed pass as it runs there
            return
        if state.partitions and len(self.received) + 1 >= state.partitions[0]:  # the last partition: kept as is
            self.received.append((graph_module, program))
            raise Stop()
        self.received.append(copy_pair((graph_module, program)))


def _capture_lowering(target, chip) -> StageGraph:
    """Run ``chip``'s flow as ExecuTorch runs it and keep the graph the fold pass receives in the lowering call.

    The INT flow: ``prepare_pt2e`` with the accelerator's quantizer (its transform-for-annotation runs the
    installed pass, which folds what it folds there), one calibration call with the example inputs (qparams do
    not change the graph), ``convert_pt2e``, re-export; then, as in the FP flow (``tosa-fp``, the float export
    itself), ``to_edge_transform_and_lower`` with the TOSA partitioner for the accelerator's TOSA specification.
    The pass is the installed one everywhere; in the last TOSA partition its call is stopped as it receives the
    graph: ExecuTorch's Arm flow (``_doors.arm_flow``) up to the fold call of the last lowering.
    """
    if target.exported is None:
        raise InspectorError(f"{target.name} is a bare graph: it has only the tfa stage")
    spec = chip.spec(_accelerators.INT)
    log = FoldLog()
    inputs = target.inputs

    def one_call(prepared):
        with torch.no_grad():
            prepared(*copy.deepcopy(inputs))

    last = _LastPartition()
    is_quantized = quantized(chip)
    flow = ArmFlow(spec=spec, quantizer=(lambda: quantizer_for(chip)) if is_quantized else None,
                   fold_pass=rule_pass_class("upstream", log=log), calibrate=one_call if is_quantized else None,
                   until="lower")
    try:
        flow.run_on(target.exported, inputs, (last,))
    except InspectorError as exc:  # the flow failing before the fold
        raise InspectorError(f"lowering {target.name} for {chip.name} ({spec}) failed before the fold pass "
                             f"received its graph: {first_line(exc.__cause__ or exc)}; the installed stack lowers "
                             f"for: {listing(_accelerators.accelerators.names())}") from exc
    received = last.received
    if not received:
        raise InspectorError(f"nothing of {target.name} is delegated to the TOSA backend for {chip.name}, so the fold "
                             "pass never runs in lowering; analyze at stage tfa or edge")
    with_sites = [pair for pair in received if _graph.candidates(pair[0].graph)]
    if len(with_sites) > 1:
        raise InspectorError(f"{target.name} lowers for {chip.name} as {len(received)} TOSA partitions with sites in "
                             f"{len(with_sites)} of them, and the lowering stage decides one graph; analyze at tfa, "
                             "or read a comparison's per-phase fold counts")
    gm, program = (with_sites or received)[-1]
    notes = []
    if len(received) > 1:
        notes.append(f"{target.name} lowers for {chip.name} as {len(received)} TOSA partitions (one lowering call "
                     "each): " + ("this is the one holding its sites" if with_sites else "no partition holds a site; "
                                  "this is the last one"))
    written = _mutated_buffers(target.exported)
    if written and not _mutated_buffers(program):
        notes.append(f"{target.name} writes back {listing(written)}, but the signature the pass reads here is the TOSA "
                     "delegate's, where that state enters and leaves as a user input and output: no BUFFER_MUTATION, "
                     "so PR #21234's structural guard cannot see it in this call; only a marker stops the fold")
    folded = [site for run in log.runs if run.tfa for site in run.folded_ids]
    if folded:
        notes.append(f"in this flow the installed pass folded {len(folded)} site{'s' * (len(folded) != 1)} earlier, "
                     f"in transform-for-annotation (before calibration), which this graph no longer has: "
                     f"{listing(folded)} (stage tfa shows {'them' if len(folded) != 1 else 'it'})")
    program = _executorch.lazy_program(program)
    return StageGraph(stage="lowering", graph_module=program.graph_module, program=program, notes=tuple(notes))


def _mutated_buffers(program) -> list[str]:
    """The buffers and inputs ``program`` writes back (in place, or by its signature's mutation outputs)."""
    writes = _graph.state_writes(program.graph_module.graph, program.graph_signature)
    return list(dict.fromkeys(w.target for w in writes))


def tfa_graph_of(log: FoldLog) -> GraphModule | None:
    """The pristine graph the fold received in a quantization run's transform-for-annotation
    (``log`` recorded with snapshots), held lazily; None if the pass never ran there."""
    run = next((r for r in log.runs if r.tfa and r.before is not None), None)
    if run is None:
        return None
    return _executorch.lazy_graph_module(run.before)
