"""Measurements: what a comparison computes for each variant, as small registered objects (``inspector.metrics``).

A ``Metric`` is a name, a unit, which direction is better, a one-line help, and how it is computed:

- ``kind="output"``: ``compute(reference, quantized) -> float`` on one output at one step (two float tensors of
  the same shape: the float model's and the quantized program's). ``compare`` computes every one it is asked
  for, for every variant, output and step; a record holds the values by name (``Metrics.values``).
- ``kind="cost"``: ``compute(cost) -> float`` on a variant's ``Cost`` (Vela's estimate on an Ethos-U).

The built-ins (``sqnr``, ``max-abs``, ``mean-abs``, ``mse``, ``flushed``; ``cycles``, ``npu-ops``, ``sram``,
``flash``) are registered exactly like a user's, through ``@inspector.metric(...)``. Nothing else branches on a
measurement's name: tables, JSON, DataFrames, Markdown, the report and the widget show whichever values a record
holds, each written by its measurement's ``format``. A built-in keeps the JSON key it always had (``column``:
``sqnr_db``, ``max_abs_error``, ...), so files written before read the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Iterable

import torch

from .._base import formats
from .._base.errors import InspectorError, listing, quoted
from .._base.registry import Registry

BETTER = ("higher", "lower", "none")
KINDS = ("output", "cost")
OVER_STEPS = ("each", "mean")
PARAMETER = "@"  # a measurement made for an argument: "decision-mismatch@0.55" (the threshold)
_MADE: set[str] = set()  # the names of measurements made for an argument (they may hold PARAMETER)
_UNITS = {"dB": formats.db, "cycles": formats.cycles, "share": formats.share, "bytes": formats.cycles,
          "ops": formats.cycles, "%": lambda v: f"{float(v):.2f}"}


@dataclass(frozen=True, kw_only=True)
class Metric:
    """One measurement: its name, unit, direction, help, and how it is computed."""

    name: str  # what users type: metrics=("sqnr", "max-abs"), budget=("sqnr", 1.0)
    unit: str  # "dB", "cycles", "bytes", "share", "ops" or any word ("" for a plain number)
    better: str  # "higher", "lower" or "none": which way is better (a budget needs one)
    help: str  # one line: what it measures
    compute: Callable = field(compare=False, repr=False)  # (reference, quantized) -> float, or (cost) -> float
    kind: str = "output"  # "output": per output and step; "cost": per variant, from its Vela cost
    column: str = ""  # its key in JSON and DataFrames (a built-in's historical key; else its name)
    builtin: bool = False  # registered by the inspector (kept from being replaced)
    origin: str = ""  # where it was defined: "module:function" (a user's file names itself)
    title: str = ""  # its column's heading in tables (default: its name and unit)
    labels: bool = False  # computed against the frame's label too: ``compute(reference, quantized, label)``, and
    # only on the frames that have one
    over_steps: str = "each"  # "each": a figure of every step (tables show the last, a budget counts the worst);
    # "mean": a share over the frames (tables and budgets read its mean over the steps that have it)
    default: bool = True  # computed when a comparison names no measurements (a task measure: when the inputs call
    # for it, see ``wanted``)

    @property
    def heading(self) -> str:
        """Its column's heading in every table."""
        return self.title or (f"{self.name} ({self.unit})" if self.unit else self.name)

    @property
    def key(self) -> str:
        """Its key in JSON and DataFrames."""
        return self.column or self.name

    def format(self, value) -> str:
        """A value as a user reads it, in this measurement's own format (``–`` for none)."""
        if value is None:
            return formats.MISSING
        writer = _UNITS.get(self.unit)
        return writer(value) if writer is not None else formats.error(value)

    def change(self, value, base) -> float | None:
        """``value`` minus ``base`` (None when either is missing)."""
        return None if value is None or base is None else value - base

    def worse_by(self, value, best) -> float | None:
        """How much worse ``value`` is than ``best`` in this measurement's direction (0 when as good or better;
        None without a direction or a number)."""
        if value is None or best is None or self.better == "none":
            return None
        gap = best - value if self.better == "higher" else value - best
        return 0.0 if gap <= 0 else gap

    def best(self, values: Iterable[float | None]) -> float | None:
        """The best of ``values`` in this measurement's direction (NaN and None left out)."""
        known = [v for v in values if v is not None and not math.isnan(v)]
        if not known or self.better == "none":
            return None
        return max(known) if self.better == "higher" else min(known)

    def worst(self, values: Iterable[float | None]) -> float | None:
        """The worst of ``values`` in this measurement's direction."""
        known = [v for v in values if v is not None and not math.isnan(v)]
        if not known or self.better == "none":
            return None
        return min(known) if self.better == "higher" else max(known)

    def text(self) -> str:
        """The measurement in words, as a list shows it."""
        unit = f" ({self.unit})" if self.unit else ""
        return f"{self.name}{unit}, {self.better} is better: {self.help}" if self.better != "none" else \
            f"{self.name}{unit}: {self.help}"


