"""``sweep``: a rule change measured over many models, as one table.

The question a reviewer of a fold rule asks is not about one model: *which sites, in which
models, does this rule change, and what does that do to the quantized numbers?* ``sweep`` answers
it. For every model (built-in samples, ``file.py:Class``, ``.pt2`` files, or a TOML file listing
them) it decides every site at every stage under every rule, finds the sites whose decision
differs between the rules, and (with ``steps``) runs each rule's variant on the TOSA INT
reference model.

How it runs:

- one task per model (load, export, stage graphs, decisions; and for comparisons the program
  archive, the calibration and the float reference), then one task per (model, variant), on a
  pool of worker processes (``executor="local"``) or as Ray tasks (``executor="ray"``): the same
  tasks and the same numbers on both, bit for bit. Variants that lead to the same fold decisions
  on a model (the real pass, on the tfa graph the quantizer sees) are run once.
- every result is kept in the result store as it finishes (``out=``: a store in that folder, which
  then also keeps the variants' compare results; else the store in use, ``FOLD_INSPECTOR_STORE``),
  keyed by what determines it (the model's content and fingerprint, the files it was built from,
  the rule's identity: a user's rule by its source; the engine). Running the same sweep again,
  in any process, reads what is done; Ctrl-C stops with everything finished kept; a worker that
  dies (a crash in native code, an out-of-memory kill) loses only its own row, which says why.
- one model that fails to load, export or lower is one row with its one-line error; the sweep
  goes on.
"""

from __future__ import annotations

from dataclasses import replace
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Sequence

from .._workers import pool as _pool
from .._base import store as _store
from .._base.limits import check_steps
from .._rules.rules import Rule, get_rule, register
from .._numbers.results import Variant
from .._numbers.tasks import VariantTask, group_by_decisions
from .._base.errors import InspectorError, listing, quoted
from .models import ModelSpec, models_from, read_models_toml
from .records import NUMBERS_STAGE, UNCHANGED_DB, Progress, SweepBar, SweepModel, SweepRow, SweepVariant
from .results import FORMATS, Sweep
from .store import MODEL, ROW, VARIANT, Records, unchanged, variant_key
from .work import MODEL_TASK, VARIANT_TASK
from .._numbers.compare import variants_of, workers_of
from .._numbers.engines import TOSA, Engine, engine_of
from .._decide import stages as _stages
from .._decide.stages import STAGES, check_stage
from .._cost.accelerators import TOSA_INT, Accelerator, accelerator_of
from .._advise.advise import advise
from .._targets import load as _load


