"""``verdict``: what PR #21234's guard does and costs in the installed executorch, measured on each network.

For every network and every INT accelerator (each Ethos-U, or ``tosa-int``) and the FP flow (``tosa-fp``):

- where the installed pass folds in each flow: the INT flow's real run (``compare``'s fold counts per phase, and
  the graphs its observers calibrate, ``stale.calibrated``), the FP flow's lowering call (the installed pass on
  the graph that flow hands it, ``analyze(stage="lowering", accelerator="tosa-fp")``);
- what each rule decides there: ``upstream``, ``state-aware`` without a marker (PR #21234's structural check),
  ``state-aware`` with a marker on each site feeding state (set on the graph the pass receives), the same marker set
  on the exported program as a model author would (does it reach the pass? the real flow answers:
  ``prepare_pt2e`` for the INT flow, a whole FP lowering for the FP flow), and ``state-aware-strict``;
- what skipping the carried-state sites costs (``compare``: Vela's cycles, the TOSA reference model's worst SQNR
  and the task's own measures), and what the fold applied after calibration would do (``stale``: a flow 1.5.1
  does not run, labelled so);
- figures a pull request published for a network (``PUBLISHED``), set beside ours, never mixed with them.

The records are ``verdict_records.py``'s; the words and the reply are ``present/verdict.py``'s.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterable

import torch

from .._base.errors import InspectorError, first_line, listing
from .._base.version import __version__
from .._cost.accelerators import TOSA_FP, Accelerator, accelerator_of, accelerators
from .._decide import stages as _stages
from .._decide.decide import analyze
from .._doors import executorch as _executorch, pipeline as _pipeline
from .._doors.arm_flow import ArmFlow
from .._numbers import stale as _stale
from .._numbers.compare import compare
from .._numbers.measures import metrics as _metrics
from .._numbers.quantization import DEFAULT, quantizations
from .._rules.pr_pass import pr_rule
from .marker_reach import CUSTOM_PROGRAM, TOP_PROGRAM, marker_reach
from .._numbers.results import VariantResult
from .._rules.rules import FoldLog, rule_pass_class
from .._sites import graph as _graph
from .._sites.reasons import RiskCode
from .._targets import load as _load, streams as _streams
from .verdict_records import (MARKER, MARKER_ON_PROGRAM, STRICT, STRUCTURAL, UPSTREAM, Decision, Figures, Flow,
                              Network, OnAccelerator, Published, Verdict)

Progress = Callable[[str, float], None]

# What the verdict lowers for unless told: the two Ethos-U targets ExecuTorch's Arm backend ships configurations for.
DEFAULT_ACCELERATORS = ("ethos-u55-128", "ethos-u85-256")
WHY_ACCELERATORS = ("the verdict prices skipping in Vela's cycles on the two Ethos-U targets ExecuTorch's Arm "
                    "backend ships configurations for (tosa-int, every other verb's default, has no cost)")
SKIPPED = "state-aware, marker on each site feeding state"  # the variant that skips the carried-state sites

# Figures pull requests published, set beside ours (from their descriptions; another engine, another recording).
PUBLISHED = (
    Published(target="sample:silero_vad", source="PR #22172", url="https://github.com/pytorch/executorch/pull/22172",
              engine="Arm's Corstone-320 FVP with Ethos-U85-256, on the PR's own recording (its description)", frames=79,
              max_abs=0.1568, mean_abs=0.018459, threshold=0.55, decisions_changed=0),
)
ORDER = (UPSTREAM, STRUCTURAL, MARKER, MARKER_ON_PROGRAM, STRICT)  # the rows of a flow, in a reply's order
_RISKS = (RiskCode.FEEDS_CARRIED_STATE.value[0], RiskCode.FEEDS_RECURRENT_OUTPUT.value[0])


def verdict(targets: Any, *, accelerators: Iterable[str | Accelerator] = DEFAULT_ACCELERATORS,
            steps: int | None = None, quantization: str | None = None, pr_pass_file: str | Path | None = None,
            markers_reach: bool = True, workers: int | None = None, fp: bool = True,
            progress: Progress | None = None) -> Verdict:
    """Measure what PR #21234's guard does and costs in the installed executorch, on each of ``targets``.

    Returns a ``Verdict``: ``answer()`` in words, ``to_markdown()`` the reply for the pull request. A figure a pull
    request published for a network is set beside ours with its own frame count, never mixed with ours.

    Args:
        targets: one target or a list; each anything ``analyze`` takes by name (``sample:NAME``, ``file.py:Class``,
            ``model.pt2``, ``timm:NAME@SIZE``, a module with its own ``example_inputs()``) or a pair
            ``(target, example_inputs)`` (inputs may be an ``inspector.Stream``).
        accelerators: the INT flows to measure; default ``DEFAULT_ACCELERATORS`` (``WHY_ACCELERATORS``).
        steps: every variant's steps; default: as every verb's (a stream's length, else 20 for a model that
            carries state, else 1).
        quantization: what every INT variant runs under (``inspector.quantizations``); default ``a8w8``.
        pr_pass_file: PR #21234's own ``fold_scalar_mul_into_conv_pass.py`` (its ``arm_pass_utils.py`` beside
            it): the structural-check and marker columns then run the PR's code instead of this project's
            re-implementation (the rule ``state-aware``); every column says which produced it.
        markers_reach: also measure, on the first network with a site feeding state, where a marker set by a
            model author reaches the pass in each flow (``marker_reach``); default True.
        workers: as ``compare``'s.
        fp: also read the FP flow (``tosa-fp``) where the backend lowers the model; default True.
        progress: ``progress(phase, fraction)``.
    """
    chips = _chips(accelerators)
    chosen = quantizations.get(DEFAULT if quantization is None else quantization)  # unknown: one line, before work
    if pr_pass_file is not None:
        guard = pr_rule(pr_pass_file, commit=Path(pr_pass_file).name)  # a label without the local path
        settings = _Settings(quantization=chosen.name, guard=guard.name, guard_label=guard.source)
    else:
        settings = _Settings(quantization=chosen.name, guard="state-aware", guard_label=REIMPLEMENTED)
    items = _items(targets)
    networks = []
    for n, (target, inputs) in enumerate(items):
        def report(phase: str, fraction: float, n=n) -> None:
            if progress is not None:
                progress(phase, (n + fraction) / len(items))

        networks.append(_network(target, inputs, chips, steps, workers, fp, report, settings))
    reach = ()
    stateful = next((n for n in networks if n.state_sites), None)
    if markers_reach and stateful is not None:
        if progress is not None:
            progress(f"{stateful.target}: where a marker reaches the pass", 1.0)
        item = next(item for item in items if _load.load(*item).name == stateful.target)
        reach = marker_reach(_load.load(*item), sites=stateful.state_sites,
                             placements=(TOP_PROGRAM, CUSTOM_PROGRAM))
    if progress is not None:
        progress("done", 1.0)
    return Verdict(networks=tuple(networks), accelerators=tuple(c.name for c in chips), versions=_versions(),
                   quantization=chosen.name,
                   pointers=_pipeline.fold_pass_registrations(), guard=settings.guard_label, marker_reach=reach)


# What produced the structural-check and marker columns when no PR pass file is given.
REIMPLEMENTED = "this project's re-implementation of PR #21234's guard (the rule state-aware)"


@dataclass(frozen=True, kw_only=True)
class _Settings:
    """What every network of one verdict runs under, resolved once."""

    quantization: str  # the quantization's registered name
    guard: str  # the rule that runs PR #21234's guard: state-aware, or the PR's own pass file's rule
    guard_label: str  # what produced those columns, in words


def _chips(accelerators) -> list[Accelerator]:
    if isinstance(accelerators, (str, Accelerator)):
        accelerators = [a.strip() for a in accelerators.split(",") if a.strip()] if isinstance(accelerators, str) \
            else [accelerators]
    chips = []
    for a in accelerators:
        chip = accelerator_of(a)
        if not _stages.quantized(chip):
            raise InspectorError(f"{chip.name} is the FP flow, which every verdict reads besides the INT accelerators "
                                 "(fp=False or --no-fp leaves it out); give INT accelerators: "
                                 + ", ".join(accelerators_names()))
        if chip not in chips:
            chips.append(chip)
    if not chips:
        raise InspectorError("no accelerator to measure; give at least one of: " + ", ".join(accelerators_names()))
    return chips


def accelerators_names() -> list[str]:
    """The accelerators whose INT flow a verdict can measure (every registered one that quantizes)."""
    return [n for n in accelerators.names() if _stages.quantized(accelerators.get(n))]


def _items(targets) -> list[tuple[Any, Any]]:
    if isinstance(targets, (str, bytes)) or not isinstance(targets, (list, tuple)) or _is_pair(targets):
        targets = [targets]
    items = [t if _is_pair(t) else (t, None) for t in targets]
    if not items:
        raise InspectorError("no target to measure; give a sample:NAME, a file.py:Class, a .pt2 or a timm:NAME@SIZE")
    return items


def _is_pair(item) -> bool:
    """``(target, example_inputs)``: a target and what it is fed (a stream, a tensor, a tuple of tensors or a list
    of input tuples), not two targets."""
    return isinstance(item, tuple) and len(item) == 2 and _are_inputs(item[1])


def _are_inputs(value) -> bool:
    if _streams.is_stream(value) or isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (tuple, list)) and bool(value) and all(
        isinstance(x, torch.Tensor) or (isinstance(x, (tuple, list)) and _are_inputs(x)) for x in value)


def published_for(name: str) -> Published | None:
    """The figures a pull request published for the network ``name`` (None: none)."""
    return next((p for p in PUBLISHED if p.target == name), None)


def _network(target, inputs, chips, steps, workers, fp, report, settings: _Settings) -> Network:
    quantization = settings.quantization
    loaded = _load.load(target, inputs)
    published = published_for(loaded.name)
    n_steps = _stages.steps_for(loaded, steps)  # every verb's one default; a published figure keeps its own frames
    wanted = _measures_for(loaded, published)
    tfa = analyze(loaded, stage="tfa", accelerator=chips[0])
    sites = tuple(s.id for s in tfa.sites)
    state_sites = tuple(s.id for s in tfa.sites if s.state_path or set(s.risk_codes) & set(_RISKS))
    flows, ons = [], []
    calibration, stream, reference = "", "", None
    variants = {UPSTREAM: ("upstream", ()), STRUCTURAL: (settings.guard, ())}
    if state_sites:
        variants[MARKER] = (settings.guard, state_sites)
    variants[STRICT] = ("state-aware-strict", ())
    for i, chip in enumerate(chips):
        def step(phase: str, fraction: float, i=i, chip=chip) -> None:
            report(f"{loaded.name} on {chip.name}: {phase}", (i + fraction) / (len(chips) + 1))

        comparison = compare(loaded, variants=list(variants.values()), steps=n_steps, accelerator=chip, metrics=wanted,
                             workers=workers, progress=step, quantization=quantization)
        calibration, stream, reference = comparison.calibration, comparison.stream, comparison.reference
        results = dict(zip(variants, comparison.results))
        on_chip = tfa if i == 0 else analyze(loaded, stage="tfa", accelerator=chip)
        flows.append(_int_flow(loaded, chip, on_chip, results, variants, settings))
        ons.append(_on(loaded, chip, n_steps, results, wanted, quantization))
    if fp:
        report(f"{loaded.name}: the FP flow", len(chips) / (len(chips) + 1))
        flows.append(_fp_flow(loaded, sites, state_sites, settings))
    return Network(target=loaded.name, steps=n_steps, calibration=calibration, stream=stream, sites=sites,
                   state_sites=state_sites, flows=tuple(flows), accelerators=tuple(ons),
                   float_task=_float_task(loaded, reference, wanted), published=published)


def _measures_for(loaded: _load.Target, published: Published | None) -> list[str]:
    """The built-ins, the task's own, and the decision measure a published figure counts at."""
    names = [m.name for m in _metrics() if m.builtin and m.default and m.kind == "output"]
    names += list(loaded.task_metrics)
    if published is not None:
        names.append(published.measure)
    return list(dict.fromkeys(names))


