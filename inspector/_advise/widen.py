"""``layers`` and ``widen``: which layers need more bits, and what that costs on the NPU.

How it works (docs/widen.md says it for users):

1. **Two ends, on the authority.** The baseline (the installed pass at ``quantization``, a8w8) and 16-bit activations
   everywhere are lowered for the accelerator, run on the TOSA reference model and priced by Vela: one ``compare``.
2. **Each layer's cost beside its error** (``layers``). Vela's per-layer rows, mapped back to the exported program's
   nodes (``Cost.layers``), summed per node; attribution's per-node error of the baseline (its SQNR, max |error| and
   the dB that enter there, each at its worst step). Rows traced to no node stay rows of their own, so the table adds
   up to Vela's total; a node outside the delegate is marked ``cpu``, with no cycles: Vela does not count it.
3. **Candidates.** Attribution's entry points of the error, then the layers the table ranks by the error entering
   there, up to ``candidates`` computed nodes.
4. **The sets.** A candidate is widened as the tensor it writes (``_group``): the node, the quantizer's pattern it
   is fused into (a ReLU after a convolution takes the convolution's configuration) and the tensor's readers (a
   node at ``a16w8`` reads and writes 16 bits, but a reader at 8 bits requantizes its input: widening the writer
   alone changes nothing). Every assignment of each candidate to nothing, the wide quantization (``a16w8``: stays
   on the NPU) or ``float`` (the CPU). Up to ``measure_up_to`` sets, every one is lowered, run on TOSA and priced by Vela. Beyond,
   every set runs on the quantize/dequantize simulation and its cycles are predicted from the two ends' rows (a layer
   at 16 bits costs what it cost in 16-bit-everywhere; a float layer costs nothing on the NPU): those points say
   ``measured: false``. The cheapest predicted sets within the budget are then lowered (at most ``CONFIRM``), or, if
   none is, the most accurate one.
5. **The pick, from measured points.** The cheapest measured point within the budget; when none is, the measured
   point closest to it (then the cheapest). Either way no measured point beats it on both cycles and the budget's
   measurement.
"""

from __future__ import annotations

import itertools
import math
import re
import time
from dataclasses import replace
from typing import Any
from collections.abc import Callable, Sequence

import torch

from .._base.errors import InspectorError, quoted
from .._base.formats import db
from .._cost.accelerators import accelerator_of
from .._numbers.attribution import attribute
from .._numbers.compare import compare
from .._numbers.engines import SIMULATION
from .._numbers.measures import metric_of
from .._numbers.quantization import FLOAT, quantizations
from .._numbers.results import Variant
from .._targets import load as _load
from .widen_records import NOT_COUNTED, LayerCost, Layers, WidenPoint, Widening

CANDIDATES = 3  # nodes the sets are made of
# What a candidate may run as by default: 16 bits on the NPU, whose whole cost Vela counts. ``float`` is a choice a
# user adds: it moves the layer to the CPU, where Vela counts nothing, so its cycles alone would always look cheap.
CHOICES = ("a16w8",)
MEASURE_UP_TO = 4  # sets: every one lowered up to this many (2 candidates: 3 sets); beyond, predicted and confirmed
CONFIRM = 3  # predicted sets confirmed on TOSA and Vela at most
SKIP_OPS = ("input", "state", "output")  # attribution's records that are not layers

Progress = Callable[[str, float], None]