def _checked(m: Metric) -> Metric:
    if not isinstance(m, Metric):
        raise InspectorError(f"a measurement is an inspector metric, got a {type(m).__name__}")
    base = m.name.split(PARAMETER, 1)[0] if isinstance(m.name, str) and m.name in _MADE else m.name
    if not isinstance(base, str) or not base or any(ch in base for ch in ",=@:| \n`") or base != base.strip():
        raise InspectorError(f"a measurement's name is one word without ',', '=', '@', ':', '|' or spaces, got "
                             f"{quoted(m.name)}")
    if m.better not in BETTER:
        raise InspectorError(f"better= is one of {listing(BETTER)}, got {quoted(m.better)}")
    if m.kind not in KINDS:
        raise InspectorError(f"kind= is one of {listing(KINDS)}, got {quoted(m.kind)}")
    if m.over_steps not in OVER_STEPS:
        raise InspectorError(f"over_steps= is one of {listing(OVER_STEPS)}, got {quoted(m.over_steps)}")
    if not callable(m.compute):
        raise InspectorError(f"measurement {quoted(m.name)} needs a function to compute it")
    if not isinstance(m.unit, str) or not isinstance(m.help, str):
        raise InspectorError(f"measurement {quoted(m.name)}: unit and help are strings")
    return m


class _Metrics(Registry):
    """The registry of measurements; calling it lists the registered ``Metric`` objects (``inspector.metrics()``)."""

    def __call__(self, kind: str | None = None) -> tuple[Metric, ...]:
        """Every registered measurement (of ``kind`` if given: "output" or "cost"), in registration order."""
        found = tuple(self.entry(n) for n in self.names())
        return found if kind is None else tuple(m for m in found if m.kind == kind)

    def by_key(self, key: str) -> Metric | None:
        """The measurement whose JSON key (or name) is ``key``, if one is registered."""
        return next((m for m in self() if key in (m.key, m.name)), None)


metrics = _Metrics("measurement", make=_checked, line=lambda m: m.text(), fixed=lambda m: m.builtin,
                   hint="or register one with @inspector.metric(...)")


def metric(name: str, *, unit: str = "", better: str = "higher", help: str = "", kind: str = "output",
           replace: bool = False, labels: bool = False, over_steps: str = "each") -> Callable[[Callable], Callable]:
    """Register the decorated function as a measurement named ``name``; returns the function unchanged.

    ``@inspector.metric("max-err", better="lower", help="max |q - f|")`` on ``fn(reference, quantized)`` (two
    float tensors of one output at one step) or, with ``kind="cost"``, on ``fn(cost)``. ``compare`` then computes
    it for every variant, output and step; every table shows it.

    Args:
        name: the measurement's name, as ``compare(metrics=...)`` and ``--metrics`` take it.
        unit: what its values are in (``"dB"``); default none.
        better: ``"higher"`` (default) or ``"lower"``: which way is better.
        help: its one-line help; default none.
        kind: ``"output"`` (default: ``fn(reference, quantized)``) or ``"cost"`` (``fn(cost)``).
        replace: replace a measurement registered under ``name`` already; default False.
        labels: ``fn`` also takes the stream frame's label (``fn(reference, quantized, label)``); default False.
        over_steps: ``"each"`` (default: a value per step) or ``"mean"`` (one value over the run).
    """
    def register(fn: Callable) -> Callable:
        origin = f"{getattr(fn, '__module__', '')}:{getattr(fn, '__qualname__', getattr(fn, '__name__', ''))}"
        metrics.register(Metric(name=name, unit=unit, better=better,
                                help=help or (fn.__doc__ or "").strip().split("\n")[0], compute=fn, kind=kind,
                                origin=origin, labels=labels, over_steps=over_steps), replace=replace)
        return fn
    return register


