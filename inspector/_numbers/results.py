"""The records a comparison is made of, and their JSON.

``Variant`` (what to run), ``VariantResult`` (what one variant measured: fold counts, per-site
qparams, per-step metrics, nodes left outside the delegate) and ``Comparison`` (every variant of
one call) are frozen dataclasses; ``to_dict`` writes them as JSON-ready dicts and
``Comparison.from_dict`` reads them back, checking every field. Nothing here runs a model: the
flow that fills them is ``flow.py``, the call that orchestrates it ``compare.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._base.codec import Record, codec, from_dict as _from_dict
from .._base.data import dataframe, json_float, read_float, read_int, read_str
from .._rules.rules import Rule, get_rule
from .._cost.records import Cost
from .._cost.accelerators import TOSA_INT, Accelerator, accelerator_named
from .engines import TOSA, Engine, engine_of, gap as engine_gap
from .measures import cost_value, in_registry_order, metrics
from .._base.errors import InspectorError, listing, quoted
from .._base.hashing import digest
from .._base.display import draw


@dataclass(frozen=True, kw_only=True)
class Variant(Record):
    """One configuration to quantize and run: a fold rule, carried-state markers, a quantization
    and per-node overrides.

    ``rule`` is the rule itself; a name given here (``Variant("upstream")``, or ``path/to/rules.py:NAME``)
    is looked up once, in ``inspector.rules``, and the variant keeps what it found.
    ``quantization`` names one (``inspector.quantizations``: a8w8, a8w8-per-tensor, a16w8, a8w4, or
    one registered with ``inspector.quantizations.register``); None runs the comparison's own (a8w8 unless
    ``compare(quantization=...)`` says otherwise). ``overrides`` maps a node name, module path or
    site id to ``"float"`` (left unquantized: it runs outside the delegate) or a quantization name.
    """

    # Variant("upstream", ...) is how users and the docs write it: the rule stays positional
    # the fold rule (inspector.rules): off, upstream, state-aware, ... (format 1 wrote it as "policy")
    rule: Rule = field(kw_only=False, metadata=codec(old="policy"))
    markers: tuple[str, ...] = ()  # site ids or node names marked carried_quant_state
    quantization: str | None = None  # a quantization's name; None: the comparison's
    overrides: tuple[tuple[str, str], ...] = ()  # sorted (key, "float" or quantization name)

    json_derived = {"label": lambda v: v.label}  # for readers: the variant as every table names it

    def __post_init__(self) -> None:
        if not isinstance(self.rule, Rule):  # where a user's name for the rule enters: resolved once, here
            object.__setattr__(self, "rule", get_rule(self.rule))
        if self.overrides:  # a dict or pairs, in one sorted, checked form (the label and keys use it)
            from .quantization import override_pairs  # quantization imports this module

            object.__setattr__(self, "overrides", override_pairs(self.overrides))

    @property
    def label(self) -> str:
        label = self.rule.name + (f"+marked({','.join(self.markers)})" if self.markers else "")
        if self.quantization is not None:
            label += f"@{self.quantization}"
        if self.overrides:
            label += "+keep(" + ",".join(f"{k}={v}" for k, v in self.overrides) + ")"
        return label


@dataclass(frozen=True, kw_only=True)
class QParams:
    """Per-tensor quantization parameters of one activation."""

    scale: float  # the quantization step
    zero_point: int  # the integer that represents 0.0


@dataclass(frozen=True, kw_only=True)
class SiteOutcome:
    """What happened to one site in one variant's real quantized flow."""

    site_id: str = field(metadata=codec(key="id"))  # the stable site id (same as in ``analyze``)
    folded_at: str | None  # "tfa", "lowering", or None when it did not fold
    conv_output: QParams | None  # calibrated qparams of the conv output in the quantized graph
    mul_output: QParams | None  # of the mul output (None once folded: the mul is gone)