def layers(
    target: Any,
    *,
    example_inputs: Any = None,
    accelerator: Any = "ethos-u85-256",
    quantization: str = "a8w8",
    overrides: dict | None = None,
    steps: int | None = None,
    calibration: Sequence | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> Layers:
    """Per layer of ``target`` on ``accelerator``: Vela's cycles beside the quantization error entering there.

    Args:
        target: a model, sample name, ``.pt2`` or ``file.py:Class`` (as ``compare`` takes it).
        example_inputs: its inputs, or a stream (one tuple per step); default: the model's own.
        accelerator: an Ethos-U (``inspector.accelerators``); default ``ethos-u85-256``.
        quantization: the baseline's quantization; default ``a8w8``.
        overrides: per-node overrides of it (``{"mix": "a16w8" or "float"}``, as a ``Variant`` takes them); a float
            node runs on the CPU and is marked so, without cycles.
        steps: steps (frames) to run; default: the stream's length, else 1. Each layer's error is its worst step's.
        calibration: the quantizer's calibration batches; default: as ``compare`` chooses.
        workers: processes for the run (see ``compare``).
        progress: ``progress(phase, fraction)`` as the work advances.
    """
    chip = _npu(accelerator, "layers")
    loaded = _load.load(target, example_inputs)
    base = compare(loaded, variants=[Variant("upstream", quantization=quantization, overrides=overrides or ())],
                   steps=steps, calibration=calibration,
                   workers=workers, accelerator=chip, progress=_part(progress, 0.0, 0.6))
    result = base.results[0]
    if result.error is not None or result.cost is None:
        raise InspectorError(f"layers needs the baseline on TOSA and Vela: {result.error or result.cost_error}")
    heard = attribute(base, progress=_part(progress, 0.6, 0.4))
    return _table(loaded, result, heard.variants[0], base.steps)


def _table(loaded, result, variant, steps: int) -> Layers:
    """The per-layer table of ``result`` (one variant with a cost) and its attribution ``variant``."""
    cost = result.cost
    exported = {n.name: n for n in loaded.exported.graph.nodes if n.op == "call_function"}
    records: dict[str, list] = {}
    for r in variant.nodes:
        if r.op not in SKIP_OPS and r.name in exported:
            records.setdefault(r.name, []).append(r)
    entry = {e.name for e in variant.entry_points}
    rows: dict[str, list] = {}
    untraced = []
    for layer in cost.layers:
        if layer.node in exported:
            rows.setdefault(layer.node, []).append(layer)
        else:
            untraced.append(layer)
    floated = {name for name, value in result.variant.overrides if value == FLOAT}
    outside = _outside_ops(result)
    order = {name: i for i, name in enumerate(exported)}
    out = []
    for name in sorted(set(records) | set(rows), key=lambda n: order[n]):
        mine, errs = rows.get(name, []), records.get(name, [])
        op = errs[0].op if errs else _op(exported[name])
        on_cpu = not mine and (name in floated or _take(outside, op))
        worst = min(errs, key=lambda r: r.sqnr_db) if errs else None
        drops = [r for r in errs if r.drop_db is not None]
        drop = max(drops, key=lambda r: r.drop_db) if drops else None
        out.append(LayerCost(
            node=name, vela_name=mine[0].name if mine else "", op=op, module=errs[0].module if errs else "",
            where="cpu" if on_cpu else "npu", cycles=None if on_cpu else sum(x.cycles for x in mine),
            operators=tuple(dict.fromkeys(x.operator for x in mine)), sqnr_db=worst.sqnr_db if worst else None,
            max_abs_error=max(r.max_abs_error for r in errs) if errs else None,
            drop_db=drop.drop_db if drop else None, drop_step=drop.step if drop else None, entry_point=name in entry))
    for layer in untraced:
        out.append(LayerCost(node=None, vela_name=layer.name, op=layer.operator, module="", where="npu",
                             cycles=layer.cycles, operators=(layer.operator,), sqnr_db=None, max_abs_error=None,
                             drop_db=None, drop_step=None, entry_point=False))
    notes = []
    if untraced:
        notes.append(f"{len(untraced)} of Vela's {len(cost.layers)} rows ({sum(x.cycles for x in untraced):,} cycles) "
                     "could not be traced to a node of the model: they are listed by Vela's tensor name")
    cpu = [x.node for x in out if x.where == "cpu"]
    if cpu:
        notes.append(f"{len(cpu)} layer(s) run on the CPU ({', '.join(cpu)}): {NOT_COUNTED}")
    fused = sum(1 for x in out if x.where == "npu" and x.cycles == 0 and x.node is not None and not x.operators)
    if fused:
        notes.append(f"{fused} layer(s) have no row of their own (0 cycles): Vela fuses them into a neighbouring "
                     "operation (an activation into its convolution, a table into the operation before it) or needs "
                     "no operation of its own for them (a reshape)")
    return Layers(target=loaded.name, accelerator=result.accelerator.name, quantization=result.quantization,
                  steps=steps, cycles=cost.cycles, compiler=cost.compiler, layers=tuple(out), notes=tuple(notes))


def _outside_ops(result) -> dict[str, int]:
    """How many non-boundary nodes of each op run outside the delegate (the partitioner left them out)."""
    counts: dict[str, int] = {}
    for n in result.not_delegated:
        if "quantize_per_tensor" in n.target or "dequantize_per_tensor" in n.target:
            continue
        op = n.target.split(".")[1] if n.target.startswith("aten.") else n.target
        counts[op] = counts.get(op, 0) + 1
    return counts


def _take(counts: dict[str, int], op: str) -> bool:
    """One node of ``op`` is outside the delegate (matched by op, in graph order)."""
    for key in (op, {"conv1d": "convolution", "conv2d": "convolution", "linear": "addmm"}.get(op, op)):
        if counts.get(key, 0) > 0:
            counts[key] -= 1
            return True
    return False


def _op(node) -> str:
    return str(getattr(node.target, "__name__", node.target)).split(".")[0]


# ---------------------------------------------------------------- widen


def widen(
    target: Any,
    *,
    example_inputs: Any = None,
    accelerator: Any = "ethos-u85-256",
    budget: str | tuple[str, float] = "sqnr=30",
    quantization: str = "a8w8",
    wide: str = "a16w8",
    steps: int | None = None,
    calibration: Sequence | None = None,
    candidates: int = CANDIDATES,
    choices: Sequence[str] = CHOICES,
    measure_up_to: int = MEASURE_UP_TO,
    workers: int | None = None,
    progress: Progress | None = None,
) -> Widening:
    """Which layers to run with more bits on ``accelerator`` so that the budget holds, for the fewest cycles.

    Args:
        target: a model, sample name, ``.pt2`` or ``file.py:Class`` (as ``compare`` takes it).
        example_inputs: its inputs, or a stream (one tuple per step); default: the model's own.
        accelerator: an Ethos-U whose cycles Vela counts; default ``ethos-u85-256`` (a16w8 needs the U85).
        budget: ``"MEASURE=VALUE"`` or ``(measure, value)``: ``sqnr=30`` (dB, at least), ``max-abs=0.05`` (at most),
            ``decision-mismatch@0.55=0`` (the share of frames whose decision flips, at most), ``accuracy=90``.
            The worst output (and step) counts.
        quantization: the baseline's quantization; default ``a8w8``.
        wide: what a widened layer runs as on the NPU; default ``a16w8`` (16-bit activations).
        steps: steps (frames); default: the stream's length, else 1.
        calibration: the quantizer's calibration batches; default: as ``compare`` chooses.
        candidates: how many candidates the sets are made of (entry points first, then the table's ranking), each
            widened with the pattern it is fused into and its tensor's readers (``Widening.groups``); default 3.
        choices: what a candidate may run as; default ``("a16w8",)`` (on the NPU); add ``"float"`` to try the CPU
            (Vela does not count what runs there: a float point's cycles are the NPU's part only).
        measure_up_to: up to this many sets, every one is measured on TOSA and Vela; beyond, they are predicted
            (simulation and the rows' cycles) and the cheapest within the budget confirmed; default 4.
        workers: processes running the lowerings side by side (see ``compare``).
        progress: ``progress(phase, fraction)`` as the work advances.
    """
    started = time.perf_counter()
    chip = _npu(accelerator, "widen")
    metric, limit, text = _budget(budget)
    _check_count(candidates, "candidates")
    _check_count(measure_up_to, "measure_up_to")
    choices = tuple(dict.fromkeys(choices))
    for c in choices:
        if c != FLOAT:
            quantizations.get(c)
    if not choices:
        raise InspectorError("choices is what a candidate may run as: 'a16w8', 'float' or both")
    quantizations.get(wide)
    better = metric.better
    sign = 1.0 if better == "higher" else -1.0

    def meets(v: float | None) -> bool:
        return v is not None and not math.isnan(v) and sign * v >= sign * limit

    loaded = _load.load(target, example_inputs)
    names = tuple(dict.fromkeys((metric.name, "sqnr")))
    common = dict(steps=steps, calibration=calibration, accelerator=chip, metrics=names)
    notes: list[str] = []

    _say(progress, "the baseline and 16-bit everywhere on TOSA and Vela", 0.0)
    ends = compare(loaded, variants=[Variant("upstream", quantization=quantization), Variant("upstream", quantization=wide)],
                   workers=workers, **common)
    base, everywhere = ends.results
    if base.error is not None or base.cost is None:
        raise InspectorError(f"widen needs the baseline on TOSA and Vela: {base.error or base.cost_error}")
    steps = ends.steps
    _say(progress, "where the error enters (attribution of the baseline)", 0.3)
    only_base = replace(ends, results=ends.results[:1], run=replace(ends.run, plans=ends.run.plans[:1]))
    heard = attribute(only_base)
    table = _table(loaded, base, heard.variants[0], steps)

    picked, why = _candidates(heard.variants[0], table, candidates)
    order_of = {n.name: i for i, n in enumerate(loaded.exported.graph.nodes)}
    if not picked:
        notes.append("attribution names no computed node where error enters, and the table ranks none: "
                     "only the two ends were measured")
    groups = {name: _group(loaded.exported.graph, name) for name in picked}
    sets = []
    for combo in itertools.product((None, *choices), repeat=len(picked)):
        chosen: dict[str, str] = {}
        pairs = [(node, choice) for name, choice in zip(picked, combo) if choice is not None for node in groups[name]]
        if any(chosen.setdefault(node, choice) != choice for node, choice in pairs):
            continue  # two candidates share a node and want it two ways: not a set
        found = tuple(sorted(chosen.items(), key=lambda kv: order_of[kv[0]]))
        if found and found not in sets:
            sets.append(found)

    wide_rows = _per_node(everywhere.cost) if everywhere.cost is not None else {}
    base_rows = _per_node(base.cost)

    def predicted_cycles(overrides) -> int:
        total = base.cost.cycles
        for name, value in overrides:
            here = base_rows.get(name, 0)
            total += -here if value == FLOAT else wide_rows.get(name, here) - here
        return max(total, 0)

    measured: dict[tuple, Any] = {(): base}
    lowerings = 2

    def measure(batch: list[tuple], phase: str) -> None:
        nonlocal lowerings
        batch = [s for s in dict.fromkeys(batch) if s not in measured]
        if not batch:
            return
        _say(progress, phase, 0.5)
        variants = [Variant("upstream", quantization=quantization, overrides=dict(s)) for s in batch]
        results = compare(loaded, variants=variants, workers=workers, **common).results
        lowerings += len(batch)
        for s, r in zip(batch, results):
            if r.error is not None or r.cost is None:
                notes.append(f"{_label(s)} could not be measured: {r.error or r.cost_error}")
            else:
                measured[s] = r

    simulated: dict[tuple, float | None] = {}
    if len(sets) <= measure_up_to:
        search = "exhaustive"
        measure(sets, f"every set of {len(picked)} candidate(s): {len(sets)} lowerings (TOSA and Vela)")
    else:
        search = "predicted"
        _say(progress, f"{len(sets)} sets on the simulation", 0.4)
        variants = [Variant("upstream", quantization=quantization, overrides=dict(s)) for s in sets]
        sim = compare(loaded, variants=variants, engine=SIMULATION, workers=workers, **common).results
        for s, r in zip(sets, sim):
            simulated[s] = r.overall(metric.name) if r.error is None else None
        within = sorted((s for s in sets if meets(simulated[s])), key=lambda s: (predicted_cycles(s), len(s)))
        if within:
            measure(within[:CONFIRM], "the cheapest predicted sets within the budget, on TOSA and Vela")
            if len(within) > CONFIRM:
                notes.append(f"{len(within) - CONFIRM} more set(s) predicted within the budget were not lowered "
                             f"(the {CONFIRM} cheapest were)")
        else:
            known = [s for s in sets if simulated[s] is not None]
            if known:
                closest = max(known, key=lambda s: (sign * simulated[s], -predicted_cycles(s)))
                measure([closest], "no set is predicted within the budget: the closest, on TOSA and Vela")

    def value(r) -> float | None:
        return r.overall(metric.name) if r.error is None else None

    points = [_point((), quantization, base, value(base), meets)]
    if everywhere.error is None and everywhere.cost is not None:
        points.append(_point((), wide, everywhere, value(everywhere), meets))
    else:
        notes.append(f"16-bit everywhere could not be measured: {everywhere.error or everywhere.cost_error}")
    for s in sets:
        if s in measured:
            points.append(_point(s, quantization, measured[s], value(measured[s]), meets))
        elif s in simulated:
            points.append(WidenPoint(overrides=s, quantization=quantization, cycles=predicted_cycles(s),
                                     value=simulated[s], measured=False, within=meets(simulated[s]), frontier=False))
    points = _frontier(points, sign)
    real = [p for p in points if p.measured and p.value is not None and not math.isnan(p.value)]
    if not real:
        raise InspectorError("no point was measured with numbers on TOSA: see the notes of compare")
    ok = [p for p in real if p.within]
    if ok:
        pick = min(ok, key=lambda p: (p.cycles, -sign * p.value, len(p.overrides)))
    else:
        pick = max(real, key=lambda p: (sign * p.value, -p.cycles, -len(p.overrides)))
    if pick.on_cpu > points[0].on_cpu:
        notes.append(f"the pick runs {pick.on_cpu - points[0].on_cpu} more node(s) on the CPU: {NOT_COUNTED}")
    if any(not p.measured for p in points):
        notes.append("points with measured: false are predicted: their value is the quantize/dequantize "
                     "simulation's, their cycles the baseline's plus each layer's change in the two ends' rows")
    config = quantizer_code(pick, chip.npu or chip.name, quantization, _system(chip))
    _say(progress, "done", 1.0)
    return Widening(target=loaded.name, accelerator=chip.name, quantization=quantization, wide=wide, budget=text,
                    metric=metric.name, better=better, limit=limit, steps=steps, search=search,
                    candidates=tuple(picked), why=tuple(why.items()),
                    groups=tuple((name, groups[name]) for name in picked), points=tuple(points), pick=pick,
                    met=pick.within, lowerings=lowerings, simulated=len(simulated), layers=table, config=config,
                    seconds=time.perf_counter() - started, notes=tuple(dict.fromkeys(notes)))


def _point(overrides, quantization, result, value, meets) -> WidenPoint:
    outside = sum(1 for n in result.not_delegated
                  if "quantize_per_tensor" not in n.target and "dequantize_per_tensor" not in n.target)
    return WidenPoint(overrides=tuple(overrides), quantization=quantization, cycles=result.cost.cycles, value=value,
                      measured=True, within=meets(value), frontier=False, on_cpu=outside,
                      sqnr_db=result.overall("sqnr"))


def _candidates(variant, table: Layers, limit: int) -> tuple[list[str], dict[str, str]]:
    """Attribution's entry points (computed nodes), then the table's ranking, up to ``limit``."""
    on_table = {x.node for x in table.layers if x.node is not None}
    why: dict[str, str] = {}
    for e in variant.entry_points:
        if e.op not in SKIP_OPS and e.name in on_table and e.name not in why:
            why[e.name] = f"entry point of the error ({db(e.drop_db)} dB enter at step {e.step + 1})"
    for x in table.ranked():
        if x.node not in why:
            why[x.node] = f"ranked by the table ({db(x.drop_db)} dB enter there)"
    picked = list(why)[:limit]
    return picked, {n: why[n] for n in picked}


# What ExecuTorch's Arm quantizer annotates as one pattern (quantization_annotator.py): a convolution or linear, a
# batch norm after a convolution, then a ReLU or hardtanh; the pattern's output is quantized once, at its last node.
_ANCHORS = ("conv1d", "conv2d", "conv3d", "convolution", "linear")
_FUSED_AFTER = ("batch_norm", "relu", "relu_", "hardtanh", "hardtanh_")
# Readers that only move values (their output shares their input's quantization): the tensor's real readers are theirs.
_MOVES = ("view", "reshape", "permute", "transpose", "t", "squeeze", "unsqueeze", "flatten", "contiguous", "clone",
          "expand", "slice", "select", "getitem", "unflatten", "alias")


def _group(graph, name: str) -> tuple[str, ...]:
    """The nodes widened together with ``name`` (in graph order): the pattern it is fused into, ending at the node that
    writes the tensor, and that tensor's readers (through nodes that only move values)."""
    nodes = {n.name: n for n in graph.nodes}
    node = nodes.get(name)
    if node is None or node.op != "call_function":
        return (name,)

    def only_user(n):
        users = [u for u in n.users if u.op == "call_function"]
        return users[0] if len(users) == 1 and len(n.users) == 1 else None

    group = [node]
    first = node
    while _op(first) in _FUSED_AFTER and first.args and isinstance(first.args[0], torch.fx.Node) \
            and first.args[0].op == "call_function" and len(first.args[0].users) == 1 \
            and _op(first.args[0]) in (*_ANCHORS, "batch_norm"):
        first = first.args[0]
        group.insert(0, first)
    last = node
    while _op(group[0]) in _ANCHORS and (after := only_user(last)) is not None and _op(after) in _FUSED_AFTER:
        last = after
        group.append(last)
    readers, frontier, seen = [], [last], {n.name for n in group}
    for _ in range(4):  # a few moves deep: a reshape of a reshape of the tensor is still the tensor
        nxt = []
        for n in frontier:
            for user in n.users:
                if user.op != "call_function" or user.name in seen:
                    continue
                seen.add(user.name)
                readers.append(user)
                if _op(user) in _MOVES:
                    nxt.append(user)
        frontier = nxt
        if not frontier:
            break
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    return tuple(sorted({n.name for n in (*group, *readers)}, key=order.__getitem__))


def _per_node(cost) -> dict[str, int]:
    out: dict[str, int] = {}
    for layer in cost.layers:
        if layer.node is not None:
            out[layer.node] = out.get(layer.node, 0) + layer.cycles
    return out


def _frontier(points: list[WidenPoint], sign: float) -> list[WidenPoint]:
    def fig(p):
        return p.cycles, (None if p.value is None or math.isnan(p.value) else sign * p.value)

    out = []
    for p in points:
        c, v = fig(p)
        known = c is not None and v is not None
        beaten = known and any(q is not p and fig(q)[1] is not None and fig(q)[0] <= c and fig(q)[1] >= v and
                               (fig(q)[0] < c or fig(q)[1] > v) for q in points)
        out.append(replace(p, frontier=known and not beaten))
    return out


def _label(s) -> str:
    return ", ".join(f"{k}={v}" for k, v in s) or "nothing"


def _budget(budget) -> tuple[Any, float, str]:
    """The budget's measurement, its value and how it reads: ``"sqnr=30"`` or ``("sqnr", 30)``."""
    if isinstance(budget, str):
        name, sep, amount = budget.rpartition("=")
        try:
            pair = (name.strip(), float(amount)) if sep and name.strip() else None
        except ValueError:
            pair = None
        if pair is None:
            raise InspectorError(f"a budget is MEASURE=VALUE (sqnr=30, max-abs=0.05, decision-mismatch@0.55=0), "
                                 f"got {quoted(budget)}")
        budget = pair
    if not isinstance(budget, (tuple, list)) or len(budget) != 2:
        raise InspectorError(f"a budget is (measure, value) or 'MEASURE=VALUE', got {quoted(budget)}")
    metric, amount = metric_of(budget[0]), budget[1]
    if metric.kind != "output" or metric.better == "none":
        raise InspectorError(f"a budget is counted in a measurement of the outputs with a direction; "
                             f"{quoted(metric.name)} has none")
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount):
        raise InspectorError(f"the budget's value is a number, got {quoted(amount)}")
    return metric, float(amount), f"{metric.name}={float(amount):g}"


