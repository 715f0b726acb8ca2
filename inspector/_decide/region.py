"""Regions: the installed pass run on part of a stage graph, for re-deciding after a toggle.

A marker toggle changes which muls the state guard hides, usually for one site. Running
the pass on a private copy of the whole graph costs a copy of every node and, with an
exported program, ExecuTorch's constant-placeholder bookkeeping per fold, which is linear
in the graph (most of a toggle at 1,000 nodes). The pass's decisions are local, though: a
site's fold reads its mul, the mul's scale, its conv, the conv's users and the conv's
weight and bias, and a fold rewrites only those. So the sites fall into *clusters* that
cannot affect one another: a conv with the muls chained on it, joined with every other
conv that reads the same weight or bias (one fold of a shared weight changes what the
other reads, or what its scaled copy is called).

``run`` builds a small program from some clusters (and, for a picture, the nodes around
a site) - the region's nodes copied in graph order, what flows in from outside as inputs,
what flows out as outputs, the constants with their signature kinds - and runs the REAL
installed pass on it, with the guard's hidden muls given by name (the guard itself needs
the whole graph; the caller computes it there). Nothing outside the region changes.

Two things keep this honest: a region is only used where the whole-graph run is known to
agree (tests run both on random toggles of every sample at every stage and compare the
decisions, the scaled-weight names and the drawn picture), and every caller falls back to
the whole-graph run when a region cannot be built or its answer would reach past its edge
(``complete`` names the nodes whose every neighbour is inside).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any
from collections.abc import Iterable

import torch
from torch import fx
from torch.fx import Node

from .._doors import executorch as _executorch
from .._sites import graph as _graph
from .._rules.rules import run_pass


class RegionUnavailable(Exception):
    """This region cannot stand in for the whole graph: use the whole-graph run."""


@dataclass(kw_only=True)
class Layout:
    """What a pristine stage graph's regions are built from, computed once per stage graph."""

    cands: list  # _graph.Candidate of the pristine graph, in graph order
    ids: list[str]  # their site ids
    cluster_of: list[int]  # candidate index -> cluster index
    clusters: list[frozenset[str]]  # cluster index -> names of its nodes (convs, muls, weights, biases)
    order: dict[Node, int]  # node -> position in the graph
    by_name: dict[str, Node]  # node name -> node
    last_first: list[str]  # node names, last first
    muls: list[Node]  # every mul node (the guard may hide any of them)
    held: dict[str, str]  # node name -> "buffer" | "input": nodes holding carried state (whole graph)
    input_specs: dict[str, Any]  # placeholder name -> its InputSpec (exported programs)
    site_of: dict[Node, int]  # a site's mul -> its candidate index
    members: list[list[int]]  # cluster index -> its candidate indices, in order
    cluster_at: dict[Node, int]  # a site's conv or mul -> its cluster index
    mul_set: frozenset[Node]  # ``muls`` as a set


def build_layout(stage_graph) -> Layout:
    """The ``Layout`` of a pristine stage graph (its decider builds it once and keeps it)."""
    return _build_layout(stage_graph.graph_module.graph, stage_graph.program)


