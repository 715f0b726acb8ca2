"""The quantized flow one variant goes through, and what is measured on it.

On a private copy of the target: ``TOSAQuantizer`` under the variant's quantization plan
(``quantization.Plan``: a8w8 by default, per-node overrides) -> calibrate -> convert
(``quantize``) -> re-export -> lower for the plan's TOSA specification (TOSA-1.0+INT, or
+int16 for 16-bit activations) -> the bit-accurate TOSA reference model (``run_variant``),
under the variant's fold rule
(``_doors/fold_swap.py``, installed by the caller of ``quantize`` and by ``run_variant``). Also here:

- the calibration rule (``choose_calibration``): which batches the observers see, and for how
  many steps each one free-runs a model with state;
- the recurrent feed (``stepped`` / ``run_steps``): a model called step after step, its declared
  recurrent outputs fed back into its inputs; the float reference, the reference-model run,
  calibration and attribution's recorders all step through this one loop;
- the state reset (``reset_state``): buffers back to the model's initial values;
- the measurements: ``metrics`` and ``sqnr`` (quantized vs float), the quantize/dequantize ops
  (``is_qdq``), per-site qparams and fold outcomes, the nodes left outside the delegate.

Why calibration follows the run and what the flow is: docs/design.md, docs/stack-facts.md.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, replace
from collections.abc import Callable, Iterator

import torch
from torch.fx import Node

from .._doors.arm_flow import ArmFlow, Observer
from .._sites import graph as _graph
from .._targets import load as _load, streams as _streams
from .._decide import stages as _stages
from .._rules.rules import FoldLog, rule_pass_class
from .quantization import Plan
from . import measures as _measures
from .results import Metrics, NotDelegated, QParams, SiteOutcome, Variant, VariantResult
from .engines import SIMULATION
from .._base.errors import InspectorError

# Default calibration: the example inputs plus this many perturbed copies (seeded). A model with
# state free-runs each of them for as many steps as the comparison runs, up to CALIBRATION_MAX_STEPS,
# with at most CALIBRATION_MAX_CALLS calls in all (fewer sequences for longer runs).
CALIBRATION_COPIES = 7
CALIBRATION_MAX_STEPS = 100
CALIBRATION_MAX_CALLS = 256
CALIBRATION_NOISE = 0.1  # perturbation std, relative to each input's own std
CALIBRATION_SEED = 0

# The phases of one variant's run ("stage" is reserved for the graph the pass sees).
PHASES = ("export", "prepare", "calibrate", "convert", "re-export", "lower", "reference", "cost", "metrics")

# The ops of quantize/dequantize simulation in a converted or lowered program (matched in the
# target's name), and the op that computes dynamic qparams, which is part of it too.
QDQ_OPS = ("quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel", "dequantize_per_channel")
CHOOSE_QPARAMS = "choose_qparams"
BOUNDARY = "(de)quantization at the delegate's input or output"  # why a q/dq node is outside the delegate


# ---------------------------------------------------------------- calibration


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """The batches the observers see, and how each one runs."""

    batches: tuple  # input tuples
    sequence_steps: int  # steps each batch free-runs (recurrent outputs fed back, buffers carried)
    reset: bool  # every batch starts from the model's initial state
    text: str  # how it was calibrated, in words (shown with every result)
    streams: tuple = ()  # streams fed frame after frame, each from the model's initial state (a new input per step)


def has_state(target: _load.Target) -> bool:
    """The model carries state between calls: a written buffer or input, or a ``RECURRENT`` declaration."""
    return _stages.carries_state(target)


def choose_calibration(target: _load.Target, calibration, steps: int) -> Calibration:
    """The user's batches or streams (``calibration``), or the default: the example inputs and seeded perturbed
    copies, each free-running as many steps as the comparison when the model has state; for a target with a stream,
    the stream itself (and perturbed copies of it), frame after frame."""
    stateful = has_state(target)
    if calibration is not None and not isinstance(calibration, (str, bytes)) and any(
            _streams.is_stream(c) for c in _listed(calibration)):
        streams = tuple(_streams.stream_of(c, f"calibration stream {i}") for i, c in enumerate(_listed(calibration)))
        return Calibration(batches=(), sequence_steps=1, reset=True,
                           text=f"{len(streams)} stream(s) of {', '.join(str(len(s)) for s in streams)} "
                                        "frame(s), each from the model's initial state", streams=streams)
    if calibration is not None:
        batches = [tuple(b) if isinstance(b, (list, tuple)) else (b,) for b in calibration]
        if not batches:
            raise InspectorError("calibration is empty; give at least one batch of inputs")
        for i, batch in enumerate(batches):
            _check_finite(batch, f"calibration batch {i}")
        runs = min(steps, CALIBRATION_MAX_STEPS) if target.recurrent else 1
        text = f"{len(batches)} user batches" + (f", each free-running {runs} recurrent step(s)" if runs > 1 else "")
        return Calibration(batches=tuple(batches), sequence_steps=runs, reset=False, text=text)
    _check_finite(target.inputs, "example inputs")
    if target.stream is not None:
        return _stream_calibration(target.stream)
    noise = (f"the example inputs and {{copies}} copies with N(0, ({CALIBRATION_NOISE} * std)^2) noise, "
             f"seed {CALIBRATION_SEED}")
    if not stateful:
        batches = perturbed(target.inputs, CALIBRATION_COPIES)
        return Calibration(batches=tuple(batches), sequence_steps=1, reset=False,
                           text=noise.format(copies=CALIBRATION_COPIES))
    # A model with state: the observers must see the state's range over the whole run, so each
    # calibration sequence free-runs as many steps as the comparison (docs/stack-facts.md: 8 calls
    # never see the state of step 20, and the quantized state clips there).
    length = min(steps, CALIBRATION_MAX_STEPS)
    sequences = max(1, min(1 + CALIBRATION_COPIES, CALIBRATION_MAX_CALLS // length))
    batches = perturbed(target.inputs, sequences - 1)
    text = (f"{sequences} sequence(s) of {length} step(s), each free-running the model's state from its "
            f"initial value: " + noise.format(copies=sequences - 1)
            + (f" (capped at {CALIBRATION_MAX_STEPS} steps of the {steps} compared)" if steps > length else ""))
    return Calibration(batches=tuple(batches), sequence_steps=length, reset=True, text=text)


def _listed(calibration) -> list:
    try:
        return list(calibration)
    except TypeError:
        raise InspectorError(f"calibration is a list of input tuples or of streams, got a "
                             f"{type(calibration).__name__}") from None


def _stream_calibration(stream: _streams.Stream) -> Calibration:
    """The default calibration of a target with a stream: the stream's frames in order (whole sequences, at most
    ``CALIBRATION_MAX_CALLS`` calls), then seeded perturbed copies of them while the calls allow."""
    length = min(len(stream), CALIBRATION_MAX_CALLS)
    if stream.sequence:
        length = max(stream.sequence, length - length % stream.sequence)
    head = _streams.Stream(frames=stream.frames[:length], labels=None, sequence=stream.sequence, name=stream.name)
    copies = max(0, min(CALIBRATION_COPIES, CALIBRATION_MAX_CALLS // length - 1))
    noisy = [_streams.Stream(frames=tuple(frames), labels=None, sequence=stream.sequence,
                             name=f"{stream.name}, perturbed")
             for frames in zip(*(perturbed(f, copies) for f in head.frames))][1:]
    text = (f"{stream.name or 'the stream'}: its first {length} frame(s) in order" if length < len(stream)
            else f"{stream.name or 'the stream'}: its {length} frame(s) in order")
    if copies:
        text += (f", and {copies} cop{'y' if copies == 1 else 'ies'} with N(0, ({CALIBRATION_NOISE} * std)^2) noise, "
                 f"seed {CALIBRATION_SEED}")
    return Calibration(batches=(), sequence_steps=1, reset=True, text=text + ", each from the model's initial state",
                       streams=(head, *noisy))


def perturbed(inputs: tuple, copies: int) -> list[tuple]:
    """The inputs, and ``copies`` copies with seeded Gaussian noise on the float tensors."""
    gen = torch.Generator().manual_seed(CALIBRATION_SEED)
    batches = [copy.deepcopy(inputs)]
    for _ in range(copies):
        batch = []
        for x in inputs:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                std = float(x.std()) if x.numel() > 1 else 1.0
                x = x + torch.randn(x.shape, generator=gen) * CALIBRATION_NOISE * (std or 1.0)
            batch.append(x)
        batches.append(tuple(batch))
    return batches


def _check_finite(batch, what: str) -> None:
    for i, x in enumerate(batch):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and not torch.isfinite(x).all():
            raise InspectorError(f"{what}: input {i} contains NaN or Inf; give finite inputs")


# ---------------------------------------------------------------- steps and state


def stepped(call: Callable, inputs, recurrent: dict[int, int], steps: int, stream: _streams.Stream | None = None,
            restart: Callable[[], None] | None = None) -> Iterator[list[torch.Tensor]]:
    """``call(*inputs)`` ``steps`` times from a copy of ``inputs``, each declared recurrent output
    (output index -> input index) fed back into its input for the next step; yields each step's
    flat outputs. With a ``stream``, step i is fed its frame i instead (the recurrent inputs still fed back within a
    sequence); where a new sequence starts, ``restart()`` puts the state back and nothing is fed back. The caller
    holds ``torch.no_grad()``."""
    inputs = list(copy.deepcopy(inputs if stream is None else stream.frames[0]))
    for step in range(steps):
        if stream is not None and step:
            fresh = stream.starts(step)
            if fresh and restart is not None:
                restart()
            kept = {} if fresh else {i: inputs[i] for i in recurrent.values()}
            inputs = [kept.get(i, x) for i, x in enumerate(copy.deepcopy(stream.frames[step]))]
        outputs = flat_outputs(call(*inputs))
        yield outputs
        for out_idx, in_idx in recurrent.items():
            inputs[in_idx] = outputs[out_idx].detach().clone()


def run_steps(module: torch.nn.Module, target: _load.Target, steps: int) -> list[list[torch.Tensor]]:
    """Call ``module`` ``steps`` times on the target's inputs (its stream's frames, one per step, when it has one),
    feeding declared recurrent outputs back; flat outputs per step."""
    initial = target.initial_buffers() if target.stream is not None and target.stream.sequence else {}
    with torch.no_grad():
        return [[o.detach().clone() for o in outputs]
                for outputs in stepped(module, target.inputs, target.recurrent, steps, target.stream,
                                       lambda: reset_state(module, initial))]


def float_reference(target: _load.Target, steps: int) -> list[list[torch.Tensor]]:
    """The float eager model's outputs per step: what every variant is measured against."""
    return run_steps(target.eager(), target, steps)