def sweep(
    models: Iterable[Any] = (),
    *,
    rules: Sequence[Any] = ("upstream", "state-aware"),
    stages: Sequence[str] = ("tfa",),
    compare: bool = False,
    steps: int | None = None,
    variants: Sequence[Any] | None = None,
    workers: int | None = None,
    executor: str = "local",
    out: str | os.PathLike | None = None,
    samples: bool = False,
    exclude: Iterable[str] = (),
    input_shapes: Sequence[Sequence[int]] | None = None,
    ray_address: str | None = None,
    progress: Progress | None = None,
    engine: str | Engine = TOSA,
    confirm: bool = False,
    accelerators: Sequence[Any] = (TOSA_INT,),
    advise_db: float | None = None,
) -> Sweep:
    """Decide every site of every model at every stage under every rule; with ``compare``, also run each rule
    (or each of ``variants``) on the TOSA INT reference model.

    Every result is kept in the result store as it finishes and read back by the next sweep. ``confirm`` (with
    the simulation) runs on the TOSA reference the variants of every model whose decisions at tfa differ between
    the rules, where a reviewer of a rule change looks: their rows are marked ``"confirmed"``.

    Args:
        models: ``sample:NAME``, ``path/to/file.py:Class``, ``model.pt2``, a ``.toml`` list, or ``ModelSpec``.
        rules: rule names, ``path/to/rules.py:NAME`` or ``Rule`` objects, the first the baseline; default
            ``("upstream", "state-aware")``.
        stages: the stages to decide at; default ``("tfa",)``.
        compare: also compare each rule's (or each of ``variants``') numbers; implied by ``steps`` and
            ``variants``; default False (decisions only).
        steps: the steps every model's comparison runs; default: each model's own, as every verb's (a stream's
            length, else 20 for a model that carries state, else 1); a model list's ``steps = 0`` never compares
            that model.
        variants: compare these variants instead of one per rule.
        workers: worker processes; default: the cores available.
        executor: ``"local"`` (default: worker processes) or ``"ray"`` (Ray tasks).
        out: the folder of the result store the sweep keeps everything in; default: the store in use
            (``FOLD_INSPECTOR_STORE``, else the platform's cache folder; ``off``: nothing is kept).
        samples: add every built-in sample; default False.
        exclude: drop models by name.
        input_shapes: one example input shape per input, for every model given here without inputs.
        ray_address: a running Ray cluster; default: a local one.
        progress: ``progress(bars)``, one ``SweepBar`` per phase as the work advances.
        engine: ``"tosa"`` (default) or ``"simulation"`` (no lowering; every row and a note say so).
        confirm: with ``engine="simulation"``, confirm on TOSA where the rules decide differently; default False.
        accelerators: what the variants are lowered for, each variant on each; default ``(tosa-int,)``. On an
            Ethos-U a row has Vela's cycles and each changed site what the rule change costs there.
        advise_db: also advise every model on every Ethos-U among ``accelerators`` within this budget of dB
            (``Sweep.advice``).
    """

    t_start = time.perf_counter()
    specs = models_from(models, samples=samples, input_shapes=input_shapes, exclude=exclude)
    asked = _Asked.of(rules=rules, stages=stages, compare=compare, steps=steps, variants=variants, workers=workers,
                      executor=executor, out=out, ray_address=ray_address, progress=progress, engine=engine,
                      confirm=confirm, accelerators=accelerators, t_start=t_start)
    root = _out_folder(out) if out is not None else _store.location()
    npus = [c for c in asked.accelerators if c.costs]
    if advise_db is not None and not npus:
        raise InspectorError("advise_db prices the fold in cycles: give an Ethos-U among the accelerators, e.g. "
                             "accelerators=('ethos-u55-128',) (--accelerators ethos-u55-128)")
    with _store.using(root):  # the sweep's store, for everything it computes here and (by its tasks) in workers
        result = _swept(specs, asked)
        if advise_db is None:
            return result
        return _advised(result, specs, npus, advise_db, asked)


@dataclass(frozen=True, kw_only=True)
class _Asked:
    """What one sweep was asked, resolved once (names to registry objects, numbers checked) and handed down whole."""

    rules: tuple  # the Rule objects, the first the baseline
    stages: tuple[str, ...]  # the stages to decide at
    numbers: bool  # compare the variants on the engine (compare=True, or steps or variants given)
    steps: int | None  # every model's steps (None: each model's own default, ``stages.default_steps``)
    variants: Any  # the variants as given (None: one per rule)
    jobs: tuple  # every (variant, accelerator) to compare (``_Job``)
    workers: int | None  # as given (a confirming sweep is asked the same)
    n_workers: int  # the cores the tasks share
    executor: str  # local or ray
    out: Any  # the store's folder as given
    ray_address: str | None  # a running Ray cluster
    progress: Any  # progress(bars)
    engine: Engine  # what computes the numbers
    confirm: bool  # re-run on TOSA where the rules differ
    accelerators: tuple[Accelerator, ...]  # what the variants are lowered for
    t_start: float  # when the sweep began

    @classmethod
    def of(cls, *, rules, stages, compare, steps, variants, workers, executor, out, ray_address, progress, engine,
           confirm, accelerators, t_start) -> _Asked:
        """Every setting of one sweep resolved and checked, before anything runs."""
        chosen = engine_of(engine)
        rules = _rules(rules)
        stage_list = _stage_list(stages)
        numbers = bool(compare) or steps is not None or variants is not None
        if confirm and (chosen.authority or not numbers or NUMBERS_STAGE not in stage_list):
            raise InspectorError(f"confirm re-runs on the TOSA reference what a simulated sweep compared where the "
                                 f"rules decide differently at {NUMBERS_STAGE}: give engine='simulation', compare=True "
                                 f"and a stage list with {NUMBERS_STAGE} (--engine simulation --compare --stages "
                                 f"{NUMBERS_STAGE} --confirm)")
        if steps is not None:
            check_steps(steps)
        chips = _accelerators(accelerators)
        jobs = [_Job(variant=v, accelerator=chip) for chip in chips
                for v in (variants_of(variants, None) if variants is not None else [Variant(rule=r) for r in rules])]
        if executor not in _pool.EXECUTORS:
            raise InspectorError(f"unknown executor {quoted(executor)}; choose one of: {', '.join(_pool.EXECUTORS)}")
        return cls(rules=tuple(rules), stages=tuple(stage_list), numbers=numbers, steps=steps, variants=variants,
                   jobs=tuple(jobs), workers=workers, n_workers=workers_of(workers), executor=executor, out=out,
                   ray_address=ray_address, progress=progress, engine=chosen, confirm=confirm,
                   accelerators=tuple(chips), t_start=t_start)

    def again(self) -> dict:
        """What a confirming sweep is asked: the same, on the TOSA reference."""
        return dict(rules=self.rules, compare=self.numbers, steps=self.steps, variants=self.variants,
                    workers=self.workers, accelerators=self.accelerators, executor=self.executor, out=self.out,
                    ray_address=self.ray_address, progress=self.progress)


