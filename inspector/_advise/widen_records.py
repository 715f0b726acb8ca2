"""The records of ``layers`` and ``widen``: each layer's cost beside the error entering there, and each set of wider
layers measured or predicted. Data only: ``widen.py`` fills them, ``inspector.present.widen_view`` draws them.

Their dict form is the shared codec's (``inspector/_base/codec.py``, the ``Record`` mixin): ``to_dict()`` from the
fields, ``from_dict()`` reads it back with every field checked. What a reader wants beside the fields (the rows'
sum, the answer in one sentence, the per-layer rows of a widening at the top) is written as derived keys.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from .._base.codec import Record, codec
from .._base.data import dataframe
from .._base.display import draw

WHERE = ("npu", "cpu")
NOT_COUNTED = "Vela does not count it (it runs on the CPU, outside the delegate)"


@dataclass(frozen=True, kw_only=True)
class LayerCost(Record):
    """One layer: what Vela counts for it and the quantization error that enters there."""

    node: str | None  # the exported program's node (None: a Vela row traced to no node; ``vela_name`` names it)
    vela_name: str  # Vela's output tensor of its first row ("" for a node with no row of its own)
    op: str  # what it computes: the node's op, or Vela's operator for an untraced row
    module: str  # the module path that made it ("" at the root or when not known)
    where: str  # "npu" (in the delegate: Vela counts it) or "cpu" (outside the delegate: Vela does not)
    cycles: int | None  # Vela's cycles of its rows (0: fused into another row; None off the NPU)
    operators: tuple[str, ...]  # the operators Vela compiled for it
    sqnr_db: float | None  # its SQNR at its worst step (attribution, the baseline quantization)
    max_abs_error: float | None  # max |quantized - float| at it, over the steps
    drop_db: float | None  # the error that enters here: its inputs' SQNR minus its own, at its worst step
    drop_step: int | None  # that step (0-based)
    entry_point: bool  # attribution lists it among the baseline's entry points of the error


@dataclass(frozen=True, kw_only=True)
class Layers(Record):
    """Per layer of one model on one accelerator: Vela's cycles beside the error that enters there (the baseline)."""

    target: str
    accelerator: str
    quantization: str  # the baseline's quantization
    steps: int  # steps (frames) the errors are taken over: each layer's worst
    cycles: int  # Vela's own total over every delegate (the NPU's part: what the rows add up to)
    compiler: str  # Vela's version and configuration, in one line
    layers: tuple[LayerCost, ...]  # in the exported program's order; Vela rows traced to no node last
    notes: tuple[str, ...] = ()

    json_kind = "layers"
    json_derived = {"counted": lambda t: t.counted}  # the rows' sum, beside Vela's total
    json_checked = ("counted",)

    @property
    def counted(self) -> int:
        """The cycles of the rows: equal to ``cycles`` (Vela's total) when every row is listed."""
        return sum(layer.cycles or 0 for layer in self.layers)

    def ranked(self) -> tuple[LayerCost, ...]:
        """The layers with a measured error, the most error entering first."""
        known = [layer for layer in self.layers if layer.node is not None and layer.drop_db is not None]
        return tuple(sorted(known, key=lambda layer: -layer.drop_db))

    def to_dataframe(self):
        """One row per layer: the columns of ``to_dict()["layers"]``."""
        return dataframe("layers", {"layers": lambda: [layer.to_dict() for layer in self.layers]})

    def plot(self):
        """A matplotlib Figure: each layer's cycles (bars) beside the error entering there (dots)."""
        return draw("widen_plot", self)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return draw("widen_bundle", self)

    def __repr__(self) -> str:
        return f"<Layers {self.target} on {self.accelerator}: {len(self.layers)} layers, {self.cycles:,} cycles>"


