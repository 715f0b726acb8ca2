"""Turn what a user hands us into a private exported program plus example inputs.

The caller's module, program and tensors are never touched: everything
downstream works on deep copies made here (the Arm pipeline writes scaled
weights in place into whatever module it is given; see docs/stack-facts.md,
"Traps that lose data or mislead").
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import logging
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .._base import quiet as _quiet
from .._base.copies import copy_parameters_aside, private_copy, swap_parameters
from .._base.cache import BoundedCache
from .._base.hashing import digest, program_fingerprint
from .._base.errors import InspectorError, describe, first_line, listing, quoted
from .facts import Fact, Facts
from .._base.limits import check_shape
from .samples import samples
from . import pt2 as _pt2
from . import timm_nets
from .streams import Stream, is_stream, stream_of

SAMPLE_PREFIX = "sample:"
# What a target keeps of this module's making: every buffer's initial value by module path.
INITIAL_BUFFERS: Fact[dict[str, torch.Tensor]] = Fact("initial buffers")


@dataclass(frozen=True, kw_only=True)
class Target:
    """A model ready for analysis: a private export, its inputs, and a pristine eager copy."""

    name: str  # what the user called it: "sample:conv_mul_scalar", "MyNet", "model.pt2"
    exported: torch.export.ExportedProgram  # private; never run a pass on it directly
    inputs: tuple  # example inputs (private copies): a stream's first frame
    model: nn.Module | None = None  # pristine private eager copy (None for programs and .pt2)
    recurrent: dict = field(default_factory=dict)  # output index -> input index fed on the next call
    source: str | None = None  # the target as given on a command line ("model.pt2", "net.py:Net"); None for objects
    # What every derived result depends on: the exported program's fingerprint, the inputs,
    # the recurrence and the name (results carry it). Set by ``load``.
    key: str = ""
    # What is derived from it once (stage graphs, deciders, predicted decisions), asked for by name; bounded.
    facts: Facts = field(default_factory=Facts, repr=False, compare=False)
    stream: Stream | None = None  # a new input at every step (None: every step is fed ``inputs`` again)
    task: tuple[str, ...] = ()  # the task's own measurements the model asks for (its METRICS; accuracy on labels)
    export: str = ""  # how a module was exported: NON_STRICT or STRICT ("" for a program or a .pt2: not exported here)
    notes: tuple[str, ...] = ()  # what every answer about it should say (a module that exported only strict=True)

    @property
    def task_metrics(self) -> tuple[str, ...]:
        """What a comparison measures beside the built-ins when it names nothing: the model's own ``METRICS`` and,
        where its stream's frames carry labels, ``accuracy``."""
        labelled = self.stream is not None and self.stream.labels is not None
        return tuple(dict.fromkeys([*self.task, *(("accuracy",) if labelled else ())]))

    def steps(self, steps: int) -> int:
        """``steps`` as given, never more than the stream has frames (the default when none is given is
        ``_decide/stages.py``'s ``default_steps``: it needs to know whether the model carries state)."""
        if self.stream is not None and steps > len(self.stream):
            raise InspectorError(f"steps={steps} but the stream of {self.name} has {len(self.stream)} frames: ask for "
                                 f"at most {len(self.stream)} steps")
        return steps

    def initial_buffers(self) -> dict[str, torch.Tensor]:
        """Every buffer's initial value by module path (state starts from these in every run)."""
        return self.facts.get(INITIAL_BUFFERS, (), lambda: {k: v.detach().clone() for k, v in self.eager().named_buffers()})

    def eager(self) -> nn.Module:
        """A fresh private module computing the model in float (eager copy, or the program's module)."""
        if self.model is not None:
            return private_copy(self.model)
        return copy.deepcopy(self.exported).module(check_guards=False)


# Targets by content key: the same model (same graph, weights, constants, inputs) loaded
# again gets the same Target back, with the stage graphs and decisions it already has.
_TARGETS = BoundedCache(16, "targets")


