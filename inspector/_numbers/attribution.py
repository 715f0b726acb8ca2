"""Where the quantization error enters: per-node error of every variant at every step.

The TOSA reference model only exposes a program's outputs. To look inside, each
variant of a comparison is quantized again exactly as it was (same rule, markers,
calibration and config: the converted pt2e program is deterministic) and both its
calibrated float graph and its converted graph (quantize/dequantize simulation in
PyTorch) are run for the comparison's steps, recording every node that survives
quantization. The float graph is the variant's own prepared graph (BatchNorm fused,
the fold applied exactly in float), so each node is compared with what it computes
in float. How far the simulation can be trusted is measured too: its outputs
against the TOSA reference's, in units of the output's quantization step.

Nodes are aligned across the float program and every variant by their source, the
way torchao's numeric debugger does (the ``from_node`` chain's first ancestor in the
exported program), and named by module path, op and occurrence, so the same node has
the same id in every variant and step. Where a site folded, its conv computes the
mul's output: it stands for the mul node (role ``folded-conv``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any
from collections.abc import Callable

import torch
from torch.fx import Node

from .._sites import graph as _graph
from .._base import quiet as _quiet
from .._decide import stages as _stages
from .compare import compare, died_message
from .._base.data import dataframe
from .._base.codec import Record, codec
from .results import Comparison, Run
from .engines import TOSA, Engine, engine_of
from . import result_store as _disk
from .variant_cache import attribution_key
from .flow import is_qdq, quantize, reset_state, sqnr, stepped
from .tasks import AttributionTask, model_task, worker_target
from .._rules.rules import FoldLog
from .._workers import pool as _pool
from .._workers.kinds import task_kind
from .._base.errors import InspectorError
from .._base.display import draw

# Nodes whose SQNR drops by more than this many dB below their inputs' are where error enters.
ENTRY_THRESHOLD_DB = 1.0
ENTRY_POINTS = 5  # how many to report per variant


@dataclass(frozen=True, kw_only=True)
class NodeError(Record):
    """Float vs quantized at one node, one step, in one variant."""

    node: str  # aligned id: "<module path or root>:<op>[#k]", the same in every variant and step
    name: str  # the node's name in the exported program
    module: str  # the module path that made it ("" at the root)
    op: str  # what it computes: "conv2d", "mul", "add", "copy_", "input", "state"
    site: str | None  # the site id, when the node is a site's conv or mul (or the conv a site folded into)
    role: str  # conv | mul | folded-conv | state-write | state | input | output | "" (any other node)
    order: int  # its position in the exported program's topological order
    step: int  # 0-based recurrent step
    sqnr_db: float  # 10 log10(sum f^2 / sum (q - f)^2) (inf when equal)
    max_abs_error: float  # max |q - f|
    scale: float | None  # the node output's quantization step (None if not quantized)
    zero_point: int | None
    drop_db: float | None  # its inputs' lowest SQNR minus its own: how much error enters here


@dataclass(frozen=True, kw_only=True)
class OutputAgreement(Record):
    """How closely the quantize/dequantize simulation matches the TOSA reference model."""

    output: int  # output index
    step: int
    max_steps: float | None  # max |simulation - TOSA| in units of the output's quantization step
    scale: float | None  # that step


@dataclass(frozen=True, kw_only=True)
class VariantAttribution(Record):
    """Every recorded node of one variant at every step, and where the error enters."""

    label: str  # the variant's label ("upstream", "state-aware+marked(...)")
    rule: str = field(metadata=codec(old="policy"))  # the name of its rule (format 1 wrote "policy")
    folded: tuple[str, ...]  # site ids folded in this variant's flow
    nodes: tuple[NodeError, ...]  # per (step, node), steps in order, nodes in topological order
    entry_points: tuple[NodeError, ...]  # per node its step of largest drop, the biggest drops first
    # simulation vs TOSA per output and step (empty without TOSA outputs)
    agreement: tuple[OutputAgreement, ...] = field(metadata=codec(key="simulation_vs_tosa"))

    def at(self, node: str, step: int | None = None) -> NodeError | None:
        """The record of ``node`` (an aligned id) at ``step`` (default: the last)."""
        records = [n for n in self.nodes if n.node == node]
        if not records:
            return None
        return records[-1] if step is None else next((n for n in records if n.step == step), None)

    def by_node(self, graph, sites, *, after: bool, step: int | None = None) -> dict[str, NodeError]:
        """This variant's records at ``step`` keyed by the node names of ``graph`` (``errors_by_node``):
        the measured-error layer of a picture."""
        return errors_by_node(graph, self, sites, after=after, step=step)

    def curve(self, node: str) -> list[float]:
        """SQNR of ``node`` per step."""
        return [n.sqnr_db for n in self.nodes if n.node == node]

    def last_step(self) -> tuple[NodeError, ...]:
        last = max((n.step for n in self.nodes), default=0)
        return tuple(n for n in self.nodes if n.step == last)


@dataclass(frozen=True, kw_only=True)
class SiteError(Record):
    """One site in one variant at one step: the error at its conv, its mul (or folded conv), its state write."""

    site: str
    variant: str  # label
    folded: bool
    step: int
    conv: NodeError | None  # None once folded (the conv then computes the mul's output)
    mul: NodeError | None  # the mul output, or the folded conv's
    state_write: NodeError | None  # the value written into carried state, if the site feeds one


@dataclass(frozen=True, kw_only=True)
class Attribution(Record):
    """Per-node error of every variant of a comparison, aligned across variants and steps."""

    target: str  # model name
    steps: int
    calibration: str  # how the quantizer was calibrated
    variants: tuple[VariantAttribution, ...]
    sites: tuple[SiteError, ...]  # per site, variant and step
    order: tuple[str, ...] = ()  # aligned node ids in the exported program's topological order
    # the engine of the comparison it looked inside: on the simulation there are no TOSA outputs to agree with
    engine: Engine = TOSA

    json_order = ("target", "engine", "steps", "calibration", "order", "variants", "sites")

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine", engine_of(self.engine))  # a name given here is looked up once

    def variant(self, label_or_rule: str) -> VariantAttribution:
        """The variant with this label, or the first one of this rule's name."""
        for v in self.variants:
            if label_or_rule in (v.label, v.rule):
                return v
        raise InspectorError(f"no variant {label_or_rule!r}; variants: {', '.join(v.label for v in self.variants)}")

    def site_errors(self, site: str, step: int | None = None) -> tuple[SiteError, ...]:
        step = self.steps - 1 if step is None else step
        return tuple(s for s in self.sites if s.site == site and s.step == step)

    def node_errors(self, label_or_rule: str, step: int | None = None) -> dict[str, NodeError]:
        """Records of one variant at ``step`` (default: the last), by exported-program node name."""
        v = self.variant(label_or_rule)
        step = self.steps - 1 if step is None else step
        return {n.name: n for n in v.nodes if n.step == step}

    def to_dataframe(self, kind: str = "nodes"):
        """A pandas DataFrame: ``"nodes"`` or ``"entry_points"``, one row per node error (the columns of
        ``to_dict()["variants"][i]["nodes"]``, after the variant's label; numbers stay floats), or
        ``"sites"`` (the columns of ``to_dict()["sites"]``)."""
        def nodes(which: str):
            return lambda: [{"variant": v.label, **vars(n)} for v in self.variants for n in getattr(v, which)]

        return dataframe(kind, {"nodes": nodes("nodes"), "entry_points": nodes("entry_points"),
                                "sites": lambda: [s.to_dict() for s in self.sites]})

    def _repr_mimebundle_(self, include=None, exclude=None):
        return draw("bundle", self)

    def __repr__(self) -> str:
        return f"<Attribution {self.target}: {', '.join(v.label for v in self.variants)}, {self.steps} step(s)>"

    def plot(self, kind: str = "graph", node: str | None = None):
        """A matplotlib Figure: ``graph`` (SQNR along the topological order per variant, last step)
        or ``steps`` (SQNR per step of ``node`` per variant)."""
        return draw("plot", self, kind, node)


