"""Stage graphs: the graph the fold pass sees at ``aten``, ``tfa`` and ``edge``.

A ``StageGraph`` is built once per (model, stage) and never modified: every
decision runs the pass on a deep copy, so toggling markers or switching
rules re-decides without re-exporting.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.fx import GraphModule

from .._doors import executorch as _executorch
from .._base import quiet as _quiet
from .._base.errors import InspectorError, crash_behind, describe, first_line, quoted
from .._base.copies import no_gc_pauses, private_copy
from .._doors.fold_swap import swapped_fold_pass
from .._rules.rules import FoldLog, rule_pass_class
from .._targets.facts import Fact
from .._doors import tosa as _tosa

STAGES = ("aten", "tfa", "edge")
STAGE_HELP = {
    "aten": "the torch.export program",
    "tfa": "the GraphModule the quantizer's transform-for-annotation folds on (weights as get_attr); "
    "where the INT flow really folds",
    "edge": "the to_edge program",
}


def check_stage(stage: str) -> str:
    if stage not in STAGES:
        raise InspectorError(f"unknown stage {quoted(stage)}; choose one of: {', '.join(STAGES)}")
    return stage


@dataclass(frozen=True)
class StageGraph:
    """The pristine graph the pass receives at one stage (never run the pass on it directly)."""

    stage: str  # aten | tfa | edge
    graph_module: GraphModule  # the graph, with weights as placeholders (aten, edge) or get_attr (tfa)
    program: Any  # the ExportedProgram at aten and edge, None at tfa
    notes: tuple[str, ...] = ()  # what went wrong around the capture that the user should know

    @classmethod
    def of_tfa_graph(cls, graph_module: GraphModule) -> "StageGraph":
        """A tfa stage graph from a GraphModule built elsewhere (generated models, tests), held lazily."""
        return cls("tfa", _executorch.lazy_graph_module(graph_module), None)

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


def stage_graph_of(target, stage: str) -> StageGraph:
    """The stage graph of a loaded target at ``stage``, built once per target and reused."""
    check_stage(stage)

    def make() -> StageGraph:
        try:
            with no_gc_pauses():
                return build(target.exported, stage)
        except InspectorError:
            raise
        except Exception as exc:  # noqa: BLE001 - torch/executorch failing on this model: one line
            raise InspectorError(
                f"building the {stage} graph of {target.name} failed: {describe(exc)}; try another stage"
            ) from None

    return target.facts.get(STAGE_GRAPH, stage, make)


def tfa_graph_for(target, key: str, quantizer: Callable[[], Any]) -> StageGraph:
    """The graph the fold receives in ``quantizer()``'s transform-for-annotation, kept as ``key`` (``"tfa"`` is the
    default quantizer's, ``stage_graph_of(target, "tfa")``; an accelerator's own quantizer may run other passes)."""
    if key == "tfa":
        return stage_graph_of(target, "tfa")

    def make() -> StageGraph:
        with no_gc_pauses():
            return StageGraph("tfa", *_capture_tfa_graph(target.exported, quantizer()))

    return target.facts.get(STAGE_GRAPH, key, make)


def has_stage_graph(target, stage: str) -> bool:
    """Whether ``target``'s graph at ``stage`` (or a tfa graph kept as ``tfa@NAME``) is made already (a tfa graph
    makes fold predictions cheap)."""
    return target.facts.has(STAGE_GRAPH, stage)


def keep_stage_graph(target, stage: str, graph: "StageGraph") -> None:
    """Keep ``graph`` as ``target``'s graph at ``stage`` (a compare's or a journey's run captured it on the way)."""
    target.facts.keep(STAGE_GRAPH, stage, graph)


def build(exported: torch.export.ExportedProgram, stage: str) -> StageGraph:
    """The stage graph for ``exported`` (which is itself left untouched)."""
    check_stage(stage)
    # aten and edge: a copy sharing the weights, which neither to_edge nor the pass writes into (the
    # pass adds new constants; see copy_pair); a deep copy was a second copy of every weight.
    if stage == "aten":
        program = _executorch.lazy_program(copy_pair((exported.graph_module, exported))[1])
        return StageGraph(stage, program.graph_module, program)
    if stage == "edge":
        program = _executorch.lazy_program(_executorch.to_edge(copy_pair((exported.graph_module, exported))[1]))
        return StageGraph(stage, program.graph_module, program)
    return StageGraph(stage, *_capture_tfa_graph(exported))


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
    unfolded graph that is then discarded.
    """

    log = FoldLog(snapshots=True)
    gm = copy.deepcopy(exported).module(check_guards=False)
    quantizer = quantizer if quantizer is not None else _executorch.tosa_int_quantizer()
    notes: tuple[str, ...] = ()
    try:
        with swapped_fold_pass(rule_pass_class("off", log=log)), _quiet.quiet_loggers(*_executorch.ARM_PASS_LOGGERS):
            _tosa.prepare_pt2e(gm, quantizer)
    except Exception as exc:  # noqa: BLE001 - a failure after the fold leaves the capture valid
        if not log.runs:
            raise InspectorError(_FAILED_BEFORE + first_line(exc)) from None
        notes = (f"the quantizer's prepare_pt2e failed after the fold pass ran "
                 f"(this model will not quantize as is): {first_line(exc)}",)
    graph = tfa_graph_of(log)
    if graph is None:
        raise InspectorError(_NEVER_RAN)
    return graph, None, notes


class _FoldReached(Exception):
    """The capture has the graph the fold receives: the rest of ``prepare_pt2e`` is not needed."""


def tfa_graph_until_fold(exported) -> StageGraph:
    """The tfa stage graph of ``exported``, from a ``prepare_pt2e`` stopped as the fold pass receives it.

    The same graph ``build`` captures (the steps before the fold are the installed ones, unchanged),
    for a caller that runs the whole ``prepare_pt2e`` itself right after: a journey, whose own run
    says whether the rest of it goes through. The passes after the fold, annotation and observers
    are two thirds of a capture; skipping them costs the note a whole capture can give (``prepare_pt2e``
    failing after the fold), so the graph is not kept as the target's: the caller keeps it once its
    own ``prepare_pt2e`` went through.
    """

    received: list[GraphModule] = []

    def start(graph_module, program):  # prepare_pt2e runs the pass in transform-for-annotation only
        received.append(graph_module)  # private to the capture; nothing runs on it after the stop
        raise _FoldReached()

    gm = copy.deepcopy(exported).module(check_guards=False)
    quantizer = _executorch.tosa_int_quantizer()
    try:  # (the collector is the caller's to pause, as for ``build``)
        with swapped_fold_pass(_executorch.fold_pass_subclass("capture", start)), \
                _quiet.quiet_loggers(*_executorch.ARM_PASS_LOGGERS):
            _tosa.prepare_pt2e(gm, quantizer)
    except Exception as exc:  # noqa: BLE001 - the stop itself, or a failure before the fold
        if not received or crash_behind(exc, _FoldReached) is None:
            raise InspectorError(_FAILED_BEFORE + first_line(exc)) from None
    if not received:
        raise InspectorError(_NEVER_RAN)
    return StageGraph("tfa", _executorch.lazy_graph_module(received[0]), None)


def tfa_graph_of(log: FoldLog) -> GraphModule | None:
    """The pristine graph the fold received in a quantization run's transform-for-annotation
    (``log`` recorded with snapshots), held lazily; None if the pass never ran there."""
    run = next((r for r in log.runs if r.tfa and r.before is not None), None)
    if run is None:
        return None
    return _executorch.lazy_graph_module(run.before)
