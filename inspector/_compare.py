"""``compare``: quantize each fold variant, run it on the TOSA INT reference model, measure against float.

This module orchestrates the call: it reads the variants asked for, loads the target, picks
the calibration, answers what it can from the cache (``_variant_cache``), computes the float
reference once, and runs the rest (``_flow.run_variant``) one after another or side by side:
variants known to lead to the same fold decisions are grouped and run once, one group in this
process and the others in worker processes (``_parallel``; ``_work_in_worker`` is what a worker
runs). The records it returns are ``_results``'.
"""

from __future__ import annotations

import io
from dataclasses import replace
from typing import Any, Callable, Iterable, Sequence

import torch

from . import _flow, _load, _parallel
from ._cache import BoundedCache
from ._limits import check_steps
from ._policies import DEFAULT_VARIANTS, Policy, check_policy, get_policy, marker_tuple, register
from ._results import Comparison, Run, Variant, VariantResult
from ._variant_cache import RESULTS, answered, base_key, can_predict, predicted_decisions
from .errors import InspectorError, quoted

Progress = Callable[[str, float], None]


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
    wanted = variants_of(variants, markers)
    loaded = _load.load(target, example_inputs)
    calibrated = _flow.choose_calibration(loaded, calibration, steps)
    quant_text = _flow.describe_config(quantization_config)
    base = base_key(loaded, calibrated, quant_text, steps)

    reference = RESULTS.reference(base)
    results: list[VariantResult | None] = [None] * len(wanted)

    def report(i: int, phase: str, fraction: float) -> None:
        if progress is not None:
            progress(f"{wanted[i].label}: {phase}", (i + fraction) / len(wanted))

    to_run = []
    for i, variant in enumerate(wanted):
        hit = RESULTS.get(loaded, base, variant, quantization_config)
        if hit is not None:
            results[i] = hit
            report(i, "cached", 1.0)
        else:
            to_run.append(i)
    if to_run and reference is None:
        _flow.check_recurrent(loaded)
        reference = _flow.float_reference(loaded, steps)
        RESULTS.put_reference(base, reference)
    n_workers = workers_of(workers)
    if any(get_policy(wanted[i].policy).is_users for i in to_run):
        n_workers = 1  # a user's rule lives in this process only: a worker would not know it
    if n_workers > 1 and len(to_run) > 1:
        _run_parallel(loaded, wanted, to_run, results, base, calibrated, quantization_config, steps,
                      reference, n_workers, progress)
    else:
        for i in to_run:
            variant = wanted[i]
            hit = RESULTS.get(loaded, base, variant, quantization_config)  # an earlier one may decide the same
            if hit is not None:
                results[i] = hit
                report(i, "cached", 1.0)
                continue
            result, decisions = _flow.run_variant(loaded, variant, calibrated, quantization_config, steps, reference,
                                                  lambda phase, fraction, i=i: report(i, phase, fraction))
            RESULTS.put(base, variant, result, decisions)
            results[i] = result
    if progress is not None:
        progress("done", 1.0)
    return Comparison(loaded.name, steps, calibrated.text, quant_text, tuple(results),
                      reference=tuple(tuple(step) for step in reference),
                      run=Run(loaded, calibrated, quantization_config))


def variants_of(variants, markers) -> list[Variant]:
    if isinstance(variants, (str, Variant)):  # one variant ("upstream", or "off,upstream" as in the CLI)
        variants = [v.strip() for v in variants.split(",") if v.strip()] if isinstance(variants, str) else [variants]
    try:
        default_markers = marker_tuple(markers)
        items = list(variants)
    except TypeError:
        raise InspectorError(f"cannot read variants {quoted(variants)}; give policy names, e.g. ('off', 'upstream')") from None
    out = []
    for v in items:
        if isinstance(v, Policy):
            variant = Variant(register(v, replace=True).name, default_markers)
        elif isinstance(v, Variant):
            variant = v
        elif isinstance(v, str):
            variant = Variant(v, default_markers)
        elif isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str):
            variant = Variant(v[0], marker_tuple(v[1]))
        else:
            raise InspectorError(f"cannot read variant {quoted(v)}; give a policy name, a Variant, or (policy, markers)")
        name = check_policy(variant.policy)  # "rules.py:NAME" imports the file and becomes NAME
        out.append(variant if name == variant.policy else replace(variant, policy=name))
    if not out:
        raise InspectorError("no variants to compare; give at least one policy")
    return out