# ---------------------------------------------------------------- the INT flow


def _folded(result: VariantResult) -> tuple[str, ...]:
    return tuple(s.site_id for s in result.sites if s.folded_at is not None)


def _decision(key: str, result: VariantResult, decided, how: str) -> Decision:
    """``result``'s folds (the real flow) with the reasons ``decided`` (the analysis of the same rule and markers at
    tfa) gives each site it did not fold."""
    folded = _folded(result)
    reasons = {s.id: s.reason_codes for s in decided.sites}
    return Decision(key=key, rule=result.variant.label, folded=folded,
                    skipped=tuple((s.id, reasons.get(s.id, ())) for s in decided.sites if s.id not in folded), how=how)


def _int_flow(loaded, chip: Accelerator, tfa, results: dict, variants: dict, settings: _Settings) -> Flow:
    upstream = results[UPSTREAM]
    if upstream.error is not None:
        return Flow(name="INT", accelerator=chip.name, spec=upstream.spec, folds={"tfa": 0, "lowering": 0},
                    calibrated=True, error=upstream.error)
    how = f"the real {chip.name} flow (prepare_pt2e, calibrate, convert, to_edge_transform_and_lower)"
    decisions = [_decision(key, r, tfa.with_rule(variants[key][0]).with_markers(variants[key][1]),
                           f"{how}; {settings.guard_label}" if key in (STRUCTURAL, MARKER) else how)
                 for key, r in results.items() if r.error is None]
    notes = [f"{r.variant.label}: {r.error}" for r in results.values() if r.error is not None]
    state_sites = variants.get(MARKER, ("", ()))[1]
    if state_sites:
        try:
            folded = _marked_program_tfa(loaded, chip, state_sites, settings)
            decisions.append(Decision(key=MARKER_ON_PROGRAM, rule=settings.guard, folded=folded,
                                      skipped=tuple((s.id, ()) for s in tfa.sites if s.id not in folded),
                                      how=f"prepare_pt2e with {chip.name}'s quantizer, the marker set in the "
                                          "exported program's top-level node meta"))
        except InspectorError as exc:
            notes.append(f"the marker set on the exported program: {exc}")
    decisions.sort(key=lambda d: ORDER.index(d.key))
    return Flow(name="INT", accelerator=chip.name, spec=upstream.spec, folds=dict(upstream.folds), calibrated=True,
                decisions=tuple(decisions), notes=tuple(notes))


