"""``compare``: quantize each fold variant, run it on the TOSA INT reference model, measure against float.

For every variant (a policy plus markers) the model goes through the real Arm
flow on a private copy: ``TOSAQuantizer`` (symmetric int8, per-channel weights by
default) -> calibrate -> convert -> re-export -> lower for TOSA-1.0+INT -> the
bit-accurate TOSA reference model. The variant's policy governs the fold pass in
every stage it runs in (``_fold_swap``). Outputs are compared with the float eager
model per output, output channel and recurrent step.
"""

from __future__ import annotations

import copy
import io
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch

from . import _executorch, _graph, _load, _quiet, _stages, _tosa
from ._cache import BoundedCache
from ._hashing import digest as _digest
from ._limits import check_steps
from .errors import InspectorError, UnknownMarker, crash_behind, describe, listing, quoted
from ._fold_swap import swapped_fold_pass
from ._policies import DEFAULT_VARIANTS, FoldLog, check_policy, folded_site_ids, marker_tuple, policy_pass_class

# Default calibration: the example inputs plus this many perturbed copies (seeded). A model with
# state free-runs each of them for as many steps as the comparison runs, up to CALIBRATION_MAX_STEPS,
# with at most CALIBRATION_MAX_CALLS calls in all (fewer sequences for longer runs).
CALIBRATION_COPIES = 7
CALIBRATION_MAX_STEPS = 100
CALIBRATION_MAX_CALLS = 256
CALIBRATION_NOISE = 0.1  # perturbation std, relative to each input's own std
CALIBRATION_SEED = 0

Progress = Callable[[str, float], None]
# The phases of one variant's run ("stage" is reserved for the graph the pass sees).
PHASES = ("export", "prepare", "calibrate", "convert", "re-export", "lower", "reference", "metrics")


@dataclass(frozen=True)
class Variant:
    """One configuration to quantize and run: a fold policy plus carried-state markers."""

    policy: str  # off | upstream | state-aware | state-aware-strict
    markers: tuple[str, ...] = ()  # site ids or node names marked carried_quant_state

    @property
    def label(self) -> str:
        return self.policy + (f"+marked({','.join(self.markers)})" if self.markers else "")


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
    """Quantized vs float for one output at one step."""

    output: int  # output index (flattened)
    step: int  # 0-based recurrent step
    max_abs_error: float  # max |q - f|
    mean_abs_error: float  # mean |q - f|
    mse: float  # mean (q - f)^2
    sqnr_db: float  # 10 log10(sum f^2 / sum (q - f)^2); inf when equal
    sqnr_per_channel_db: tuple[float, ...]  # the same per output channel (dim 1)
    flushed_to_zero: float  # share of elements with f != 0 but q == 0

    def to_dict(self) -> dict:
        d = {k: _json_float(v) if isinstance(v, float) else v for k, v in vars(self).items()}
        d["sqnr_per_channel_db"] = [_json_float(v) for v in self.sqnr_per_channel_db]
        return d


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
    outputs: tuple = field(default=(), repr=False, compare=False)  # quantized outputs per step (flat tuples)
    log: str = field(default="", repr=False, compare=False)  # what the stack printed during the run (--debug)

    def at_step(self, step: int, output: int = 0) -> Metrics:
        return next(m for m in self.metrics if m.step == step and m.output == output)

    def drift(self, output: int = 0, metric: str = "sqnr_db") -> list[float]:
        """``metric`` of ``output`` per step (the drift curve)."""
        return [getattr(m, metric) for m in self.metrics if m.output == output]

    def to_dict(self) -> dict:
        return {
            "variant": {"policy": self.variant.policy, "markers": list(self.variant.markers), "label": self.variant.label},
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
        }


