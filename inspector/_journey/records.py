"""A journey's records: what each pass did to the site, where the site ended, its numbers.

Frozen like every result (``Change``, ``Step``, ``Point``, ``Ending``, ``Journey``); ``to_dict``
writes JSON-ready dicts, ``to_dataframe`` one row per change. Nothing here runs a model: the
verb that fills them is ``journey`` (``_journey.journey``), the reading of graphs ``follow``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._base.codec import Record, as_objects, codec
from .._cost.records import Cost
from .._cost.accelerators import TOSA_INT, Accelerator, accelerator_named
from .._base.display import draw

# What a pass can do to one of the site's nodes (the ``kind`` of a ``Change``).
KINDS = ("created", "removed", "op-changed", "inputs-changed", "constant-changed", "constant-renamed",
         "constant-removed", "qparams-attached", "qparams-changed")


@dataclass(frozen=True, kw_only=True)
class Change(Record):
    """One thing one pass did to one of the site's nodes."""

    kind: str  # one of KINDS
    role: str  # conv, mul, output, weight, bias, scale, or neighbour (a node created next to the site)
    node: str  # the node's name (after the pass; the removed node's name for "removed")
    detail: str  # in words: "replaced by conv2d", "largest |change| 0.031", "(x, w) -> (x, w_1)"
    largest_change: float | None = None  # constants: the largest absolute change of a value

    def text(self) -> str:
        """One line: what the pass did to the node."""
        return draw("text", self)


@dataclass(frozen=True, kw_only=True)
class Step(Record):
    """One pass (or one of ``prepare_pt2e``'s and ``convert_pt2e``'s own steps) and what it did to the site."""

    index: int  # position among the steps listed
    run: int | None  # position among every pass run (``Journey.passes``); None for a step between passes
    phase: str  # prepare, transform-for-annotation, convert, re-export, to_edge, lowering
    name: str  # the pass's class name, or what ran between two passes ("prepare_pt2e: fuse conv + BatchNorm")
    changes: tuple[Change, ...]  # what it did to the site (empty: it ran but did not touch it)
    nodes_before: int  # nodes in the graph it received
    nodes_after: int  # nodes in the graph it returned
    synthetic: bool = False  # a step between observed passes (its name says what ran)
    # for the picture (touched steps only; not in the dict form)
    graph_before: Any = field(default=None, repr=False, compare=False, metadata=codec(kept=False))
    graph_after: Any = field(default=None, repr=False, compare=False, metadata=codec(kept=False))

    json_order = ("index", "run", "phase", "name", "synthetic", "nodes_before", "nodes_after", "changes")

    @property
    def touched(self) -> bool:
        return bool(self.changes)

    def kinds(self, role: str | None = None) -> tuple[str, ...]:
        """The kinds of change this step made (to ``role`` only, if given)."""
        return tuple(c.kind for c in self.changes if role is None or c.role == role)

    def largest_change(self, role: str = "weight") -> float | None:
        """The largest absolute change this step made to the constant of ``role``, if it changed one."""
        values = [c.largest_change for c in self.changes if c.role == role and c.largest_change is not None]
        return max(values) if values else None

    def text(self) -> str:
        """The step's line and one line per change."""
        return draw("text", self)


@dataclass(frozen=True, kw_only=True)
class Point(Record):
    """The site's output (and the model's first output) against float eager at one point of the pipeline."""

    point: str  # float eager, after transform-for-annotation, simulation, TOSA
    engine: str  # what computed it: "torch (float)", "torch (quantize/dequantize simulation)", "TOSA reference model"
    site_max_abs: float | None  # max |site output - float eager site output| (None where it cannot be had)
    site_sqnr_db: float | None  # SQNR of the site output against float eager, dB
    output_max_abs: float | None  # the same for the model's first output
    output_sqnr_db: float | None
    note: str = ""  # why a number is missing, or what the site's output is here