def _marked_mul_names(loaded: _load.Target, state_sites) -> list[str]:
    """The exported program's mul node of each site feeding state (site ids are the same at every stage)."""
    aten = analyze(loaded, stage="aten")
    names = [s.mul for s in aten.sites if s.id in state_sites]
    if not names:
        raise InspectorError(f"none of the sites {listing(state_sites)} is a site of the exported program")
    return names


def _marked_program(loaded: _load.Target, state_sites):
    """A private copy of the exported program with the PR's marker in the top-level meta of each site's mul."""
    program = copy.deepcopy(loaded.exported)
    names = set(_marked_mul_names(loaded, state_sites))
    for node in program.graph.nodes:
        if node.name in names:
            node.meta[_graph.CARRIED_STATE_KEY] = True
    return program


def _marked_program_tfa(loaded: _load.Target, chip: Accelerator, state_sites, settings: _Settings) -> tuple[str, ...]:
    """The sites ``state-aware`` lets fold at tfa when the marker is set on the exported program: the real
    ``prepare_pt2e`` with the accelerator's quantizer (nothing is lowered)."""
    program = _marked_program(loaded, state_sites)
    plan = _stale.plan_for(loaded, chip, settings.quantization)
    log = FoldLog()
    ArmFlow(spec=plan.spec, quantizer=plan.quantizer, fold_pass=rule_pass_class(settings.guard, (), log),
            until="prepare", capture_output=False).run_on(program, loaded.inputs)
    return tuple(i for r in log.runs if r.tfa for i in r.folded_ids)


