"""The engines that produce a variant's quantized numbers (``Engine`` objects, one registry), and how far
two engines' answers are apart.

- ``tosa`` (the default, the authority): quantize, re-export, lower with the Arm backend, run the
  bit-accurate TOSA reference model (``flow.run_variant``).
- ``simulation``: the converted pt2e program (quantize/dequantize simulation) run in PyTorch, with
  no lowering and no TOSA (``flow.run_simulated``). Seconds instead of minutes on a real network,
  but not the TOSA reference: the Arm backend's integer rescales and tables round differently, and
  what only the lowering sees is not there (``SIMULATION_NOTE`` says so next to every simulated
  number).

Every record says which engine produced it; ``gap`` says how far two results of the same question
are apart (per variant, output and step: the SQNR difference in dB and the largest difference in
quantization steps of the output's scale).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .._base import codec as _codec
from .._base.codec import Record
from .._base.registry import Named, Registry
from .._base.errors import InspectorError, listing, quoted
from .._base.display import draw


@dataclass(frozen=True, eq=False, kw_only=True)
class Engine(Named):
    """One way to compute a variant's quantized numbers: the flow asks it, never branches on its name. Records
    hold the engine itself; ``str(engine)`` is its name (what their JSON writes), and it equals its name."""

    name: str  # what users type: engine="simulation", --engine simulation
    help: str = field(repr=False)  # one line: what it runs
    text: str = field(repr=False)  # what a reader sees next to its numbers
    note: str = field(repr=False)  # what it cannot show, said with every one of its numbers ("" for the authority)
    lowers: bool  # it lowers the program (a lowered program is what an accelerator's cost is read from)
    in_workers: bool  # worth a worker process (the simulation runs no native lowering or reference model)
    authority: bool  # its numbers are the ones the others are measured against


def _checked(engine: Engine) -> Engine:
    if not isinstance(engine, Engine):
        raise InspectorError(f"an engine is an Engine, got a {type(engine).__name__}")
    return engine


# The engines, in one registry (the shape of rules, quantizations and accelerators).
engines = Registry("engine", make=_checked, line=lambda e: e.help, fixed=lambda e: True)

TOSA = engines.register(Engine(
    name="tosa", help="lower with the Arm backend and run the bit-accurate TOSA reference model (the authority)",
    text="TOSA INT reference", note="", lowers=True, in_workers=True, authority=True))
# The one line said with every simulated number: what the simulation cannot show.
SIMULATION_NOTE = ("simulation: the converted program run in PyTorch, not lowered and not run on the TOSA reference "
                   "model; a failure only the lowering hits, nodes the delegate would not take and an accelerator's "
                   "cost are not shown, and integer rescales may round differently")
SIMULATION = engines.register(Engine(
    name="simulation",
    help="run the converted program's quantize/dequantize simulation in PyTorch: no lowering, no TOSA (a preview)",
    text="quantize/dequantize simulation (preview, not TOSA)", note=SIMULATION_NOTE, lowers=False, in_workers=False,
    authority=False))


def engine_of(engine: str | Engine) -> Engine:
    """The engine ``engine`` names (one line naming the choices if it names none)."""
    if isinstance(engine, Engine):
        return engine
    if engine not in engines:
        raise InspectorError(f"unknown engine {quoted(engine)}; choose one of {listing(engines.names())}")
    return engines.get(engine)


def read_engine(v) -> Engine:
    """The registered engine a file names (ValueError on a name no engine has)."""
    if not isinstance(v, str) or v not in engines:
        raise ValueError(f"unknown engine {quoted(v)}")
    return engines.get(v)


_codec.register(Engine, write=lambda e: e.name, read=read_engine)  # a record's engine is written by its name


@dataclass(frozen=True, kw_only=True)
class OutputGap(Record):
    """How far two engines' numbers are apart for one output of one variant at one step."""

    variant: str  # the variant's label
    output: int  # output index (flattened)
    step: int  # 0-based recurrent step
    sqnr_db: float  # SQNR against float on the first engine
    other_sqnr_db: float  # the same on the second engine
    db: float  # sqnr_db - other_sqnr_db (0 when both are exact, inf when only one is)
    max_steps: float | None  # max |first - second| in the output's quantization steps (None: no outputs or scale)
    scale: float | None  # that quantization step


@dataclass(frozen=True, kw_only=True)
class EngineGap(Record):
    """Two comparisons of the same question on two engines, side by side."""

    target: str  # model name
    engines: tuple[Engine, Engine]  # (first, second), e.g. (SIMULATION, TOSA)
    outputs: tuple[OutputGap, ...]  # per variant, step and output

    # for readers: the largest gaps, in dB and in quantization steps
    json_derived = {"largest_db": lambda g: g.largest_db, "largest_steps": lambda g: g.largest_steps}
    json_order = ("target", "engines", "largest_db", "largest_steps", "outputs")

    @property
    def largest_db(self) -> float:
        """The largest |SQNR difference| over every variant, output and step (0.0 when there is none)."""
        values = [abs(g.db) for g in self.outputs if not math.isnan(g.db)]
        return max(values, default=0.0)

    @property
    def largest_steps(self) -> float | None:
        """The largest difference in quantization steps (None when no output had both outputs and a scale)."""
        values = [g.max_steps for g in self.outputs if g.max_steps is not None]
        return max(values) if values else None

    def text(self) -> str:
        """One line: how far apart the engines were."""
        return draw("text", self)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return draw("bundle", self)

    def __repr__(self) -> str:
        return f"<EngineGap {self.target}: {self.text()}>"


def gap(first, second) -> EngineGap:
    """How far ``first`` and ``second`` (two ``Comparison``s of the same model and variants, usually
    one per engine) are apart: per variant both measured, output and step."""
    if first.target != second.target or first.steps != second.steps:
        raise InspectorError(f"cannot measure the gap between {first.target} ({first.steps} step(s)) and "
                             f"{second.target} ({second.steps} step(s)): give two comparisons of the same question")
    others = {r.variant.label: r for r in second.measured}
    out = []
    for a in first.measured:
        b = others.get(a.variant.label)
        if b is None:
            continue
        b_metrics = {(m.step, m.output): m for m in b.metrics}
        for m in a.metrics:
            other = b_metrics.get((m.step, m.output))
            if other is None:
                continue
            scale = _scale(a, m.output) or _scale(b, m.output)
            out.append(OutputGap(variant=a.variant.label, output=m.output, step=m.step, sqnr_db=m.sqnr_db,
                                 other_sqnr_db=other.sqnr_db,
                                 db=_db_difference(m.sqnr_db, other.sqnr_db),
                                 max_steps=_steps_apart(a, b, m.step, m.output, scale), scale=scale))
    return EngineGap(target=first.target, engines=(engine_of(first.engine), engine_of(second.engine)),
                     outputs=tuple(out))


def _scale(result, output: int) -> float | None:
    scales = result.output_scales
    return scales[output] if output < len(scales) and scales[output] else None


def _db_difference(a: float, b: float) -> float:
    if a == b:  # both exact (inf) or equal
        return 0.0
    return a - b


def _steps_apart(a, b, step: int, output: int, scale: float | None) -> float | None:
    if scale is None or step >= len(a.outputs) or step >= len(b.outputs):
        return None
    x, y = a.outputs[step], b.outputs[step]
    if output >= len(x) or output >= len(y) or x[output].shape != y[output].shape:
        return None
    if x[output].numel() == 0:
        return 0.0
    return float((x[output].double() - y[output].double()).abs().max()) / scale
