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

from .._base.data import FORMAT, check_format, dataframe, json_float, read_float, read_int, read_str, renamed
from .._rules.rules import Rule, get_rule, rule_named
from .._cost.records import Cost
from .._cost.accelerators import TOSA_INT, Accelerator, accelerator_named
from .engines import TOSA, Engine, engine_of, engines, gap as engine_gap
from .measures import cost_value, in_registry_order, metrics
from .._base.errors import InspectorError, listing, quoted
from .._base.hashing import digest
from .._base.display import draw


@dataclass(frozen=True)
class Variant:
    """One configuration to quantize and run: a fold rule, carried-state markers, a quantization
    and per-node overrides.

    ``rule`` is the rule itself; a name given here (``Variant("upstream")``, or ``path/to/rules.py:NAME``)
    is looked up once, in ``inspector.rules``, and the variant keeps what it found.
    ``quantization`` names one (``inspector.quantizations``: a8w8, a8w8-per-tensor, a16w8, a8w4, or
    one registered with ``inspector.quantizations.register``); None runs the comparison's own (a8w8 unless
    ``compare(quantization=...)`` says otherwise). ``overrides`` maps a node name, module path or
    site id to ``"float"`` (left unquantized: it runs outside the delegate) or a quantization name.
    """

    rule: Rule  # the fold rule (inspector.rules): off, upstream, state-aware, ...
    markers: tuple[str, ...] = ()  # site ids or node names marked carried_quant_state
    quantization: str | None = None  # a quantization's name; None: the comparison's
    overrides: tuple[tuple[str, str], ...] = ()  # sorted (key, "float" or quantization name)

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

    def to_dict(self) -> dict:
        return {"rule": self.rule.name, "markers": list(self.markers), "quantization": self.quantization,
                "overrides": dict(self.overrides), "label": self.label}


@dataclass(frozen=True)
class QParams:
    """Per-tensor quantization parameters of one activation."""

    scale: float  # the quantization step
    zero_point: int  # the integer that represents 0.0


@dataclass(frozen=True)
class SiteOutcome:
    """What happened to one site in one variant's real quantized flow."""

    site_id: str  # the stable site id (same as in ``analyze``)
    folded_at: str | None  # "tfa", "lowering", or None when it did not fold
    conv_output: QParams | None  # calibrated qparams of the conv output in the quantized graph
    mul_output: QParams | None  # of the mul output (None once folded: the mul is gone)


@dataclass(frozen=True)
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

    def to_dict(self) -> dict:
        """One key per measurement (a built-in's historical key: ``sqnr_db``, ``max_abs_error``, ...)."""
        return {"output": self.output, "step": self.step,
                **{_metric_key(name): json_float(self.value(name)) for name in in_registry_order(self.names)},
                "sqnr_per_channel_db": [json_float(v) for v in self.sqnr_per_channel_db]}

    @classmethod
    def from_dict(cls, d: dict) -> "Metrics":
        """Read ``to_dict()`` back: every key but the output, the step and the per-channel SQNR is a value."""
        fixed = {"output", "step", "sqnr_per_channel_db"}
        return cls(_int(d["output"]), _int(d["step"]),
                   tuple((_metric_name(_str(k)), _float(v)) for k, v in d.items() if k not in fixed),
                   tuple(_float(v) for v in d.get("sqnr_per_channel_db", ())))

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


@dataclass(frozen=True)
class NotDelegated:
    """A node of the lowered program that runs outside the TOSA delegate."""

    node: str  # node name in the lowered program
    target: str  # its op
    reason: str  # the partitioner's reason, or why it stays outside


@dataclass(frozen=True)
class VariantResult:
    """The numbers of one variant."""

    variant: Variant  # what was run
    folds: dict  # {"tfa": n, "lowering": n}: how many muls the pass folded per stage
    sites: tuple[SiteOutcome, ...]  # per site: where it folded, qparams around it
    metrics: tuple[Metrics, ...]  # per (step, output), steps in order
    not_delegated: tuple[NotDelegated, ...]  # nodes outside the delegate
    timings: dict  # seconds per phase of the flow (export, prepare, ..., reference)
    cached: bool = False  # answered from the cache
    quantization: str = "a8w8"  # the quantization it ran under (the variant's, or the comparison's)
    spec: str = "TOSA-1.0+INT"  # the TOSA specification it was lowered for
    error: str | None = None  # why this variant has no numbers (the others' results stand)
    outputs: tuple = field(default=(), repr=False, compare=False)  # quantized outputs per step (flat tuples)
    log: str = field(default="", repr=False, compare=False)  # what the stack printed during the run (--debug)
    engine: Engine = TOSA  # what produced the numbers: the TOSA reference model or the simulation (engines.py)
    # per flat output, the quantization step of the converted program's last dequantize (None: not quantized)
    output_scales: tuple = field(default=(), repr=False, compare=False)
    accelerator: Accelerator = TOSA_INT  # what it was lowered for (inspector.accelerators)
    cost: Cost | None = None  # Vela's estimate of its lowered program on that accelerator (None: no NPU, or none made)
    cost_error: str | None = None  # why an NPU variant with numbers has no cost (one line)
    # a digest of ``outputs``, kept where the outputs are not (a comparison read back from JSON or a session)
    outputs_digest: str = field(default="", repr=False, compare=False)

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

    def to_dict(self) -> dict:
        return {
            "variant": self.variant.to_dict(),
            "engine": self.engine.name,
            "quantization": self.quantization,
            "tosa_spec": self.spec,
            "error": self.error,
            "folds": dict(self.folds),
            "sites": [
                {"id": s.site_id, "folded_at": s.folded_at,
                 "conv_output": vars(s.conv_output) if s.conv_output else None,
                 "mul_output": vars(s.mul_output) if s.mul_output else None}
                for s in self.sites
            ],
            "metrics": [m.to_dict() for m in self.metrics],
            "not_delegated": [vars(n) for n in self.not_delegated],
            "timings": dict(self.timings),
            "cached": self.cached,
            "accelerator": self.accelerator.name,
            "cost": self.cost.to_dict() if self.cost is not None else None,
            "cost_error": self.cost_error,
            "outputs_digest": self.output_digest,
        }


