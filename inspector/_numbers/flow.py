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

import contextlib
import copy
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from torch.fx import Node

from .._doors import executorch as _executorch, tosa as _tosa
from .._sites import graph as _graph
from .._targets import load as _load, streams as _streams
from .._base import quiet as _quiet
from .._decide import stages as _stages
from .._base.copies import private_copy
from .._doors.fold_swap import swapped_fold_pass
from .._rules.rules import FoldLog, rule_pass_class
from .quantization import Plan
from . import measures as _measures
from .results import Metrics, NotDelegated, QParams, SiteOutcome, Variant, VariantResult
from .engines import SIMULATION
from .._base.errors import InspectorError, UnknownMarker, crash_behind, describe

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


@dataclass(frozen=True)
class Calibration:
    """The batches the observers see, and how each one runs."""

    batches: tuple  # input tuples
    sequence_steps: int  # steps each batch free-runs (recurrent outputs fed back, buffers carried)
    reset: bool  # every batch starts from the model's initial state
    text: str  # how it was calibrated, in words (shown with every result)
    streams: tuple = ()  # streams fed frame after frame, each from the model's initial state (a new input per step)


def has_state(target: _load.Target) -> bool:
    """The model carries state between calls: a written buffer or input, or a ``RECURRENT`` declaration."""
    program = target.exported
    return bool(target.recurrent) or bool(_graph.state_writes(program.graph, program.graph_signature))


