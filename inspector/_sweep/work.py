"""What a sweep's workers run: one model's analysis, and one variant of one model.

Both are module-level functions of ``(task, report)`` (task kinds ``sweep-model`` and ``sweep-variant``,
which the pool runs by kind) taking and
returning plain picklable data (a variant is a ``tasks.VariantTask``, as compare's are; a row a
``records.SweepRow``), so the same call runs in a spawned process, a Ray task or this
process. A model is loaded and exported once, in ``prepare_model``; the variants get its exported
program as a ``torch.export.save`` archive, loaded back through the safe ``.pt2`` loader, with the
float reference and the calibration computed beside it, so every executor computes exactly the
same numbers.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path
import time

from .._base import store as _store
from .._numbers import flow as _flow
from .._targets import load as _load
from .._decide import stages as _stages
from .._decide.decide import decider_of
from .._workers.kinds import task_kind
from .._numbers.compare import measured, plan_of
from .._numbers.measures import wanted
from .._numbers.tasks import VariantTask, model_run, run_in_worker, worker_target
from .._numbers.quantization import quantization_of
from .._numbers.engines import TOSA
from .._numbers.variant_cache import base_key, predicted_decisions
from .._base.errors import InspectorError, describe
from .records import SweepRow
from .._base.hashing import digest


MODEL_TASK, VARIANT_TASK = "sweep-model", "sweep-variant"


def row_of(label: str, stage: str, rule: str, analysis, seconds: float) -> SweepRow:
    """One (model, stage, rule) row of the sweep: the sites and what the rule (named ``rule``) decided at each."""
    return SweepRow(
        target=label, stage=stage, rule=rule, sites=len(analysis.sites),
        folded=tuple(s.id for s in analysis.sites if s.folded),
        skipped=tuple(s.id for s in analysis.sites if not s.folded),
        reasons={s.id: tuple(s.reason_codes) for s in analysis.sites if not s.folded},
        where={s.id: {"module": s.module_path, "location": s.location, "mul": s.mul} for s in analysis.sites},
        seconds=round(seconds, 4),
    )


@task_kind(MODEL_TASK)
def prepare_model(payload: dict, report) -> dict:
    """Load and export one model, decide every (stage, rule) row asked for, and, when variants are to
    be compared, everything they need: the program archive, the calibration, the float reference,
    and the fold decisions each variant leads to (variants with equal decisions are run once).
    In the result store the sweep names (``payload["store"]``), whatever this worker's environment says."""
    with _store.using(payload["store"]):
        return _prepare_model(payload, report)


def _prepare_model(payload: dict, report) -> dict:
    spec = payload["spec"]
    label = spec["label"]
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    inputs = _load.random_inputs(spec["input_shapes"], f"input_shape of {label}") if spec["input_shapes"] else None
    target = _load.load(spec["target"], inputs)
    timings["load"] = time.perf_counter() - t0
    rows = []
    need = [tuple(pair) for pair in payload["need"]]
    stages = list(dict.fromkeys(stage for stage, _ in need))
    for n, stage in enumerate(stages):
        t1 = time.perf_counter()
        try:
            decider = decider_of(target, stage)
        except InspectorError as exc:
            rows += [SweepRow(target=label, stage=stage, rule=rule.name, error=str(exc)) for s,
                     rule in need if s == stage]
            continue
        finally:
            timings[f"stage {stage}"] = time.perf_counter() - t1
        for s, rule in need:  # each rule travelled as what rebuilds it here (Rule.__reduce__)
            if s != stage:
                continue
            t2 = time.perf_counter()
            try:
                analysis = decider.decide(rule, ())
            except InspectorError as exc:
                rows.append(SweepRow(target=label, stage=stage, rule=rule.name, error=str(exc)))
                continue
            seconds = time.perf_counter() - t2
            timings[f"decide {stage}"] = timings.get(f"decide {stage}", 0.0) + seconds
            rows.append(row_of(label, stage, rule.name, analysis, seconds))
        report("analysed", (n + 1) / (len(stages) + bool(payload["compare"])))
    out = {"name": target.name, "fingerprint": target.key, "rows": rows, "timings": timings, "compare": None,
           "compare_error": None, "sources": user_sources()}
    if payload["compare"]:
        try:
            out["compare"] = _for_variants(target, payload["compare"], timings)
        except InspectorError as exc:
            out["compare_error"] = str(exc)
    return out


def user_sources() -> dict[str, str]:
    """The Python files of this process's modules outside the installed stack and the inspector, by
    digest: the user's code a model was built from (its file and the helpers that file imports; more
    at worst). A sweep trusts a model's record in the store only while they are unchanged."""

    installed = {Path(p).resolve() for p in (*sysconfig.get_paths().values(), sys.prefix, sys.base_prefix)}
    inspector_folder = Path(__file__).resolve().parent.parent
    out = {}
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str) or not file.endswith(".py"):
            continue
        path = Path(file).resolve()
        if path.is_relative_to(inspector_folder) or any(path.is_relative_to(p) for p in installed):
            continue
        try:
            out[str(path)] = digest(path.read_bytes())
        except OSError:
            continue
    return out