def workers_of(workers: int | None) -> int:
    if workers is None:
        return _parallel.available_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InspectorError(f"workers must be a positive integer, got {quoted(workers)}")
    return workers


# ---------------------------------------------------------------- side by side


def _fold_count(decisions) -> int:
    """How many sites a group's variants fold (a variant-keyed group: unknown, counted as none)."""
    if decisions and decisions[0] == "variant":
        return 0
    return sum(len(ids) for _, ids in decisions)


def _run_parallel(target, wanted, to_run, results, base, calibrated, config, steps, reference, n_workers,
                  progress) -> None:
    """Run the variants in ``to_run`` side by side: one in this process (warm: nothing to import), the
    others in worker processes. Variants known to lead to the same fold decisions run once."""
    groups: dict[Any, list[int]] = {}
    predictable = can_predict(target, config)  # cheap only once the tfa graph exists
    for i in to_run:
        key = predicted_decisions(target, wanted[i]) if predictable else ("variant", wanted[i])
        groups.setdefault(key, []).append(i)
    # This process takes the variant that folds least (the most ops to lower: likely the longest),
    # a rule that never folds when one is asked for; the workers take the rest, in order.
    local_key = min(groups, key=lambda key: (_fold_count(key) if predictable else
                                             (0 if not get_policy(wanted[groups[key][0]].policy).folds else 1)))
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
        return _flow.run_variant(target, wanted[firsts[n]], calibrated, config, steps, reference,
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
                                target.key, wanted[i], calibrated, config, steps, reference, base)
                 for n, i in enumerate(firsts) if n > 0]
        here, rest = _parallel.run_tasks(_work_in_worker, tasks, min(n_workers - 1, len(tasks)), report,
                                         local=lambda: run_here(0))
        outcomes = [here, *rest]
    for members, (result, decisions) in zip(groups.values(), outcomes):
        # decisions is None when a worker answered from its own cache: only the variant is a key then
        RESULTS.put(base, wanted[members[0]], result, decisions)
        results[members[0]] = result
        for i in members[1:]:
            if decisions is not None:
                RESULTS.put(base, wanted[i], result, decisions)
            results[i] = answered(result, wanted[i])


# In a worker process: the target it rebuilt (its tasks share it and its memo).
_WORKER_TARGETS = BoundedCache(1, "worker target")


def _work_in_worker(task: _parallel.Task, report):
    """One variant in a worker process (see ``_parallel``), run exactly as in this process."""
    target = _WORKER_TARGETS.get(task.key)
    if target is None:
        # The archive was written by the parent a moment ago from a program it already loaded.
        program = torch.export.load(io.BytesIO(task.program))
        target = _load.Target(task.name, program, task.inputs, None, dict(task.recurrent), task.source, task.key)
        _WORKER_TARGETS.put(task.key, target)
    # A variant that leads to the same fold decisions as one this worker ran is the same computation
    # (the first run captured the tfa graph that tells).
    hit = RESULTS.get(target, task.base_key, task.variant, task.config)
    if hit is not None:
        report("cached", 1.0)
        return "ok", hit, None
    result, decisions = _flow.run_variant(target, task.variant, task.calibration, task.config, task.steps,
                                          task.reference, report)
    RESULTS.put(task.base_key, task.variant, result, decisions)
    return "ok", result, decisions