def _build_layout(graph: fx.Graph, program) -> Layout:
    cands = _graph.candidates(graph)
    signature = program.graph_signature if program is not None else None
    parent = list(range(len(cands)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[Any, int] = {}  # a node or a get_attr target -> the first candidate that holds it
    for i, c in enumerate(cands):
        for key in _cluster_keys(c):
            j = owner.setdefault(key, i)
            parent[find(i)] = find(j)
    roots: dict[int, int] = {}
    cluster_of = [roots.setdefault(find(i), len(roots)) for i in range(len(cands))]
    members: list[set[str]] = [set() for _ in roots]
    for i, c in enumerate(cands):
        members[cluster_of[i]].update(n.name for n in _cluster_nodes(c))
    specs = {s.arg.name: s for s in signature.input_specs if getattr(s.arg, "name", None)} if signature else {}
    held = {n.name: role for n, role in _graph.written_state(graph, signature).items()}
    nodes = list(graph.nodes)
    muls = [n for n in nodes if _graph.is_mul(n)]
    indices: list[list[int]] = [[] for _ in roots]
    cluster_at: dict[Node, int] = {}
    for i, c in enumerate(cands):
        indices[cluster_of[i]].append(i)
        cluster_at.setdefault(c.mul, cluster_of[i])
        cluster_at.setdefault(c.conv, cluster_of[i])
    return Layout(
        cands=cands, ids=_graph.site_ids(cands), cluster_of=cluster_of, clusters=[frozenset(m) for m in members],
        order={n: i for i, n in enumerate(nodes)}, by_name={n.name: n for n in nodes},
        last_first=[n.name for n in reversed(nodes)], muls=muls, held=held, input_specs=specs,
        site_of={c.mul: i for i, c in enumerate(cands)}, members=indices, cluster_at=cluster_at,
        mul_set=frozenset(muls),
    )


def _cluster_nodes(c) -> list[Node]:
    """The nodes a site's fold reads and rewrites: conv, weight, bias, the mul chain and its scales (and the
    views between conv and mul, for a site behind one)."""
    nodes = [c.conv, c.mul, *c.path] + ([c.via] if c.via is not None else [])
    nodes += [a for a in c.conv.args[1:3] if isinstance(a, Node)]
    if isinstance(c.scale, Node):
        nodes.append(c.scale)
    return nodes


def _cluster_keys(c) -> list[Any]:
    """What joins two sites into one cluster: their conv, or a weight or bias they share (by node, and
    by get_attr target: two get_attr nodes of one tensor share it too)."""
    keys: list[Any] = [c.conv]
    for a in c.conv.args[1:3]:
        if isinstance(a, Node):
            keys.append(a)
            if a.op == "get_attr":
                keys.append(("attr", str(a.target)))
    return keys


@dataclass(kw_only=True)
class Region:
    """The installed pass's run on a region: the rewritten region and what it folded."""

    graph_module: fx.GraphModule  # the region after the pass
    program: Any  # its ExportedProgram (aten, edge) or None (tfa)
    folded: tuple[str, ...]  # mul names the pass folded, in order
    complete: frozenset[str]  # nodes whose every neighbour, before and after the pass, is in the region
    names: frozenset[str]  # the region's nodes of the stage graph
    stand_ins: frozenset[str]  # nodes standing for the outside: the values flowing in, the region's output
    outside_users: dict[str, int]  # region node -> how many of its users lie outside (fed via the output)
    own_outputs: int  # how many of the region's output values are the whole graph's own outputs (first)

    def folded_args(self) -> dict[str, tuple[str | None, str | None]]:
        """conv name -> (weight, bias) node names it reads after the pass."""
        out = {}
        for n in self.graph_module.graph.nodes:
            if _graph.is_conv(n):
                out[n.name] = tuple(a.name if isinstance(a, Node) else None for a in n.args[1:3])
        return out


def for_drawing(region: Region) -> Region:
    """``region`` with its output holding the whole graph's own outputs only (in place: the region is
    private): the values it carried out to the rest of the graph were edges of no real graph, and a
    picture shows the rest of the graph as counts (``outside_users``) instead."""
    out = next(n for n in reversed(region.graph_module.graph.nodes) if n.op == "output")
    values = out.args[0] if isinstance(out.args[0], (list, tuple)) else (out.args[0],)
    out.args = (tuple(values[:region.own_outputs]),)
    return region


def cluster_names(lay: Layout, indices: Iterable[int]) -> set[str]:
    names: set[str] = set()
    for k in indices:
        names |= lay.clusters[k]
    return names


def around(lay: Layout, seeds: Iterable[Node], hops: int, hub_degree: int) -> set[str]:
    """The names of the nodes a picture of ``hops`` around ``seeds`` can reach, with every cluster they
    touch whole: a breadth-first walk of ``hops + 2`` (the border's neighbours are counted in the
    picture, and a fold can bring a node one edge nearer), not through hubs."""
    seen = set(seeds)
    frontier = list(seen)
    for depth in range(hops + 2):
        nxt = []
        for n in frontier:
            if depth > 0 and len(n.users) + len(n.all_input_nodes) > hub_degree:
                continue
            for m in (*n.all_input_nodes, *n.users):
                if m not in seen:
                    seen.add(m)
                    nxt.append(m)
        frontier = nxt
    names = {n.name for n in seen}
    touched = {lay.cluster_at[n] for n in seen if n in lay.cluster_at}
    return names | cluster_names(lay, touched)


def _standing_alone(stage_graph, lay: Layout, names: set[str]):
    """``_build``, any failure to copy the region out on its own a ``RegionUnavailable``."""
    try:
        return _build(stage_graph, lay, names)
    except RegionUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - this region cannot be copied out on its own
        raise RegionUnavailable(f"the region cannot stand alone: {exc}") from None


def run(stage_graph, lay: Layout, names: set[str], rule, hidden: frozenset[str], marked: Iterable[str] = (),
        site_ids: dict[str, str] | None = None) -> Region:
    """Run ``rule``'s installed pass on the region ``names`` of ``stage_graph`` (never modified).

    ``hidden``: the muls the state guard hides, by name (computed on the whole graph);
    ``marked``: nodes to mark carried state in the region, for the picture. Raises
    ``RegionUnavailable`` when the region cannot be built as a program of its own; a crash of
    the pass propagates (the caller re-runs the whole graph, which reports it as the user sees it).
    ``lay`` is ``stage_graph``'s layout; ``site_ids``: mul name -> site id of the whole graph.
    """
    built = _standing_alone(stage_graph, lay, names)
    gm = built.graph_module
    by_name = {n.name: n for n in gm.graph.nodes}
    for name in marked:
        if name in by_name:
            _graph.set_marker(by_name[name])
    before = set(by_name)
    fold = run_pass(gm, built.program, rule, stage=stage_graph.stage, hidden=frozenset(hidden) & built.names,
                    site_ids=site_ids)
    after = {n.name for n in gm.graph.nodes}
    created = after - before  # the scaled weights and biases: their only user is their conv
    return Region(graph_module=gm, program=built.program, folded=tuple(fold.folded),
                  complete=frozenset((built.complete & after) | created), names=built.names,
                  stand_ins=frozenset(before) - built.names, outside_users=built.outside_users, own_outputs=built.own_outputs)


def pristine(stage_graph, lay: Layout, names: set[str]) -> Region:
    """The region ``names`` of ``stage_graph`` as it is, the pass not run, ready to draw (see
    ``for_drawing``): what a focused picture of the graph before the pass is drawn from. Raises
    ``RegionUnavailable`` when the region cannot be built as a program of its own."""
    built = _standing_alone(stage_graph, lay, names)
    inside = frozenset(n.name for n in built.graph_module.graph.nodes)
    return for_drawing(Region(graph_module=built.graph_module, program=built.program, folded=(),
                              complete=built.complete, names=built.names,
                              stand_ins=inside - built.names, outside_users=built.outside_users, own_outputs=built.own_outputs))


@dataclass(kw_only=True)
class _Built:
    graph_module: fx.GraphModule  # the region, before the pass
    program: Any  # its ExportedProgram, or None at tfa
    names: frozenset[str]  # the stage graph's nodes in it
    complete: frozenset[str]  # those whose every neighbour is in it too
    outside_users: dict[str, int]  # node name -> how many of its users are not in it
    own_outputs: int  # how many output values are the whole graph's own outputs (they come first)


def _build(stage_graph, lay: Layout, names: set[str]) -> _Built:
    """The region ``names`` of ``stage_graph`` as a program of its own (the stage graph is only read)."""
    program = stage_graph.program
    source = [lay.by_name[name] for name in names if name in lay.by_name]
    inside = set(source)
    # Constants and inputs the region reads come in as they are; values computed outside become inputs.
    for n in source:
        for m in n.all_input_nodes:
            if m not in inside and m.op in ("placeholder", "get_attr"):
                inside.add(m)
    nodes = sorted(inside, key=lay.order.__getitem__)
    outside_inputs: dict[Node, None] = {}
    for n in nodes:
        for m in n.all_input_nodes:
            if m not in inside:
                outside_inputs[m] = None
    complete = frozenset(n.name for n in nodes
                         if all(m in inside for m in n.all_input_nodes) and all(u in inside for u in n.users))
    outside_users = {n.name: k for n in nodes if (k := sum(1 for u in n.users if u not in inside))}

    # Nodes keep their order. The values flowing in come first at tfa (where get_attr nodes may
    # precede placeholders), and after the stage program's own placeholders in a program (whose
    # constants must precede its user inputs).
    graph = fx.Graph()
    env: dict[Node, Node] = {}
    placeholders = [n for n in nodes if n.op == "placeholder"] if program is not None else []
    for n in placeholders:
        env[n] = graph.node_copy(n)
    for m in outside_inputs:
        p = graph.placeholder(m.name)
        p.meta = copy.copy(m.meta)
        env[m] = p
    real_output = next((n for n in nodes if n.op == "output"), None)
    for n in nodes:
        if n not in env and n is not real_output:
            env[n] = graph.node_copy(n, env.__getitem__)
    # What flows out to users outside leaves through the region's output, after the whole graph's own
    # outputs when that is in the region (``own_outputs``): the others are not the graph's edges.
    carried = [n for n in nodes if any(u not in inside for u in n.users)]
    returned: list = []
    if real_output is not None:
        value = real_output.args[0]
        returned = [fx.map_arg(v, env.__getitem__) for v in (value if isinstance(value, (list, tuple)) else [value])]
    out = graph.output(tuple(returned) + tuple(env[n] for n in carried))
    if real_output is not None:
        out.meta = copy.copy(real_output.meta)
        env[real_output] = out
    renamed = [m.name for m in (*nodes, *outside_inputs) if env[m].name != m.name]
    if renamed:
        raise RegionUnavailable(f"node {renamed[0]} was renamed in the region")
    names_inside = frozenset(n.name for n in nodes)
    if program is None:
        gm = _executorch.lazy_graph_module_of(_attributes(stage_graph.graph_module, nodes), graph)
        return _Built(graph_module=gm, program=None, names=names_inside, complete=complete,
                      outside_users=outside_users, own_outputs=len(returned))
    if any(n.op == "get_attr" for n in nodes):
        raise RegionUnavailable("the region reads a submodule")
    region_program = _program(program, lay, graph, placeholders, list(outside_inputs), returned,
                              [env[n] for n in carried])
    return _Built(graph_module=region_program.graph_module, program=region_program, names=names_inside,
                  complete=complete, outside_users=outside_users, own_outputs=len(returned))


def _attributes(root: torch.nn.Module, nodes: list[Node]) -> torch.nn.Module:
    """A module holding copies of the get_attr targets ``nodes`` read, as parameters, buffers or plain
    attributes like in ``root`` (the pass writes scaled weights into them in place at tfa)."""
    holder = torch.nn.Module()
    for n in nodes:
        if n.op != "get_attr":
            continue
        *path, leaf = str(n.target).split(".")
        src, dst = root, holder
        for part in path:
            src = getattr(src, part)
            if not hasattr(dst, part):
                dst.add_module(part, torch.nn.Module())
            dst = getattr(dst, part)
        if hasattr(dst, leaf):
            continue
        value = getattr(src, leaf)
        if isinstance(value, torch.nn.Parameter):
            dst.register_parameter(leaf, torch.nn.Parameter(value.detach().clone(), value.requires_grad))
        elif leaf in getattr(src, "_buffers", {}):
            dst.register_buffer(leaf, value.clone() if isinstance(value, torch.Tensor) else value,
                                persistent=leaf not in src._non_persistent_buffers_set)
        elif isinstance(value, torch.Tensor):
            setattr(dst, leaf, value.clone())
        else:
            raise RegionUnavailable(f"get_attr {n.target} is a {type(value).__name__}")
    return holder


def _program(program, lay: Layout, graph: fx.Graph, placeholders: list[Node], outside: list[Node],
             returned: list, outputs: list[Node]):
    """The region as an ExportedProgram: the stage program's specs and tensors for its constants and
    inputs (tensors shared: the pass adds scaled copies and never writes into them), and the values
    flowing in and out as user inputs and outputs."""
    # lazy: only a region built as a program needs the spec classes
    from torch.export.graph_signature import (ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec,
                                              TensorArgument)

    specs = [lay.input_specs[n.name] for n in placeholders]
    for m in outside:
        if not isinstance(m.meta.get("val"), torch.Tensor):
            raise RegionUnavailable(f"{m.name} flows into the region and is not a tensor")
        specs.append(InputSpec(InputKind.USER_INPUT, TensorArgument(m.name), None))
    for o in outputs:
        if not isinstance(o.meta.get("val"), torch.Tensor):
            raise RegionUnavailable(f"{o.name} flows out of the region and is not a tensor")
    # The whole graph's own outputs keep their specs (what they write into state is read from them).
    output_specs = list(program.graph_signature.output_specs) if returned else []
    if len(output_specs) != len(returned):
        raise RegionUnavailable("the graph's outputs do not match its signature")
    output_specs += [OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(o.name), None) for o in outputs]
    signature = ExportGraphSignature(specs, output_specs)
    state_dict, constants = {}, {}
    for spec in specs:
        if spec.target is None:
            continue
        if spec.target in program.state_dict:
            state_dict[spec.target] = program.state_dict[spec.target]
        elif spec.target in program.constants:
            constants[spec.target] = program.constants[spec.target]
    return _executorch.program_like(program, graph, signature, state_dict, constants)