def _advised(result: Sweep, specs, npus, budget, asked: _Asked) -> Sweep:
    """``result`` with every analysed model advised on every Ethos-U (a model whose advice fails: a note)."""
    failed = {m.target for m in result.models if m.error}
    advice, notes = [], list(result.notes)
    for spec in specs:
        if spec.label in failed or spec.steps == 0:
            continue
        inputs = _load.random_inputs(spec.input_shapes, f"input_shape of {spec.label}") if spec.input_shapes else None
        for chip in npus:
            try:
                advice.append(advise(spec.target, example_inputs=inputs, accelerator=chip, budget_db=budget,
                                     steps=spec.steps or asked.steps, workers=asked.workers))
            except InspectorError as exc:
                notes.append(f"no advice for {spec.label} on {chip.name}: {exc}")
    return replace(result, advice=tuple(advice), notes=tuple(notes), seconds=time.perf_counter() - asked.t_start)


def _out_folder(out) -> Path:
    """The folder ``out=`` names, created (a folder that cannot be is one line, not a store silently off)."""
    root = Path(out).expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InspectorError(f"cannot create the results folder {out}: {exc.strerror or exc}") from None
    return root


@dataclass(frozen=True, kw_only=True)
class _Job:
    """One variant of the sweep on one accelerator."""

    variant: Variant
    accelerator: Accelerator

    @property
    def key(self) -> str:
        """What the sweep's tables know it by: the variant's label, and on an NPU the accelerator too."""
        return self.variant.label + (f" on {self.accelerator.name}" if self.accelerator.costs else "")

    @property
    def label(self) -> str:
        return self.variant.label


def _accelerators(accelerators) -> list[Accelerator]:
    """The accelerators a user named (names or ``Accelerator`` objects, "a,b" as on a command line), resolved once."""
    if isinstance(accelerators, (str, Accelerator)):
        accelerators = [a.strip() for a in accelerators.split(",")] if isinstance(accelerators, str) else [accelerators]
    found = {}
    for a in accelerators:
        chip = accelerator_of(a)
        found.setdefault(chip.name, chip)
    if not found:
        raise InspectorError("no accelerator to sweep on; give at least one, e.g. --accelerators tosa-int")
    return list(found.values())


