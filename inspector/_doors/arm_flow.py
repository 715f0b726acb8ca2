"""ExecuTorch's Arm flow, written once: one runner, named steps, observers.

The flow is ExecuTorch's own, in its order:

    export -> prepare (prepare_pt2e: fuse, transform-for-annotation, annotate, observe) -> calibrate -> convert
    (convert_pt2e) -> re-export -> lower (to_edge_transform_and_lower for a TOSA specification) -> run -> cost

and the FP flow (nothing quantized) is ``export -> lower -> run -> cost``. ``ArmFlow`` is a frozen configuration
(which quantizer, which fold pass the pass manager builds, how to calibrate, what to run on the lowered program, where
to stop); ``ArmFlow.run(program, inputs)`` runs it on a private copy of ``program`` in one loop, the way torch.fx's
``PassManager`` runs passes: every step under the same scope (the fold pass swapped, the Arm loggers quiet, the stack's
own output kept off the screen), the same hooks before and after, and a crash turned into one ``InspectorError`` that
names the step (and the variant) with the original chained below it (``__cause__``, and its traceback in
``details``).

What a feature wants to see is an observer, not a copy of the flow: ``before(step, state)`` / ``after(step, state)``
around each step, ``fold_call(state, graph_module, program)`` each time the fold pass is called (``program is None``
in transform-for-annotation, the exported program in a lowering call), ``scope()`` for a context held over the whole
run (the pipeline door's pass observer). An observer raises ``Stop`` to end the flow early: the run returns with
``state.stopped`` naming the step. This module and the doors below it are the only code that calls
``prepare_pt2e``, ``convert_pt2e`` or ``to_edge_transform_and_lower`` (tests/test_house.py checks it).
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

import torch

from .._base import quiet as _quiet
from .._base.copies import private_copy
from .._base.errors import InspectorError, UnknownMarker, crash_behind, describe
from . import executorch as _executorch, tosa as _tosa
from .fold_swap import active_fold_pass, swapped_fold_pass

# Every step the runner knows, in the flow's order (the FP flow skips the quantizing ones).
STEPS = ("export", "prepare", "calibrate", "convert", "re-export", "lower", "run", "cost")
QUANTIZING = ("prepare", "calibrate", "convert", "re-export")


class Stop(Exception):
    """Raised by an observer to end the flow where it is: what it needed has been seen."""


@dataclass(kw_only=True)
class FlowState:
    """One run's working values, filled in as the steps go (None until a step makes them)."""

    program: Any = None  # the private copy of the exported program the run started from
    module: Any = None  # its module, what prepare_pt2e receives (the INT flow)
    prepared: Any = None  # after prepare (observers in place), calibrated after calibrate
    float_copy: Any = None  # a private copy of the calibrated prepared model (``keep_float``)
    converted: Any = None  # after convert_pt2e: the quantize/dequantize simulation
    reexported: Any = None  # the converted model exported again: what lowering receives
    lowered: Any = None  # the edge program manager to_edge_transform_and_lower returned
    outputs: Any = None  # what the run step returned
    cost: Any = None  # what the cost step returned
    cost_error: str | None = None  # why the cost step gave no cost (the numbers still stand)
    rejected: dict = field(default_factory=dict)  # node name -> why the partitioner left it out
    partitions: list = field(default_factory=list)  # the TOSA partitions the partitioner found, per lowering
    fold_calls: int = 0  # how many times the fold pass was called
    stopped: str | None = None  # the step an observer stopped the run in (None: it ran to its end)
    output: str = ""  # what the stack printed on the way (kept for --debug)

    @property
    def lowered_program(self):
        """The lowered program's ExportedProgram (None before lowering)."""
        return None if self.lowered is None else self.lowered.exported_program()


class Observer:
    """What a feature sees of the flow; every hook is optional (this base does nothing)."""

    def scope(self) -> contextlib.AbstractContextManager:
        """A context held over the whole run (opened inside the runner's own scope)."""
        return contextlib.nullcontext()

    def before(self, step: str, state: FlowState) -> None:
        """``step`` is about to run."""

    def after(self, step: str, state: FlowState) -> None:
        """``step`` ran; ``state`` holds what it made."""

    def fold_call(self, state: FlowState, graph_module, program) -> None:
        """The fold pass is about to run on ``graph_module`` (``program`` None: transform-for-annotation)."""


