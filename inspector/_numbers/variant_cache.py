"""The cache of compare's results: every variant result and float reference, by what determines it.

One ``VariantCache`` (``RESULTS``) is read and written by every caller: ``compare`` in this
process and each worker process (its own copy). Its keys are built here only:

- the *base key*: everything but the variant (the target's fingerprint, its inputs, the
  calibration batches and how they run, the steps, the engine: a simulated result never answers
  for TOSA);
- a variant's result under ``(base key, "variant", rule identity, markers, plan identity)`` (a
  user's rule is identified by its source; the plan is the quantization and the nodes its
  overrides reach), and under ``(base key, "decisions", plan identity, fold decisions)``: the
  decisions the run really made, so that another variant leading to the same decisions (a
  marker toggle that changes none) is answered without running; not for a rule's own pass
  class, which may fold differently from the installed pass;
- the float reference under ``("reference", base key)``;
- an attribution of a comparison under ``(base key, "attribution", ...)`` and a bits record under
  ``(base key, "bits", ...)``, each with every variant's identity (``attribution_key``,
  ``bits_key``); only on disk (``result_store.load_record``): this cache keeps no such record.

Decisions are predicted with the real pass on the tfa graph that a first run on the model
captured from its own quantization pipeline (the default a8w8 quantizer, no overrides); on a
model nothing has run on yet, or under another quantization (which can change which nodes the
quantizer lets fold: a node kept in float is never folded), only the variant itself is a key. Storage is a
``_base/cache.py``'s ``BoundedCache``: the least recently used go first.

Behind it, the result store on disk (``result_store``): a variant's result and a float reference
this process does not have are read from there (written by another process or session), and what
is kept here is kept there too.
"""

from __future__ import annotations

from dataclasses import replace

from .._targets import load as _load
from .._targets.facts import Fact
from .._decide import stages as _stages
from .._base.cache import BoundedCache
from .._base.hashing import digest as _digest
from .._rules.rules import folded_site_ids, get_rule
from . import result_store as _disk
from .results import Variant, VariantResult
from .engines import TOSA, Engine, engine_of


def model_fingerprint(target: _load.Target) -> str:
    """What the target's results depend on: its exported program, inputs and recurrence (see ``_load.load``)."""
    return target.key


def base_key(target: _load.Target, calibrated, steps: int, engine: str | Engine = TOSA) -> tuple:
    """Everything a comparison's results depend on but the variant (``calibrated``: a ``flow.Calibration``),
    the engine that computes them among it (by its name: the keys of before)."""
    return (model_fingerprint(target), _digest(target.inputs), _digest(list(calibrated.batches)),
            calibrated.sequence_steps, calibrated.reset, steps, engine_of(engine).name) + \
        ((tuple(s.key for s in calibrated.streams),) if calibrated.streams else ())  # a stream's keys (none: as before)


def variant_identity(variant: Variant, plan) -> tuple:
    """What a variant's numbers depend on besides the base key: its rule's identity (a user's rule by
    its source), its markers, and its plan's identity (the quantization and the nodes its overrides reach)."""
    return (variant.rule.identity, variant.markers, plan.identity)


def _comparison_key(comparison, kind: str) -> tuple | None:
    """``comparison``'s base key, ``kind``, its name and calibration text, and every variant's label and
    identity; None when it was read from a file or a variant has no numbers (an error is not an answer)."""
    run = getattr(comparison, "run", None)
    if run is None or len(run.plans) != len(comparison.results) or any(
            r.error is not None or p is None for r, p in zip(comparison.results, run.plans)):
        return None
    base = base_key(run.target, run.calibration, comparison.steps, comparison.engine)
    return base + (kind, comparison.target, comparison.calibration,
                   tuple((r.variant.label, *variant_identity(r.variant, p)) for r, p in zip(comparison.results, run.plans)))


def attribution_key(comparison) -> tuple | None:
    """What ``attribute(comparison)`` depends on: the comparison's base key and every variant's
    identity (its outputs, against which the simulation's agreement is measured, follow from them)."""
    return _comparison_key(comparison, "attribution")


def bits_key(first, *options) -> tuple | None:
    """What ``bits`` depends on: its baseline's comparison ``first`` (base key and the baseline's
    identity) and ``options`` (the 16-bit plan's identity, the rule ``off``'s, how many sites and
    entry points are measured)."""
    key = _comparison_key(first, "bits")
    return None if key is None else key + (get_rule("off").identity, *options)