def _swept(specs, asked: _Asked) -> Sweep:
    """The sweep asked of ``sweep``, inside its result store (``_store.using``)."""

    store = Records(_store.store())
    notes = []
    # A rule defined in this process only (no file) cannot travel to a worker (``Rule.__reduce__``).
    local_only = list(dict.fromkeys(r.name for r in (*asked.rules, *(v.variant.rule for v in asked.jobs))
                                    if r.is_users and not r.origin))
    if local_only:
        notes.append(f"rule {listing(local_only)} lives in this process only (not in a file), so every task ran "
                     "here, one after another: save it in a file and name it path/to/rules.py:NAME to use workers")
    state = _State(specs, asked, store)
    state.root = _store.where()  # the folder of the store this sweep is inside (None: off)
    if asked.numbers and asked.engine.note:
        notes.append(asked.engine.note)
    for spec in specs:
        state.plan(spec)
    if state.pending_models:
        with _pool.pool_for(asked.executor, asked.n_workers, asked.ray_address, inline=bool(local_only)) as pool:
            state.run(pool)
    notes += state.notes
    cached = sum(1 for v in state.results.values() if v.cached)
    if cached:
        notes.append(f"{cached} variant{'s' * (cached != 1)} answered by warm worker processes from an earlier sweep "
                     "of the same model, or from the result store (same numbers, no time spent); "
                     "inspector.clear_cache(disk=True) stops those workers and empties the store")
    result = Sweep(rules=tuple(r.name for r in asked.rules), stages=asked.stages, steps=state.steps_run(),
                   models=tuple(state.model_rows()), rows=tuple(state.rows_in_order()),
                   variants=tuple(state.variants_in_order()), executor="inline" if local_only else asked.executor,
                   seconds=time.perf_counter() - asked.t_start, reused=state.reused,
                   out=str(asked.out) if asked.out is not None else None, notes=tuple(notes), engine=asked.engine,
                   accelerators=asked.accelerators)
    if not asked.confirm:
        return result
    return _confirmed(result, specs, asked.again(), asked.t_start)


def _confirmed(simulated: Sweep, specs: list[ModelSpec], asked: dict, t_start: float) -> Sweep:
    """``simulated`` with the variants of every model whose decisions at tfa differ between the rules
    run again on the TOSA reference model: those rows are TOSA's, marked ``confirmed``; the others
    stay the simulation's, marked not confirmed."""

    differ = {c.target for c in simulated.changed if c.stage == NUMBERS_STAGE}
    chosen = [spec for spec in specs if spec.label in differ]
    exact = sweep(chosen, stages=(NUMBERS_STAGE,), engine=TOSA, **asked) if chosen else None
    by_pair = {(v.target, v.variant, v.accelerator): v for v in (exact.variants if exact else ())}
    rows = tuple(replace(by_pair[(v.target, v.variant, v.accelerator)], confirmed=True)
                 if (v.target, v.variant, v.accelerator) in by_pair
                 else replace(v, confirmed=False) for v in simulated.variants)
    n = sum(1 for v in rows if v.confirmed)
    note = (f"{n} of {len(rows)} variants confirmed on the TOSA reference model (those of the models whose "
            f"decisions at {NUMBERS_STAGE} differ between the rules); the others are the simulation's")
    extra = tuple(x for x in (exact.notes if exact else ()) if x not in simulated.notes)
    return replace(simulated, variants=rows, notes=simulated.notes + extra + (note,),
                   seconds=time.perf_counter() - t_start)


def _read(kind, stored: dict | None, key: str, defaults: dict, **given):
    """A record kept in the store (``stored[key]`` over ``defaults``, under the ``given`` fields this
    sweep knows better), or None when there is none or it does not read: computed again, never
    trusted."""
    if stored is None or not isinstance(stored.get(key), dict):
        return None
    try:
        return kind.from_dict({**defaults, **stored[key], **given})
    except InspectorError:
        return None


def _model_record(record: dict) -> bool:
    """A model's record in the store says either its one-line error or its fingerprint (and timings)."""
    if isinstance(record.get("error"), str):
        return True
    return isinstance(record.get("fingerprint"), str) and isinstance(record.get("timings", {}), dict)


def _rules(rules) -> list[Rule]:
    """The rules a user named (names, ``path/to/rules.py:NAME`` or ``Rule`` objects), each resolved here,
    once; the first is the baseline."""
    if isinstance(rules, (str, Rule)):
        rules = [p.strip() for p in rules.split(",")] if isinstance(rules, str) else [rules]
    found: dict[str, Rule] = {}
    for p in rules:
        if isinstance(p, Rule):
            rule = register(p, replace=True)
        elif isinstance(p, str) and p.strip():
            rule = get_rule(p.strip())
        else:
            raise InspectorError(f"cannot read rule {quoted(p)}; give rule names such as upstream,state-aware")
        found.setdefault(rule.name, rule)
    if not found:
        raise InspectorError("no rules to sweep; give at least one, e.g. --rules upstream,state-aware")
    return list(found.values())


