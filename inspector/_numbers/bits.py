"""``bits``: is it the fold or the bits? One call that measures what each change recovers.

From a baseline (the installed pass, ``upstream``, at 8-bit activations) it runs, on the TOSA INT
reference model, every change a user would try first: the fold turned off, 16-bit activations,
and, one at a time, each site's mul and each node attribution names as an entry point of the
error kept in float. Each change is a variant of one ``compare`` call (so variants with equal
fold decisions run once, side by side on the workers); its figure is the SQNR of the worst
output at the last step, ranked by how many dB it recovers over the baseline. Nothing here is
presumed: a change that makes things worse shows a negative recovery.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

from .attribution import attribute
from .compare import compare, variants_of
from .engines import TOSA, Engine, engine_of
from .._cost.accelerators import accelerator_of
from .._decide.decide import analyze
from .quantization import Plan, quantizations, resolve_overrides
from .._base.formats import db, db_change
from .results import Comparison, Variant, VariantResult
from .._base.codec import Record, codec
from . import result_store as _disk
from .variant_cache import bits_key
from .._base.errors import InspectorError, quoted
from .._base.display import draw

MAX_SITES = 8  # sites measured one by one (the first in graph order); more is a sweep's work
ENTRY_POINTS = 3  # attribution's entry points measured one by one


@dataclass(frozen=True, kw_only=True)
class BitsChange(Record):
    """One change against the baseline and what it recovered."""

    change: str  # "fold off", "16-bit activations", "keep in float"
    kind: str  # "model" (the whole model), "site" (a site's mul), "entry point" (attribution's)
    node: str | None  # the site id or the exported program's node name it applies to
    variant: str  # the variant's label in the comparison
    sqnr_db: float | None  # worst output's SQNR at the last step (None: the variant failed)
    recovered_db: float | None  # sqnr_db minus the baseline's
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Bits(Record):
    """What each change recovers over the baseline, best first. ``comparison`` (the variants'
    results) is not kept in the result store: a ``Bits`` read from there has None."""

    target: str
    steps: int
    baseline: str  # the baseline variant's label
    baseline_sqnr_db: float
    changes: tuple[BitsChange, ...]  # ranked: most recovered first, failed ones last
    notes: tuple[str, ...] = ()
    comparison: Comparison | None = field(default=None, repr=False, compare=False, metadata=codec(kept=False))
    engine: Engine = TOSA  # what computed every number: the TOSA reference model or the simulation (engines.py)

    # the answer in words is written for readers, and checked on reading: it must follow from the numbers
    json_derived = {"answer": lambda b: b.answer()}
    json_checked = ("answer",)
    json_order = ("target", "engine", "steps", "baseline", "baseline_sqnr_db", "answer", "changes", "notes")

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine", engine_of(self.engine))  # a name given here is looked up once

    @property
    def best(self) -> BitsChange | None:
        return next((c for c in self.changes if c.recovered_db is not None), None)

    def answer(self) -> str:
        """The question in one sentence, from the numbers."""
        best = self.best
        if best is None:
            return f"{self.target}: no change ran; see the errors"
        fold = next((c for c in self.changes if c.change == "fold off"), None)
        wide = next((c for c in self.changes if c.change == "16-bit activations"), None)
        parts = [f"{self.target} at step {self.steps}: {self.baseline} gives {db(self.baseline_sqnr_db)} dB"]
        for c in (fold, wide):
            if c is not None and c.recovered_db is not None:
                parts.append(f"{c.change} {db_change(c.recovered_db)} dB")
        lead = f"{best.change}{' at ' + best.node if best.node else ''}"
        return "; ".join(parts) + f". The most recovered: {lead} ({db_change(best.recovered_db)} dB)."


    def to_dataframe(self):
        """One row per change: the columns of ``to_dict()["changes"]``."""
        import pandas as pd  # lazy: pandas is only for the notebook user's tables

        return pd.DataFrame([c.to_dict() for c in self.changes])

    def plot(self):
        """A matplotlib Figure: dB recovered per change (bars), best at the top."""
        return draw("plot", self)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return draw("bundle", self)

    def __repr__(self) -> str:
        return f"<Bits {self.target}: {len(self.changes)} changes, best {self.best.change if self.best else '-'}>"


def bits(
    target: Any,
    *,
    steps: int | None = None,
    rule: str = "upstream",
    quantization: str = "a8w8",
    wide: str = "a16w8",
    example_inputs: Any = None,
    markers=None,
    max_sites: int = MAX_SITES,
    entry_points: int = ENTRY_POINTS,
    workers: int | None = None,
    progress: Callable[[str, float], None] | None = None,
    isolate: bool = False,
    engine: str | Engine = TOSA,
    accelerator=None,
) -> Bits:
    """Is it the fold or the bits? The SQNR at the last step of ``target`` under ``rule`` at
    ``quantization`` (the baseline), and with each change: the fold off (rule ``off``),
    ``wide`` activations (16-bit), and each site's mul and each entry point of the error
    (attribution's, on the baseline) kept in float, ranked by the dB each recovers. ``isolate`` runs
    the native work in worker processes (see ``compare``). ``engine="simulation"`` measures every
    change on the quantize/dequantize simulation (no lowering; a note says what it cannot show).
    ``accelerator`` is what every change is lowered for (see ``compare``); on an NPU each change's cost is in
    its comparison's results (``Bits.comparison``).
    The answer is kept in the result store (docs/store.md): asked again, in this process or another,
    it is read from there after the baseline's comparison (itself read from the store), without
    its ``comparison``; an answer with a failed change is not kept.

    Args:
        target: what ``analyze`` takes.
        steps: how many steps every change runs; default: as ``compare``'s (a stream's length, else 20 for a model
            that carries state, else 1).
        rule: the baseline's rule; default ``upstream``.
        quantization: the baseline's quantization; default ``a8w8``.
        wide: the wider activations tried; default ``a16w8``.
        example_inputs: as ``analyze``'s.
        markers: site ids or node names marked as carried state in the baseline.
        max_sites: at most this many sites are each kept in float (the ones attribution ranks first).
        entry_points: at most this many of attribution's entry points of the error are each kept in float.
        workers: as ``compare``'s.
        progress: ``progress(phase, fraction)``.
        isolate: as ``compare``'s; default False.
        engine: as ``compare``'s; default ``"tosa"``.
        accelerator: as ``compare``'s; default ``tosa-int``.
    """
    check_bits_args(max_sites, entry_points)
    engine = engine_of(engine)
    chip = accelerator_of(accelerator)
    baseline = variants_of([f"{rule}@{quantization}"], markers)[0]
    part = (lambda start, width: None if progress is None else (lambda phase, f: progress(phase, start + width * f)))
    first = compare(target, variants=[baseline], example_inputs=example_inputs, steps=steps, progress=part(0.0, 0.2),
                    workers=1, isolate=isolate, engine=engine, accelerator=chip)
    loaded = first.run.target
    steps = first.steps  # a stream's length when it was not given
    try:
        wide_plan = Plan.of(quantizations.get(wide), (), chip).identity
    except InspectorError:
        wide_plan = None  # an unknown width: that change fails below, and the answer is not kept
    key = None if wide_plan is None else bits_key(first, wide_plan, max_sites, entry_points)
    found = _disk.load_record("bits", key, Bits.from_dict)
    if found is not None:
        if progress is not None:
            progress("done", 1.0)
        return found
    entries = _entry_nodes(attribute(first, progress=part(0.2, 0.1), isolate=isolate), entry_points)
    sites = analyze(loaded, stage="tfa", rule=rule, markers=baseline.markers).sites
    notes = []
    if len(sites) > max_sites:
        notes.append(f"{len(sites)} sites: the first {max_sites} in graph order are measured one by one "
                     f"(max_sites={max_sites})")
    planned: list[tuple[str, str, str | None, Variant]] = [
        ("fold off", "model", None, Variant(rule="off", markers=baseline.markers, quantization=quantization)),
        ("16-bit activations", "model", None, Variant(rule=rule, markers=baseline.markers, quantization=wide)),
    ]
    planned += [("keep in float", "site", s.id, Variant(rule=rule, markers=baseline.markers, quantization=quantization,
                                                        overrides={s.id: "float"}))
                for s in sites[:max_sites]]
    # entry points are the exported program's names; a site's mul is named at tfa: compare them there
    site_muls = {name for name, _ in resolve_overrides(loaded, tuple((s.id, "float") for s in sites), baseline.label)}
    planned += [("keep in float", "entry point", name, Variant(rule=rule, markers=baseline.markers,
                                                               quantization=quantization, overrides={name: "float"}))
                for name in entries if name not in site_muls]
    comparison = compare(loaded, variants=[baseline, *(v for *_, v in planned)], steps=steps, progress=part(0.3, 0.7),
                         workers=workers, isolate=isolate, engine=engine, accelerator=chip)
    base_db = _worst_last(comparison.results[0])
    changes = []
    for (change, kind, node, _), result in zip(planned, comparison.results[1:]):
        sqnr = _worst_last(result) if result.error is None else None
        changes.append(BitsChange(change=change, kind=kind, node=node, variant=result.variant.label, sqnr_db=sqnr,
                                  recovered_db=None if sqnr is None else sqnr - base_db, error=result.error))
    changes.sort(key=lambda c: (c.recovered_db is None, -(c.recovered_db if c.recovered_db is not None else 0.0)))
    if comparison.engine_note:
        notes.append(comparison.engine_note)
    answer = Bits(target=loaded.name, steps=steps, baseline=baseline.label, baseline_sqnr_db=base_db,
                  changes=tuple(changes), notes=tuple(notes) + comparison.notes,
                  comparison=comparison, engine=engine)
    if not any(c.error is not None for c in changes):
        _disk.keep_record("bits", key, answer)
    return answer


def _entry_nodes(attribution, limit: int) -> list[str]:
    """The exported program's names of the baseline's entry points that a quantizer can keep in
    float (computed nodes: not inputs or state placeholders)."""
    out = []
    for e in attribution.variants[0].entry_points:
        if e.op not in ("input", "state") and e.name not in out:
            out.append(e.name)
    return out[:limit]


def _worst_last(result: VariantResult) -> float:
    last = max(m.step for m in result.metrics)
    return min(m.sqnr_db for m in result.metrics if m.step == last)


def check_bits_args(max_sites: int, entry_points: int) -> None:
    for name, v in (("max_sites", max_sites), ("entry_points", entry_points)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InspectorError(f"{name} must be a whole number >= 0, got {quoted(v)}")