def errors_by_node(graph, variant: VariantAttribution, sites, *, after: bool,
                   step: int | None = None) -> dict[str, NodeError]:
    """A variant's records at ``step`` (default: the last) keyed by the node names of ``graph``
    (a stage graph, before or ``after`` the pass), for drawing the measured-error layer. Where
    the variant folded a site, its value is the folded conv's: drawn on the conv after the
    pass, on the mul before it."""
    graph = getattr(graph, "graph", graph)
    step = max((n.step for n in variant.nodes), default=0) if step is None else step
    records = [n for n in variant.nodes if n.step == step]
    by_name = {r.name: r for r in records if r.role != "folded-conv"}
    by_state = {r.node: r for r in records if r.op == "state"}
    folded = {r.site: r for r in records if r.role == "folded-conv"}
    stands_for = {}  # node name in this graph -> the folded-conv record it shows
    for s in sites:
        if s.id in folded:
            stands_for[s.conv if after else s.mul] = folded[s.id]
    out = {}
    for n in graph.nodes:
        if n.name in stands_for:
            record = stands_for[n.name]
        elif n.op == "get_attr":
            record = by_state.get(f"state:{n.target}")
        else:
            record = by_name.get(_graph.source_name(n))
        if record is not None:
            out[n.name] = record
    return out