@dataclass(frozen=True, kw_only=True)
class Metrics:
    """Quantized vs float for one output at one step: a value per measurement (``inspector.metrics``)."""

    output: int  # output index (flattened)
    step: int  # 0-based recurrent step
    values: tuple[tuple[str, float], ...]  # (measurement name, value), sorted by name: sqnr, max-abs, ... any registered
    sqnr_per_channel_db: tuple[float, ...] = ()  # the SQNR per output channel (dim 1)

    def __post_init__(self) -> None:  # one order, however computed or read back (a store sorts JSON keys)
        object.__setattr__(self, "values", tuple(sorted(self.values)))

    def value(self, name: str) -> float | None:
        """The value of the measurement ``name`` (None: not measured here)."""
        for key, v in self.values:
            if key == name:
                return v
        return None

    @property
    def names(self) -> tuple[str, ...]:
        """The measurements this record holds (sorted by name)."""
        return tuple(k for k, _ in self.values)

    # the built-ins by the names the records always had (every figure is in ``values``)
    sqnr_db = property(lambda self: self.value("sqnr"), doc="10 log10(sum f^2 / sum (q - f)^2); inf when equal")
    max_abs_error = property(lambda self: self.value("max-abs"), doc="max |q - f|")
    mean_abs_error = property(lambda self: self.value("mean-abs"), doc="mean |q - f|")
    mse = property(lambda self: self.value("mse"), doc="mean (q - f)^2")
    flushed_to_zero = property(lambda self: self.value("flushed"), doc="share of elements with f != 0 but q == 0")

    # Written by hand: each measurement is a key of its own (a built-in's historical key: sqnr_db, ...), so the
    # dict form is not the fields' (``values`` spreads into keys named by the registry).
    def to_dict(self) -> dict:
        """One key per measurement (a built-in's historical key: ``sqnr_db``, ``max_abs_error``, ...)."""
        return {"output": self.output, "step": self.step,
                **{_metric_key(name): json_float(self.value(name)) for name in in_registry_order(self.names)},
                "sqnr_per_channel_db": [json_float(v) for v in self.sqnr_per_channel_db]}

    @classmethod
    def from_dict(cls, d: dict) -> Metrics:
        """Read ``to_dict()`` back: every key but the output, the step and the per-channel SQNR is a value."""
        fixed = {"output", "step", "sqnr_per_channel_db"}
        return cls(output=_int(d["output"]), step=_int(d["step"]),
                   values=tuple((_metric_name(_str(k)), _float(v)) for k, v in d.items() if k not in fixed),
                   sqnr_per_channel_db=tuple(_float(v) for v in d.get("sqnr_per_channel_db", ())))

    def row(self) -> dict:
        """A DataFrame's row: the JSON's keys, numbers as floats."""
        return {"output": self.output, "step": self.step,
                **{_metric_key(n): self.value(n) for n in in_registry_order(self.names)},
                "sqnr_per_channel_db": self.sqnr_per_channel_db}


def _metric_key(name: str) -> str:
    m = metrics.by_key(name)
    return m.key if m is not None else name


def _metric_name(key: str) -> str:
    m = metrics.by_key(key)
    return m.name if m is not None else key


@dataclass(frozen=True, kw_only=True)
class NotDelegated:
    """A node of the lowered program that runs outside the TOSA delegate."""

    node: str  # node name in the lowered program
    target: str  # its op
    reason: str  # the partitioner's reason, or why it stays outside


