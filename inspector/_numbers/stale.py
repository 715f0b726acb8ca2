"""The graphs the observers calibrate, and a flow executorch 1.5.1 does not run: the fold applied after calibration.

In 1.5.1's INT flow the installed pass folds in transform-for-annotation, before ``prepare_pt2e`` inserts the
observers: calibration sees the folded conv. The mechanism PR #21152 describes ("activation qparams are calibrated
and frozen on the pre-fold conv output; folding ... requantizes the conv output with the stale pre-fold scale")
needs a fold *after* calibration. To show what that mechanism does to the numbers, this module builds it:

- ``calibrated``: the model prepared twice with the accelerator's quantizer, once with the fold off at tfa (the
  unfolded conv output and the mul output each get an observer) and once with the installed fold (``upstream``);
  both calibrated on the comparison's own calibration. Per site (``ObservedSite``): whether its mul is still in the
  graph the observers calibrate, which observer watches the conv's output, and the range each calibrated.
- ``folded_after_calibration``: ``upstream``'s flow (``flow.run_variant``, lowered, run on the TOSA reference model,
  priced by Vela like any variant) in which, between calibration and conversion, each folded conv's output observer
  is replaced by the unfolded graph's conv-output observer: the qparams a fold after calibration would leave stale.
  Sites are matched through their conv node (its name is the same in both preparations; the run's ``FoldLog`` says
  which conv each site's mul follows). ``copy=False`` runs the same flow without the swap: a sanity check that must
  equal ``upstream`` bit for bit. Its label says what it is: ``LABEL``, never a rule a user can pick.

Results are kept in memory and in the result store (``result_store``) under a key of their own: the comparison's
base key (``variant_cache.base_key``), the plan and whether the observers were swapped.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field, replace

import torch
from torch.fx import GraphModule, Node

from .._base.cache import BoundedCache
from .._base.codec import Record
from .._base.errors import InspectorError
from .._decide import stages as _stages
from .._rules.rules import FoldLog, Rule, get_rule
from .._targets import load as _load
from . import compare as _compare, flow as _flow, result_store as _disk
from . import measures as _measures
from .engines import TOSA
from .quantization import DEFAULT, quantizations
from .results import Variant, VariantResult
from .variant_cache import RESULTS, base_key

LABEL = "upstream, folded after calibration (not a 1.5.1 flow)"
# What a result of this flow is labelled with: a rule object of its own (never registered: no picker offers it).
FOLDED_AFTER_CALIBRATION = Rule(
    name="folded-after-calibration",
    help="the installed fold, with each folded conv's output quantized with the qparams its observer calibrated before "
    "the fold (the mechanism PR #21152 describes); executorch 1.5.1 never runs this flow",
    source="this project: a flow executorch 1.5.1 does not run, built to show PR #21152's mechanism")
# Its sanity check: the same flow, no observer swapped (must equal upstream's numbers bit for bit).
UNSWAPPED = Rule(name="folded-after-calibration-unswapped",
                 help="the folded-after-calibration flow without the observer swap: upstream's numbers, computed again",
                 source=FOLDED_AFTER_CALIBRATION.source)
_VERSION = 1  # of what this module computes (a change here is another store entry)

# The calibrated graphs of one target, accelerator and calibration (two prepare + calibrate runs each).
_CALIBRATED = BoundedCache(4, "graphs the observers calibrate")
# The results of the flow above, by its store key (each holds its per-step outputs).
_RESULTS = BoundedCache(8, "folded-after-calibration results")


@dataclass(frozen=True, kw_only=True)
class ObservedSite(Record):
    """One site in the graphs the observers calibrate (upstream's and off's, one INT flow)."""

    site: str  # the site id
    conv: str  # the conv node's name (the same in both preparations)
    mul: str  # the mul node's name (as the tfa fold received it)
    folded: bool  # upstream's tfa fold removed the mul before the observers were inserted
    observer: str | None  # the observer of the conv's output in upstream's graph (None: the conv has none of its own)
    folded_range: tuple[float, float] | None  # (min, max) that observer calibrated: the folded conv's output
    unfolded_range: tuple[float, float] | None  # (min, max) off's conv-output observer calibrated: the pre-fold range
    unfolded_mul_range: tuple[float, float] | None  # (min, max) of off's mul-output observer (the scaled range)


@dataclass(frozen=True, kw_only=True)
class Calibrated:
    """The graphs one INT flow's observers calibrate: with the installed fold (``upstream``) and without (``off``)."""

    accelerator: str  # whose quantizer prepared them
    upstream: GraphModule = field(repr=False)  # prepared under the installed fold, calibrated
    off: GraphModule = field(repr=False)  # prepared with the fold off, calibrated
    sites: tuple[ObservedSite, ...]  # every site of the tfa graph, in order

    def site(self, site_id: str) -> ObservedSite:
        for s in self.sites:
            if s.site == site_id:
                return s
        raise InspectorError(f"no site {site_id!r} in the calibrated graph; sites: "
                             f"{', '.join(s.site for s in self.sites) or 'none'}")