# ---------------------------------------------------------------- the run


def attribution(target: Any, *, variants=("off", "upstream"), steps: int | None = None, progress=None,
                isolate: bool = False, engine: str | Engine = TOSA, **compare_kw) -> Attribution:
    """Per-node error of each variant at every step: where the quantization error enters.

    ``target`` is a ``Comparison`` you already have (its variants are quantized again as they were
    compared; ``variants``, ``steps`` and the ``compare`` arguments do not apply), or a model: then
    ``compare(target, variants, steps=steps, ...)`` runs first. ``isolate=True`` runs the work in
    worker processes (see ``compare``). ``engine="simulation"`` compares on the quantize/dequantize
    simulation (no lowering): the per-node errors are the same (attribution always looks inside the
    converted program), but there is then no TOSA output to measure the simulation's agreement against.

    Args:
        target: a ``Comparison`` you already have, or what ``analyze`` takes.
        variants: as ``compare``'s; default ``("off", "upstream")``.
        steps: as ``compare``'s (default: a stream's length, else 20 for a model that carries state, else 1).
        progress: ``progress(phase, fraction)``.
        isolate: as ``compare``'s; default False.
        engine: as ``compare``'s; default ``"tosa"``.
        **compare_kw: any other argument of ``compare`` (``example_inputs``, ``markers``, ``accelerator``, ...).
    """
    if isinstance(target, Comparison):
        if compare_kw:
            raise InspectorError(f"attribution of a comparison takes no compare arguments, got {', '.join(compare_kw)}")
        return attribute(target, progress=progress, isolate=isolate)

    def part(start: float, width: float):
        return None if progress is None else (lambda phase, f: progress(phase, start + width * f))

    comparison = compare(target, variants=variants, steps=steps, progress=part(0.0, 0.6), isolate=isolate,
                         engine=engine,
                         **compare_kw)
    return attribute(comparison, progress=part(0.6, 0.4), isolate=isolate)


def attribute(comparison, progress: Callable[[str, float], None] | None = None, *,
              isolate: bool = False) -> Attribution:
    """``attribution`` of a comparison you already have: per-node error of each of its variants at every step.

    Each variant is quantized again as it was compared; the TOSA reference does not run again (see the
    module docstring).
    ``isolate=True`` does it in a worker process: a crash there is one line, this process lives on.
    The answer is kept in the result store (docs/store.md): the same attribution asked again, in this
    process or another, is read from there (a comparison with a failed variant is not kept).
    """
    if getattr(comparison, "run", None) is None:
        raise InspectorError("this comparison was read from a file: run inspector.compare again to look inside it")
    key = attribution_key(comparison)
    found = _disk.load_record("attribution", key, Attribution.from_dict)
    if found is not None:
        if progress is not None:
            progress("done", 1.0)
        return found
    result = _attribute_in_worker(comparison, progress) if isolate else _attribute(comparison, progress)
    _disk.keep_record("attribution", key, result)
    return result