def load(target: Any, example_inputs: Any = None) -> Target:
    """Resolve ``target`` (module, ExportedProgram, sample name, ``.pt2`` path, ``file.py:Class``,
    ``timm:NAME@SIZE``).

    Every call exports afresh (cheap next to everything after it) and fingerprints the
    exported program; a model whose program, weights, constants and inputs are all the
    same as an earlier one's gets the earlier ``Target`` back, with what was derived from
    it. Anything that changed (a constructor argument, an attribute, a weight edited in
    place, a non-persistent buffer, a redefined class) gives a new key, never a stale answer.
    """
    if isinstance(target, Target):
        return target
    fresh = _load(target, example_inputs)
    if isinstance(target, (str, os.PathLike)):
        fresh = replace(fresh, source=os.fspath(target))
    key = digest(fresh.name, fresh.source or "", program_fingerprint(fresh.exported), fresh.inputs,
                 sorted(fresh.recurrent.items()), fresh.stream.key if fresh.stream is not None else "")
    fresh = replace(fresh, key=key)
    return _TARGETS.get_or_compute(key, lambda: fresh)


def clear_targets() -> None:
    """Forget every loaded target (and what was derived from it)."""
    _TARGETS.clear()


def _load(target: Any, example_inputs: Any) -> Target:
    if isinstance(target, torch.export.ExportedProgram):
        return _from_program(target, example_inputs, type(target).__name__)
    if isinstance(target, nn.Module):
        return _from_module(target, example_inputs, type(target).__name__)
    if isinstance(target, (str, os.PathLike)):
        text = os.fspath(target)
        if text.startswith(SAMPLE_PREFIX) or _is_sample(text):
            return _from_sample(text.removeprefix(SAMPLE_PREFIX), example_inputs)
        if text.startswith(timm_nets.PREFIX):
            model, inputs, name = timm_nets.build(text)
            return _from_module(model, inputs if example_inputs is None else example_inputs, name)
        if text.endswith(".pt2"):
            return _from_program(load_pt2(text), example_inputs, os.path.basename(text))
        if ".py:" in text:
            return _from_script(text, example_inputs)
        raise InspectorError(
            f"cannot tell what {quoted(text)} is; give a sample (sample:NAME), a .pt2 file, path/to/file.py:ClassName "
            "or a timm architecture (timm:NAME@SIZE)"
        )
    raise InspectorError(
        f"cannot analyze a {type(target).__name__}; give an nn.Module with example inputs, an ExportedProgram, "
        "a sample name, a .pt2 path, or path/to/file.py:ClassName"
    )


def _is_sample(name: str) -> bool:
    return name in samples.names()


def _from_sample(name: str, example_inputs: Any) -> Target:
    model = samples.get(name)
    return _from_module(model, example_inputs, SAMPLE_PREFIX + name)


def load_pt2(path: str | os.PathLike) -> torch.export.ExportedProgram:
    """Load a ``.pt2`` archive without running code from it (see ``inspector._targets.pt2.load_pt2``)."""
    return _pt2.load_pt2(path)


def import_file(file: str | os.PathLike):
    """Import the Python file the user named (code they chose to run, as ``python file.py``), afresh
    each time (an edited file is read again); a failure is one line."""
    path = Path(file)
    if not path.is_file():
        raise InspectorError(f"no such file: {file}")
    mod_name = "_fold_inspector_user_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module_spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[mod_name] = module  # dataclasses and pickling look the module up by name
    try:
        module_spec.loader.exec_module(module)
    except SystemExit as exc:  # a script that calls sys.exit() when imported
        sys.modules.pop(mod_name, None)
        raise InspectorError(f"importing {path.name} called sys.exit({exc.code!r}); guard the script's own code "
                             "with `if __name__ == '__main__':`") from None
    except Exception as exc:
        sys.modules.pop(mod_name, None)
        raise InspectorError(f"importing {path.name} failed: {describe(exc)}") from exc
    return module