@dataclass(frozen=True, kw_only=True)
class ArmFlow:
    """One configuration of ExecuTorch's Arm flow.

    Args:
        spec: the TOSA specification lowered for (``TOSA-1.0+INT``, ``TOSA-1.0+FP``, an Ethos-U's).
        quantizer: builds the quantizer (``plan.quantizer``); None is the FP flow: the export lowered as it is.
        fold_pass: the fold pass class the Arm pass manager builds (None: the installed one).
        prepare_module: turns the private exported program into what ``prepare_pt2e`` receives (default:
            ``program.module(check_guards=False)``); a quantization plan tags nodes here.
        calibrate: feeds the prepared model (None: no calibration step).
        after_calibration: runs on the calibrated prepared model before conversion (a flow ExecuTorch does not run).
        keep_float: keep a private copy of the calibrated prepared model (``state.float_copy``).
        reset: puts a module's state back to the model's initial values (after conversion, before the run).
        lower: lower the program (False: the flow ends with the converted model, the simulation's).
        locations: every TOSA operator carries the node it comes from (how Vela's rows reach the sites).
        run: runs the lowered module (on the TOSA reference model) or, without lowering, the converted one.
        run_name: the run step's name in errors ("the TOSA reference model", "the quantize/dequantize simulation").
        cost: prices the lowered program (``cost(state)``: an accelerator's Vela); its error is kept in
            ``state.cost_error``, the numbers stand.
        until: the last step to run (None: every step configured).
        label: the variant's label, named in errors.
        capture_output: keep what the stack prints (on fds 1 and 2) off the screen, in ``state.output``.
    """

    spec: str
    quantizer: Callable[[], Any] | None = None
    fold_pass: type | None = None
    prepare_module: Callable[[Any], Any] | None = None
    calibrate: Callable[[Any], None] | None = None
    after_calibration: Callable[[Any], None] | None = None
    keep_float: bool = False
    reset: Callable[[Any], None] | None = None
    lower: bool = True
    locations: bool = False
    run: Callable[[Any], Any] | None = None
    run_name: str = "the TOSA reference model"
    cost: Callable[[FlowState], Any] | None = None
    until: str | None = None
    label: str | None = None
    capture_output: bool = True

    @property
    def quantized(self) -> bool:
        """The INT flow (prepare, calibrate, convert, re-export) rather than the FP flow."""
        return self.quantizer is not None

    def steps(self) -> tuple[str, ...]:
        """The steps this configuration runs, in order."""
        wanted = ["export"]
        if self.quantized:
            wanted += ["prepare"] + (["calibrate"] if self.calibrate is not None else []) + ["convert"]
            if self.lower:
                wanted.append("re-export")
        if self.lower:
            wanted.append("lower")
        if self.run is not None:
            wanted.append("run")
        if self.lower and self.cost is not None:
            wanted.append("cost")
        if self.until is not None:
            if self.until not in wanted:
                raise ValueError(f"until={self.until!r} is not a step of this flow: {', '.join(wanted)}")
            wanted = wanted[:wanted.index(self.until) + 1]
        return tuple(wanted)

    def run_on(self, program, inputs, observers: tuple[Observer, ...] = ()) -> FlowState:
        """Run the flow on a private copy of ``program`` (an ExportedProgram; never written), ``inputs`` its example
        inputs (the re-export's); ``observers`` hear every step. Returns the run's state."""
        state = FlowState()
        steps = self.steps()
        error: InspectorError | None = None
        with contextlib.ExitStack() as outer:  # what the stack printed is read once this scope has closed
            captured = outer.enter_context(_quiet.captured_fds()) if self.capture_output else None
            try:
                with contextlib.ExitStack() as stack:
                    stack.enter_context(swapped_fold_pass(_observed_pass(self.fold_pass or active_fold_pass(),
                                                                         observers, state)))
                    stack.enter_context(_quiet.quiet_loggers(*_executorch.ARM_PASS_LOGGERS))
                    for observer in observers:
                        stack.enter_context(observer.scope())
                    state.program = copy.deepcopy(program)  # the tfa fold writes scaled weights into what it is given
                    for step in steps:
                        self._heard(step, state, observers, "before")
                        self._step(step, state, inputs)
                        self._heard(step, state, observers, "after")
            except _Stopped as stop:
                state.stopped = stop.step
            except InspectorError as exc:
                error = exc
        if captured is not None:
            state.output = captured.text
        if error is not None:
            # the attached text only: the cause's traceback is read from the chain, not stored twice
            error.details = "\n".join(filter(None, (error.attached, state.output)))
            raise error
        return state

    # ------------------------------------------------------------ the steps

    @staticmethod
    def _heard(step: str, state: FlowState, observers, hook: str) -> None:
        try:
            for observer in observers:
                getattr(observer, hook)(step, state)
        except Stop as stop:
            raise _Stopped(step) from stop

    def _step(self, step: str, state: FlowState, inputs) -> None:
        try:
            getattr(self, "_" + step.replace("-", "_"))(state, inputs)
        except (Stop, _Stopped) as exc:
            raise _Stopped(step) from exc
        except InspectorError:
            raise
        except Exception as exc:  # any crash of the stack becomes one line naming the step
            if crash_behind(exc, Stop) is not None:  # an observer's stop, wrapped by the pass manager
                raise _Stopped(step) from exc
            raise self._failure(step, exc) from exc

    def _failure(self, step: str, exc: Exception) -> FlowStepError:
        name = self.run_name if step == "run" else step
        failed = f"{name} failed" + (f" for variant {self.label}" if self.label is not None else "")
        crash = crash_behind(exc)
        if crash is not None:  # the fold pass crashed inside the pipeline, which wrapped the error
            return FlowStepError(f"{failed}: {crash}", step=step)
        unknown = crash_behind(exc, UnknownMarker)
        if unknown is not None:
            return FlowStepError(f"variant {self.label}: {unknown}" if self.label is not None else str(unknown),
                                 step=step)
        return FlowStepError(f"{failed}: {describe(exc)}", step=step)  # raised from exc: details are its traceback

    def _export(self, state: FlowState, inputs) -> None:
        if self.quantized:
            prepare = self.prepare_module or (lambda program: program.module(check_guards=False))
            state.module = prepare(state.program)

    def _prepare(self, state: FlowState, inputs) -> None:
        state.prepared = _tosa.prepare_pt2e(state.module, self.quantizer())

    def _calibrate(self, state: FlowState, inputs) -> None:
        self.calibrate(state.prepared)
        if self.after_calibration is not None:
            self.after_calibration(state.prepared)
        if self.keep_float:
            state.float_copy = private_copy(state.prepared)  # the quantizer's folding leaves non-leaf tensors
            if self.reset is not None:
                self.reset(state.float_copy)

    def _convert(self, state: FlowState, inputs) -> None:
        state.converted = _tosa.convert_pt2e(state.prepared)
        if self.reset is not None:
            self.reset(state.converted)

    def _re_export(self, state: FlowState, inputs) -> None:
        state.reexported = torch.export.export(state.converted, copy.deepcopy(inputs))

    def _lower(self, state: FlowState, inputs) -> None:
        program = state.reexported if self.quantized else state.program
        with _tosa.partition_rejections() as rejected:
            state.lowered = _tosa.lower(program, self.spec, locations=self.locations, partitions=state.partitions)
        state.rejected = dict(rejected)

    def _run(self, state: FlowState, inputs) -> None:
        if not self.lower:
            state.outputs = self.run(state.converted)
            return
        module = state.lowered_program.module()
        if self.reset is not None:
            self.reset(module)
        with _tosa.reference_dispatch():
            state.outputs = self.run(module)

    def _cost(self, state: FlowState, inputs) -> None:
        try:  # the same flatbuffer the reference model ran, priced: the numbers stand without it
            state.cost = self.cost(state)
        except InspectorError as exc:
            state.cost_error = (f"variant {self.label}: {exc}" if self.label is not None else str(exc))


class FlowStepError(InspectorError):
    """A crash of the stack inside one step of the flow: the one line names the step, ``step`` says which, and the
    original is chained below it (``__cause__``)."""

    def __init__(self, message: str, *, step: str) -> None:
        super().__init__(message)
        self.step = step  # one of STEPS


class _Stopped(Exception):
    """An observer stopped the run in ``step``."""

    def __init__(self, step: str) -> None:
        super().__init__(step)
        self.step = step


def _observed_pass(base: type, observers: tuple[Observer, ...], state: FlowState) -> type:
    """``base`` (the fold pass the run swaps in), telling every observer of each call first."""
    if not any(type(o).fold_call is not Observer.fold_call for o in observers):
        return base

    class Observed(base):  # type: ignore[misc, valid-type]
        def call(self, graph_module):
            state.fold_calls += 1
            for observer in observers:
                observer.fold_call(state, graph_module, self.exported_program)
            return super().call(graph_module)

    Observed.__name__ = Observed.__qualname__ = base.__name__
    return Observed