def _attribute(comparison, progress: Callable[[str, float], None] | None = None) -> Attribution:
    """``attribute``'s work, in this process."""
    run = comparison.run
    target, calibrated = run.target, run.calibration
    program = target.exported
    ids, meta = _graph.aligned_ids(program)
    sites = _site_nodes(target)
    variants, site_errors = [], []
    for i, (result, plan) in enumerate(zip(comparison.results, run.plans)):
        variant = result.variant
        if result.error is not None:
            continue  # no numbers to look inside
        if progress is not None:
            progress(f"{variant.label}: quantize", i / len(comparison.results))
        log = FoldLog()
        with _quiet.captured_fds():
            float_gm, quant_gm = quantize(target, variant, calibrated, plan, keep_float=True, log=log)
        folded = _folded_names(log, sites)
        if progress is not None:
            progress(f"{variant.label}: per-node error", (i + 0.5) / len(comparison.results))
        records, sim_outputs, out_scales = _record(target, float_gm, quant_gm, comparison.steps, ids, meta,
                                                   sites, folded)
        # on an engine that does not lower, the comparison's outputs are this simulation's: nothing to agree with
        agreement = _agreement(sim_outputs, result.outputs, out_scales) if result.engine.lowers else []
        entries = _entry_points(records)
        folded_ids = tuple(sorted({sites[m][0] for m in folded}))
        variants.append(VariantAttribution(label=variant.label, rule=variant.rule.name, folded=folded_ids,
                                           nodes=tuple(records),
                                           entry_points=tuple(entries), agreement=tuple(agreement)))
        site_errors += _site_errors(records, sites, folded, variant.label, comparison.steps)
    if progress is not None:
        progress("done", 1.0)
    order = tuple(ids[n] for n in sorted(ids, key=lambda n: meta[n][2]))
    return Attribution(target=comparison.target, steps=comparison.steps, calibration=comparison.calibration,
                       variants=tuple(variants),
                       sites=tuple(site_errors), order=order, engine=comparison.engine)


def _entry_points(records: list[NodeError]) -> tuple[NodeError, ...]:
    """Where the error enters: for each node the step where its SQNR falls most below its inputs'
    (over ENTRY_THRESHOLD_DB), the ENTRY_POINTS biggest drops first."""
    best: dict[str, NodeError] = {}
    for r in records:
        if r.drop_db is not None and r.drop_db > ENTRY_THRESHOLD_DB and (
                r.node not in best or r.drop_db > best[r.node].drop_db):
            best[r.node] = r
    return tuple(sorted(best.values(), key=lambda r: -r.drop_db)[:ENTRY_POINTS])


def _ancestor(node: Node) -> str | None:
    """The node's first ancestor in the exported program, by name (None without a ``from_node`` chain)."""
    return _graph.source_name(node) if node.meta.get("from_node") else None


@dataclass(frozen=True, kw_only=True)
class _SiteNodes:
    id: str
    conv: str | None  # exported-program names
    mul: str | None
    state_write: str | None


def _site_nodes(target) -> dict[str, tuple[str, _SiteNodes]]:
    """Per site, by its tfa mul's name: (site id, its nodes in the exported program)."""
    stage = _stages.stage_graph_of(target, "tfa")
    graph = stage.graph_module.graph
    cands = _graph.candidates(graph)
    ids = _graph.site_ids(cands)
    reach = _graph.state_reach(graph, None, in_place_writes=True, markers=False)
    recurrent = _graph.recurrent_reach(graph, None, target.recurrent)
    outputs = _graph.output_values(graph) if recurrent else []
    out = {}
    for c, site_id in zip(cands, ids):
        write = None
        for kind in (_graph.BUFFER, _graph.INPUT):
            if reach.reaches(kind, c.mul):
                write = _ancestor(reach.path(kind, c.mul)[-1])
                break
        if write is None and c.mul in recurrent:  # the recurrent output it reaches is fed back as state
            write = _ancestor(outputs[recurrent[c.mul]])
        out[c.mul.name] = (site_id, _SiteNodes(id=site_id, conv=_ancestor(c.conv), mul=_ancestor(c.mul),
                                               state_write=write))
    return out


def _folded_names(log: FoldLog, sites) -> set[str]:
    """The tfa mul names this variant's pass folded."""
    run = next((r for r in log.runs if r.tfa), None)
    return set(run.folded) & set(sites) if run is not None else set()


def _dequantized(node: Node) -> tuple[Node, float | None, int | None]:
    """The node whose value the rest of the quantized graph reads for ``node`` (its output's
    dequantize, if it is quantized), and that quantization's scale and zero point."""
    for q in node.users:
        if q.op == "call_function" and "quantize_per_tensor" in str(q.target) and "dequantize" not in str(q.target):
            for dq in q.users:
                if "dequantize_per_tensor" in str(dq.target):
                    scale, zp = q.args[1], q.args[2]
                    ok = isinstance(scale, (int, float)) and isinstance(zp, int)
                    return dq, (float(scale) if ok else None), (int(zp) if ok else None)
    return node, None, None