@dataclass(frozen=True, kw_only=True)
class VariantResult(Record):
    """The numbers of one variant."""

    variant: Variant  # what was run
    folds: dict[str, int]  # {"tfa": n, "lowering": n}: how many muls the pass folded per stage
    sites: tuple[SiteOutcome, ...]  # per site: where it folded, qparams around it
    metrics: tuple[Metrics, ...]  # per (step, output), steps in order
    not_delegated: tuple[NotDelegated, ...]  # nodes outside the delegate
    timings: dict[str, float]  # seconds per phase of the flow (export, prepare, ..., reference)
    cached: bool = False  # answered from the cache
    quantization: str = "a8w8"  # the quantization it ran under (the variant's, or the comparison's)
    spec: str = field(default="TOSA-1.0+INT", metadata=codec(key="tosa_spec"))  # the TOSA specification lowered for
    error: str | None = None  # why this variant has no numbers (the others' results stand)
    # quantized outputs per step (flat tuples; not in the dict form: its digest is)
    outputs: tuple = field(default=(), repr=False, compare=False, metadata=codec(kept=False))
    # what the stack printed during the run (--debug)
    log: str = field(default="", repr=False, compare=False, metadata=codec(kept=False))
    engine: Engine = TOSA  # what produced the numbers: the TOSA reference model or the simulation (engines.py)
    # per flat output, the quantization step of the converted program's last dequantize (None: not quantized)
    output_scales: tuple = field(default=(), repr=False, compare=False, metadata=codec(kept=False))
    accelerator: Accelerator = TOSA_INT  # what it was lowered for (inspector.accelerators)
    cost: Cost | None = None  # Vela's estimate of its lowered program on that accelerator (None: no NPU, or none made)
    cost_error: str | None = None  # why an NPU variant with numbers has no cost (one line)
    # a digest of ``outputs``, kept where the outputs are not (a comparison read back from JSON or a session)
    outputs_digest: str = field(default="", repr=False, compare=False, metadata=codec(
        value=lambda r: r.output_digest, read=lambda v: read_str(v, True) or ""))

    json_order = ("variant", "engine", "quantization", "tosa_spec", "error", "folds", "sites", "metrics",
                  "not_delegated", "timings", "cached", "accelerator", "cost", "cost_error", "outputs_digest")

    @property
    def output_digest(self) -> str:
        """A digest of the quantized outputs, bit for bit ("" when neither they nor their digest were kept)."""
        return digest(*(t for step in self.outputs for t in step)) if self.outputs else self.outputs_digest

    def __post_init__(self) -> None:
        _resolve(self)

    def worst(self, step: int | None = None) -> Metrics | None:
        """The output with the lowest SQNR at ``step`` (default: the step where some output is lowest): the
        one figure the trade-off and the advice read."""
        candidates = [m for m in self.metrics if step is None or m.step == step]
        return min(candidates, key=lambda m: m.sqnr_db, default=None)

    def at_step(self, step: int, output: int = 0) -> Metrics:
        return next(m for m in self.metrics if m.step == step and m.output == output)

    def drift(self, output: int = 0, metric: str = "sqnr") -> list[float]:
        """``metric`` (a measurement's name, or a built-in's old field name such as ``sqnr_db``) of ``output`` per
        step (the drift curve)."""
        name = _metric_name(metric)
        return [m.value(name) for m in self.metrics if m.output == output]

    def value(self, metric: str, output: int = 0, step: int = 0) -> float | None:
        """The value of ``metric`` (a measurement's name: ``inspector.metrics()``) at ``output`` and ``step``, or of a
        cost measurement (``cycles``, ``sram``, ...) of the whole variant (None: not measured)."""
        m = metrics.entry(_metric_name(metric))
        if m.kind == "cost":
            return cost_value(m, self.cost)
        found = next((x for x in self.metrics if x.output == output and x.step == step), None)
        if found is None:
            raise InspectorError(f"{self.variant.label} has no output {output} at step {step}")
        return found.value(m.name)

    def summary(self, metric: str, output: int = 0) -> float | None:
        """One figure of ``metric`` for ``output`` over the run: its value at the last step, or, for a share over the
        frames (a measurement with ``over_steps="mean"``: accuracy, decision mismatches), its mean over the steps
        that have it (None: none has)."""
        name = _metric_name(metric)
        found = metrics.by_key(name)
        mine = [m for m in self.metrics if m.output == output]
        if found is not None and found.over_steps == "mean":
            values = [v for v in (m.value(name) for m in mine) if v is not None]
            return sum(values) / len(values) if values else None
        last = max(mine, key=lambda m: m.step, default=None)
        return None if last is None else last.value(name)

    def overall(self, metric: str) -> float | None:
        """``metric`` at its worst over every output: at the worst step for a figure of every step, or the worst
        output's mean for a share over the frames (what a budget counts)."""
        name = _metric_name(metric)
        found = metrics.entry(name)
        if found.over_steps == "mean":
            per_output = [self.summary(name, o) for o in sorted({m.output for m in self.metrics})]
            return found.worst(per_output)
        return found.worst(m.value(name) for m in self.metrics)

    @property
    def measured_names(self) -> tuple[str, ...]:
        """The output measurements this result holds, in the registry's order (the built-ins first)."""
        return in_registry_order(n for m in self.metrics for n in m.names)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, kw_only=True)