@dataclass(frozen=True, kw_only=True)
class WidenPoint(Record):
    """One set of layers run wider: its cycles and the budget's measurement, each measured or predicted."""

    overrides: tuple[tuple[str, str], ...]  # (exported node name, "a16w8" or "float"), sorted; written as an object
    quantization: str  # the rest of the model's quantization ("a8w8"; "a16w8" for 16-bit everywhere)
    cycles: int | None  # Vela's total (measured) or the baseline's plus each layer's change (predicted)
    value: float | None  # the budget's measurement (TOSA reference model when measured, simulation when predicted)
    measured: bool  # True: lowered, run on the TOSA reference model and priced by Vela; False: predicted
    within: bool  # meets the budget
    frontier: bool  # no point beats it on both cycles and the measurement
    on_cpu: int = 0  # nodes outside the delegate (Vela does not count them)
    sqnr_db: float | None = None  # the worst output's SQNR at the worst step (beside the budget's measurement)

    @property
    def label(self) -> str:
        if not self.overrides:
            return "16-bit everywhere" if self.quantization != "a8w8" else "baseline"
        return ", ".join(f"{k}={v}" for k, v in self.overrides)


@dataclass(frozen=True, kw_only=True)
class Widening(Record):
    """Which layers to run wider on one accelerator within a budget: every point, the frontier, the pick."""

    target: str
    accelerator: str
    quantization: str  # the baseline's
    wide: str  # the wider quantization a layer may get ("a16w8")
    budget: str  # "MEASURE=VALUE" as given (e.g. "decision-mismatch@0.55=0")
    metric: str  # the budget's measurement
    better: str  # "higher" or "lower"
    limit: float  # the budget's value
    steps: int
    search: str  # "exhaustive" (every set measured) or "predicted" (sets predicted, the cheapest confirmed)
    candidates: tuple[str, ...]  # the nodes the sets are made of, in the order chosen
    why: tuple[tuple[str, str], ...]  # per candidate, why it is one ("entry point", "ranked by the table"): an object
    points: tuple[WidenPoint, ...]  # baseline first, then 16-bit everywhere, then the sets
    pick: WidenPoint  # a measured point: the cheapest within the budget, or (none is) the best measured
    met: bool  # the pick meets the budget
    lowerings: int  # lowerings the search needed (TOSA reference model and Vela each)
    simulated: int  # sets run on the quantize/dequantize simulation
    # the baseline's per-layer table, written whole under "table"; its rows are also the derived key "layers"
    layers: Layers = field(metadata=codec(key="table"))
    config: str  # the Arm quantizer code that gives the pick (paste it)
    seconds: float
    notes: tuple[str, ...] = ()
    # per candidate, the nodes widened with it: the pattern it is fused into and the readers of the tensor it writes
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()

    json_kind = "widening"
    json_derived = {"layers": lambda w: [layer.to_dict() for layer in w.layers.layers], "answer": lambda w: w.answer()}

    @property
    def baseline(self) -> WidenPoint:
        return self.points[0]

    def answer(self) -> str:
        """The question in one sentence, from the numbers."""
        p, b = self.pick, self.baseline
        what = "nothing wider" if not p.overrides and p.quantization == self.quantization else p.label
        if self.met:
            return (f"{self.target}: {what} meets {self.budget} for {p.cycles:,} cycles (baseline {b.cycles:,}, "
                    f"{self.metric} {_num(b.value)} -> {_num(p.value)}), measured on the TOSA reference model and "
                    "priced by Vela")
        return (f"{self.target}: no measured set meets {self.budget}; the closest is {what} ({self.metric} "
                f"{_num(p.value)}, {p.cycles:,} cycles; baseline {_num(b.value)}, {b.cycles:,} cycles)")

    def to_json(self) -> str:
        """``to_dict()`` as one JSON document (what ``python -m inspector widen --json`` prints)."""
        return json.dumps(self.to_dict(), indent=2)

    def to_dataframe(self):
        """One row per point: the columns of ``to_dict()["points"]``."""
        return dataframe("points", {"points": lambda: [p.to_dict() for p in self.points]})

    def plot(self):
        """A matplotlib Figure: cycles against the budget's measurement, measured and predicted, the pick marked."""
        return draw("widen_plot", self)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return draw("widen_bundle", self)

    def __repr__(self) -> str:
        return f"<Widening {self.target} {self.budget}: pick {self.pick.label} ({'met' if self.met else 'not met'})>"


def _num(v) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if math.isfinite(v) else str(v)


__all__ = ["LayerCost", "Layers", "NOT_COUNTED", "WidenPoint", "Widening"]