class _Recorder(torch.fx.Interpreter):
    """Runs a graph module and keeps the values of the watched nodes."""

    def __init__(self, gm, watch: dict[str, str]) -> None:
        super().__init__(gm)
        self.watch = watch  # node name -> record key
        self.values: dict[str, torch.Tensor] = {}

    def fresh_run(self, *args) -> Any:
        """Run the graph, keeping this run's values only."""
        self.values = {}
        return self.run(*args)

    def run_node(self, n: Node) -> Any:
        out = super().run_node(n)
        key = self.watch.get(n.name)
        if key is not None and isinstance(out, torch.Tensor) and out.is_floating_point():
            self.values[key] = out.detach().clone()
        return out


def _keys(gm, program_names: set[str], buffer_of: dict[str, str]) -> dict[str, str]:
    """Per node of a prepared or converted graph, the exported-program node it stands for."""
    keys = {}
    for n in gm.graph.nodes:
        if n.op == "get_attr" and str(n.target) in buffer_of:
            keys[n.name] = buffer_of[str(n.target)]
        elif n.op in ("placeholder", "call_function") and not is_qdq(n, choose_qparams=True):
            source = _ancestor(n) or n.name
            if source in program_names:
                keys[n.name] = source
    return keys


def _record(target, float_gm, quant_gm, steps: int, ids, meta, sites, folded):
    """Run both graphs ``steps`` times; one NodeError per aligned node and step."""
    program = target.exported
    buffer_of = {s.target: s.arg.name for s in program.graph_signature.input_specs
                 if s.target is not None and s.arg.name in ids}
    float_keys = _keys(float_gm, set(ids), buffer_of)
    quant_keys = _keys(quant_gm, set(ids), buffer_of)
    # In the quantized graph, read each node's value after its output's quantize -> dequantize.
    quant_watch, qparams = {}, {}
    by_name = {n.name: n for n in quant_gm.graph.nodes}
    for name, key in quant_keys.items():
        read, scale, zp = _dequantized(by_name[name])
        quant_watch[read.name] = key
        qparams[key] = (scale, zp)
    # Where a site folded, the conv computes the mul's output: it stands for the mul.
    folded_conv = {sites[m][1].conv: sites[m][1].mul for m in folded if sites[m][1].conv and sites[m][1].mul}
    site_of = {}
    for site_id, nodes in sites.values():
        for role, name in (("conv", nodes.conv), ("mul", nodes.mul), ("state-write", nodes.state_write)):
            if name is not None:
                site_of.setdefault(name, (site_id, role))
    inputs_of = _recorded_inputs(quant_gm, quant_keys, folded_conv)

    float_rec, quant_rec = _Recorder(float_gm, float_keys), _Recorder(quant_gm, quant_watch)
    records, sim_outputs = [], []
    out_scales = _output_scales(quant_gm)
    with torch.no_grad():
        # Both graphs step side by side, each fed its own recurrent outputs back.
        # With a stream each step is fed its own frame, and a new sequence starts both from the initial state.
        initial = target.initial_buffers() if target.stream is not None and target.stream.sequence else {}
        both = zip(stepped(float_rec.fresh_run, target.inputs, target.recurrent, steps, target.stream,
                           lambda: reset_state(float_gm, initial)),
                   stepped(quant_rec.fresh_run, target.inputs, target.recurrent, steps, target.stream,
                           lambda: reset_state(quant_gm, initial)))
        for step, (_, q_out) in enumerate(both):
            sim_outputs.append([o.detach().clone() for o in q_out])
            by_source: dict[str, float] = {}
            step_records = []
            for key, q in quant_rec.values.items():
                source = folded_conv.get(key, key)  # a folded conv is compared with the float mul output
                f = float_rec.values.get(source if key not in folded_conv else key)
                if f is None or f.shape != q.shape:
                    continue
                err = (q.double() - f.double())
                s_db = sqnr(f.double(), err)
                by_source[source] = s_db
                module, op, order = meta[source]
                site, role = site_of.get(source, (None, ""))
                if key in folded_conv:
                    role = "folded-conv"
                elif source not in site_of:
                    role = {"input": "input", "state": "state", "copy_": "state-write"}.get(op, "")
                scale, zp = qparams.get(key, (None, None))
                step_records.append([source, module, op, site, role, order, s_db,
                                     float(err.abs().max()) if err.numel() else 0.0, scale, zp, key])
            for rec in step_records:
                source, key = rec[0], rec[-1]
                upstream = [by_source[i] for i in inputs_of.get(key, ()) if i in by_source]
                drop = (min(upstream) - rec[6]) if upstream and math.isfinite(min(upstream)) else None
                if drop is not None and not math.isfinite(drop):
                    drop = None
                records.append(NodeError(node=ids[source], name=source, module=rec[1], op=rec[2], site=rec[3],
                                         role=rec[4], order=rec[5], step=step,
                                         sqnr_db=rec[6], max_abs_error=rec[7], scale=rec[8], zero_point=rec[9], drop_db=drop))
    records.sort(key=lambda r: (r.step, r.order))
    return records, sim_outputs, out_scales