def flat_outputs(outputs) -> list[torch.Tensor]:
    """A module's outputs as one flat list of tensors (nested tuples, lists and dicts in order)."""
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    if isinstance(outputs, dict):
        outputs = list(outputs.values())
    return [t for o in outputs for t in flat_outputs(o)]


def check_recurrent(target: _load.Target) -> None:
    """The model's ``RECURRENT`` declaration names outputs and inputs it has, of the same shapes."""
    if not target.recurrent:
        return
    outputs = flat_outputs(target.eager()(*copy.deepcopy(target.inputs)))
    for out_idx, in_idx in target.recurrent.items():
        if not (0 <= out_idx < len(outputs)):
            raise InspectorError(f"{target.name} declares output {out_idx} as recurrent, but it has {len(outputs)} outputs")
        if not (0 <= in_idx < len(target.inputs)):
            raise InspectorError(f"{target.name} feeds output {out_idx} into input {in_idx}, "
                                 f"but it takes {len(target.inputs)} inputs")
        if outputs[out_idx].shape != target.inputs[in_idx].shape:
            raise InspectorError(
                f"{target.name} feeds output {out_idx} {tuple(outputs[out_idx].shape)} into input {in_idx} "
                f"{tuple(target.inputs[in_idx].shape)}: the shapes differ"
            )