def plan_for(target: _load.Target, accelerator, quantization=None):
    """How ``upstream`` quantizes ``target`` for ``accelerator`` under ``quantization`` (a name or a registered
    quantization; default ``a8w8``), no override."""
    chosen = quantizations.get(DEFAULT if quantization is None else quantization)
    return _compare.plan_of(target, Variant(rule=get_rule("upstream")), chosen, accelerator)


def _prepared(target: _load.Target, rule: str, plan, calibration: _flow.Calibration):
    """``target`` prepared with ``plan``'s quantizer under ``rule``'s fold, calibrated: (graph, the tfa FoldRun).
    ExecuTorch's Arm flow (``_doors.arm_flow``) up to calibration."""
    log = FoldLog()

    def calibrate(prepared):
        with _one_thread():
            _flow.calibrate(prepared, calibration, target)

    flow = replace(_flow.arm_flow(target, None, None, plan, log=log, fold_rule=rule), calibrate=calibrate,
                   until="calibrate", capture_output=False)
    prepared = flow.run_on(target.exported, target.inputs).prepared
    tfa = next((r for r in log.runs if r.tfa), None)
    if tfa is None:
        raise InspectorError(f"the fold pass never ran in transform-for-annotation for {target.name} on "
                             f"{plan.accelerator.name}: no INT flow's observers to read")
    return prepared, tfa


@contextlib.contextmanager
def _one_thread():
    """This thread runs torch's ops on one thread in this scope. Calibration is thousands of tiny ops, and on a busy
    2-core machine OpenMP's waiting threads made it 30 times slower (3.7 s against 0.11 s for stateful_conv_mul's
    160 calls, as a worker process runs it). The thread count is per calling thread under OpenMP: other threads keep
    theirs."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def observers_of(graph: GraphModule, node_name: str) -> list[Node]:
    """The observer calls (``call_module`` nodes) that watch ``node_name``'s output in a prepared graph."""
    node = next((n for n in graph.graph.nodes if n.name == node_name), None)
    if node is None:
        return []
    return [u for u in node.users if u.op == "call_module" and _is_observer(graph.get_submodule(u.target))]


def _is_observer(module) -> bool:
    # torchao's observers and fake-quantizers both compute qparams; a quantizer's shared spec reuses one object
    return callable(getattr(module, "calculate_qparams", None))


def _range(graph: GraphModule, observer: Node | None) -> tuple[float, float] | None:
    if observer is None:
        return None
    module = graph.get_submodule(observer.target)
    low, high = getattr(module, "min_val", None), getattr(module, "max_val", None)
    if not isinstance(low, torch.Tensor) or low.numel() != 1 or not torch.isfinite(low).all():
        return None
    return float(low), float(high)


def calibrated(target, accelerator, steps: int, calibration=None, quantization=None) -> Calibrated:
    """The graphs ``accelerator``'s INT flow calibrates for ``target`` (with and without the installed fold), on the
    calibration ``compare`` would use for ``steps`` steps (or ``calibration``), under ``quantization`` (default
    ``a8w8``)."""
    target = _load.load(target)
    plan = plan_for(target, accelerator, quantization)
    chosen = _flow.choose_calibration(target, calibration, steps)
    key = base_key(target, chosen, steps, TOSA) + (plan.identity,)
    return _CALIBRATED.get_or_compute(key, lambda: _calibrate_both(target, plan, chosen))