@dataclass(frozen=True, kw_only=True)
class Ending(Record):
    """What the site became at the end of the pipeline."""

    where: str  # "delegate" (in the TOSA program), "outside" (left the delegate), "unknown"
    # (role, node, op) standing for the site at the end: TOSA ops by name (written as objects)
    ops: tuple[tuple[str, str, str], ...] = field(metadata=as_objects("role", "node", "op"))
    around: tuple[str, ...]  # the ops next to them (RESCALE, ...)
    detail: str  # in words
    vela: str = ""  # on an NPU accelerator: what Vela made of the site, in words ("" on tosa-int)


@dataclass(frozen=True, kw_only=True)
class Journey(Record):
    """One site followed through the installed Arm pipeline under one fold rule."""

    target: str  # model name
    site: str  # the site's id
    variant: str  # the fold rule followed (off, upstream, ...)
    decision: str  # the site's decision at its stage under that rule (fold / skip)
    conv: str  # the site's conv and mul as the journey started
    mul: str
    # (phase, pass) of every pass run, in order (written as objects)
    passes: tuple[tuple[str, str], ...] = field(metadata=as_objects("phase", "name"))
    steps: tuple[Step, ...]  # the steps that touched the site (every step with all_passes=True)
    untouched: int  # passes run that did not touch the site
    ending: Ending  # what the site became
    numbers: tuple[Point, ...]  # the site's numbers at the points where they can be had
    moved: tuple[str, ...]  # which step moved the numbers, one sentence per boundary
    notes: tuple[str, ...] = ()  # what the reader must know (an observer that failed, a number missing)
    seconds: float = 0.0  # how long the journey took
    program_digest: str = ""  # sha256 of the lowered program (its TOSA flatbuffers and the graph around them)
    site_record: Any = field(default=None, repr=False, compare=False, metadata=codec(kept=False))  # for the pictures
    accelerator: Accelerator = TOSA_INT  # what the pipeline lowered for
    cost: Cost | None = None  # on an NPU: Vela's estimate of the lowered program, its rows mapped to the site

    def __post_init__(self) -> None:
        object.__setattr__(self, "accelerator", accelerator_named(self.accelerator))  # a name: looked up once

    # ---------------------------------------------------------------- questions

    def touched(self) -> tuple[Step, ...]:
        """The steps that touched the site."""
        return tuple(s for s in self.steps if s.touched)

    def step(self, name: str, phase: str | None = None) -> Step | None:
        """The first touched step named ``name`` (in ``phase``, if given), or None."""
        return next((s for s in self.steps if s.name == name and (phase is None or s.phase == phase)
                     and s.touched), None)

    def first(self, kind: str, role: str) -> Step | None:
        """The first step that made a change of ``kind`` to ``role`` (``first("constant-changed", "weight")``)."""
        return next((s for s in self.steps if any(c.kind == kind and c.role == role for c in s.changes)), None)

    def point(self, name: str) -> Point | None:
        return next((p for p in self.numbers if p.point == name), None)

    # ---------------------------------------------------------------- pictures

    # ---------------------------------------------------------------- drawn by the presentation

    def picture(self, step: int | Step):
        """The site's neighbourhood before and after ``step`` (a touched step or its index), drawn by
        the inspector's renderer with the site's marks: a ``graphviz.Digraph``."""
        return draw("journey_picture", self, step)

    def text(self) -> str:
        """A compact timeline: every step that touched the site, the ending, the numbers."""
        return draw("text", self)

    __str__ = text

    def html(self) -> str:
        """The timeline as an HTML fragment (every name from the model escaped)."""
        return draw("html", self)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return draw("bundle", self)

    def __repr__(self) -> str:
        return (f"<Journey {self.target} site {self.site} under {self.variant}: {len(self.touched())} of "
                f"{len(self.passes)} passes touched it; {self.ending.where}>")

    def to_dataframe(self):
        """One row per change: the step's fields (index, run, phase, name) and the change's."""
        import pandas as pd  # lazy: pandas is only for the notebook user's tables

        columns = ["index", "run", "phase", "name", "kind", "role", "node", "detail", "largest_change"]
        rows = [{"index": s.index, "run": s.run, "phase": s.phase, "name": s.name, **c.to_dict()}
                for s in self.steps for c in s.changes]
        return pd.DataFrame(rows, columns=columns)