def reset_state(module: torch.nn.Module, initial: dict[str, torch.Tensor]) -> None:
    """Put a module's buffers back to the model's initial state (calibration moved them)."""
    with torch.no_grad():
        for name, buf in module.named_buffers():
            if name in initial and buf.shape == initial[name].shape:
                buf.copy_(initial[name])


# ---------------------------------------------------------------- quantize


def quantize(target: _load.Target, variant: Variant, calibrated: Calibration, plan: Plan, *,
             keep_float: bool = False, between=None, log: FoldLog | None = None):
    """Prepare, calibrate and convert a private copy of the target under ``plan`` and the variant's fold rule
    (ExecuTorch's Arm flow up to ``convert_pt2e``: ``_doors.arm_flow``).

    Returns ``(prepared, converted)``: with ``keep_float`` a copy of the calibrated prepared
    model (float, observers passing values through), else None; and the converted pt2e model
    (quantize/dequantize simulation), state reset to the model's initial values. ``between(prepared)`` runs
    after calibration, before conversion (a flow 1.5.1 does not run: ``stale.py``'s fold after calibration).
    ``log`` hears the fold pass's calls.
    """
    flow = replace(arm_flow(target, variant, calibrated, plan, between=between, log=log or FoldLog()),
                   keep_float=keep_float, lower=False, capture_output=False)
    state = flow.run_on(target.exported, target.inputs)
    return state.float_copy, state.converted