def choose_calibration(target: _load.Target, calibration, steps: int) -> Calibration:
    """The user's batches or streams (``calibration``), or the default: the example inputs and seeded perturbed
    copies, each free-running as many steps as the comparison when the model has state; for a target with a stream,
    the stream itself (and perturbed copies of it), frame after frame."""
    stateful = has_state(target)
    if calibration is not None and not isinstance(calibration, (str, bytes)) and any(
            _streams.is_stream(c) for c in _listed(calibration)):
        streams = tuple(_streams.stream_of(c, f"calibration stream {i}") for i, c in enumerate(_listed(calibration)))
        return Calibration((), 1, True, f"{len(streams)} stream(s) of {', '.join(str(len(s)) for s in streams)} "
                                        "frame(s), each from the model's initial state", streams)
    if calibration is not None:
        batches = [tuple(b) if isinstance(b, (list, tuple)) else (b,) for b in calibration]
        if not batches:
            raise InspectorError("calibration is empty; give at least one batch of inputs")
        for i, batch in enumerate(batches):
            _check_finite(batch, f"calibration batch {i}")
        runs = min(steps, CALIBRATION_MAX_STEPS) if target.recurrent else 1
        text = f"{len(batches)} user batches" + (f", each free-running {runs} recurrent step(s)" if runs > 1 else "")
        return Calibration(tuple(batches), runs, False, text)
    _check_finite(target.inputs, "example inputs")
    if target.stream is not None:
        return _stream_calibration(target.stream)
    noise = (f"the example inputs and {{copies}} copies with N(0, ({CALIBRATION_NOISE} * std)^2) noise, "
             f"seed {CALIBRATION_SEED}")
    if not stateful:
        batches = perturbed(target.inputs, CALIBRATION_COPIES)
        return Calibration(tuple(batches), 1, False, noise.format(copies=CALIBRATION_COPIES))
    # A model with state: the observers must see the state's range over the whole run, so each
    # calibration sequence free-runs as many steps as the comparison (docs/stack-facts.md: 8 calls
    # never see the state of step 20, and the quantized state clips there).
    length = min(steps, CALIBRATION_MAX_STEPS)
    sequences = max(1, min(1 + CALIBRATION_COPIES, CALIBRATION_MAX_CALLS // length))
    batches = perturbed(target.inputs, sequences - 1)
    text = (f"{sequences} sequence(s) of {length} step(s), each free-running the model's state from its "
            f"initial value: " + noise.format(copies=sequences - 1)
            + (f" (capped at {CALIBRATION_MAX_STEPS} steps of the {steps} compared)" if steps > length else ""))
    return Calibration(tuple(batches), length, True, text)


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
    head = _streams.Stream(stream.frames[:length], None, stream.sequence, stream.name)
    copies = max(0, min(CALIBRATION_COPIES, CALIBRATION_MAX_CALLS // length - 1))
    noisy = [_streams.Stream(tuple(frames), None, stream.sequence, f"{stream.name}, perturbed")
             for frames in zip(*(perturbed(f, copies) for f in head.frames))][1:]
    text = (f"{stream.name or 'the stream'}: its first {length} frame(s) in order" if length < len(stream)
            else f"{stream.name or 'the stream'}: its {length} frame(s) in order")
    if copies:
        text += (f", and {copies} cop{'y' if copies == 1 else 'ies'} with N(0, ({CALIBRATION_NOISE} * std)^2) noise, "
                 f"seed {CALIBRATION_SEED}")
    return Calibration((), 1, True, text + ", each from the model's initial state", (head, *noisy))


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


def stepped(call: Callable, inputs, recurrent: dict[int, int], steps: int, stream: "_streams.Stream | None" = None,
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
            raise InspectorError(f"{target.name} feeds output {out_idx} into input {in_idx}, but it takes {len(target.inputs)} inputs")
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
             keep_float: bool = False, mark=None, between=None):
    """Prepare, calibrate and convert a private copy of the target under ``plan`` (inside the
    caller's fold swap).

    Returns ``(prepared, converted)``: with ``keep_float`` a copy of the calibrated prepared
    model (float, observers passing values through), else None; and the converted pt2e model
    (quantize/dequantize simulation), state reset to the model's initial values. ``between(prepared)`` runs
    after calibration, before conversion (a flow 1.5.1 does not run: ``stale.py``'s fold after calibration).
    """
    mark = mark or (lambda phase, index: None)
    with _quiet.quiet_loggers(*_executorch.ARM_PASS_LOGGERS):
        return _quantize(target, variant, calibrated, plan, keep_float, mark, between)


def _quantize(target, variant, calibrated, plan: Plan, keep_float, mark, between=None):
    quantizer = run_phase("quantizer", variant, plan.quantizer)
    # The target's own export (a private copy): the program the user gave, exported once.
    module = copy.deepcopy(target.exported).module(check_guards=False)
    plan.tag(module)  # the nodes an override keeps out of the variant's quantization
    mark("export", 0)
    prepared = run_phase("prepare", variant, lambda: _tosa.prepare_pt2e(module, quantizer))
    mark("prepare", 1)
    run_phase("calibrate", variant, lambda: calibrate(prepared, calibrated, target))
    if between is not None:
        run_phase("after calibration", variant, lambda: between(prepared))
    mark("calibrate", 2)
    kept = None
    if keep_float:
        kept = private_copy(prepared)  # the quantizer's constant folding leaves non-leaf tensors in it
        reset_state(kept, target.initial_buffers())
    converted = run_phase("convert", variant, lambda: _tosa.convert_pt2e(prepared))
    reset_state(converted, target.initial_buffers())
    return kept, converted


def run_phase(name: str, variant: Variant | None, fn):
    """``fn()``, one phase of the quantized flow (prepare, calibrate, convert, lower, ...), with a
    crash turned into a one-line InspectorError that names the phase (and the variant, if given);
    a crash of the fold pass that the pipeline wrapped is unwrapped first."""
    failed = f"{name} failed" + (f" for variant {variant.label}" if variant is not None else "")
    try:
        return fn()
    except InspectorError:
        raise
    except Exception as exc:  # noqa: BLE001
        crash = crash_behind(exc)
        if crash is not None:  # the pass crashed inside the pipeline, which wrapped the error
            raise InspectorError(f"{failed}: {crash}") from None
        unknown = crash_behind(exc, UnknownMarker)
        if unknown is not None:
            raise InspectorError(f"variant {variant.label}: {unknown}" if variant is not None else str(unknown)) \
                from None
        raise InspectorError(f"{failed}: {describe(exc)}") from None


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
    mark = _clock(timings, report, PHASES)

    # The run captures the tfa graph for later predictions (the default quantization's, per accelerator).
    log.snapshots = plan.plain and not _stages.has_stage_graph(target, plan.tfa_key)
    initial = target.initial_buffers()
    chip = plan.accelerator
    # Everything the stack prints on the way (the reference model's C++ warnings on fd 1
    # among it) goes into the variant's log, shown under --debug, never into stdout.
    with _output_kept() as captured:
        with swapped_fold_pass(rule_pass_class(variant.rule, variant.markers, log)):
            _, converted = quantize(target, variant, calibrated, plan, mark=mark, between=between)
            qparams = _site_qparams(converted, log)
            mark("convert", 3)
            reexported = run_phase("re-export", variant,
                                lambda: torch.export.export(converted, copy.deepcopy(target.inputs)))
            mark("re-export", 4)
            with _tosa.partition_rejections() as rejected:
                # on an NPU every TOSA operator carries its node: how Vela's rows reach the sites
                lowered = run_phase("lower", variant, lambda: _tosa.lower(reexported, plan.spec, locations=chip.costs))
            mark("lower", 5)
        program = lowered.exported_program()
        module = program.module()
        reset_state(module, initial)

        def on_the_reference_model():
            with _tosa.reference_dispatch():
                return run_steps(module, target, steps)

        quantized = run_phase("the TOSA reference model", variant, on_the_reference_model)
    mark("reference", 6)
    outside = _not_delegated(program, rejected)
    cost, cost_error = None, None
    if chip.costs:
        try:  # the same flatbuffer the reference model ran, compiled by Vela: numbers and cost from one program
            with _output_kept():
                cost = chip.cost(lowered, _site_names(log), sum(1 for n in outside if n.reason != BOUNDARY))
        except InspectorError as exc:
            cost_error = f"variant {variant.label}: {exc}"
        mark("cost", 7)
    measured, folds, sites, decisions = _outcome(target, log, qparams, quantized, reference, plan.tfa_key)
    mark("metrics", 8)
    result = VariantResult(variant, folds, sites, measured, outside, timings,
                           quantization=plan.quantization.name, spec=plan.spec,
                           outputs=tuple(tuple(step) for step in quantized), log=captured.text,
                           output_scales=output_scales(converted), accelerator=chip, cost=cost,
                           cost_error=cost_error)
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
    mark = _clock(timings, report, SIMULATION_PHASES)

    log.snapshots = plan.plain and not _stages.has_stage_graph(target, plan.tfa_key)
    with _output_kept() as captured:
        with swapped_fold_pass(rule_pass_class(variant.rule, variant.markers, log)):
            _, converted = quantize(target, variant, calibrated, plan, mark=mark)
        qparams = _site_qparams(converted, log)
        mark("convert", 3)
        quantized = run_phase("the quantize/dequantize simulation", variant,
                           lambda: run_steps(converted, target, steps))
    mark("simulate", 4)
    measured, folds, sites, decisions = _outcome(target, log, qparams, quantized, reference, plan.tfa_key)
    mark("metrics", 5)
    result = VariantResult(variant, folds, sites, measured, (), timings, quantization=plan.quantization.name,
                           spec=plan.spec, outputs=tuple(tuple(step) for step in quantized), log=captured.text,
                           engine=SIMULATION, output_scales=output_scales(converted), accelerator=plan.accelerator,
                           cost_error=("the simulation does not lower the program: its cost comes with the TOSA run"
                                       if plan.accelerator.costs else None))
    return result, decisions


@contextlib.contextmanager
def _output_kept():
    """Everything the stack prints inside (the reference model's C++ warnings on fd 1 among it) is
    kept, never shown; an ``InspectorError`` raised inside carries it as its ``details`` (--debug)."""
    error = None
    with _quiet.captured_fds() as captured:
        try:
            yield captured
        except InspectorError as exc:
            error = exc
    if error is not None:
        error.details = "\n".join(filter(None, (error.details, captured.text)))
        raise error


def _clock(timings: dict, report, phases: tuple) -> Callable[[str, int], None]:
    """``mark(phase, index)``: the time since the last mark goes into ``timings[phase]``, and
    ``report`` hears how far through ``phases`` the run is."""
    clock = time.perf_counter()

    def mark(phase: str, index: int) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[phase] = now - clock
        clock = now
        report(phase, (index + 1) / len(phases))

    return mark


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
            _stages.keep_stage_graph(target, tfa_key, _stages.StageGraph("tfa", graph, None))
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
                return QParams(float(scale), int(zero_point))
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
        SiteOutcome(s, where.get(s), *(qparams.get(s) or (None, None))) for s in order
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
        out.append(NotDelegated(n.name, target, reason))
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
    return Metrics(output, step, _measures.values(chosen, f, q), per_channel)


sqnr = _measures.sqnr  # the one definition, where the measurements live