def _for_variants(target, asked: dict, timings: dict) -> dict:
    t0 = time.perf_counter()
    steps = _stages.steps_for(target, asked["steps"])  # None: the model's own default, as every verb's
    _flow.check_recurrent(target)
    calibrated = _flow.choose_calibration(target, None, steps)
    reference = _flow.float_reference(target, steps)
    engine = asked.get("engine", TOSA.name)
    base = base_key(target, calibrated, steps, engine)
    timings["float reference"] = time.perf_counter() - t0
    # The fold decisions each variant leads to, from the real pass on the tfa graph the quantizer
    # sees (a rule with its own pass class may fold otherwise: it is its own group).
    t1 = time.perf_counter()
    decisions = {}
    try:
        for key, (variant, accelerator) in asked["variants"].items():
            plan = plan_of(target, variant, quantization_of(None), accelerator)
            if plan.plain and variant.rule.pass_class is None:
                _stages.tfa_graph_for(target, plan.tfa_key, plan.quantizer)  # the accelerator's quantizer's
                # the same decisions on two accelerators are two computations: the accelerator is in the group key
                decisions[key] = (accelerator.identity, predicted_decisions(target, variant, plan))
    except InspectorError:
        decisions = {}  # no prediction: every variant runs
    timings["predict"] = time.perf_counter() - t1
    try:
        run = model_run(target, calibrated, steps, reference, base, engine)
    except Exception as exc:
        raise InspectorError(f"torch.export.save cannot write {target.name}'s program, so no worker can run it: "
                             f"{describe(exc)}") from exc
    return {"run": run, "decisions": decisions, "nodes": len(target.exported.graph.nodes), "steps": steps}


@task_kind(VARIANT_TASK)
def run_variant(task: VariantTask, report) -> dict:
    """One variant of one model on the TOSA INT reference model, from the prepared program (the same
    worker body as compare's: ``tasks.run_in_worker``)."""
    variant = task.variant
    target = worker_target(task.run.model)
    plan = task.plan or plan_of(target, variant, quantization_of(None), task.accelerator)
    result, _, cached = run_in_worker(task.run, variant, plan, report)
    if result.error is None and target.task_metrics:  # the task's own numbers (accuracy on labelled frames, ...)
        result = measured(result, task.run.reference, wanted(None, task=target.task_metrics), target.stream)
    return {**summary_of(result, target.task_metrics), "cached": cached, **({"timings": {}} if cached else {})}


def summary_of(result, task: tuple[str, ...] = ()) -> dict:
    """A variant's numbers as the sweep keeps them (JSON-ready; no tensors); ``task``: the task's own measurements
    the result holds, each over the run (the worst output's)."""
    data = result.to_dict()
    finite = result.metrics
    last = max((m.step for m in finite), default=0)
    outputs = sorted({m.output for m in finite})
    per_output = []
    for o in outputs:
        mine = [m for m in finite if m.output == o]
        worst = min(mine, key=lambda m: m.sqnr_db)
        per_output.append({"output": o, "sqnr_db_last": next(m.sqnr_db for m in mine if m.step == last),
                           "sqnr_db_worst": worst.sqnr_db, "worst_step": worst.step,
                           "max_abs_error": max(m.max_abs_error for m in mine),
                           "sqnr_db_steps": [m.sqnr_db for m in sorted(mine, key=lambda m: m.step)]})
    return {
        "sqnr_db_last": min((p["sqnr_db_last"] for p in per_output), default=float("nan")),
        "sqnr_db_worst": min((p["sqnr_db_worst"] for p in per_output), default=float("nan")),
        "worst_step": min(per_output, key=lambda p: p["sqnr_db_worst"])["worst_step"] if per_output else None,
        "max_abs_error": max((p["max_abs_error"] for p in per_output), default=float("nan")),
        "last_step": last, "outputs": per_output, "folds": data["folds"],
        "folded": sorted(s.site_id for s in result.sites if s.folded_at),
        "not_delegated": len(result.not_delegated), "timings": data["timings"],
        "quantization": result.quantization, "tosa_spec": result.spec, "engine": result.engine.name,
        "accelerator": result.accelerator.name, "cycles": result.cost.cycles if result.cost is not None else None,
        "npu_ops": result.cost.npu_ops if result.cost is not None else None,
        "compiler": result.cost.compiler if result.cost is not None else None,
        "measures": {name: result.overall(name) for name in task if name in result.measured_names},
    }