# ---------------------------------------------------------------- the FP flow


def _fp_flow(loaded: _load.Target, sites, state_sites, settings: _Settings) -> Flow:
    spec = TOSA_FP.spec("")
    how = "the installed pass on the graph the FP flow hands it in to_edge_transform_and_lower"
    try:
        runs = [(UPSTREAM, "upstream", ()), (STRUCTURAL, settings.guard, ())]
        found = analyze(loaded, stage="lowering", accelerator=TOSA_FP)
        present = [s for s in state_sites if s in {x.id for x in found.sites}]
        if present:
            runs.append((MARKER, settings.guard, tuple(present)))
        runs.append((STRICT, "state-aware-strict", ()))
        decisions = []
        for key, rule, markers in runs:
            a = found.with_rule(rule).with_markers(markers) if (rule, markers) != ("upstream", ()) else found
            decisions.append(Decision(key=key, rule=rule + (f"+marked({','.join(markers)})" if markers else ""),
                                      folded=tuple(s.id for s in a.folded),
                                      skipped=tuple((s.id, s.reason_codes) for s in a.skipped),
                                      how=f"{how}; {settings.guard_label}" if key in (STRUCTURAL, MARKER) else how))
        notes = [n for n in found.notes if "PR #21234" in n or "earlier" in n]
    except InspectorError as exc:
        return Flow(name="FP", accelerator=TOSA_FP.name, spec=spec, folds={"tfa": 0, "lowering": 0}, calibrated=False,
                    error=f"the FP flow could not be read: {first_line(exc)}")
    if present:
        try:
            folded = _marked_program_fp(loaded, state_sites, settings)
            decisions.append(Decision(key=MARKER_ON_PROGRAM, rule=settings.guard, folded=folded,
                                      skipped=tuple((s, ()) for s in sites if s not in folded),
                                      how="to_edge_transform_and_lower for TOSA-1.0+FP, the marker set in the "
                                          "exported program's top-level node meta"))
        except InspectorError as exc:
            notes.append(f"the marker set on the exported program: {exc}")
    decisions.sort(key=lambda d: ORDER.index(d.key))
    folds = {"tfa": 0, "lowering": len(decisions[0].folded)}
    return Flow(name="FP", accelerator=TOSA_FP.name, spec=spec, folds=folds, calibrated=False,
                decisions=tuple(decisions), notes=tuple(notes))