@dataclass(frozen=True)
class Comparison:
    """Every variant's quantized outputs against float, on the TOSA INT reference model."""

    target: str  # model name
    steps: int  # recurrent steps run
    calibration: str  # how the quantizer was calibrated
    quantization: str  # the quantization config used
    results: tuple[VariantResult, ...]  # one per variant, in the order asked
    reference: tuple = field(default=(), repr=False, compare=False)  # float outputs per step (flat tuples)
    # What produced it, kept to look inside later (attribution); absent in a comparison read from JSON.
    run: "_Run | None" = field(default=None, repr=False, compare=False)

    def result(self, policy_or_label: str) -> VariantResult:
        for r in self.results:
            if policy_or_label in (r.variant.label, r.variant.policy):
                return r
        raise InspectorError(f"no variant {quoted(policy_or_label)}; variants: {listing(r.variant.label for r in self.results)}")

    def folded_where(self) -> dict[str, str]:
        """Per site id, where it folded in each variant: ``"off: not folded; upstream: tfa"``."""
        out: dict[str, list[str]] = {}
        for r in self.results:
            for s in r.sites:
                out.setdefault(s.site_id, []).append(f"{r.variant.label}: {s.folded_at or 'not folded'}")
        return {k: "; ".join(v) for k, v in out.items()}

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "steps": self.steps,
            "calibration": self.calibration,
            "quantization": self.quantization,
            "variants": [r.to_dict() for r in self.results],
        }

    def _repr_mimebundle_(self, include=None, exclude=None):
        from ._present import comparison_html, comparison_text

        return {"text/plain": comparison_text(self), "text/html": comparison_html(self)}

    def __repr__(self) -> str:
        return f"<Comparison {self.target}: {', '.join(r.variant.label for r in self.results)}, {self.steps} step(s)>"

    @classmethod
    def from_dict(cls, data: dict) -> "Comparison":
        """Rebuild a comparison from ``to_dict()`` (raw output tensors are not kept in JSON)."""
        try:
            result = cls(_str(data["target"]), _int(data["steps"]), _str(data["calibration"]),
                         _str(data["quantization"]), tuple(_variant_result_from_dict(v) for v in data["variants"]))
        except KeyError as exc:
            raise InspectorError(f"not a saved comparison: missing field {exc}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise InspectorError(f"not a saved comparison: {type(exc).__name__}: {exc}") from None
        for r in result.results:  # every (step, output) the tables and plots read must be there
            have = {(m.step, m.output) for m in r.metrics}
            outputs = sorted({o for _, o in have})
            missing = next(((s, o) for s in range(result.steps) for o in outputs if (s, o) not in have), None)
            if missing is not None or len(have) != len(r.metrics):
                what = f"no metrics for output {missing[1]} at step {missing[0]}" if missing else "duplicate metrics"
                raise InspectorError(f"not a saved comparison: variant {quoted(r.variant.label)} has {what}")
        return result

    def plot(self, kind: str = "drift", output: int = 0):
        """A matplotlib Figure: ``drift`` (SQNR per step per variant) or ``channels`` (SQNR per channel)."""
        from ._plots import plot_comparison

        return plot_comparison(self, kind, output)


def _json_float(v: float):
    """JSON has no inf or NaN: they are written as the strings "inf", "-inf", "nan"."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def _float(v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise TypeError(f"expected a number, got {type(v).__name__}")
    return float(v)  # float("inf") / float("-inf") / float("nan") read the strings back


def _int(v) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"expected an integer, got {type(v).__name__}")
    return v


def _str(v, optional: bool = False) -> str | None:
    if v is None and optional:
        return None
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {type(v).__name__}")
    return v


def _variant_result_from_dict(d: dict) -> VariantResult:
    qp = lambda q: QParams(_float(q["scale"]), _int(q["zero_point"])) if q is not None else None  # noqa: E731
    folds = {k: _int(d["folds"][k]) for k in ("tfa", "lowering")}
    return VariantResult(
        variant=Variant(_str(d["variant"]["policy"]), tuple(_str(m) for m in d["variant"]["markers"])),
        folds=folds,
        sites=tuple(SiteOutcome(_str(s["id"]), _str(s["folded_at"], True), qp(s["conv_output"]), qp(s["mul_output"]))
                    for s in d["sites"]),
        metrics=tuple(
            Metrics(_int(m["output"]), _int(m["step"]), _float(m["max_abs_error"]), _float(m["mean_abs_error"]),
                    _float(m["mse"]), _float(m["sqnr_db"]), tuple(_float(v) for v in m["sqnr_per_channel_db"]),
                    _float(m["flushed_to_zero"]))
            for m in d["metrics"]
        ),
        not_delegated=tuple(NotDelegated(_str(n["node"]), _str(n["target"]), _str(n["reason"]))
                            for n in d["not_delegated"]),
        timings={_str(k): _float(v) for k, v in dict(d["timings"]).items()},
        cached=bool(d.get("cached", False)),
    )


# ---------------------------------------------------------------- the cache


# Variant results (each holds its per-step outputs) and float references, by what determines
# them; bounded like every cache of the inspector (the least recently used go first).
_CACHE = BoundedCache(64, "comparison results")


def clear_cache() -> None:
    """Forget every cached variant result and float reference."""
    _CACHE.clear()


def model_fingerprint(target: _load.Target) -> str:
    """What the target's results depend on: its exported program, inputs and recurrence (see ``_load.load``)."""
    return target.key


# ---------------------------------------------------------------- the public call


def compare(
    target: Any,
    variants: Iterable[str | Variant | tuple] = DEFAULT_VARIANTS,
    *,
    example_inputs: Any = None,
    markers: Iterable[str] | None = None,
    steps: int = 1,
    calibration: Sequence[Sequence[torch.Tensor]] | None = None,
    quantization_config: Any = None,
    progress: Progress | None = None,
    workers: int | None = None,
) -> Comparison:
    """Quantize, lower and run each variant on the TOSA INT reference model; compare with float.

    ``variants`` are policies (``"upstream"``), ``Variant`` records, or ``(policy, markers)``
    pairs; ``markers`` applies to the variants given as plain policies. ``steps > 1``
    runs recurrent models step after step: mutable buffers start from the model's
    initial state; functional state is fed back per the model's ``RECURRENT``
    declaration (output index -> input index). ``calibration`` is a list of input
    tuples (default: the example inputs plus seeded perturbed copies).
    ``progress(phase, fraction)`` is called as the work advances (phase: "variant: phase").
    ``workers`` processes run variants side by side (default: the cores available; 1 runs them
    one after another); a variant whose fold decisions equal another's is computed once.
    """
    check_steps(steps)
    wanted = _variants(variants, markers)
    loaded = _load.load(target, example_inputs)
    calibrated = _calibration(loaded, calibration, steps)
    quant_text = _describe_config(quantization_config)
    base_key = (model_fingerprint(loaded), _digest(loaded.inputs), _digest(list(calibrated.batches)),
                calibrated.sequence_steps, calibrated.reset, quant_text, steps)

    reference = _CACHE.get(("reference",) + base_key)
    results: list[VariantResult | None] = [None] * len(wanted)

    def report(i: int, phase: str, fraction: float) -> None:
        if progress is not None:
            progress(f"{wanted[i].label}: {phase}", (i + fraction) / len(wanted))

    to_run = []
    for i, variant in enumerate(wanted):
        hit = _cached_result(loaded, base_key, variant, quantization_config)
        if hit is not None:
            results[i] = _relabel(hit, variant)
            report(i, "cached", 1.0)
        else:
            to_run.append(i)
    if to_run and reference is None:
        _check_recurrent(loaded)
        reference = _float_reference(loaded, steps)
        _CACHE.put(("reference",) + base_key, reference)
    n_workers = _workers(workers)
    if n_workers > 1 and len(to_run) > 1:
        _run_parallel(loaded, wanted, to_run, results, base_key, calibrated, quantization_config, steps,
                      reference, n_workers, progress)
    else:
        for i in to_run:
            variant = wanted[i]
            hit = _cached_result(loaded, base_key, variant, quantization_config)  # an earlier one may decide the same
            if hit is not None:
                results[i] = _relabel(hit, variant)
                report(i, "cached", 1.0)
                continue
            result, decisions = _run_variant(loaded, variant, calibrated, quantization_config, steps, reference,
                                             lambda phase, fraction, i=i: report(i, phase, fraction))
            _store(base_key, variant, decisions, result)
            results[i] = result
    if progress is not None:
        progress("done", 1.0)
    return Comparison(loaded.name, steps, calibrated.text, quant_text, tuple(results),
                      reference=tuple(tuple(step) for step in reference),
                      run=_Run(loaded, calibrated, quantization_config))


def _store(base_key: tuple, variant: Variant, decisions: tuple, result: VariantResult) -> None:
    """Keyed by the variant, and by the fold decisions it really led to: another variant that leads
    to the same decisions (a marker toggle that changes none) is the same computation."""
    _CACHE.put(base_key + ("variant", variant.policy, variant.markers), result)
    _CACHE.put(base_key + ("decisions", decisions), result)


def _fold_count(decisions) -> int:
    """How many sites a group's variants fold (a variant-keyed group: unknown, counted as none)."""
    if decisions and decisions[0] == "variant":
        return 0
    return sum(len(ids) for _, ids in decisions)


def _workers(workers: int | None) -> int:
    from ._parallel import available_workers

    if workers is None:
        return available_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InspectorError(f"workers must be a positive integer, got {quoted(workers)}")
    return workers


def _run_parallel(target, wanted, to_run, results, base_key, calibrated, config, steps, reference, n_workers,
                  progress) -> None:
    """Run the variants in ``to_run`` side by side: one in this process (warm: nothing to import), the
    others in worker processes. Variants known to lead to the same fold decisions run once."""
    from . import _parallel

    groups: dict[Any, list[int]] = {}
    predictable = config is None and ("stage", "tfa") in target.memo  # cheap only once the tfa graph exists
    for i in to_run:
        key = _predicted_decisions(target, wanted[i]) if predictable else ("variant", wanted[i])
        groups.setdefault(key, []).append(i)
    # This process takes the variant that folds least (the most ops to lower: likely the longest),
    # policy off when it is asked for; the workers take the rest, in order.
    local_key = min(groups, key=lambda key: (_fold_count(key) if predictable else
                                             (0 if wanted[groups[key][0]].policy == "off" else 1)))
    groups = {local_key: groups[local_key], **{k: v for k, v in groups.items() if k != local_key}}
    firsts = [members[0] for members in groups.values()]
    fractions = {i: 0.0 for i in firsts}

    def report(index: int, phase: str, fraction: float) -> None:
        i = firsts[index]
        fractions[i] = fraction
        if progress is not None:
            done = sum(1.0 if results[j] is not None else 0.0 for j in range(len(wanted)) if j not in fractions)
            progress(f"{wanted[i].label}: {phase}", (done + sum(fractions.values())) / len(wanted))

    def run_here(n: int):
        return _run_variant(target, wanted[firsts[n]], calibrated, config, steps, reference,
                            lambda phase, fraction: report(n, phase, fraction))

    program = None
    if len(firsts) > 1:  # only workers need the archive
        try:
            program = _parallel.program_bytes(target.exported)
        except Exception:  # noqa: BLE001 - a program torch cannot save: run here, one after another
            program = None
    if program is None:
        outcomes = [run_here(n) for n in range(len(firsts))]
    else:
        tasks = [_parallel.Task(n, program, target.name, target.source, target.inputs, target.recurrent,
                                target.key, wanted[i], calibrated, config, steps, reference, base_key)
                 for n, i in enumerate(firsts) if n > 0]
        here, rest = _parallel.run_tasks(_work_in_worker, tasks, min(n_workers - 1, len(tasks)), report,
                                         local=lambda: run_here(0))
        outcomes = [here, *rest]
    for members, (result, decisions) in zip(groups.values(), outcomes):
        first = members[0]
        if decisions is not None:  # computed (not found in a worker's cache)
            _store(base_key, wanted[first], decisions, result)
        else:
            _CACHE.put(base_key + ("variant", wanted[first].policy, wanted[first].markers), result)
        results[first] = result
        for i in members[1:]:
            if decisions is not None:
                _store(base_key, wanted[i], decisions, result)
            results[i] = _relabel(result, wanted[i])


_WORKER_TARGETS: dict = {}  # in a worker process: the target it rebuilt (its tasks share it and its memo)


def _work_in_worker(task, report):
    """One variant in a worker process (see ``_parallel``), run exactly as in this process."""
    target = _WORKER_TARGETS.get(task.key)
    if target is None:
        # The archive was written by the parent a moment ago from a program it already loaded.
        program = torch.export.load(io.BytesIO(task.program))
        target = _load.Target(task.name, program, task.inputs, None, dict(task.recurrent), task.source, task.key)
        _WORKER_TARGETS.clear()
        _WORKER_TARGETS[task.key] = target
    # A variant that leads to the same fold decisions as one this worker ran is the same computation
    # (the first run captured the tfa graph that tells).
    hit = _cached_result(target, task.base_key, task.variant, task.config)
    if hit is not None:
        report("cached", 1.0)
        return "ok", _relabel(hit, task.variant), None
    result, decisions = _run_variant(target, task.variant, task.calibration, task.config, task.steps,
                                     task.reference, report)
    _store(task.base_key, task.variant, decisions, result)
    return "ok", result, decisions


def _cached_result(target: _load.Target, base_key: tuple, variant: Variant, config) -> "VariantResult | None":
    """A result computed before for this variant, or for another one with the same fold decisions.

    Decisions are predicted with the real pass on the tfa graph, which a first run on a model
    captured from its own quantization pipeline; on a model nothing has run on yet, the variant
    simply runs (predicting would cost a pipeline run of its own). A custom quantization config
    can change which nodes the quantizer lets fold, so then only the variant itself is a key.
    """
    hit = _CACHE.get(base_key + ("variant", variant.policy, variant.markers))
    if hit is not None or config is not None or ("stage", "tfa") not in target.memo:
        return hit
    return _CACHE.get(base_key + ("decisions", _predicted_decisions(target, variant)))


def _relabel(result: VariantResult, variant: Variant) -> VariantResult:
    return VariantResult(variant, result.folds, result.sites, result.metrics, result.not_delegated,
                         {k: 0.0 for k in result.timings}, cached=True, outputs=result.outputs, log=result.log)


def _variants(variants, markers) -> list[Variant]:
    if isinstance(variants, (str, Variant)):  # one variant ("upstream", or "off,upstream" as in the CLI)
        variants = [v.strip() for v in variants.split(",") if v.strip()] if isinstance(variants, str) else [variants]
    try:
        default_markers = marker_tuple(markers)
        items = list(variants)
    except TypeError:
        raise InspectorError(f"cannot read variants {quoted(variants)}; give policy names, e.g. ('off', 'upstream')") from None
    out = []
    for v in items:
        if isinstance(v, Variant):
            variant = v
        elif isinstance(v, str):
            variant = Variant(v, default_markers)
        elif isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str):
            variant = Variant(v[0], marker_tuple(v[1]))
        else:
            raise InspectorError(f"cannot read variant {quoted(v)}; give a policy name, a Variant, or (policy, markers)")
        check_policy(variant.policy)
        out.append(variant)
    if not out:
        raise InspectorError("no variants to compare; give at least one policy")
    return out