def _from_script(spec: str, example_inputs: Any) -> Target:
    """``path/to/file.py:ClassName``: import the file, build the class with no arguments."""
    file, _, cls_name = spec.rpartition(":")
    module = import_file(file)
    mod_name, path = module.__name__, Path(file)
    cls = getattr(module, cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        classes = sorted(n for n, v in vars(module).items()
                         if isinstance(v, type) and issubclass(v, nn.Module) and v.__module__ == mod_name)
        raise InspectorError(f"{path.name} has no nn.Module class {quoted(cls_name)}; found: {listing(classes) or 'none'}")
    try:
        model = cls()
    except SystemExit as exc:
        raise InspectorError(f"{cls_name}() called sys.exit({exc.code!r})") from None
    except TypeError as exc:
        if "required" in str(exc) and "argument" in str(exc):
            raise InspectorError(f"{cls_name}() needs arguments ({first_line(exc)}); the inspector builds the class "
                                 "with none: give it defaults, or build it in Python and call inspector.analyze(model)"
                                 ) from None
        raise InspectorError(f"{cls_name}() failed: {describe(exc)}") from exc
    except Exception as exc:
        raise InspectorError(f"{cls_name}() failed: {describe(exc)}") from exc
    if example_inputs is None:
        example_inputs = getattr(module, "EXAMPLE_INPUTS", None)
    return _from_module(model, example_inputs, cls_name)


def _inputs_of(model: nn.Module, example_inputs: Any, name: str) -> tuple[tuple, Stream | None]:
    """The inputs to export with and the stream, if the inputs are one (a sample's own stream by default)."""
    if example_inputs is None and callable(getattr(model, "example_stream", None)):
        example_inputs = model.example_stream()  # a sample's real inputs in order (None: it has none)
    if is_stream(example_inputs):
        stream = stream_of(example_inputs, f"the stream given for {name}")
        return copy.deepcopy(stream.inputs), stream
    if example_inputs is None and callable(getattr(model, "example_inputs", None)):
        example_inputs = model.example_inputs()
    if example_inputs is None:
        example_inputs = getattr(model, "EXAMPLE_INPUTS", None)
    if example_inputs is None:
        raise InspectorError(
            f"{name} needs example inputs: pass example_inputs=(tensor, ...), give the class an "
            "example_inputs() method, or use --input-shape"
        )
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and not torch.isfinite(x).all():
            raise InspectorError(f"example input {i} of {name} contains NaN or Inf; give finite inputs")
    return copy.deepcopy(example_inputs), None


def _from_module(model: nn.Module, example_inputs: Any, name: str) -> Target:
    inputs, stream = _inputs_of(model, example_inputs, name)
    # The weights are copied in the background while the model is exported: export only reads
    # them (on fake tensors), so it runs on the caller's, and the copies replace them after.
    parameters = list(model.parameters())
    copies = copy_parameters_aside(parameters)
    # everything but the weights copied now (deepcopy alone would refuse non-leaf tensor attributes)
    private = private_copy(model, shared=parameters).eval()
    try:
        exported, how, notes = _export(private, inputs, name)
    finally:
        weights = copies()
    swap_parameters(private, weights)
    state = exported.state_dict
    for key, value in state.items():
        if id(value) in weights:
            state[key] = weights[id(value)]
    recurrent = dict(getattr(model, "RECURRENT", {}) or {})
    task = tuple(getattr(model, "METRICS", ()) or ())  # the task's own measurements (a sample's)
    return Target(name=name, exported=exported, inputs=inputs, model=private, recurrent=recurrent, stream=stream,
                  task=task, export=how, notes=notes)


NON_STRICT = "torch.export.export(strict=False)"  # the inspector's way: traces the Python as it runs
STRICT = "torch.export.export(strict=True)"  # ExecuTorch's test harness's way (TorchDynamo captures the graph)


def _export(private: nn.Module, inputs: tuple, name: str) -> tuple[torch.export.ExportedProgram, str, tuple[str, ...]]:
    """Export ``private`` non-strict and, if that fails, strict, as ExecuTorch's own test harness exports
    (``backends/test/harness/stages/export.py``): some models export only that way (torchaudio's Conformer, whose
    padding mask reads ``lengths.max()``, fails non-strict with GuardOnDataDependentSymNode). Returns the program,
    which export made it, and the note saying so when it was the strict one; when both fail, the non-strict
    export's error is the one line (with the strict one's after it)."""
    try:
        return _export_once(private, inputs, strict=False), NON_STRICT, ()
    except Exception as exc:  # noqa: BLE001 - export errors are the user's model/input mismatch
        first = exc
    try:
        exported = _export_once(private, inputs, strict=True)
    except Exception as exc:  # noqa: BLE001 - both exports failed: one line naming both
        raise InspectorError(
            f"torch.export failed for {name} with inputs {describe_inputs(inputs)}: "
            f"{describe(first)} (and with strict=True, as ExecuTorch's test harness exports: {describe(exc)}); "
            "check the example inputs or --input-shape"
        ) from first
    return exported, STRICT, (f"{name} was exported with {STRICT}, as ExecuTorch's own test harness exports it: the "
                              f"inspector's default non-strict export failed ({describe(first)})",)


def _export_once(private: nn.Module, inputs: tuple, *, strict: bool) -> torch.export.ExportedProgram:
    # torch prints the whole graph before some export errors; the one-line error says enough
    with _quiet.captured_python(), _quiet.quiet_loggers(*_quiet.EXPORT_LOGGERS, level=logging.CRITICAL):
        return torch.export.export(_sharing_parameters(private), copy.deepcopy(inputs), strict=strict)


def _sharing_parameters(module: nn.Module) -> nn.Module:
    """A copy of ``module`` to export that shares its parameters (buffers and everything else copied).

    Export traces on fake tensors and never writes into a parameter, but a ``forward`` may set
    Python attributes while it is traced: the copy keeps the pristine eager module as it was. The
    parameters are the weights (140 MB in nfnet_l0, about a second to copy), and nothing writes
    into the exported program's without copying it first (``_decide/stages.py``, ``_numbers/flow.py``), so the export
    and the eager copy hold the same ones.
    """
    return private_copy(module, shared=module.parameters())


def _from_program(program, example_inputs: Any, name: str) -> Target:
    program = copy.deepcopy(program)
    if example_inputs is None:
        stored = getattr(program, "example_inputs", None)
        example_inputs = stored[0] if stored else None
    if example_inputs is None:
        raise InspectorError(f"{name} carries no example inputs; pass example_inputs or --input-shape")
    stream = stream_of(example_inputs, f"the stream given for {name}") if is_stream(example_inputs) else None
    if stream is not None:
        example_inputs = stream.inputs
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    return Target(name=name, exported=program, inputs=copy.deepcopy(tuple(example_inputs)), stream=stream)


def random_inputs(shapes, what: str = "input shape") -> tuple:
    """Seeded random float32 inputs in [-1, 1) of these shapes (what ``--input-shape`` and a sweep's
    ``input_shape`` give a model): the same shapes give the same tensors in every process."""

    gen = torch.Generator().manual_seed(0)
    out = []
    for shape in shapes:
        dims = tuple(shape)
        if not dims or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in dims):
            raise InspectorError(f"bad {what} {quoted(list(dims))}: give positive integers, e.g. [1, 3, 8, 8]")
        check_shape(dims, what)
        out.append(torch.rand(dims, generator=gen) * 2 - 1)
    return tuple(out)


def describe_inputs(inputs: tuple) -> str:
    return "(" + ", ".join(
        "x".join(map(str, x.shape)) + f" {str(x.dtype).replace('torch.', '')}" if isinstance(x, torch.Tensor) else repr(x)
        for x in inputs
    ) + ")"