def _npu(accelerator, verb: str):
    chip = accelerator_of(accelerator)
    if not chip.costs:
        raise InspectorError(f"{verb} prices layers in cycles, and {quoted(chip.name)} has no cost model: give an "
                             "Ethos-U, e.g. accelerator='ethos-u85-256'")
    return chip


def _system(chip) -> tuple[str | None, str | None]:
    return getattr(chip, "system_config", None), getattr(chip, "memory_mode", None)


def _check_count(v, name: str) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise InspectorError(f"{name} must be a whole number >= 0, got {quoted(v)}")


def _say(progress, phase: str, fraction: float) -> None:
    if progress is not None:
        progress(phase, fraction)


def _part(progress, start: float, width: float):
    return None if progress is None else (lambda phase, f: progress(phase, start + width * f))


# ---------------------------------------------------------------- the pick as code a user pastes

_CONFIGS = {"a8w8": "get_symmetric_quantization_config(is_per_channel=True)",
            "a8w8-per-tensor": "get_symmetric_quantization_config(is_per_channel=False)",
            "a16w8": "get_symmetric_a16w8_quantization_config()",
            "a8w4": "get_symmetric_a8w4_quantization_config(is_qat=False)"}
_SAFE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def quantizer_code(point: WidenPoint, npu: str, quantization: str = "a8w8",
                   system: tuple[str | None, str | None] = (None, None)) -> str:
    """ExecuTorch's Arm quantizer configured as ``point``: Python a user pastes where they build their quantizer
    (``quantizer``, then ``prepare_pt2e(module, quantizer)``). Only the built-in quantizations have code."""
    glob = point.quantization
    for name in (glob, *(v for _, v in point.overrides if v != FLOAT)):
        if name not in _CONFIGS:
            raise InspectorError(f"no quantizer code for the quantization {quoted(name)}: only the built-ins have one")
    for node, _ in point.overrides:
        if not _SAFE.match(node):  # a model-derived name never reaches generated code unchecked
            raise InspectorError(f"node name {quoted(node)} cannot be written as code")
    helpers = sorted({_CONFIGS[n].split("(")[0] for n in (glob, *(v for _, v in point.overrides if v != FLOAT))})
    settings = "".join(f", {k}={v!r}" for k, v in zip(("system_config", "memory_mode"), system) if v)
    lines = [
        f"# {point.label}: {point.cycles:,} cycles (Vela), measured on the TOSA reference model",
        "from executorch.backends.arm.ethosu import EthosUCompileSpec",
        f"from executorch.backends.arm.quantizer import EthosUQuantizer, {', '.join(helpers)}",
        "",
        f"compile_spec = EthosUCompileSpec({npu!r}{settings})",
        "quantizer = EthosUQuantizer(compile_spec)",
        f"quantizer.set_global({_CONFIGS[glob]})",
    ]
    for node, value in point.overrides:
        if value == FLOAT:
            lines.append(f"quantizer.set_node_name({node!r}, None)  # float: left unquantized, it runs on the CPU")
        else:
            lines.append(f"quantizer.set_node_name({node!r}, {_CONFIGS[value]})")
    return "\n".join(lines) + "\n"


__all__ = ["layers", "quantizer_code", "widen"]