class Comparison(Record):
    """Every variant's quantized outputs against float, on the TOSA INT reference model (or, with the
    simulation engine, on the quantize/dequantize simulation: a preview)."""

    target: str  # model name
    steps: int  # recurrent steps run
    calibration: str  # how the quantizer was calibrated
    quantization: str  # the quantization config used
    results: tuple[VariantResult, ...] = field(metadata=codec(key="variants"))  # one per variant, in order asked
    # float outputs per step (flat tuples; not in the dict form)
    reference: tuple = field(default=(), repr=False, compare=False, metadata=codec(kept=False))
    # What produced it, kept to look inside later (attribution); absent in a comparison read from JSON.
    run: Run | None = field(default=None, repr=False, compare=False, metadata=codec(kept=False))
    notes: tuple[str, ...] = ()  # what the reader must know: a fold decision a quantization changed
    engine: Engine = TOSA  # what produced every number: the TOSA reference model or the simulation (engines.py)
    accelerator: Accelerator = TOSA_INT  # what every variant was lowered for (inspector.accelerators)
    # the stream every step was fed a frame of, in words ("" without one: the same inputs each step; then no key)
    stream: str = field(default="", metadata=codec(omit=True))

    json_format = "saved comparison"
    json_derived = {"rules": lambda c: _rules_of(c.results)}  # for readers: each rule's help and source
    json_order = ("format", "target", "engine", "accelerator", "steps", "calibration", "quantization", "variants",
                  "rules", "notes", "stream")

    def __post_init__(self) -> None:
        _resolve(self)

    @property
    def errors(self) -> tuple[VariantResult, ...]:
        """The variants that have no numbers, each with its one-line error."""
        return tuple(r for r in self.results if r.error is not None)

    @property
    def measured(self) -> tuple[VariantResult, ...]:
        """The variants that ran (the ones with numbers)."""
        return tuple(r for r in self.results if r.error is None)

    def result(self, rule_or_label: str) -> VariantResult:
        """The result of the variant with this label, or the first one of this rule's name."""
        for r in self.results:
            if rule_or_label in (r.variant.label, r.variant.rule.name):
                return r
        raise InspectorError(f"no variant {quoted(rule_or_label)}; variants: {listing(r.variant.label for r in self.results)}")

    @property
    def engine_text(self) -> str:
        """The engine in words, as tables and titles say it."""
        return self.engine.text

    @property
    def engine_note(self) -> str:
        """What the engine cannot show, in one line ("" for the TOSA reference)."""
        return self.engine.note

    def gap(self, other: Comparison):
        """How far this comparison and ``other`` (the same question, usually on the other engine) are
        apart: an ``EngineGap`` (per variant, output and step: dB and quantization steps)."""
        return engine_gap(self, other)

    def tradeoff(self):
        """On an NPU accelerator: per variant Vela's cycles beside its dB, per site the cycles folding it buys
        (a ``Tradeoff``)."""
        from .tradeoff import tradeoff  # cycle: the trade-off reads these records
        return tradeoff(self)

    def folded_where(self) -> dict[str, str]:
        """Per site id, where it folded in each variant: ``"off: not folded; upstream: tfa"``."""
        out: dict[str, list[str]] = {}
        for r in self.results:
            for s in r.sites:
                out.setdefault(s.site_id, []).append(f"{r.variant.label}: {s.folded_at or 'not folded'}")
        return {k: "; ".join(v) for k, v in out.items()}


    def to_dataframe(self, kind: str = "metrics"):
        """A pandas DataFrame: ``"metrics"``, one row per variant, step and output (the columns of
        ``to_dict()["variants"][i]["metrics"]``, after the variant's label; numbers stay floats), or
        ``"variants"``, one row per variant (the columns of ``to_dict()["variants"]``)."""
        return dataframe(kind, {"metrics": lambda: [{"variant": r.variant.label, **m.row()}
                                                    for r in self.results for m in r.metrics],
                                "variants": lambda: [r.to_dict() for r in self.results]})

    def _repr_mimebundle_(self, include=None, exclude=None):
        return draw("bundle", self)

    def __repr__(self) -> str:
        return f"<Comparison {self.target}: {', '.join(r.variant.label for r in self.results)}, {self.steps} step(s)>"

    @classmethod
    def from_dict(cls, data: dict) -> Comparison:
        """Rebuild a comparison from ``to_dict()`` (raw output tensors are not kept in JSON); a comparison
        written in format 1 (each variant's rule under "policy") reads the same. The engine and accelerator
        are the registered ones the file names (an accelerator this process does not know reads as a stand-in:
        ``accelerators.accelerator_named``)."""
        # Beyond the fields (the codec): errors said in one line, and every (step, output) a table reads present.
        try:
            result = _from_dict(cls, data)
        except KeyError as exc:
            raise InspectorError(f"not a saved comparison: missing field {exc}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise InspectorError(f"not a saved comparison: {type(exc).__name__}: {exc}") from exc
        for r in result.measured:  # every (step, output) the tables and plots read must be there
            have = {(m.step, m.output) for m in r.metrics}
            outputs = sorted({o for _, o in have})
            missing = next(((s, o) for s in range(result.steps) for o in outputs if (s, o) not in have), None)
            if missing is not None or len(have) != len(r.metrics):
                what = f"no metrics for output {missing[1]} at step {missing[0]}" if missing else "duplicate metrics"
                raise InspectorError(f"not a saved comparison: variant {quoted(r.variant.label)} has {what}")
        return result

    def to_markdown(self, limit: int | None = None) -> str:
        """A reply for an issue or a pull request: every variant's measurements (local paths redacted, within
        GitHub's comment limit)."""
        return draw("markdown", self, limit=limit)

    def plot(self, kind: str = "drift", output: int = 0, metric: str = "sqnr"):
        """A matplotlib Figure: ``drift`` (``metric``, the SQNR by default, per step per variant) or ``channels``
        (SQNR per channel)."""
        return draw("plot", self, kind, output, metric)


def _rules_of(results) -> dict:
    """Each variant's rule: what it does and where it comes from (a rule this process does not know,
    as from a saved session, is left out)."""
    out = {}
    for r in results:
        rule = r.variant.rule
        if not rule.stand_in and rule.name not in out:
            out[rule.name] = {"help": rule.help, "source": rule.source, "origin": rule.origin}
    return out


def _resolve(record) -> None:
    """A record's engine and accelerator as the registered objects (a record made with their names, as a script
    may write it, holds the objects all the same)."""
    object.__setattr__(record, "engine", engine_of(record.engine))
    object.__setattr__(record, "accelerator", accelerator_named(record.accelerator))


_float, _int, _str = read_float, read_int, read_str  # the readers' short names here


@dataclass(frozen=True, kw_only=True)
class Run:
    """What a comparison was computed from: the model, its calibration and each variant's quantization."""

    target: Any  # the _load.Target compared
    calibration: Any  # its _flow.Calibration
    plans: tuple = ()  # per result, the _quantization.Plan it ran under