def _marked_program_fp(loaded: _load.Target, state_sites, settings: _Settings) -> tuple[str, ...]:
    """The sites ``state-aware`` lets fold in the FP flow's lowering calls when the marker is set on the exported
    program: a whole ``to_edge_transform_and_lower`` for TOSA-1.0+FP."""
    program = _marked_program(loaded, state_sites)
    log = FoldLog()
    ArmFlow(spec=TOSA_FP.spec(""), fold_pass=rule_pass_class(settings.guard, (), log),
            capture_output=False).run_on(program, loaded.inputs)
    return tuple(i for r in log.runs if not r.tfa for i in r.folded_ids)


# ---------------------------------------------------------------- the numbers on one accelerator


def _figures(label: str, r: VariantResult, task: Iterable[str]) -> Figures:
    if r.error is not None:
        return Figures(label=label, folded=(), cycles=None, worst_db=None, last_db=None, max_abs=None, mean_abs=None,
                       error=r.error)
    means = [m.value("mean-abs") for m in r.metrics if m.value("mean-abs") is not None]
    worst = r.worst(max((m.step for m in r.metrics), default=0))
    steps = sorted({m.step for m in r.metrics})
    per_step = tuple(min((m.sqnr_db for m in r.metrics if m.step == s and m.sqnr_db is not None), default=None)
                     for s in steps)  # the worst output's SQNR at each step
    return Figures(label=label, folded=_folded(r), cycles=r.cost.cycles if r.cost is not None else None,
                   worst_db=r.overall("sqnr"),
                   last_db=worst.sqnr_db if worst is not None else None, max_abs=r.overall("max-abs"),
                   mean_abs=sum(means) / len(means) if means else None,
                   task=tuple((name, r.summary(name)) for name in task), step_db=per_step)


def _on(loaded, chip: Accelerator, steps: int, results: dict, wanted, quantization: str) -> OnAccelerator:
    task = [m for m in wanted if _metrics.entry(m).over_steps == "mean"]
    upstream = _figures("upstream", results[UPSTREAM], task)
    skipped = _figures(SKIPPED, results[MARKER], task) if MARKER in results else None
    stale, note, observed, graphs = None, "", (), None
    if results[UPSTREAM].error is None and _folded(results[UPSTREAM]):
        try:
            graphs = _stale.calibrated(loaded, chip, steps, quantization=quantization)
            observed = graphs.sites
            if _stale.swappable(graphs):
                stale = _figures(_stale.LABEL, _stale.folded_after_calibration(loaded, chip, steps, metrics=wanted,
                                                                              quantization=quantization),
                                 task)
            else:
                note = ("no folded conv has an observer of its own output in the INT flow's calibrated graph: no fold "
                        "after calibration to build")
        except InspectorError as exc:
            note = f"{_stale.LABEL}: {exc}"
    elif results[UPSTREAM].error is None:
        note = "upstream folds no site here: there is no fold to apply after calibration"
    return OnAccelerator(accelerator=chip.name, compiler=chip.compiler, upstream=upstream, skipped=skipped,
                         stale=stale, stale_note=note, observed=observed, graphs=graphs)


def _float_task(loaded: _load.Target, reference, wanted) -> tuple[tuple[str, float | None], ...]:
    """The float model's own score on the task's labelled measures (accuracy): the float reference against the
    stream's labels, as the quantized runs are scored."""
    if reference is None or loaded.stream is None or loaded.stream.labels is None:
        return ()
    out = []
    for name in wanted:
        m = _metrics.entry(name)
        if not m.labels:
            continue
        values = [float(m.compute(step[0], step[0], loaded.stream.label(s)))
                  for s, step in enumerate(reference) if loaded.stream.label(s) is not None]
        out.append((name, sum(values) / len(values) if values else None))
    return tuple(out)


def _versions() -> tuple[tuple[str, str], ...]:
    return tuple((name, _executorch.installed_version(name, missing="not installed"))
                 for name in ("executorch", "torch", "torchao", "tosa-tools", "ethos-u-vela")) + (
        ("fold-inspector", __version__),)


__all__ = ["DEFAULT_ACCELERATORS", "WHY_ACCELERATORS", "PUBLISHED", "accelerators_names", "published_for", "verdict"]