@dataclass(frozen=True)
class Comparison:
    """Every variant's quantized outputs against float, on the TOSA INT reference model (or, with the
    simulation engine, on the quantize/dequantize simulation: a preview)."""

    target: str  # model name
    steps: int  # recurrent steps run
    calibration: str  # how the quantizer was calibrated
    quantization: str  # the quantization config used
    results: tuple[VariantResult, ...]  # one per variant, in the order asked
    reference: tuple = field(default=(), repr=False, compare=False)  # float outputs per step (flat tuples)
    # What produced it, kept to look inside later (attribution); absent in a comparison read from JSON.
    run: "Run | None" = field(default=None, repr=False, compare=False)
    notes: tuple[str, ...] = ()  # what the reader must know: a fold decision a quantization changed
    engine: Engine = TOSA  # what produced every number: the TOSA reference model or the simulation (engines.py)
    accelerator: Accelerator = TOSA_INT  # what every variant was lowered for (inspector.accelerators)
    stream: str = ""  # the stream every step was fed a frame of, in words ("" without one: the same inputs each step)

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

    def gap(self, other: "Comparison"):
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

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "target": self.target,
            "engine": self.engine.name,
            "accelerator": self.accelerator.name,
            "steps": self.steps,
            "calibration": self.calibration,
            "quantization": self.quantization,
            "variants": [r.to_dict() for r in self.results],
            "rules": _rules_of(self.results),
            "notes": list(self.notes),
            **({"stream": self.stream} if self.stream else {}),
        }

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
    def from_dict(cls, data: dict) -> "Comparison":
        """Rebuild a comparison from ``to_dict()`` (raw output tensors are not kept in JSON); a comparison
        written in format 1 (each variant's rule under "policy") reads the same. The engine and accelerator
        are the registered ones the file names (an accelerator this process does not know reads as a stand-in:
        ``accelerators.accelerator_named``)."""
        if isinstance(data, dict):
            check_format(data, "saved comparison")
        try:
            result = cls(_str(data["target"]), _int(data["steps"]), _str(data["calibration"]),
                         _str(data["quantization"]), tuple(_variant_result_from_dict(v) for v in data["variants"]),
                         notes=tuple(_str(n) for n in data.get("notes", ())),
                         engine=_engine(data.get("engine", TOSA.name)),
                         accelerator=_accelerator(data.get("accelerator", TOSA_INT.name)),
                         stream=_str(data.get("stream", "")))
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


def _engine(v) -> Engine:
    """The registered engine a file names (ValueError on a name no engine has)."""
    if not isinstance(v, str) or v not in engines:
        raise ValueError(f"unknown engine {quoted(v)}")
    return engines.get(v)


def _accelerator(v) -> Accelerator:
    """The accelerator a file names: the registered one, or a stand-in for one this process does not know."""
    return accelerator_named(_str(v))


_float, _int, _str, _renamed = read_float, read_int, read_str, renamed  # the readers' short names here
read_engine = _engine  # for the other records read back from JSON (attribution, bits)


def _variant_result_from_dict(d: dict) -> VariantResult:
    qp = lambda q: QParams(_float(q["scale"]), _int(q["zero_point"])) if q is not None else None  # noqa: E731
    folds = {k: _int(d["folds"][k]) for k in ("tfa", "lowering")}
    v = d["variant"]
    overrides = v.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise TypeError(f"expected overrides as an object, got {type(overrides).__name__}")
    return VariantResult(
        variant=Variant(rule_named(_str(_renamed(v, "rule", "policy"))), tuple(_str(m) for m in v["markers"]),
                        _str(v.get("quantization"), True),
                        tuple(sorted((_str(k), _str(x)) for k, x in overrides.items()))),
        folds=folds,
        sites=tuple(SiteOutcome(_str(s["id"]), _str(s["folded_at"], True), qp(s["conv_output"]), qp(s["mul_output"]))
                    for s in d["sites"]),
        metrics=tuple(Metrics.from_dict(m) for m in d["metrics"]),
        not_delegated=tuple(NotDelegated(_str(n["node"]), _str(n["target"]), _str(n["reason"]))
                            for n in d["not_delegated"]),
        timings={_str(k): _float(v) for k, v in dict(d["timings"]).items()},
        cached=bool(d.get("cached", False)),
        quantization=_str(d.get("quantization", "a8w8")),
        spec=_str(d.get("tosa_spec", "TOSA-1.0+INT")),
        error=_str(d.get("error"), True),
        engine=_engine(d.get("engine", TOSA.name)),
        accelerator=_accelerator(d.get("accelerator", TOSA_INT.name)),
        cost=Cost.from_dict(d["cost"]) if d.get("cost") is not None else None,
        cost_error=_str(d.get("cost_error"), True),
        outputs_digest=_str(d.get("outputs_digest"), True) or "",
    )


@dataclass(frozen=True)
class Run:
    """What a comparison was computed from: the model, its calibration and each variant's quantization."""

    target: Any  # the _load.Target compared
    calibration: Any  # its _flow.Calibration
    plans: tuple = ()  # per result, the _quantization.Plan it ran under
