"""``compare``: quantize each fold variant, run it on the TOSA INT reference model, measure against float.

This module orchestrates the call: it reads the variants asked for (each with its rule, resolved
here once), loads the target, picks the calibration, resolves each variant's quantization plan
(``quantization.py``), answers what it can from the cache (``variant_cache.py``), computes the float
reference once, and runs the rest (``flow.run_variant``) one after another or side by side: variants
known to lead to the same fold decisions are grouped (``tasks.group_by_decisions``) and run once, on
the process's warm worker pool (``_workers/pool.py``; the task kind ``compare-variant`` runs a
``tasks.VariantTask``, with ``tasks.run_in_worker`` as its body, shared with the sweep). The pool's
fork server is started as the call begins, so its warm-up overlaps this process's own export and
float reference. The records it returns are ``results.py``'s.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Any
from collections.abc import Callable, Iterable, Sequence

import torch

from . import flow as _flow
from .._targets import load as _load
from .._workers import parallel as _parallel, pool as _pool
from .._decide import stages as _stages
from .._base.limits import available_memory, check_memory, check_steps, memory_estimate
from .._rules.rules import DEFAULT_VARIANTS, Rule, get_rule, marker_tuple, register
from .._workers.kinds import task_kind
from .quantization import DEFAULT, Plan, Quantization, quantizations, quantization_of, resolve_overrides
from .results import Comparison, Run, Variant, VariantResult
from .tasks import VariantTask, group_by_decisions, model_run, run_in_worker
from .engines import TOSA, Engine, engine_of
from . import measures as _measures
from .measures import Metric
from .._cost.accelerators import TOSA_INT, Accelerator, accelerator_of
from .variant_cache import RESULTS, answered, base_key, can_predict, predicted_decisions
from .._base.errors import InspectorError, describe, quoted
from .._doors import executorch as _executorch
from .._sites import graph as _graph

Progress = Callable[[str, float], None]

# The fork server imports this before it forks a worker: the stack, and one tiny model through the flow.
_pool.boot_with("inspector._numbers.worker_boot")


def compare(
    target: Any,
    *,
    variants: Iterable[str | Variant | tuple] = DEFAULT_VARIANTS,
    example_inputs: Any = None,
    markers: Iterable[str] | None = None,
    steps: int | None = None,
    calibration: Sequence[Sequence[torch.Tensor]] | None = None,
    quantization: Any = None,
    progress: Progress | None = None,
    workers: int | None = None,
    isolate: bool = False,
    engine: str | Engine = TOSA,
    accelerator: str | Accelerator | None = None,
    metrics: Iterable[str | Metric] | None = None,
) -> Comparison:
    """Quantize, lower and run each variant on the TOSA INT reference model; compare with float.

    A variant that cannot run has an ``error`` and no numbers, the others stand (when every one fails, the first
    one's error is raised). Variants that lead to the same fold decisions are computed once; a run that would not
    fit the memory available is refused before anything starts.

    Args:
        target: what ``analyze`` takes (a module, a program, ``sample:NAME``, a ``.pt2``, ``file.py:Class``).
        variants: rule names, ``"rule@quantization"`` (``"upstream@a16w8"``), ``Variant`` records (with per-node
            ``overrides``) or ``(rule, markers)`` pairs; default ``DEFAULT_VARIANTS``.
        example_inputs: a module's inputs, or a stream (a list of input tuples, an ``inspector.Stream``): each step
            is fed its own frame; default: the model's own (a sample's stream included).
        markers: site ids or node names marked as carried state in the variants given as plain rules.
        steps: how many steps each variant runs, recurrent models step after step (mutable buffers from their
            initial state, functional state fed back per the model's ``RECURRENT``); default: a stream's length,
            else ``STATE_STEPS`` (20) for a model that carries state, else 1.
        calibration: a list of input tuples or streams; default: the example inputs and seeded perturbed copies.
        quantization: what variants that name none run under: a name (``inspector.quantizations``) or a
            ``QuantizationConfig``; default ``a8w8``.
        progress: ``progress(phase, fraction)``, called as the work advances (phase: ``"variant: phase"``).
        workers: the cores the variants share; default: the cores available (1: one after another here; more:
            side by side in warm worker processes, up to twice as many at once as cores).
        isolate: run every variant's native work (quantizer, lowering, reference model) in worker processes, so a
            crash or an out-of-memory kill costs that variant only; default False.
        engine: ``"tosa"`` (default: the TOSA reference model) or ``"simulation"`` (the quantize/dequantize
            simulation in PyTorch: no lowering, in this process; ``Comparison.gap`` says how far it was).
        accelerator: what every variant is lowered for (``inspector.accelerators``); default ``tosa-int``. On an
            Ethos-U each result's ``cost`` is Vela's estimate and ``Comparison.tradeoff()`` sets cycles beside dB.
        metrics: the measurements computed per variant, output and step (``inspector.metrics()``); default: the
            built-ins and the task's own.
    """
    if metrics is not None:
        _measures.wanted(metrics)  # a bad name fails before anything runs
    if steps is not None:
        check_steps(steps)
    engine = engine_of(engine)
    chip = accelerator_of(accelerator)
    if not engine.in_workers:
        workers, isolate = 1, False  # no lowering and no reference model: nothing worth a worker
    default = quantization_of(quantization)
    wanted = variants_of(variants, markers)
    n_workers = workers_of(workers)
    started = False  # the fork server, by this call
    if isolate or (n_workers > 1 and len(wanted) > 1):
        started = _pool.start_server()  # warms up in its own process while this one loads and exports
    loaded = _load.load(target, example_inputs)
    steps = _stages.steps_for(loaded, steps)  # the one default of every verb unless given
    check_steps(steps)
    chosen = _measures.wanted(metrics, task=loaded.task_metrics)
    calibrated = _flow.choose_calibration(loaded, calibration, steps)
    base = base_key(loaded, calibrated, steps, engine.name)
    plans: list[Plan | None] = []
    results: list[VariantResult | None] = [None] * len(wanted)
    for i, variant in enumerate(wanted):
        try:
            plans.append(plan_of(loaded, variant, default, chip))
        except InspectorError as exc:
            plans.append(None)
            results[i] = failed(variant, default, exc, accelerator=chip)

    def report(i: int, phase: str, fraction: float) -> None:
        # by what is finished, not by position: a later variant answered by the store never moves the bar back
        if progress is not None:
            finished = sum(1 for j, r in enumerate(results) if r is not None and j != i)
            progress(f"{wanted[i].label}: {phase}", (finished + fraction) / len(wanted))

    reference = RESULTS.reference(base)
    to_run = []
    for i, variant in enumerate(wanted):
        if plans[i] is None:
            continue
        hit = RESULTS.get(loaded, base, variant, plans[i])
        if hit is not None:
            results[i] = hit
            report(i, "cached", 1.0)
        else:
            to_run.append(i)
    # every variant may come from the store while the float reference is no longer in this process's memory
    # (after clear_cache): the comparison still carries it, computed again (a float run, no lowering)
    if reference is None and (to_run or any(r is not None and r.error is None for r in results)):
        _flow.check_recurrent(loaded)
        reference = _flow.float_reference(loaded, steps)
        RESULTS.put_reference(base, reference)
    if any(wanted[i].rule.is_users and not wanted[i].rule.origin for i in to_run):
        n_workers, isolate = 1, False  # a rule defined in this session only: a worker would not know it
    at_once = side_by_side(loaded, steps, len(to_run), n_workers)
    if to_run:
        check_memory(loaded, steps, len(to_run), at_once, isolate or at_once > 1)
    on_workers = bool(to_run) and (isolate or at_once > 1)
    if started and not on_workers:
        _pool.stop_server(mid_warm_up=True)  # every answer from the store, or one variant to run here: its warm-up stops
    if on_workers:
        call = _Call(target=loaded, wanted=tuple(wanted), plans=tuple(plans), base=base, calibrated=calibrated,
                     steps=steps, reference=reference, engine=engine, n_workers=n_workers, at_once=at_once,
                     progress=progress, isolate=isolate)
        _run_parallel(call, to_run, results)
    else:
        for i in to_run:
            variant = wanted[i]
            hit = RESULTS.get(loaded, base, variant, plans[i])  # an earlier one may decide the same
            if hit is not None:
                results[i] = hit
                report(i, "cached", 1.0)
                continue
            try:
                result, decisions = _flow.run_on(engine, loaded, variant, calibrated, plans[i], steps, reference,
                                                 lambda phase, fraction, i=i: report(i, phase, fraction))
            except InspectorError as exc:
                results[i] = failed(variant, plans[i].quantization, exc, plans[i].spec, chip)
                continue
            RESULTS.put(base, variant, plans[i], result, decisions)
            results[i] = result
    if all(r.error is not None for r in results):
        first = results[0]
        raise InspectorError(first.error, details=first.log)
    results = [measured(r, reference, chosen, loaded.stream) for r in results]
    if progress is not None:
        progress("done", 1.0)
    return Comparison(target=loaded.name, steps=steps, calibration=calibrated.text, quantization=default.text,
                      results=tuple(results),
                      reference=tuple(tuple(step) for step in reference),
                      run=Run(target=loaded, calibration=calibrated, plans=tuple(plans)),
                      notes=loaded.notes + release_notes(loaded, chip) + decision_notes(loaded, wanted, results, chip),
                      engine=engine, accelerator=chip, stream=loaded.stream.text() if loaded.stream is not None else "")


def measured(result: VariantResult, reference, chosen, stream=None) -> VariantResult:
    """``result`` with every measurement of ``chosen`` it does not hold yet, computed here from its quantized outputs
    against the float ``reference`` (a measurement registered in this process: the workers compute the built-ins).
    A result read from a store keeps its outputs, so a measurement registered later is computed for it too."""
    if result.error is not None:
        return result
    missing = [m for m in chosen if m.name not in result.measured_names]
    if not missing:
        return result
    if not result.outputs:
        raise InspectorError(f"{result.variant.label} kept no outputs to compute {', '.join(m.name for m in missing)} "
                             "from; compare it again")
    return replace(result, metrics=tuple(
        replace(m, values=m.values + _measures.values(missing, reference[m.step][m.output],
                                                       result.outputs[m.step][m.output],
                                                       None if stream is None else stream.label(m.step)))
        for m in result.metrics))


def plan_of(target: _load.Target, variant: Variant, default: Quantization,
            accelerator: Accelerator = TOSA_INT) -> Plan:
    """How ``variant`` quantizes ``target`` for ``accelerator``: its quantization (or the comparison's), and the
    nodes of the exported program its overrides reach (one line if one names nothing)."""
    quantization = quantizations.get(variant.quantization) if variant.quantization is not None else default
    nodes = resolve_overrides(target, variant.overrides, variant.label)
    return Plan.of(quantization, nodes, accelerator)


def failed(variant: Variant, quantization: Quantization, exc: InspectorError, spec: str | None = None,
           accelerator: Accelerator = TOSA_INT) -> VariantResult:
    """The record of a variant that could not run: its one-line error, no numbers."""
    return VariantResult(variant=variant, folds={"tfa": 0, "lowering": 0}, sites=(), metrics=(), not_delegated=(),
                         timings={}, quantization=quantization.name,
                         spec=spec or quantization.spec, error=str(exc), log=getattr(exc, "details", "") or "",
                         accelerator=accelerator)


def release_notes(target: _load.Target, accelerator: Accelerator = TOSA_INT) -> tuple[str, ...]:
    """What the installed executorch does to these numbers that a later release does not: on 1.4.x a model that
    writes a registered buffer runs its INT flow with the state frozen (``freezes_buffer_state``)."""
    if not (_stages.quantized(accelerator) and _executorch.freezes_buffer_state()):
        return ()
    program = target.exported
    if not any(w.kind == _graph.BUFFER for w in _graph.state_writes(program.graph, program.graph_signature)):
        return ()
    return (f"executorch {_executorch.installed_version()} quantizes a registered buffer's read as a constant "
            "(fixed in 1.5.0): every step reads the state the calibration left, so these numbers are of a frozen "
            "state, not a carried one (docs/stack-facts.md)",)


def decision_notes(target: _load.Target, wanted: list[Variant], results: list[VariantResult],
                   accelerator: Accelerator = TOSA_INT) -> tuple[str, ...]:
    """Where a variant's quantization changed a fold decision: a site it folds or not against the
    same rule and markers under plain a8w8 (the decision ``analyze`` shows at tfa)."""
    plain = Plan.of(quantizations.get(DEFAULT), (), accelerator)
    notes = []
    for variant, result in zip(wanted, results):
        if result.error is not None or (result.quantization == DEFAULT and not variant.overrides):
            continue
        if variant.rule.pass_class is not None:
            continue  # a rule's own pass class: the installed pass's prediction does not apply
        try:
            expected = set(predicted_decisions(target, Variant(rule=variant.rule, markers=variant.markers),
                                               plain)[0][1])
        except InspectorError:
            return tuple(notes)
        for s in result.sites:
            folds = s.folded_at == "tfa"
            if folds != (s.site_id in expected):
                now = "folds" if folds else "does not fold"
                was = "folds" if s.site_id in expected else "does not"
                notes.append(f"{variant.label}: site {s.site_id} {now} (under a8w8 without overrides it {was}): "
                             "the quantization changed what transform-for-annotation lets the pass fold")
    return tuple(notes)


def variants_of(variants, markers) -> list[Variant]:
    if isinstance(variants, (str, Variant)):  # one variant ("upstream", or "off,upstream" as in the CLI)
        variants = [v.strip() for v in variants.split(",") if v.strip()] if isinstance(variants, str) else [variants]
    try:
        default_markers = marker_tuple(markers)
        items = list(variants)
    except TypeError:
        raise InspectorError(f"cannot read variants {quoted(variants)}; give rule names, e.g. ('off', 'upstream')") from None
    out = []
    for v in items:
        if isinstance(v, Rule):
            variant = Variant(rule=register(v, replace=True), markers=default_markers)
        elif isinstance(v, Variant):
            # a variant read from a file may name a rule this process does not know: one line, before anything runs
            variant = v if not v.rule.stand_in else replace(v, rule=get_rule(v.rule.name))
        elif isinstance(v, str):
            # the user's name enters here: "rules.py:NAME" imports the file and becomes the rule NAME
            name, quantization = split_variant(v)
            variant = Variant(rule=get_rule(name), markers=default_markers, quantization=quantization)
        elif isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], (str, Rule)):
            variant = Variant(rule=get_rule(v[0]), markers=marker_tuple(v[1]))
        else:
            raise InspectorError(f"cannot read variant {quoted(v)}; give a rule name, a Variant, or (rule, markers)")
        if variant.quantization is not None:
            quantizations.get(variant.quantization)  # an unknown name fails here, before anything runs
        out.append(variant)
    if not out:
        raise InspectorError("no variants to compare; give at least one rule")
    return out


def split_variant(text: str) -> tuple[str, str | None]:
    """``"upstream@a16w8"`` -> ``("upstream", "a16w8")``; ``"upstream"`` -> ``("upstream", None)``.
    Only the last ``@`` counts, and only when what follows it is a name (not part of a path)."""
    rule, at, quantization = text.rpartition("@")
    if not at or not rule or "/" in quantization or ":" in quantization:
        return text, None
    return rule.strip(), quantization.strip()


def side_by_side(target: _load.Target, steps: int, variants: int, workers: int) -> int:
    """How many variants run at once on ``workers`` cores: one when there is one core, else every
    variant up to twice the cores. The variants of one comparison differ in size (a variant that
    folds nothing has the most ops to lower), so with exactly as many processes as cores the core
    that drew the big one finishes last while the other waits; with more processes than cores
    the cores are shared until the end (each process runs one thread: nothing is oversubscribed
    within a process). Fewer, when the machine's memory would not hold that many."""
    if workers == 1 or variants <= 1:
        return 1
    at_once = min(variants, 2 * workers)
    available = available_memory()
    while at_once > workers and available is not None and \
            memory_estimate(target, steps, variants, at_once, True) > available:
        at_once -= 1
    return at_once


def workers_of(workers: int | None) -> int:
    if workers is None:
        return _parallel.available_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InspectorError(f"workers must be a positive integer, got {quoted(workers)}")
    return workers


# ---------------------------------------------------------------- side by side


def _fold_count(decisions) -> int:
    """How many sites a group's variants fold."""
    return sum(len(ids) for _, ids in decisions)


@dataclass(frozen=True, kw_only=True)
class _Call:
    """What one comparison resolved once (the target loaded, names turned into registry objects, steps and plans
    checked), handed to the side-by-side run whole."""

    target: _load.Target  # the loaded target
    wanted: tuple[Variant, ...]  # every variant asked for, in order
    plans: tuple  # each variant's Plan (None: it failed to plan)
    base: tuple  # the comparison's part of every result key
    calibrated: Any  # the calibration chosen
    steps: int  # the steps every variant runs
    reference: Any  # the float reference, per step
    engine: Engine  # what computes the numbers
    n_workers: int  # the cores the variants share
    at_once: int  # how many variants run at once
    progress: Progress | None  # progress(phase, fraction)
    isolate: bool  # native work only in workers


def _run_parallel(call: _Call, to_run, results) -> None:
    """Run the variants in ``to_run`` on the process's warm worker pool (``_workers/pool.py``), ``at_once`` at a
    time sharing ``n_workers`` cores; this process only hands them out and gathers the results (a
    worker forked from the warm server starts at once, and a crash there costs that variant only).
    Variants known to lead to the same fold decisions run once; with ``isolate`` off, a comparison
    left with one computation runs it here."""
    target, wanted, plans, base, calibrated = call.target, call.wanted, call.plans, call.base, call.calibrated
    steps, reference, engine, progress, isolate = call.steps, call.reference, call.engine, call.progress, call.isolate
    n_workers, at_once = call.n_workers, call.at_once
    plain = [plans[i] for i in to_run if plans[i].plain]
    if len(plain) > 1 and not _stages.has_stage_graph(target, plain[0].tfa_key):
        # Two runs of the same computation on two workers would cost twice: the tfa graph (a fraction
        # of one variant, while the fork server warms up) tells which variants fold alike.
        with contextlib.suppress(InspectorError):
            _stages.tfa_graph_for(target, plain[0].tfa_key, plain[0].quantizer)
    # The fold decisions each variant leads to, where they are cheap to know (once the tfa graph exists).
    known = {i: (plans[i].identity, predicted_decisions(target, wanted[i], plans[i])) for i in to_run
             if can_predict(target, plans[i])}
    # The variant that folds least first (the most ops to lower: likely the longest), a rule that never
    # folds when one is asked for, then the rest in order.
    groups = sorted(group_by_decisions(to_run, known.get), key=lambda members: (
        _fold_count(known[members[0]][1]) if members[0] in known else
        (0 if not wanted[members[0]].rule.folds else 1)))
    firsts = [members[0] for members in groups]
    fractions = {i: 0.0 for i in firsts}

    def report(index: int, phase: str, fraction: float) -> None:
        i = firsts[index]
        fractions[i] = fraction
        if progress is not None:
            done = sum(1.0 if results[j] is not None else 0.0 for j in range(len(wanted)) if j not in fractions)
            progress(f"{wanted[i].label}: {phase}", (done + sum(fractions.values())) / len(wanted))

    def run_here(n: int):
        i = firsts[n]
        try:
            return _flow.run_on(engine, target, wanted[i], calibrated, plans[i], steps, reference,
                              lambda phase, fraction: report(n, phase, fraction))
        except InspectorError as exc:
            return failed(wanted[i], plans[i].quantization, exc, plans[i].spec, plans[i].accelerator), None

    try:
        run = model_run(target, calibrated, steps, reference, base, engine.name)
    except Exception as exc:  # a program torch cannot save cannot travel to a worker
        if isolate:
            raise InspectorError(f"torch.export.save cannot write {target.name}'s program, so it cannot run in a "
                                 f"worker process: {describe(exc)}; run it with isolate=False") from exc
        run = None
    outcomes: list[Any] = [None] * len(firsts)
    if run is None or (len(firsts) == 1 and not isolate):
        outcomes = [run_here(n) for n in range(len(firsts))]
    else:
        running = max(1, min(at_once, len(firsts)))
        with _pool.warm_pool(running, n_workers) as pool:
            for n in range(len(firsts)):
                # More at once than cores: the first ones (likely the longest) keep a core each, the rest
                # share the last core (and take the others' when they end). Every core stays busy to the
                # end, and the longest variant is not slowed down by the short ones.
                pool.submit(("variant", n), VARIANT_TASK, VariantTask(run=run, variant=wanted[firsts[n]],
                                                                      plan=plans[firsts[n]]),
                            priority=n, background=running > n_workers and n >= n_workers - 1)
            for event in pool.events():
                kind, (_, n) = event[0], event[1]
                if kind == "progress":
                    report(n, event[2], event[3])
                elif kind == "done":
                    outcomes[n] = event[2]
                else:  # the worker's one line (an InspectorError does not travel), or its death
                    i = firsts[n]
                    label = wanted[i].label
                    if kind == "error":  # a crash of ours is named after the variant too
                        error = InspectorError(event[2] if label in event[2] else f"variant {label}: {event[2]}",
                                               details=event[3])
                    else:  # died: that variant alone is lost
                        error = InspectorError(died_message(f"variant {label}", event[2]))
                    outcomes[n] = (failed(wanted[i], plans[i].quantization, error, plans[i].spec,
                                          plans[i].accelerator), None)
    for members, (result, decisions) in zip(groups, outcomes):
        first = members[0]
        if result.error is not None:
            for i in members:
                results[i] = replace(result, variant=wanted[i])
            continue
        # decisions is None when a worker answered from its own cache: only the variant is a key then
        RESULTS.put(base, wanted[first], plans[first], result, decisions)
        results[first] = result
        for i in members[1:]:
            if decisions is not None:
                RESULTS.put(base, wanted[i], plans[i], result, decisions)
            results[i] = answered(result, wanted[i])


def died_message(what: str, how: str) -> str:
    """One line for work (a variant, an attribution) whose worker process died: which, how, what to try."""
    hint = ("it ran out of memory or was killed: try fewer steps, a smaller input or workers=1"
            if "SIGKILL" in how or "out of memory" in how else
            "native code crashed on this model: run this variant alone to check, and report it with "
            "python -m inspector report if it crashes again")
    return f"{what}: the worker process running it died ({how}); the other results are kept; {hint}"


VARIANT_TASK = "compare-variant"


@task_kind(VARIANT_TASK)
def variant_task(task: VariantTask, report):
    """The pool task of one of compare's variants (its rule travelled with it: ``Rule.__reduce__``)."""
    result, decisions, _ = run_in_worker(task.run, task.variant, task.plan, report)
    return result, decisions
