"""What a worker process is handed: frozen, picklable task records, built here and nowhere else.

A loaded model travels as a ``ModelTask`` (its exported program as a ``torch.export.save``
archive, read back in the worker through the safe ``.pt2`` loader, and what rebuilds the same
``Target`` around it); a model's variants share a ``ModelRun`` (the model, its calibration, the
float reference and the cache key of all three). ``VariantTask`` is one variant of compare or of
the sweep, ``AttributionTask`` one isolated attribution. In the worker, ``worker_target`` rebuilds
the target once for all the tasks of one model, and ``run_in_worker`` runs a variant exactly as
the parent would. ``group_by_decisions`` is how compare and the sweep run once the variants that
lead to the same fold decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar
from collections.abc import Callable, Hashable, Sequence

from .._targets import load as _load
from .._workers import parallel as _parallel
from .._base import store as _store
from .._base.cache import BoundedCache
from . import flow as _flow
from .engines import TOSA, engine_of
from .quantization import Plan
from .._cost.accelerators import TOSA_INT, Accelerator
from .results import Comparison, Variant, VariantResult
from .variant_cache import RESULTS
from .._targets import pt2 as _pt2

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class ModelTask:
    """A loaded target as it travels to a worker: enough to rebuild the same ``Target`` there."""

    program: bytes  # the exported program as a torch.export.save archive
    name: str  # the target's name
    source: str | None  # the target as given on a command line (None for objects)
    inputs: tuple  # its example inputs
    recurrent: tuple[tuple[int, int], ...]  # (output index, input index fed on the next call) pairs
    key: str  # the target's content key (the worker keeps its rebuilt target under it)
    stream: Any = None  # its stream (a _targets.streams.Stream: plain tensors), when every step has a new input


@dataclass(frozen=True, kw_only=True)
class ModelRun:
    """What every variant of one model shares: the model, its calibration, steps and float reference."""

    model: ModelTask
    calibration: Any  # the _flow.Calibration the variants quantize with
    steps: int  # how many recurrent steps each variant runs
    reference: Any  # the float outputs per step
    base_key: tuple  # variant_cache.base_key of the above: the results' cache key but the variant
    engine: str = TOSA.name  # the name of the engine that computes the numbers (plain data: the worker resolves it)
    store: str | None = None  # the result store's folder the parent uses (None: off); the worker uses it too


@dataclass(frozen=True, kw_only=True)
class VariantTask:
    """One variant of one model, for a worker (compare's and the sweep's)."""

    run: ModelRun
    variant: Variant
    plan: Plan | None  # how it quantizes; None: the default quantization, resolved in the worker
    accelerator: Accelerator = TOSA_INT  # what it is lowered for when the worker resolves the plan


@dataclass(frozen=True, kw_only=True)
class AttributionTask:
    """One attribution of a comparison, for a worker."""

    model: ModelTask
    comparison: Comparison  # without its Run (the worker rebuilds it around its own target)
    calibration: Any  # the comparison's _flow.Calibration
    plans: tuple  # per result, the Plan it ran under


def model_task(target: _load.Target) -> ModelTask:
    """``target`` as a worker receives it (raises what ``torch.export.save`` raises on its program)."""
    return ModelTask(program=_parallel.program_bytes(target.exported), name=target.name, source=target.source,
                     inputs=target.inputs,
                     recurrent=tuple(target.recurrent.items()), key=target.key, stream=target.stream)


def model_run(target: _load.Target, calibration, steps: int, reference, base_key: tuple,
              engine: str = TOSA.name) -> ModelRun:
    """What the variants of ``target`` share, as a worker receives it (with the result store in use
    here: a worker keeps and reads answers where its parent does, whatever its own environment says)."""
    return ModelRun(model=model_task(target), calibration=calibration, steps=steps, reference=reference,
                    base_key=base_key, engine=engine, store=_store.where())


def group_by_decisions(items: Sequence[T], decisions_of: Callable[[T], Hashable | None]) -> list[list[T]]:
    """``items`` (variants) grouped by the fold decisions they lead to, in order of first appearance:
    one of a group runs, the others share its result. An item whose decisions are not known
    (``None``) is a group of its own."""
    groups: dict[Any, list[T]] = {}
    for n, item in enumerate(items):
        key = decisions_of(item)
        groups.setdefault(("decisions", key) if key is not None else ("alone", n), []).append(item)
    return list(groups.values())


# In a worker process: the target it rebuilt (its tasks share it and what it keeps).
_WORKER_TARGETS = BoundedCache(1, "worker target")


def worker_target(model: ModelTask) -> _load.Target:
    """The target a worker rebuilds from the parent's archive (through the safe loader), kept for its
    next tasks on the same model."""
    target = _WORKER_TARGETS.get(model.key)
    if target is None:

        program = _pt2.load_pt2_bytes(model.program)
        target = _load.Target(name=model.name, exported=program, inputs=model.inputs, model=None,
                              recurrent=dict(model.recurrent), source=model.source, key=model.key,
                              stream=model.stream)
        _WORKER_TARGETS.put(model.key, target)
    return target


def run_in_worker(run: ModelRun, variant: Variant, plan: Plan, report) -> tuple[VariantResult, tuple | None, bool]:
    """One variant in a worker process, exactly as in this one: ``(result, decisions, cached)``. A variant
    that leads to the same fold decisions as one this worker ran is the same computation (the first
    run captured the tfa graph that tells); its decisions are then None (not this run's to describe)."""
    target = worker_target(run.model)
    with _store.using(run.store):
        hit = RESULTS.get(target, run.base_key, variant, plan)
        if hit is not None:
            report("cached", 1.0)
            return hit, None, True
        result, decisions = _flow.run_on(engine_of(run.engine), target, variant, run.calibration, plan, run.steps,
                                         run.reference, report)
        RESULTS.put(run.base_key, variant, plan, result, decisions)
    return result, decisions, False


__all__ = ["AttributionTask", "ModelRun", "ModelTask", "VariantTask", "group_by_decisions", "model_run", "model_task",
           "run_in_worker", "worker_target"]