def metric_of(value: str | Metric) -> Metric:
    """The measurement ``value`` names (or is): ``"decision-mismatch@0.55"`` makes the built-in for that threshold."""
    if isinstance(value, Metric):
        return metrics.register(value, replace=True) if value.name not in metrics else metrics.entry(value.name)
    if isinstance(value, str) and PARAMETER in value and value not in metrics:
        base, _, argument = value.partition(PARAMETER)
        make = _FACTORIES.get(base)
        if make is None:
            raise InspectorError(f"{quoted(base)} takes no argument after '{PARAMETER}'; the measurements that do: "
                                 f"{listing(_FACTORIES) or 'none'}")
        try:
            number = float(argument)
        except ValueError:
            raise InspectorError(f"{quoted(value)}: the argument after '{PARAMETER}' is a number, e.g. "
                                 f"{base}{PARAMETER}0.5") from None
        return make(number)
    return metrics.entry(value)


def wanted(names: Iterable[str | Metric] | None, kind: str = "output",
           task: Iterable[str] = ()) -> tuple[Metric, ...]:
    """The measurements of ``kind`` a call computes: the built-ins computed by default and the ``task``'s own
    (what the inputs call for: accuracy where the frames carry labels, a sample's own) when ``names`` is None, else
    those named, with ``sqnr`` always among the output measurements (the figure tables and advice rank by)."""
    if names is None:
        return tuple(dict.fromkeys([*(m for m in metrics(kind) if m.builtin and m.default),
                                    *(m for m in (metric_of(t) for t in task) if m.kind == kind)]))
    if isinstance(names, (str, Metric)):
        names = [names]
    try:
        chosen = [metric_of(n) for n in names]
    except TypeError:
        raise InspectorError(f"metrics= is a list of measurement names, got {quoted(names)}") from None
    chosen = [m for m in chosen if m.kind == kind]
    if kind == "output" and not any(m.name == "sqnr" for m in chosen):
        chosen.insert(0, metrics.entry("sqnr"))
    return tuple(dict.fromkeys(chosen))


def in_registry_order(names: Iterable[str]) -> tuple[str, ...]:
    """Measurement names once each, in the order they were registered (the built-ins first; names this process does
    not know last, by name)."""
    order = {n: i for i, n in enumerate(metrics.names())}
    return tuple(sorted(set(names), key=lambda n: (order.get(n, len(order)), n)))


def values(chosen: Iterable[Metric], reference: torch.Tensor, quantized: torch.Tensor,
           label=None) -> tuple[tuple[str, float], ...]:
    """Each output measurement of ``chosen`` on one output at one step, as (name, value) pairs; one against the
    frame's label only where the frame has one."""
    out = []
    for m in chosen:
        if m.labels and label is None:
            continue
        try:
            value = float(m.compute(reference, quantized, label) if m.labels else m.compute(reference, quantized))
        except Exception as exc:  # a user's measurement failed: one line naming it
            raise InspectorError(f"the measurement {quoted(m.name)} failed: {type(exc).__name__}: {exc}") from exc
        out.append((m.name, value))
    return tuple(out)


def cost_value(m: Metric, cost: Any) -> float | None:
    """A cost measurement of a variant's ``Cost`` (None without one)."""
    if cost is None:
        return None
    try:
        return float(m.compute(cost))
    except Exception as exc:  # a user's measurement failed: one line naming it
        raise InspectorError(f"the measurement {quoted(m.name)} failed: {type(exc).__name__}: {exc}") from exc


# ---------------------------------------------------------------- the built-ins, registered as a user's would be


def sqnr(signal: torch.Tensor, noise: torch.Tensor) -> float:
    """10 log10(sum signal^2 / sum noise^2) in dB: inf without noise, -inf without signal."""
    s, n = float((signal ** 2).sum()), float((noise ** 2).sum())
    if n == 0:
        return math.inf
    if s == 0:
        return -math.inf
    return 10 * math.log10(s / n)


def _builtin(name: str, unit: str, better: str, help_line: str, column: str, kind: str = "output", title: str = "",
             **task):
    def register(fn):
        metrics.register(Metric(name=name, unit=unit, better=better, help=help_line, compute=fn, kind=kind,
                                column=column, builtin=True,
                                origin=f"{__name__}:{fn.__name__}", title=title, **task))
        return fn
    return register