def _recorded_inputs(gm, keys: dict[str, str], folded_conv: dict[str, str]) -> dict[str, list[str]]:
    """Per recorded node (by key), the recorded nodes it reads, through quantize/dequantize chains."""
    by_name = {n.name: n for n in gm.graph.nodes}
    out = {}
    for name, key in keys.items():
        found, stack, seen = [], list(by_name[name].all_input_nodes), set()
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if n.name in keys and not is_qdq(n, choose_qparams=True):
                src = keys[n.name]
                found.append(folded_conv.get(src, src))
            elif is_qdq(n, choose_qparams=True):
                stack.extend(n.all_input_nodes)
        out[key] = found
    return out


def _output_scales(gm) -> list[float | None]:
    """Per flat output of a converted graph, the quantization step of its final dequantize (or None)."""
    scales = []
    for v in _graph.output_values(gm.graph):
        scale = v.args[1] if isinstance(v, Node) and "dequantize_per_tensor" in str(v.target) else None
        scales.append(float(scale) if isinstance(scale, (int, float)) else None)
    return scales


def _agreement(sim_outputs, tosa_outputs, scales) -> list[OutputAgreement]:
    out = []
    for step, (sim, tosa) in enumerate(zip(sim_outputs, tosa_outputs)):
        for i, (s, t) in enumerate(zip(sim, tosa)):
            scale = scales[i] if i < len(scales) else None
            if s.shape != t.shape:
                continue
            diff = float((s.double() - t.double()).abs().max()) if s.numel() else 0.0
            out.append(OutputAgreement(output=i, step=step, max_steps=diff / scale if scale else None, scale=scale))
    return out


def _site_errors(records, sites, folded, label: str, steps: int) -> list[SiteError]:
    by = {(r.name, r.step, r.role): r for r in records}
    out = []
    for mul_name, (site_id, nodes) in sites.items():
        is_folded = mul_name in folded
        for step in range(steps):
            conv = None if is_folded else by.get((nodes.conv, step, "conv"))
            mul = by.get((nodes.mul, step, "folded-conv" if is_folded else "mul"))
            write = by.get((nodes.state_write, step, "state-write")) if nodes.state_write else None
            out.append(SiteError(site=site_id, variant=label, folded=is_folded, step=step, conv=conv, mul=mul,
                                 state_write=write))
    return out


__all__ = ["Attribution", "NodeError", "OutputAgreement", "SiteError", "VariantAttribution", "attribution"]


def _attribute_in_worker(comparison, progress) -> Attribution:
    """``attribute`` in a worker of the warm pool, from the comparison's program archive."""
    run = getattr(comparison, "run", None)
    if run is None:
        raise InspectorError("this comparison was read from a file: run inspector.compare again to look inside it")
    task = AttributionTask(model=model_task(run.target), comparison=replace(comparison, run=None),
                           calibration=run.calibration, plans=run.plans)
    with _pool.warm_pool(1) as pool:
        pool.submit(("attribution", 0), ATTRIBUTION_TASK, task)
        for event in pool.events():
            kind = event[0]
            if kind == "progress":
                if progress is not None:
                    progress(event[2], event[3])
            elif kind == "done":
                return event[2]
            elif kind == "error":
                raise InspectorError(event[2], details=event[3])
            else:
                labels = ", ".join(r.variant.label for r in comparison.results)
                raise InspectorError(died_message(f"the attribution of {labels}", event[2]))
    raise InspectorError("the attribution's worker gave no answer")  # not reached: the pool reports every task


ATTRIBUTION_TASK = "attribution"


@task_kind(ATTRIBUTION_TASK)
def attribute_task(task: AttributionTask, report) -> Attribution:
    """The pool task of ``attribute``: the comparison rebuilt around the worker's copy of the target."""
    target = worker_target(task.model)
    comparison = replace(task.comparison, run=Run(target=target, calibration=task.calibration, plans=task.plans))
    return _attribute(comparison, report)