def _calibrate_both(target: _load.Target, plan, calibration: _flow.Calibration) -> Calibrated:
    folded, folded_run = _prepared(target, "upstream", plan, calibration)
    unfolded, unfolded_run = _prepared(target, "off", plan, calibration)
    sites = []
    for mul, site_id in unfolded_run.site_ids.items():
        conv = unfolded_run.convs.get(mul, "")
        watching = observers_of(folded, conv)
        before = observers_of(unfolded, conv)
        after_mul = observers_of(unfolded, mul)
        sites.append(ObservedSite(
            site=site_id, conv=conv, mul=mul, folded=mul in folded_run.folded,
            observer=watching[0].target if watching else None,
            folded_range=_range(folded, watching[0] if watching else None),
            unfolded_range=_range(unfolded, before[0] if before else None),
            unfolded_mul_range=_range(unfolded, after_mul[0] if after_mul else None)))
    return Calibrated(accelerator=plan.accelerator.name, upstream=folded, off=unfolded, sites=tuple(sites))


def _swap(graph: Calibrated, ids: tuple[str, ...]):
    """``between(prepared)``: each listed site's folded-conv output observer replaced by off's conv-output observer
    (a copy: its calibrated state, the pre-fold range)."""
    def between(prepared: GraphModule) -> None:
        for s in graph.sites:
            if s.site not in ids:
                continue
            stale = observers_of(graph.off, s.conv)
            watching = observers_of(prepared, s.conv)
            if not stale or not watching:
                raise InspectorError(f"site {s.site}: no observer of {s.conv}'s output to swap")
            for node in watching:
                # The attribute, not the object: a shared observer (the state it writes into) keeps its own range.
                setattr(prepared, node.target, copy.deepcopy(graph.off.get_submodule(stale[0].target)))
    return between


def swappable(graph: Calibrated) -> tuple[str, ...]:
    """The sites whose fold after calibration this module can build: folded by upstream at tfa, with an observer
    of the folded conv's output in upstream's graph and one of the unfolded conv's output in off's."""
    return tuple(s.site for s in graph.sites if s.folded and s.observer is not None and s.unfolded_range is not None)


def folded_after_calibration(target, accelerator, steps: int, *, copy_observers: bool = True, metrics=None,
                             progress=None, quantization=None) -> VariantResult:
    """``upstream``'s flow for ``accelerator`` with the fold applied after calibration (``LABEL``: executorch 1.5.1
    never runs it): each folded conv's output keeps the qparams calibrated before the fold. Lowered, run on the TOSA
    reference model and priced by Vela like any variant of ``compare`` (the same calibration and float reference),
    measured by ``metrics`` (default: the built-ins and the task's own). ``copy_observers=False``: the same flow
    without the swap (equals ``upstream``). ``quantization``: as ``compare``'s (default ``a8w8``). One line if no
    site can be swapped."""
    target = _load.load(target)
    plan = plan_for(target, accelerator, quantization)
    steps = _stages.steps_for(target, steps)
    chosen = _flow.choose_calibration(target, None, steps)
    graph = calibrated(target, accelerator, steps, quantization=quantization)
    ids = swappable(graph)
    if not ids:
        raise InspectorError(f"{target.name} on {plan.accelerator.name}: no site folds at tfa with an observer of its "
                             "conv's output, so there is no fold to apply after calibration")
    rule = FOLDED_AFTER_CALIBRATION if copy_observers else UNSWAPPED
    wanted = _measures.wanted(metrics, task=target.task_metrics)
    base = base_key(target, chosen, steps, TOSA)
    key = base + ("folded-after-calibration", _VERSION, copy_observers, ids, plan.identity)
    result = _RESULTS.get(key)
    if result is None and (result := _disk.load_result(key)) is not None:
        result = replace(result, variant=Variant(rule=rule))
        _RESULTS.put(key, result)
    reference = RESULTS.reference(base)
    if reference is None:
        _flow.check_recurrent(target)
        reference = _flow.float_reference(target, steps)
        RESULTS.put_reference(base, reference)
    if result is None:
        report = (lambda phase, fraction: progress(f"{LABEL}: {phase}", fraction)) if progress else \
            (lambda phase, fraction: None)
        with _one_thread():  # as a worker process runs a variant
            result, _ = _flow.run_variant(target, Variant(rule=rule), chosen, plan, steps, reference, report,
                                          between=_swap(graph, ids) if copy_observers else _unchanged)
        _RESULTS.put(key, result)
        _disk.keep_result(key, result)
    return _compare.measured(result, reference, wanted, target.stream)


def _unchanged(prepared: GraphModule) -> None:
    """The sanity check's ``between``: nothing swapped (the flow must then equal upstream's)."""


__all__ = ["Calibrated", "FOLDED_AFTER_CALIBRATION", "LABEL", "ObservedSite", "calibrated", "folded_after_calibration",
           "observers_of", "plan_for", "swappable"]