# What a target keeps of this module's making: per (rule identity, markers), where the pass folds.
DECISIONS: Fact[tuple] = Fact("fold decisions")


def predicted_decisions(target: _load.Target, variant: Variant, plan=None) -> tuple:
    """Where the pass folds in this variant's flow: ``(("tfa", site ids), ("lowering", ()))``.

    The real pass on the tfa graph of the plan's quantizer (default: the default accelerator's); in the INT flow
    nothing is left to fold in lowering. Only once that tfa graph exists (``can_predict``).
    """
    key = plan.tfa_key if plan is not None else "tfa"

    def decide() -> tuple:
        graph = _stages.tfa_graph_for(target, key, plan.quantizer if plan is not None else None)
        folded = folded_site_ids(graph, variant.rule, variant.markers)
        return (("tfa", tuple(sorted(folded))), ("lowering", ()))

    return target.facts.get(DECISIONS, (variant.rule.identity, variant.markers, key), decide)


def can_predict(target: _load.Target, plan) -> bool:
    """Fold decisions can be predicted cheaply: the default quantization without overrides (``plan``: a
    ``quantization.Plan``), and the tfa graph of its accelerator's quantizer captured."""
    return plan.plain and _stages.has_stage_graph(target, plan.tfa_key)


def answered(result: VariantResult, variant: Variant) -> VariantResult:
    """``result`` as the answer for ``variant`` from the cache: its label, no time spent."""
    return replace(result, variant=variant, timings={k: 0.0 for k in result.timings}, cached=True)


class VariantCache:
    """Variant results and float references of compare, by what determines them."""

    def __init__(self, maxsize: int = 64) -> None:
        self._entries = BoundedCache(maxsize, "comparison results")

    @staticmethod
    def _variant_key(base: tuple, variant: Variant, plan) -> tuple:
        return base + ("variant", *variant_identity(variant, plan))

    @staticmethod
    def _shares_decisions(variant: Variant) -> bool:
        """Variants with the same fold decisions give the same result when the installed pass does
        every fold; a rule's own pass class may fold differently (so it is keyed by itself only)."""
        return variant.rule.pass_class is None

    @staticmethod
    def _decisions_key(base: tuple, plan, decisions: tuple) -> tuple:
        return base + ("decisions", plan.identity, decisions)

    @staticmethod
    def _reference_key(base: tuple) -> tuple:
        return ("reference",) + base

    def get(self, target: _load.Target, base: tuple, variant: Variant, plan) -> VariantResult | None:
        """A result computed before for this variant under ``plan``, or for another one with the same
        fold decisions, relabelled as ``variant``'s (``cached``, no time spent); None if there is none."""
        key = self._variant_key(base, variant, plan)
        hit = self._entries.get(key)
        if hit is not None:  # computed in this process, maybe while another store was in use: kept in this one too
            _disk.keep_result(key, hit, missing_only=True)
        if hit is None and can_predict(target, plan) and self._shares_decisions(variant):
            hit = self._entries.get(self._decisions_key(base, plan, predicted_decisions(target, variant, plan)))
        if hit is None and (hit := _disk.load_result(key)) is not None:
            self._entries.put(key, hit)
        return answered(hit, variant) if hit is not None else None

    def put(self, base: tuple, variant: Variant, plan, result: VariantResult, decisions: tuple | None = None) -> None:
        """Keep ``result`` for ``variant`` under ``plan``, and for the fold ``decisions`` it really led
        to when known (None: answered from a worker's cache, whose run is not this one's to describe)."""
        self._entries.put(self._variant_key(base, variant, plan), result)
        _disk.keep_result(self._variant_key(base, variant, plan), result)
        if decisions is not None and self._shares_decisions(variant):
            self._entries.put(self._decisions_key(base, plan, decisions), result)

    def reference(self, base: tuple):
        """The float reference computed before for ``base``, or None."""
        found = self._entries.get(self._reference_key(base))
        if found is None and (found := _disk.load_reference(self._reference_key(base))) is not None:
            self._entries.put(self._reference_key(base), found)
        return found

    def put_reference(self, base: tuple, reference) -> None:
        self._entries.put(self._reference_key(base), reference)
        _disk.keep_reference(self._reference_key(base), reference)

    def clear(self) -> None:
        self._entries.clear()


# The one cache of variant results (each holds its per-step outputs) and float references.
RESULTS = VariantCache(64)


def clear_cache() -> None:
    """Forget every cached variant result and float reference."""
    RESULTS.clear()