def _predicted_decisions(target: _load.Target, variant: Variant) -> tuple:
    """Where the pass folds in this variant's flow: ``(("tfa", site ids), ("lowering", ()))``.

    The real pass on the captured tfa graph; in the INT flow nothing is left to fold in lowering.
    """
    def decide() -> tuple:
        folded = folded_site_ids(_stages.stage_graph_of(target, "tfa"), variant.policy, variant.markers)
        return (("tfa", tuple(sorted(folded))), ("lowering", ()))

    return target.memo.get_or_compute(("decisions", variant.policy, variant.markers), decide)


# ---------------------------------------------------------------- inputs, calibration, state


def _check_recurrent(target: _load.Target) -> None:
    if not target.recurrent:
        return
    outputs = _flat(target.eager()(*copy.deepcopy(target.inputs)))
    for out_idx, in_idx in target.recurrent.items():
        if not (0 <= out_idx < len(outputs)):
            raise InspectorError(f"{target.name} declares output {out_idx} as recurrent, but it has {len(outputs)} outputs")
        if not (0 <= in_idx < len(target.inputs)):
            raise InspectorError(f"{target.name} feeds output {out_idx} into input {in_idx}, but it takes {len(target.inputs)} inputs")
        if outputs[out_idx].shape != target.inputs[in_idx].shape:
            raise InspectorError(
                f"{target.name} feeds output {out_idx} {tuple(outputs[out_idx].shape)} into input {in_idx} "
                f"{tuple(target.inputs[in_idx].shape)}: the shapes differ"
            )