def arm_flow(target: _load.Target, variant: Variant | None, calibrated: Calibration | None, plan: Plan, *,
             log: FoldLog, between=None, fold_rule=None) -> ArmFlow:
    """The Arm flow one variant of ``target`` goes through: ``plan``'s quantizer (its overrides tagged on the
    module), the variant's fold rule (``fold_rule``, else the variant's rule and markers) logging into ``log``,
    calibration on ``calibrated`` (none when None), every module reset to the model's initial state after
    conversion; lowered for ``plan``'s specification. The caller adds what to run and price (``replace``)."""
    initial = target.initial_buffers()

    def tagged(program):
        module = program.module(check_guards=False)
        plan.tag(module)  # the nodes an override keeps out of the variant's quantization
        return module

    rule = fold_rule if fold_rule is not None else (variant.rule if variant is not None else "upstream")
    markers = variant.markers if variant is not None and fold_rule is None else ()
    return ArmFlow(spec=plan.spec, quantizer=plan.quantizer, fold_pass=rule_pass_class(rule, markers, log),
                   prepare_module=tagged,
                   calibrate=(None if calibrated is None else lambda prepared: calibrate(prepared, calibrated, target)),
                   after_calibration=between, reset=lambda module: reset_state(module, initial),
                   label=variant.label if variant is not None else None)


def calibrate(prepared, calibration: Calibration, target: _load.Target) -> None:
    """Feed every batch; each free-runs ``sequence_steps`` steps (recurrent outputs fed back,
    buffers carried), from the model's initial state when ``reset``."""
    initial = target.initial_buffers()
    with torch.no_grad():
        for batch in calibration.batches:
            if calibration.reset:
                reset_state(prepared, initial)
            for _ in stepped(prepared, batch, target.recurrent, calibration.sequence_steps):
                pass
        for stream in calibration.streams:  # each recording from the model's initial state, frame after frame
            reset_state(prepared, initial)
            for _ in stepped(prepared, stream.inputs, target.recurrent, len(stream), stream,
                             lambda: reset_state(prepared, initial)):
                pass


# ---------------------------------------------------------------- one variant


def run_variant(target: _load.Target, variant: Variant, calibrated: Calibration, plan: Plan, steps: int, reference,
                report, between=None) -> tuple[VariantResult, tuple]:
    """The whole flow for one variant, measured against ``reference`` (the float outputs per step).

    Returns the result and the fold decisions the run really made:
    ``(("tfa", site ids), ("lowering", site ids))``. ``report(phase, fraction)`` as it advances.
    """
    timings: dict[str, float] = {}
    log = FoldLog()
    # The run captures the tfa graph for later predictions (the default quantization's, per accelerator).
    log.snapshots = plan.plain and not _stages.has_stage_graph(target, plan.tfa_key)
    chip = plan.accelerator

    def priced(state):  # the same flatbuffer the reference model ran, compiled by Vela: numbers and cost from one
        outside = _not_delegated(state.lowered_program, state.rejected)
        return chip.cost(state.lowered, _site_names(log), sum(1 for n in outside if n.reason != BOUNDARY))

    flow = replace(arm_flow(target, variant, calibrated, plan, between=between, log=log),
                   locations=chip.costs,  # on an NPU every TOSA operator carries its node: how Vela's rows reach sites
                   run=lambda module: run_steps(module, target, steps), cost=priced if chip.costs else None)
    # Everything the stack prints on the way (the reference model's C++ warnings on fd 1
    # among it) goes into the variant's log, shown under --debug, never into stdout.
    state = flow.run_on(target.exported, target.inputs, (_Clock(timings, report, PHASES),))
    qparams = _site_qparams(state.converted, log)
    outside = _not_delegated(state.lowered_program, state.rejected)
    measured, folds, sites, decisions = _outcome(target, log, qparams, state.outputs, reference, plan.tfa_key)
    timings["metrics"] = 0.0
    report("metrics", 1.0)
    result = VariantResult(variant=variant, folds=folds, sites=sites, metrics=measured, not_delegated=outside,
                           timings=timings,
                           quantization=plan.quantization.name, spec=plan.spec,
                           outputs=tuple(tuple(step) for step in state.outputs), log=state.output,
                           output_scales=output_scales(state.converted), accelerator=chip, cost=state.cost,
                           cost_error=state.cost_error)
    return result, decisions