def _pair(reference: torch.Tensor, quantized: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return reference.detach().double(), quantized.detach().double()


@_builtin("sqnr", "dB", "higher", "signal to quantization noise: 10 log10(sum f^2 / sum (q - f)^2)", "sqnr_db", title="SQNR dB")
def _sqnr(reference, quantized):
    f, q = _pair(reference, quantized)
    return sqnr(f, q - f)


@_builtin("max-abs", "", "lower", "the largest |q - f|", "max_abs_error", title="max |err|")
def _max_abs(reference, quantized):
    f, q = _pair(reference, quantized)
    return float((q - f).abs().max()) if f.numel() else 0.0


@_builtin("mean-abs", "", "lower", "the mean |q - f|", "mean_abs_error", title="mean |err|")
def _mean_abs(reference, quantized):
    f, q = _pair(reference, quantized)
    return float((q - f).abs().mean()) if f.numel() else 0.0


@_builtin("mse", "", "lower", "the mean (q - f)^2", "mse", title="MSE")
def _mse(reference, quantized):
    f, q = _pair(reference, quantized)
    return float(((q - f) ** 2).mean()) if f.numel() else 0.0


@_builtin("flushed", "share", "lower", "the share of elements with f != 0 that quantize to 0", "flushed_to_zero", title="flushed")
def _flushed(reference, quantized):
    f, q = _pair(reference, quantized)
    return float(((f != 0) & (q == 0)).double().mean()) if f.numel() else 0.0


@_builtin("cycles", "cycles", "lower", "Vela's total cycles over every delegate (memory stalls included)", "cycles",
          "cost", title="cycles")
def _cycles(cost):
    return cost.cycles


@_builtin("npu-ops", "ops", "lower", "Vela's NPU operations", "npu_ops", "cost", title="NPU ops")
def _npu_ops(cost):
    return cost.npu_ops


@_builtin("sram", "bytes", "lower", "peak SRAM used (Vela, the largest delegate)", "sram_bytes", "cost", title="SRAM bytes")
def _sram(cost):
    return dict(cost.memory_used).get("sram", 0)


@_builtin("flash", "bytes", "lower", "flash used, on and off chip (Vela, the largest delegate)", "flash_bytes", "cost",
          title="flash bytes")
def _flash(cost):
    used = dict(cost.memory_used)
    return used.get("on_chip_flash", 0) + used.get("off_chip_flash", 0)


# ---------------------------------------------------------------- the task's own numbers


@_builtin("accuracy", "%", "higher", "top-1: the share of frames (or inputs) whose arg-max class is their label, "
          "in points", "accuracy", title="accuracy %", labels=True, over_steps="mean", default=False)
def _accuracy(reference, quantized, label):
    q = quantized.detach()
    predicted = q.reshape(q.shape[0], -1).argmax(dim=1) if q.dim() >= 2 else q.argmax().reshape(1)
    return 100.0 * float((predicted == torch.as_tensor(label).reshape(-1).to(predicted.device)).double().mean())


def decision_mismatch(threshold: float = 0.5) -> Metric:
    """The measurement ``decision-mismatch@THRESHOLD``: the share of frames (or inputs) whose decision differs from
    float's: a probability above ``threshold`` (an output of one value per input) or the arg-max class (more)."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise InspectorError(f"a decision threshold is a number, got {quoted(threshold)}")
    name = f"decision-mismatch{PARAMETER}{threshold:g}"
    if name in metrics:
        return metrics.entry(name)

    def mismatch(reference, quantized):
        f, q = reference.detach(), quantized.detach()
        n = f.shape[0] if f.dim() >= 1 else 1
        f, q = f.reshape(n, -1), q.reshape(n, -1)
        if f.shape[1] == 1:
            return float(((f[:, 0] > threshold) != (q[:, 0] > threshold)).double().mean())
        return float((f.argmax(dim=1) != q.argmax(dim=1)).double().mean())

    _MADE.add(name)
    return metrics.register(Metric(name=name, unit="share", better="lower",
                                   help=f"the share of frames whose decision differs from float's "
                                   f"(a probability above {threshold:g}, or the arg-max class)", compute=mismatch, kind="output",
                                   column=name, builtin=True, origin=f"{__name__}:decision_mismatch", over_steps="mean",
                                   default=False))


_FACTORIES: dict[str, Callable[[float], Metric]] = {"decision-mismatch": decision_mismatch}
decision_mismatch(0.5)  # the built-in at the usual threshold (silero_vad reports it by default)

BUILT_IN = tuple(m.name for m in metrics())


__all__ = ["BUILT_IN", "Metric", "decision_mismatch", "in_registry_order", "metric", "metric_of", "metrics", "sqnr", "values",
           "wanted"]