def _stage_list(stages) -> list[str]:
    if isinstance(stages, str):
        stages = [s.strip() for s in stages.split(",") if s.strip()]
    out = [check_stage(s) for s in stages]
    if not out:
        raise InspectorError(f"no stages to sweep; give at least one of {', '.join(STAGES)}")
    return list(dict.fromkeys(out))


@dataclass(kw_only=True)
class _Phase:
    name: str
    total: int = 0
    done: int = 0
    running: dict = field(default_factory=dict)  # key -> fraction
    started: float | None = None

    def bar(self) -> SweepBar:
        done = self.done + sum(self.running.values())
        eta = None
        if self.started is not None and done > 0 and self.total:
            elapsed = time.perf_counter() - self.started
            eta = max(0.0, elapsed * (self.total - done) / done)
        return SweepBar(phase=self.name, done=done, total=self.total, eta=eta)


class _State:
    """The scheduler's book: what each model needs, what is done, what is written."""

    def __init__(self, specs, asked: _Asked, store: Records) -> None:
        self.specs, self.rules, self.stages, self.steps = specs, asked.rules, asked.stages, asked.steps
        self.numbers = asked.numbers
        self.rule_of = {r.name: r for r in asked.rules}
        self.variants = asked.jobs
        self.store, self.progress = store, asked.progress
        self.resolved: dict[str, int] = {}  # label -> the steps its model task resolved (its default unless given)
        self.models: dict[str, SweepModel] = {}  # label -> model record
        self.rows: dict[tuple, SweepRow] = {}  # (label, stage, rule) -> row
        self.results: dict[tuple, SweepVariant] = {}  # (label, variant label) -> variant row
        self.pending_models: list[ModelSpec] = []
        self.keys: dict[str, str] = {}  # label -> content key
        self.reused = 0
        self.notes: list[str] = []
        self.analysed = _Phase(name="models analysed")
        self.compared = _Phase(name="variants compared")
        self.waiting: dict[str, list] = {}  # label -> variant groups in flight
        self.need: dict[str, tuple] = {}  # label -> (rows, variants) still to compute
        self.engine = asked.engine.name  # what computes the variants' numbers (in their keys in the store)
        self.root: str | None = None  # the result store's folder (None: off): every task carries it to its worker

    # ------------------------------------------------------------ what is already done

    def _compares(self, spec: ModelSpec) -> bool:
        return self.numbers and spec.steps != 0  # a model list's steps = 0: never compare this model

    def _steps_of(self, spec: ModelSpec) -> int | None:
        """The steps asked for ``spec``: its own (a model list's), else the sweep's; None: the model's default."""
        return spec.steps if spec.steps else self.steps

    def _steps_key(self, spec: ModelSpec):
        """What stands for ``spec``'s steps in a store key: the number asked, or the default's rule (the model's bytes,
        in the key already, decide the rest)."""
        steps = self._steps_of(spec)
        return steps if steps is not None else ("default", _stages.STEPS_HELP)

    def steps_run(self) -> int:
        """The record's steps: as asked, else the most any model ran (0: decisions only)."""
        if not self.numbers:
            return 0
        ran = [*self.resolved.values(), *(v.steps for v in self.results.values() if v.steps)]
        return self.steps if self.steps is not None else max(ran, default=1)

    def _variants_for(self, spec: ModelSpec) -> list:
        return list(self.variants) if self._compares(spec) else []

    def plan(self, spec: ModelSpec) -> None:
        key = spec.content_key()
        self.keys[spec.label] = key
        record = self.store.read(MODEL, key)
        if record is not None and not _model_record(record):
            record = None  # not a model record this version wrote: computed again
        if record is not None and not record.get("error") and not unchanged(record.get("sources")):
            record = None  # a file the model was built from (a helper its file imports) changed: so may its program
        if record is not None and record.get("error"):
            self.models[spec.label] = SweepModel(target=spec.label, error=record["error"])
            self.reused += 1
            return
        missing_rows = list(self._all_rows(spec))
        missing_variants = self._variants_for(spec)
        if record is not None:
            fingerprint = record["fingerprint"]
            found = []
            for stage, rule in missing_rows:
                row = _read(SweepRow, self.store.read(ROW, fingerprint, stage, rule.identity), "row",
                            {}, target=spec.label, rule=rule.name)
                if row is not None and row.error is None and row.stage == stage:
                    self.rows[(spec.label, stage, rule.name)] = row
                    found.append((stage, rule))
            missing_rows = [pair for pair in missing_rows if pair not in found]
            still = []
            for v in missing_variants:
                stored = self.store.read(VARIANT, fingerprint, *self._variant_key(v, spec))
                got = _read(SweepVariant, stored, "variant", {"engine": self.engine}, target=spec.label,
                            variant=v.label, rule=v.variant.rule.name, accelerator=v.accelerator.name)
                if got is not None:
                    self.results[(spec.label, v.key)] = got
                else:
                    still.append(v)
            missing_variants = still
            self.reused += len(found) + len(self._variants_for(spec)) - len(missing_variants)
            self.models[spec.label] = SweepModel(target=spec.label, error=None, fingerprint=fingerprint,
                                                 timings=record.get("timings", {}))
            if not missing_rows and not missing_variants:
                return
        self.pending_models.append(spec)
        self.need[spec.label] = (missing_rows, missing_variants)

    def _all_rows(self, spec):
        for stage in self.stages:
            for rule in self.rules:
                yield stage, rule

    # ------------------------------------------------------------ running

    def run(self, pool) -> None:
        self.analysed.total = len(self.pending_models)
        self.compared.total = sum(len(self.need[s.label][1]) for s in self.pending_models)
        self.analysed.started = time.perf_counter()
        for spec in self.pending_models:
            rows, variants = self.need[spec.label]
            payload = {"spec": {"target": spec.target, "label": spec.label,
                                "input_shapes": [list(s) for s in spec.input_shapes] if spec.input_shapes else None},
                       "need": rows, "store": self.root,
                       "compare": ({"steps": self._steps_of(spec),
                                    "variants": {v.key: (v.variant, v.accelerator) for v in variants},
                                    "engine": self.engine}
                                   if variants else None)}
            # Models first, in the order given (each is short), so that every variant is known early ...
            pool.submit(("model", spec.label), MODEL_TASK, payload, priority=0)
        self._report()
        specs = {s.label: s for s in self.pending_models}
        for event in pool.events():
            kind, (task, label, *rest) = event[0], event[1]
            spec = specs[label]
            phase = self.analysed if task == "model" else self.compared
            if kind == "progress":
                phase.running[event[1]] = float(event[3])
                self._report()
                continue
            phase.running.pop(event[1], None)
            if task == "model":
                phase.done += 1
                self._model_done(pool, spec, kind, event[2:])
            else:
                self._variant_done(spec, rest[0], kind, event[2:])
            self._report()

    def _report(self) -> None:
        if self.progress is not None:
            bars = (self.analysed.bar(),) + ((self.compared.bar(),) if self.compared.total else ())
            self.progress(bars)

    def _model_done(self, pool, spec: ModelSpec, kind: str, rest) -> None:
        rows, variants = self.need[spec.label]
        if kind != "done":
            message = rest[0] if kind == "error" else f"the worker analysing {spec.label} died: {rest[0]}"
            message = " ".join(str(message).split())
            self.models[spec.label] = SweepModel(target=spec.label, error=message)
            if kind == "error":  # the model's own failure: the same next time
                self.store.write({"target": spec.label, "error": message}, MODEL, self.keys[spec.label])
            self.compared.total -= len(variants)
            return
        value = rest[0]
        fingerprint = value["fingerprint"]
        self.models[spec.label] = SweepModel(target=spec.label, error=None, fingerprint=fingerprint,
                                             timings=value["timings"])
        for row in value["rows"]:
            self.rows[(spec.label, row.stage, row.rule)] = row
            if row.error is None:
                self.store.write({"row": row.to_dict(where=True)}, ROW, fingerprint, row.stage,
                                 self.rule_of[row.rule].identity)
        self.store.write({"target": spec.label, "error": None, "fingerprint": fingerprint,
                          "timings": value["timings"], "sources": value.get("sources")},
                         MODEL, self.keys[spec.label])
        if not variants:
            return
        prepared = value["compare"]
        if prepared is not None:
            self.resolved[spec.label] = prepared["steps"]
        if prepared is None:
            for v in variants:
                self._put_variant(spec, v, {"error": value["compare_error"]}, write=True)
            self.compared.total -= len(variants)
            return
        groups = group_by_decisions(variants, lambda v: prepared["decisions"].get(v.key))
        if self.compared.started is None:
            self.compared.started = time.perf_counter()
        for members in groups:
            first = members[0]
            self.waiting.setdefault(spec.label, []).append(members)
            pool.submit(("variant", spec.label, first.key), VARIANT_TASK,
                        VariantTask(run=prepared["run"], variant=first.variant, plan=None,
                                    accelerator=first.accelerator),
                        # ... then the variants, biggest program first: the last to finish are short ones,
                        # so no worker idles at the end while another lowers a big model.
                        priority=1 + 1 / (1 + prepared.get("nodes", 0)))
            self.compared.total -= len(members) - 1  # the others share its result

    def _variant_done(self, spec: ModelSpec, first_label: str, kind: str, rest) -> None:
        groups = self.waiting.get(spec.label, [])
        members = next(g for g in groups if g[0].key == first_label)
        groups.remove(members)
        self.compared.done += 1
        if kind == "done":
            for i, v in enumerate(members):
                data = {**rest[0], "error": None, "shared_with": None if i == 0 else members[0].label}
                data["accelerator"] = v.accelerator.name
                if i:
                    data["timings"] = {}  # it cost nothing: its numbers are the first member's
                self._put_variant(spec, v, data, write=True)
            return
        if kind == "error":
            message, write = " ".join(str(rest[0]).split()), True
        else:
            message, write = (f"the worker running {spec.label} / {first_label} died: {rest[0]}; the other results "
                              "are kept; run this model alone (python -m inspector compare ...) to see more"), False
        for v in members:
            self._put_variant(spec, v, {"error": message}, write=write)

    def _put_variant(self, spec: ModelSpec, job: _Job, data: dict, write: bool) -> None:
        v = job.variant
        row = SweepVariant.from_dict({
            "target": spec.label, "stage": NUMBERS_STAGE, "engine": self.engine, "variant": v.label,
            "rule": v.rule.name, "markers": list(v.markers), "quantization": v.quantization or "a8w8",
            "overrides": dict(v.overrides), "steps": self.resolved.get(spec.label, self._steps_of(spec) or 0),
            "sqnr_db_last": None,
            "sqnr_db_worst": None, **data, "accelerator": job.accelerator.name})
        self.results[(spec.label, job.key)] = row
        model = self.models.get(spec.label)
        if write and model is not None and model.fingerprint:
            fingerprint = model.fingerprint
            stored = {k: val for k, val in row.to_dict().items() if k != "target"}
            self.store.write({"variant": stored}, VARIANT, fingerprint, *self._variant_key(job, spec))

    def _variant_key(self, v: _Job, spec: ModelSpec) -> tuple:
        """A variant's key in the store: the engine is in it (a simulated result never answers for TOSA)."""
        return variant_key(v.variant, self._steps_key(spec), self.engine, v.accelerator)

    # ------------------------------------------------------------ the tables, in the order asked

    def model_rows(self) -> list[SweepModel]:
        return [self.models.get(s.label, SweepModel(target=s.label, error="not run (interrupted)")) for s in self.specs]

    def rows_in_order(self) -> list[SweepRow]:
        out = []
        for s in self.specs:
            model = self.models.get(s.label)
            if model is not None and model.error:
                continue
            for stage in self.stages:
                for rule in self.rules:
                    row = self.rows.get((s.label, stage, rule.name))
                    if row is not None:
                        out.append(row)
        return out

    def variants_in_order(self) -> list[SweepVariant]:
        out = []
        for s in self.specs:
            for v in self._variants_for(s):
                row = self.results.get((s.label, v.key))
                if row is not None:
                    out.append(row)
        return out


__all__ = ["sweep", "Sweep", "ModelSpec", "SweepBar", "models_from", "read_models_toml", "FORMATS", "NUMBERS_STAGE",
           "UNCHANGED_DB"]