def run_on(engine, target: _load.Target, variant: Variant, calibrated: Calibration, plan: Plan, steps: int,
           reference, report) -> tuple[VariantResult, tuple]:
    """One variant's flow on ``engine`` (an ``engines.Engine``): lowered and run on the TOSA reference model when
    the engine lowers, else the quantize/dequantize simulation (``run_variant``, ``run_simulated``)."""
    run = run_variant if engine.lowers else run_simulated
    return run(target, variant, calibrated, plan, steps, reference, report)


def _site_names(log: FoldLog) -> dict[str, tuple[str, str]]:
    """Exported-program node name -> (site id, "conv" or "mul"), from what the run's tfa fold saw (its nodes
    keep the exported program's names: the roots of every lowered node's provenance)."""
    tfa = next((r for r in log.runs if r.tfa), None)
    if tfa is None:
        return {}
    names = {}
    for mul, site_id in tfa.site_ids.items():
        names[mul] = (site_id, "mul")
        if tfa.convs.get(mul):
            names.setdefault(tfa.convs[mul], (site_id, "conv"))
    return names


# The phases of one variant's run on the simulation engine: no re-export, lowering or reference run.
SIMULATION_PHASES = ("export", "prepare", "calibrate", "convert", "simulate", "metrics")


def run_simulated(target: _load.Target, variant: Variant, calibrated: Calibration, plan: Plan, steps: int, reference,
                  report) -> tuple[VariantResult, tuple]:
    """``run_variant`` on the simulation engine: the converted pt2e program (quantize/dequantize
    simulation) run step after step in PyTorch, never lowered, never run on the TOSA reference model.

    The same record (``engine="simulation"``), the same metrics; no nodes outside the delegate (there
    is no delegate), and fold decisions only as far as the quantizer's graph shows them.
    """
    timings: dict[str, float] = {}
    log = FoldLog()
    log.snapshots = plan.plain and not _stages.has_stage_graph(target, plan.tfa_key)
    flow = replace(arm_flow(target, variant, calibrated, plan, log=log), lower=False,
                   run=lambda converted: run_steps(converted, target, steps),
                   run_name="the quantize/dequantize simulation")
    state = flow.run_on(target.exported, target.inputs,
                        (_Clock(timings, report, SIMULATION_PHASES, {"run": "simulate"}),))
    qparams = _site_qparams(state.converted, log)
    measured, folds, sites, decisions = _outcome(target, log, qparams, state.outputs, reference, plan.tfa_key)
    timings["metrics"] = 0.0
    report("metrics", 1.0)
    result = VariantResult(variant=variant, folds=folds, sites=sites, metrics=measured, not_delegated=(),
                           timings=timings, quantization=plan.quantization.name,
                           spec=plan.spec, outputs=tuple(tuple(step) for step in state.outputs), log=state.output,
                           engine=SIMULATION, output_scales=output_scales(state.converted),
                           accelerator=plan.accelerator,
                           cost_error=("the simulation does not lower the program: its cost comes with the TOSA run"
                                       if plan.accelerator.costs else None))
    return result, decisions


class _Clock(Observer):
    """Each step's seconds into ``timings`` (under the phase names results use), and ``report(phase, fraction)`` as
    the run advances through ``phases``."""

    def __init__(self, timings: dict, report, phases: tuple, names: dict | None = None) -> None:
        self.timings, self.report, self.phases = timings, report, phases
        self.names = {"run": "reference", **(names or {})}
        self.clock = 0.0

    def before(self, step, state) -> None:
        self.clock = time.perf_counter()

    def after(self, step, state) -> None:
        phase = self.names.get(step, step)
        self.timings[phase] = time.perf_counter() - self.clock
        if phase in self.phases:
            self.report(phase, (self.phases.index(phase) + 1) / len(self.phases))


def _outcome(target: _load.Target, log: FoldLog, qparams, quantized, reference, tfa_key: str = "tfa"):
    """What one variant's run measured and decided, on either engine: ``(metrics, folds, sites,
    decisions)``; the tfa graph the run captured is kept for later predictions (as ``tfa_key``)."""
    measured = tuple(
        metrics(o, s, q, f)
        for s, (q_outs, f_outs) in enumerate(zip(quantized, reference))
        for o, (q, f) in enumerate(zip(q_outs, f_outs))
    )
    folds, sites = _site_outcomes(log, qparams)
    if log.snapshots:
        graph = _stages.tfa_graph_of(log)
        if graph is not None:
            _stages.keep_stage_graph(target, tfa_key, _stages.StageGraph(stage="tfa", graph_module=graph, program=None))
    decisions = tuple((stage, tuple(sorted(s.site_id for s in sites if s.folded_at == stage)))
                      for stage in ("tfa", "lowering"))
    return measured, folds, sites, decisions