@dataclass(frozen=True)
class _Run:
    """What a comparison was computed from: the model, its calibration and quantization config."""

    target: _load.Target
    calibration: "_Calibration"
    config: Any


@dataclass(frozen=True)
class _Calibration:
    """The batches the observers see, and how each one runs."""

    batches: tuple  # input tuples
    sequence_steps: int  # steps each batch free-runs (recurrent outputs fed back, buffers carried)
    reset: bool  # every batch starts from the model's initial state
    text: str  # how it was calibrated, in words (shown with every result)


def has_state(target: _load.Target) -> bool:
    """The model carries state between calls: a written buffer or input, or a ``RECURRENT`` declaration."""
    program = target.exported
    return bool(target.recurrent) or bool(_graph.state_writes(program.graph, program.graph_signature))


def _calibration(target: _load.Target, calibration, steps: int) -> _Calibration:
    stateful = has_state(target)
    if calibration is not None:
        batches = [tuple(b) if isinstance(b, (list, tuple)) else (b,) for b in calibration]
        if not batches:
            raise InspectorError("calibration is empty; give at least one batch of inputs")
        for i, batch in enumerate(batches):
            _check_finite(batch, f"calibration batch {i}")
        runs = min(steps, CALIBRATION_MAX_STEPS) if target.recurrent else 1
        text = f"{len(batches)} user batches" + (f", each free-running {runs} recurrent step(s)" if runs > 1 else "")
        return _Calibration(tuple(batches), runs, False, text)
    _check_finite(target.inputs, "example inputs")
    noise = (f"the example inputs and {{copies}} copies with N(0, ({CALIBRATION_NOISE} * std)^2) noise, "
             f"seed {CALIBRATION_SEED}")
    if not stateful:
        batches = _perturbed(target.inputs, CALIBRATION_COPIES)
        return _Calibration(tuple(batches), 1, False, noise.format(copies=CALIBRATION_COPIES))
    # A model with state: the observers must see the state's range over the whole run, so each
    # calibration sequence free-runs as many steps as the comparison (docs/stack-facts.md: 8 calls never see
    # the state of step 20, and the quantized state clips there).
    length = min(steps, CALIBRATION_MAX_STEPS)
    sequences = max(1, min(1 + CALIBRATION_COPIES, CALIBRATION_MAX_CALLS // length))
    batches = _perturbed(target.inputs, sequences - 1)
    text = (f"{sequences} sequence(s) of {length} step(s), each free-running the model's state from its "
            f"initial value: " + noise.format(copies=sequences - 1)
            + (f" (capped at {CALIBRATION_MAX_STEPS} steps of the {steps} compared)" if steps > length else ""))
    return _Calibration(tuple(batches), length, True, text)


def _perturbed(inputs: tuple, copies: int) -> list[tuple]:
    """The inputs, and ``copies`` copies with seeded Gaussian noise on the float tensors."""
    gen = torch.Generator().manual_seed(CALIBRATION_SEED)
    batches = [copy.deepcopy(inputs)]
    for _ in range(copies):
        batch = []
        for x in inputs:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                std = float(x.std()) if x.numel() > 1 else 1.0
                x = x + torch.randn(x.shape, generator=gen) * CALIBRATION_NOISE * (std or 1.0)
            batch.append(x)
        batches.append(tuple(batch))
    return batches


def _check_finite(batch, what: str) -> None:
    for i, x in enumerate(batch):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and not torch.isfinite(x).all():
            raise InspectorError(f"{what}: input {i} contains NaN or Inf; give finite inputs")


def _describe_config(config) -> str:
    if config is None:
        return "symmetric int8, per-channel weights (get_symmetric_quantization_config())"
    return re.sub(r" at 0x[0-9a-f]+", "", repr(config))


def _run_steps(module: torch.nn.Module, target: _load.Target, steps: int) -> list[list[torch.Tensor]]:
    """Call ``module`` ``steps`` times, feeding declared recurrent outputs back; flat outputs per step."""
    inputs = list(copy.deepcopy(target.inputs))
    per_step = []
    with torch.no_grad():
        for _ in range(steps):
            outputs = _flat(module(*inputs))
            per_step.append([o.detach().clone() for o in outputs])
            for out_idx, in_idx in target.recurrent.items():
                inputs[in_idx] = outputs[out_idx].detach().clone()
    return per_step


def _float_reference(target: _load.Target, steps: int) -> list[list[torch.Tensor]]:
    return _run_steps(target.eager(), target, steps)


def _flat(outputs) -> list[torch.Tensor]:
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    if isinstance(outputs, dict):
        outputs = list(outputs.values())
    return [t for o in outputs for t in _flat(o)]


def _reset_state(module: torch.nn.Module, initial: dict[str, torch.Tensor]) -> None:
    """Put the lowered program's buffers back to the model's initial state (calibration moved them)."""
    with torch.no_grad():
        for name, buf in module.named_buffers():
            if name in initial and buf.shape == initial[name].shape:
                buf.copy_(initial[name])


# ---------------------------------------------------------------- one variant


def _run_variant(target, variant: Variant, calibrated: _Calibration, config, steps, reference,
                 report) -> VariantResult:
    timings: dict[str, float] = {}
    log = FoldLog()
    clock = time.perf_counter()

    def mark(phase: str, index: int) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[phase] = now - clock
        clock = now
        report(phase, (index + 1) / len(PHASES))

    # The run captures the tfa graph for later predictions (the default quantizer's graph only).
    log.snapshots = config is None and ("stage", "tfa") not in target.memo
    initial = target.initial_buffers()
    # Everything the stack prints on the way (the reference model's C++ warnings on fd 1
    # among it) goes into the variant's log, shown under --debug, never into stdout.
    error = None
    with _quiet.captured_fds() as captured:
        try:
            with swapped_fold_pass(policy_pass_class(variant.policy, variant.markers, log)):
                _, converted = quantize(target, variant, calibrated, config, mark=mark)
                qparams = _site_qparams(converted, log)
                mark("convert", 3)
                reexported = _phase("re-export", variant,
                                    lambda: torch.export.export(converted, copy.deepcopy(target.inputs)))
                mark("re-export", 4)
                with _tosa.partition_rejections() as rejected:
                    lowered = _phase("lower", variant, lambda: _tosa.lower(reexported))
                mark("lower", 5)
            program = lowered.exported_program()
            module = program.module()
            _reset_state(module, initial)
            try:
                with _tosa.reference_dispatch():
                    quantized = _run_steps(module, target, steps)
            except InspectorError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise InspectorError(
                    f"the TOSA reference model failed for variant {variant.label}: {describe(exc)}") from None
        except InspectorError as exc:
            error = exc
    if error is not None:
        error.details = "\n".join(filter(None, (error.details, captured.text)))
        raise error
    mark("reference", 6)
    metrics = tuple(
        _metrics(o, s, q, f)
        for s, (q_outs, f_outs) in enumerate(zip(quantized, reference))
        for o, (q, f) in enumerate(zip(q_outs, f_outs))
    )
    folds, sites = _site_outcomes(log, qparams)
    mark("metrics", 7)
    if log.snapshots and config is None:
        graph = _stages.tfa_graph_of(log)
        if graph is not None:
            target.memo.put(("stage", "tfa"), _stages.StageGraph("tfa", graph, None))
    decisions = tuple((stage, tuple(sorted(s.site_id for s in sites if s.folded_at == stage)))
                      for stage in ("tfa", "lowering"))
    result = VariantResult(variant, folds, sites, metrics, _not_delegated(program, rejected), timings,
                           outputs=tuple(tuple(step) for step in quantized), log=captured.text)
    return result, decisions


def quantize(target: _load.Target, variant: Variant, calibrated: "_Calibration", config, *,
             keep_float: bool = False, mark=None):
    """Prepare, calibrate and convert a private copy of the target (inside the caller's fold swap).

    Returns ``(prepared, converted)``: with ``keep_float`` a copy of the calibrated prepared
    model (float, observers passing values through), else None; and the converted pt2e model
    (quantize/dequantize simulation), state reset to the model's initial values.
    """
    mark = mark or (lambda phase, index: None)
    with _quiet.quiet_loggers(*_executorch.ARM_PASS_LOGGERS):
        return _quantize(target, variant, calibrated, config, keep_float, mark)


def _quantize(target, variant, calibrated, config, keep_float, mark):
    quantizer = _executorch.tosa_int_quantizer(config=config)
    # The target's own export (a private copy): the program the user gave, exported once.
    exported = copy.deepcopy(target.exported)
    mark("export", 0)
    prepared = _phase("prepare", variant, lambda: _tosa.prepare_pt2e(exported.module(check_guards=False), quantizer))
    mark("prepare", 1)
    _phase("calibrate", variant, lambda: _calibrate(prepared, calibrated, target))
    mark("calibrate", 2)
    kept = None
    if keep_float:
        kept = copy.deepcopy(prepared)
        _reset_state(kept, target.initial_buffers())
    converted = _phase("convert", variant, lambda: _tosa.convert_pt2e(prepared))
    _reset_state(converted, target.initial_buffers())
    return kept, converted


def _phase(name: str, variant: Variant, fn):
    try:
        return fn()
    except InspectorError:
        raise
    except Exception as exc:  # noqa: BLE001
        crash = crash_behind(exc)
        if crash is not None:  # the pass crashed inside the pipeline, which wrapped the error
            raise InspectorError(f"{name} failed for variant {variant.label}: {crash}") from None
        unknown = crash_behind(exc, UnknownMarker)
        if unknown is not None:
            raise InspectorError(f"variant {variant.label}: {unknown}") from None
        raise InspectorError(f"{name} failed for variant {variant.label}: {describe(exc)}") from None



def _calibrate(prepared, calibration: _Calibration, target: _load.Target) -> None:
    """Feed every batch; each free-runs ``sequence_steps`` steps (recurrent outputs fed back,
    buffers carried), from the model's initial state when ``reset``."""
    initial = target.initial_buffers()
    with torch.no_grad():
        for batch in calibration.batches:
            if calibration.reset:
                _reset_state(prepared, initial)
            inputs = list(copy.deepcopy(batch))
            for _ in range(calibration.sequence_steps):
                outputs = _flat(prepared(*inputs))
                for out_idx, in_idx in target.recurrent.items():
                    inputs[in_idx] = outputs[out_idx].detach()


def _quant_args(node) -> QParams | None:
    for user in node.users:
        if "quantize_per_tensor" in str(user.target) and "dequantize" not in str(user.target):
            scale, zero_point = user.args[1], user.args[2]
            if isinstance(scale, (int, float)) and isinstance(zero_point, int):
                return QParams(float(scale), int(zero_point))
    return None


def _site_qparams(converted, log: FoldLog) -> dict[str, tuple[QParams | None, QParams | None]]:
    """Per site id: qparams of the conv output and the mul output in the converted graph."""
    tfa = next((r for r in log.runs if r.tfa), None)
    if tfa is None:
        return {}
    nodes = {n.name: n for n in converted.graph.nodes}
    out = {}
    for mul_name, site_id in tfa.site_ids.items():
        conv_name = tfa.convs.get(mul_name)
        conv, mul = nodes.get(conv_name), nodes.get(mul_name)
        out[site_id] = (_quant_args(conv) if conv is not None else None,
                        _quant_args(mul) if mul is not None and mul_name not in tfa.folded else None)
    return out


def _site_outcomes(log: FoldLog, qparams) -> tuple[dict, tuple[SiteOutcome, ...]]:
    folds = {"tfa": 0, "lowering": 0}
    where: dict[str, str] = {}
    order: list[str] = []
    for run in log.runs:
        stage = "tfa" if run.tfa else "lowering"
        folds[stage] += len(run.folded)
        for site_id in run.folded_ids:
            where.setdefault(site_id, stage)
        for site_id in run.site_ids.values():
            if site_id not in order:
                order.append(site_id)
    sites = tuple(
        SiteOutcome(s, where.get(s), *(qparams.get(s) or (None, None))) for s in order
    )
    return folds, sites


def _metrics(output: int, step: int, q: torch.Tensor, f: torch.Tensor) -> Metrics:
    q, f = q.detach().double(), f.detach().double()
    if q.shape != f.shape:
        raise InspectorError(f"output {output} has shape {tuple(q.shape)} quantized but {tuple(f.shape)} in float")
    err = q - f
    return Metrics(
        output=output,
        step=step,
        max_abs_error=float(err.abs().max()) if err.numel() else 0.0,
        mean_abs_error=float(err.abs().mean()) if err.numel() else 0.0,
        mse=float((err ** 2).mean()) if err.numel() else 0.0,
        sqnr_db=_sqnr(f, err),
        sqnr_per_channel_db=tuple(_sqnr(f.select(1, c), err.select(1, c)) for c in range(f.shape[1])) if f.dim() >= 2 else (),
        flushed_to_zero=float(((f != 0) & (q == 0)).double().mean()) if f.numel() else 0.0,
    )


def _sqnr(signal: torch.Tensor, noise: torch.Tensor) -> float:
    s, n = float((signal ** 2).sum()), float((noise ** 2).sum())
    if n == 0:
        return math.inf
    if s == 0:
        return -math.inf
    return 10 * math.log10(s / n)


_BOUNDARY_OPS = ("quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel", "dequantize_per_channel")


def _not_delegated(program, rejected: dict[str, str]) -> tuple[NotDelegated, ...]:
    out = []
    for n in program.graph.nodes:
        if n.op != "call_function" or "executorch_call_delegate" in str(n.target) or n.target.__name__ == "getitem":
            continue
        target = _graph.op_name(n) or str(n.target)
        if n.name in rejected:
            reason = rejected[n.name]
        elif any(op in str(n.target) for op in _BOUNDARY_OPS):
            reason = "(de)quantization at the delegate's input or output"
        else:
            reason = "not claimed by the TOSA partitioner (no reason reported)"
        out.append(NotDelegated(n.name, target, reason))
    return tuple(out)