def output_scales(gm) -> tuple[float | None, ...]:
    """Per flat output of a converted graph, the quantization step of its final dequantize (or None)."""
    scales = []
    for v in _graph.output_values(gm.graph):
        scale = v.args[1] if isinstance(v, Node) and "dequantize_per_tensor" in str(v.target) else None
        scales.append(float(scale) if isinstance(scale, (int, float)) else None)
    return tuple(scales)


def _quant_args(node) -> QParams | None:
    for user in node.users:
        if "quantize_per_tensor" in str(user.target) and "dequantize" not in str(user.target):
            scale, zero_point = user.args[1], user.args[2]
            if isinstance(scale, (int, float)) and isinstance(zero_point, int):
                return QParams(scale=float(scale), zero_point=int(zero_point))
    return None


def _site_qparams(converted, log: FoldLog) -> dict[str, tuple[QParams | None, QParams | None]]:
    """Per site id: qparams of the conv output and the mul output in the converted graph."""
    tfa = next((r for r in log.runs if r.tfa), None)
    if tfa is None:
        return {}
    nodes = {n.name: n for n in converted.graph.nodes}
    out = {}
    for mul_name, site_id in tfa.site_ids.items():
        conv_name = tfa.convs.get(mul_name)
        conv, mul = nodes.get(conv_name), nodes.get(mul_name)
        out[site_id] = (_quant_args(conv) if conv is not None else None,
                        _quant_args(mul) if mul is not None and mul_name not in tfa.folded else None)
    return out


def _site_outcomes(log: FoldLog, qparams) -> tuple[dict, tuple[SiteOutcome, ...]]:
    folds = {"tfa": 0, "lowering": 0}
    where: dict[str, str] = {}
    order: list[str] = []
    for run in log.runs:
        stage = "tfa" if run.tfa else "lowering"
        folds[stage] += len(run.folded)
        for site_id in run.folded_ids:
            where.setdefault(site_id, stage)
        for site_id in run.site_ids.values():
            if site_id not in order:
                order.append(site_id)
    sites = tuple(
        SiteOutcome(site_id=s, folded_at=where.get(s), conv_output=(qparams.get(s) or (None, None))[0],
                    mul_output=(qparams.get(s) or (None, None))[1]) for s in order
    )
    return folds, sites


def is_qdq(node: Node, *, choose_qparams: bool = False) -> bool:
    """A quantize or dequantize op (and, with ``choose_qparams``, the op computing dynamic qparams)."""
    ops = QDQ_OPS + (CHOOSE_QPARAMS,) if choose_qparams else QDQ_OPS
    return node.op == "call_function" and any(op in str(node.target) for op in ops)


def _not_delegated(program, rejected: dict[str, str]) -> tuple[NotDelegated, ...]:
    out = []
    for n in program.graph.nodes:
        if n.op != "call_function" or "executorch_call_delegate" in str(n.target) or n.target.__name__ == "getitem":
            continue
        target = _graph.op_name(n) or str(n.target)
        if n.name in rejected:
            reason = rejected[n.name]
        elif is_qdq(n):
            reason = BOUNDARY
        else:
            reason = "not claimed by the TOSA partitioner (no reason reported)"
        out.append(NotDelegated(node=n.name, target=target, reason=reason))
    return tuple(out)


# ---------------------------------------------------------------- measurements


def metrics(output: int, step: int, q: torch.Tensor, f: torch.Tensor, chosen=None) -> Metrics:
    """Quantized ``q`` against float ``f`` for one output at one step: every measurement of ``chosen`` (default:
    the built-ins, ``measures.wanted(None)``) and the SQNR per channel."""
    if q.shape != f.shape:
        raise InspectorError(f"output {output} has shape {tuple(q.shape)} quantized but {tuple(f.shape)} in float")
    chosen = _measures.wanted(None) if chosen is None else chosen
    qd, fd = q.detach().double(), f.detach().double()
    err = qd - fd
    per_channel = tuple(sqnr(fd.select(1, c), err.select(1, c)) for c in range(fd.shape[1])) if fd.dim() >= 2 else ()
    return Metrics(output=output, step=step, values=_measures.values(chosen, f, q), sqnr_per_channel_db=per_channel)


sqnr = _measures.sqnr  # the one definition, where the measurements live
