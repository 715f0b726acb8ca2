"""Graph facts the analysis needs: sites, stable ids, constants, state reachability.

Everything here is a read-only query over an FX graph; nothing is rewritten.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Iterable

import torch
from torch.fx import Node

from .._doors import executorch as _executorch
from .._base.cache import FactTable, WeakCache
from .._base.lineage import source_name as source_name  # the sites' callers read it here
from torch.export.graph_signature import InputKind, OutputKind

CARRIED_STATE_KEY = "carried_quant_state"
# A node with more neighbours ends a neighbourhood walk: a focused picture and the region it is drawn
# from stop at the same hubs (the input every block reads).
HUB_DEGREE = 10

_MUL_OPS = {"mul.Tensor", "mul.Scalar", "mul_.Tensor", "mul_.Scalar"}
_CONV_PACKETS = {
    "conv1d", "conv2d", "conv3d", "convolution", "_convolution",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
}
# Ops a conv output can pass through on its way to a mul the pass never matches (it matches a mul on the
# conv itself): views of it (a site "behind a view"), and, in the lowering of the INT flow, the integer
# RESCALE and the quantize/dequantize ops that carry the quantized value ("quantized-graph").
VIEW_OPS = frozenset({
    "view", "_unsafe_view", "reshape", "permute", "squeeze", "unsqueeze", "flatten", "transpose", "t",
    "view_copy", "permute_copy", "squeeze_copy", "unsqueeze_copy", "transpose_copy", "t_copy",
})
QUANTIZED_OPS = frozenset({
    "tosa.RESCALE", "quantized_decomposed.quantize_per_tensor", "quantized_decomposed.dequantize_per_tensor",
    "quantized_decomposed.quantize_per_channel", "quantized_decomposed.dequantize_per_channel",
})
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


# Facts about op overloads (process-wide singletons, few per graph), looked up per node many times.
# Only overloads are kept: a plain Python function target may hold anything (a closure over a model).
_OP_FACTS = FactTable(4096, "op facts")  # (fact, op overload) -> fact(op overload)


def _op_fact(fact: Callable[[Any], Any], target: Any) -> Any:
    """``fact(target)``, computed once per op overload."""
    key = (fact, target)
    value = _OP_FACTS.get(key, _OP_FACTS)
    if value is _OP_FACTS:
        value = fact(target)
        if hasattr(target, "_overloadname") and hasattr(target, "_schema"):
            _OP_FACTS.put(key, value)
    return value


def op_name(node: Node) -> str:
    """``aten.conv2d.default`` for aten and edge ops alike ("" for non-ops)."""
    if node.op != "call_function":
        return ""
    return _op_fact(_target_name, node.target)


def _target_name(target: Any) -> str:
    name = getattr(target, "_name", None) or getattr(target, "__name__", None) or str(target)
    name = str(name).replace("::", ".")
    overload = getattr(target, "_overloadname", None)
    if overload is not None and not name.endswith("." + overload):
        name = f"{name}.{overload}"
    if not name.startswith("aten.") and "aten." in name:
        name = name[name.index("aten."):]
    return name if name.startswith("aten.") else name


def is_mul(node: Node) -> bool:
    name = op_name(node)
    return name.startswith("aten.") and name[len("aten."):] in _MUL_OPS


def is_conv(node: Node) -> bool:
    """Any convolution-family op, transposed too, whether or not the pass matches it."""
    name = op_name(node)
    parts = name.split(".")
    return len(parts) >= 2 and parts[0] == "aten" and parts[1] in _CONV_PACKETS


def is_view(node: Node) -> bool:
    """A view of its first argument: view, reshape, permute, squeeze, unsqueeze, flatten, transpose (and the
    edge dialect's ``*_copy`` forms)."""
    parts = op_name(node).split(".")
    return len(parts) >= 2 and parts[0] == "aten" and parts[1] in VIEW_OPS


def is_quantized_carrier(node: Node) -> bool:
    """An op that carries a quantized value: TOSA's RESCALE, a quantize or dequantize (lowering, INT flow)."""
    return op_name(node).rpartition(".")[0] in QUANTIZED_OPS


def _passes_through(node: Node) -> bool:
    return node.op == "call_function" and bool(node.args) and isinstance(node.args[0], Node) and (
        is_view(node) or is_quantized_carrier(node))


def is_transposed(conv: Node) -> bool:
    parts = op_name(conv).split(".")
    if parts[1].startswith("conv_transpose"):
        return True
    if parts[1] in ("convolution", "_convolution") and len(conv.args) > 6:
        return bool(conv.args[6])
    return False


def marked(node: Node, top_level_only: bool = False) -> bool:
    """Whether ``node`` carries the carried-state marker, top-level or in ``meta["custom"]``
    (``top_level_only``: the top-level key alone, as executorch PR #21234 reads it)."""
    if node.meta.get(CARRIED_STATE_KEY):
        return True
    custom = node.meta.get("custom") or {}
    return not top_level_only and isinstance(custom, dict) and bool(custom.get(CARRIED_STATE_KEY))


def marked_in_custom_only(node: Node) -> bool:
    """The marker is in ``meta["custom"]`` but not top-level: a guard reading the top-level key misses it."""
    return marked(node) and not marked(node, top_level_only=True)


def set_marker(node: Node) -> None:
    """Mark ``node`` the way upstream reads it, and in ``meta["custom"]``, which survives re-export."""
    node.meta[CARRIED_STATE_KEY] = True
    custom = node.meta.get("custom")
    custom = dict(custom) if isinstance(custom, dict) else {}
    custom[CARRIED_STATE_KEY] = True
    node.meta["custom"] = custom


# ---------------------------------------------------------------- candidates


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A mul whose operand is (through earlier same-conv muls, or through views and quantized values) a
    convolution."""

    mul: Node
    conv: Node
    scale: Any  # the other operand: a Node or a Python number
    via: Node | None  # the earlier mul between conv and this one (``conv(x) * a * b``), if any
    path: tuple[Node, ...] = ()  # the views or quantized values between conv and mul (empty: the mul reads the conv)

    @property
    def route(self) -> str:
        """The way from the conv (or the earlier mul it follows) to the mul in node names: ``conv2d -> view -> mul``."""
        start = self.via if self.via is not None else self.conv
        return " -> ".join(n.name for n in (start, *self.path, self.mul))


def _behind(operand: Node, found) -> tuple[Node, tuple[Node, ...]] | None:
    """(the node, the nodes between) when ``operand`` is, through views or quantized values, a node ``found``
    accepts (a conv, or an earlier site's mul)."""
    path: list[Node] = []
    node = operand
    while _passes_through(node) and len(path) < 16:
        path.append(node)
        node = node.args[0]
        if found(node):
            return node, tuple(reversed(path))
    return None


def candidates(graph: torch.fx.Graph) -> list[Candidate]:
    """Every site in graph order, near-misses, chained muls and muls behind a view (or, in a quantized graph,
    behind RESCALE or quantize/dequantize) included."""
    found: list[Candidate] = []
    by_mul: dict[Node, Candidate] = {}
    for node in graph.nodes:
        if not is_mul(node):
            continue
        operands = node.args[:2]
        cand = None
        for i, operand in enumerate(operands):
            if not isinstance(operand, Node):
                continue
            other = operands[1 - i] if len(operands) > 1 else None
            if is_conv(operand):
                cand = Candidate(mul=node, conv=operand, scale=other, via=None)
            elif operand in by_mul and isinstance(other, (int, float, Node)) and not (
                isinstance(other, Node) and (is_conv(other) or other in by_mul)
            ):
                cand = Candidate(mul=node, conv=by_mul[operand].conv, scale=other, via=operand)
            else:
                continue
            break
        if cand is None:  # only when the mul reads no conv itself: a direct site is what the pass matches
            for i, operand in enumerate(operands):
                if not isinstance(operand, Node):
                    continue
                other = operands[1 - i] if len(operands) > 1 else None
                behind = _behind(operand, is_conv)
                if behind is not None:
                    cand = Candidate(mul=node, conv=behind[0], scale=other, via=None, path=behind[1])
                    break
                behind = _behind(operand, by_mul.__contains__)  # an earlier site's mul, seen through them
                if behind is not None:
                    cand = Candidate(mul=node, conv=by_mul[behind[0]].conv, scale=other, via=behind[0], path=behind[1])
                    break
        if cand is not None:
            found.append(cand)
            by_mul[node] = cand
    return found


# ---------------------------------------------------------------- identity


def _user_frame(node: Node) -> tuple[str, int] | None:
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    if not frames:
        return None
    path, line, _ = frames[-1]
    return os.path.basename(path), int(line)


def module_path(node: Node) -> str:
    """The dotted path of the innermost module that produced ``node`` ("" at the root)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    # strict export spells paths L['self'].block.conv or L__self___block_conv; keep the dotted form
    return re.sub(r"^L\['self'\]\.?|^L__self__\.?", "", str(path))


def original_name(node: Node) -> str:
    """The name the node had when first traced (``from_node`` chain), else its name."""
    chain = node.meta.get("from_node") or []
    first = chain[0] if chain else None
    while first is not None and getattr(first, "from_node", None):
        first = first.from_node[0]
    return getattr(first, "name", None) or node.name


def site_ids(cands: Iterable[Candidate]) -> list[str]:
    """Stable ids ``<conv module>@<file>:<line>`` (``#k`` when several muls share a line).

    Built from module path and source location, which survive every stage, never
    from ``debug_handle`` (changes between runs) or node names (renamed at edge).
    """
    bases = []
    for c in cands:
        frame = _user_frame(c.mul)
        where = f"{frame[0]}:{frame[1]}" if frame else original_name(c.mul)
        bases.append(f"{module_path(c.conv) or 'root'}@{where}")
    return unique_ids(bases)


def location(node: Node) -> str:
    frame = _user_frame(node)
    return f"{frame[0]}:{frame[1]}" if frame else ""


# ---------------------------------------------------------------- constants


# program -> (its signature's size, its constant lookup): dies with the program (the lookup
# holds the program only weakly).
_LOOKUPS = WeakCache("constant lookups")


def _lookup(program):
    """The program's constant lookup, rebuilt when its signature grows (a fold adds constants)."""
    size = len(program.graph_signature.input_specs)
    entry = _LOOKUPS.get(program)
    if entry is None or entry[0] != size:
        entry = (size, _executorch.constant_lookup(program))
        _LOOKUPS.put(program, entry)
    return entry[1]


def constant_tensor(node: Any, program: Any) -> torch.Tensor | None:
    """The tensor behind a constant node as the pass reads it, or None if it is not constant."""
    if not isinstance(node, Node):
        return None
    if program is not None:
        t = _lookup(program)(node)
        return t if isinstance(t, torch.Tensor) else None
    if node.op != "get_attr":
        return None
    owner = node.graph.owning_module
    if owner is None:
        return None
    target = str(node.target)
    for getter in (owner.get_parameter, owner.get_buffer):
        try:
            return getter(target)
        except AttributeError:
            pass
    t = getattr(owner, target, None)
    return t if isinstance(t, torch.Tensor) else None


def constant_behind(node: Any, program: Any) -> tuple[torch.Tensor, Node] | None:
    """(tensor, its node) for a constant seen through RESCALE, quantize/dequantize and views (a scale in the
    lowering of the INT flow), or None when ``node`` is not such a constant."""
    seen = 0
    while isinstance(node, Node) and seen < 16:
        tensor = constant_tensor(node, program)
        if tensor is not None:
            return tensor, node
        if not _passes_through(node):
            return None
        node, seen = node.args[0], seen + 1
    return None


def value_meta(node: Any):
    """The fake/meta value recorded for a node (shape and dtype), or None."""
    if isinstance(node, Node):
        v = node.meta.get("val")
        return v if hasattr(v, "shape") else None
    return None


# ---------------------------------------------------------------- state reachability


@dataclass(kw_only=True)
class StateReach:
    """For each state-boundary kind, which nodes reach a boundary and the next hop towards it.

    Computed in one backward sweep over the graph for all sites at once.
    """

    next_hop: dict[str, dict[Node, Node]] = field(default_factory=dict)
    # boundary node -> human description ("buffer 'state'", "marker on mul_1")
    boundary: dict[Node, str] = field(default_factory=dict)
    terminal: set[Node] = field(default_factory=set)  # the writes into state: a path ends there

    def reaches(self, kind: str, node: Node) -> bool:
        return node in self.next_hop.get(kind, {})

    def kinds(self, node: Node) -> tuple[str, ...]:
        """The boundary kinds ``node`` reaches, markers first (the order the guard reports them)."""
        return tuple(k for k in (MARKER, BUFFER, INPUT) if self.reaches(k, node))

    def path(self, kind: str, node: Node) -> list[Node]:
        """Nodes from ``node`` to the boundary it reaches (inclusive)."""
        hops = self.next_hop.get(kind, {})
        out = [node]
        cur = node
        while cur in hops and hops[cur] is not cur and len(out) <= len(hops) + 1:
            cur = hops[cur]
            out.append(cur)
        return out


BUFFER, INPUT, MARKER = "feeds-buffer-mutation", "feeds-input-mutation", "marked-carried-state"


@dataclass(frozen=True, kw_only=True)
class StateWrite:
    """One place where a graph writes carried state: the boundary a state path ends at."""

    node: Node  # the writing node: an in-place op (copy_ into a buffer or input), or the output node
    kind: str  # BUFFER or INPUT
    target: str  # the buffer or input written into
    via: str  # "in-place" (visible in the graph) or "signature" (a mutation output of the graph signature)
    sources: tuple[Node, ...]  # the values written

    @property
    def description(self) -> str:
        what = "buffer" if self.kind == BUFFER else "input"
        if self.via == "signature":
            return f"{what} '{self.target}' (graph signature)"
        return f"{self.node.name} writes into {what} '{self.target}'"


def _writes_first_argument(target: Any) -> bool:
    """Whether ``target``'s schema says it writes into its first argument."""
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.arguments:
        return False
    info = schema.arguments[0].alias_info
    return info is not None and bool(info.is_write)


def _inplace_destination(node: Node) -> Node | None:
    """The node ``node`` writes into in place (its first argument, if the schema says it is written)."""
    if node.op != "call_function" or not node.args:
        return None
    dest = node.args[0]
    return dest if isinstance(dest, Node) and _op_fact(_writes_first_argument, node.target) else None


def state_writes(graph: torch.fx.Graph, signature: Any = None) -> list[StateWrite]:
    """Every node that writes carried state, and into what: the one definition of a state boundary.

    Two ways, both reported: an in-place op writing into a ``get_attr`` buffer or a
    placeholder (how the graph shows it at tfa and aten), and a ``BUFFER_MUTATION`` /
    ``USER_INPUT_MUTATION`` output of an exported program's ``signature`` (at edge).
    """
    writes: list[StateWrite] = []
    nodes = list(graph.nodes)
    buffer_inputs: set[str] = set()
    if signature is not None:

        buffer_inputs = {s.arg.name for s in signature.input_specs if s.kind == InputKind.BUFFER}
        out = next((n for n in reversed(nodes) if n.op == "output"), None)
        if out is not None:
            for spec, value in zip(signature.output_specs, output_values(graph)):
                if isinstance(value, Node) and spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION):
                    kind = BUFFER if spec.kind == OutputKind.BUFFER_MUTATION else INPUT
                    writes.append(StateWrite(node=out, kind=kind, target=str(spec.target), via="signature",
                                             sources=(value,)))
    for n in nodes:
        dest = _inplace_destination(n)
        if dest is None or dest.op not in ("get_attr", "placeholder"):
            continue
        kind = BUFFER if dest.op == "get_attr" or dest.name in buffer_inputs else INPUT
        sources = tuple(src for src in n.all_input_nodes if src is not dest)
        writes.append(StateWrite(node=n, kind=kind, target=str(dest.target), via="in-place", sources=sources))
    return writes


def placeholder_roles(signature: Any = None) -> tuple[set[str], set[str]]:
    """(placeholder names of buffers, placeholder names of parameters, buffers and constants)
    by an exported program's graph signature (empty sets without one)."""
    if signature is None:
        return set(), set()

    buffers, constants = set(), set()
    for spec in signature.input_specs:
        name = getattr(spec.arg, "name", None)
        if name is None:
            continue
        if spec.kind == InputKind.BUFFER:
            buffers.add(name)
        if spec.kind != InputKind.USER_INPUT:
            constants.add(name)
    return buffers, constants


def written_state(graph: torch.fx.Graph, signature: Any = None,
                  writes: list[StateWrite] | None = None) -> dict[Node, str]:
    """The nodes that hold carried state (buffers and inputs written back), as ``"buffer"`` or ``"input"``
    (``writes``: the graph's ``state_writes``, when the caller has them already)."""
    held: dict[Node, str] = {}
    by_target: dict[str, Node] = {}
    by_name: dict[str, Node] = {}
    for n in graph.nodes:
        if n.op in ("get_attr", "placeholder"):
            by_target[str(n.target)] = n
            by_name[n.name] = n
    if signature is not None:
        for spec in signature.input_specs:
            if spec.target is not None and getattr(spec.arg, "name", None):
                by_target[str(spec.target)] = by_name.get(spec.arg.name)
    for w in state_writes(graph, signature) if writes is None else writes:
        node = by_target.get(w.target)
        if w.via == "in-place" and w.node.args and isinstance(w.node.args[0], Node):
            node = w.node.args[0]
        if node is not None:
            held[node] = "buffer" if w.kind == BUFFER else "input"
    return held


def state_reach(
    graph: torch.fx.Graph,
    signature: Any = None,
    *,
    in_place_writes: bool = False,
    markers: bool = True,
    also_marked: Iterable[Node] = (),
    top_level_markers: bool = False,
    memo: ReachMemo | None = None,
) -> StateReach:
    """Which nodes feed carried state: signature mutations, optional in-place writes, markers.

    ``signature`` is an ExportedProgram's graph signature (None for a bare GraphModule).
    With ``in_place_writes`` an in-place op writing into a ``get_attr`` buffer or a
    placeholder counts as a boundary too (visible where no signature exists).
    ``also_marked``: nodes read as marked besides those whose meta says so (markers applied
    without writing them into a shared graph). ``top_level_markers``: a marker counts only in the
    top-level ``meta["carried_quant_state"]`` (not in ``meta["custom"]``). ``memo``: what this
    reads of ``graph`` that no marker changes, kept by the owner of a graph that is never
    modified (a decider's pristine stage graph); the answer is the same.
    """
    if memo is not None and (memo.graph is not graph or memo.signature is not signature):
        memo = None
    reach = memo.boundaries(in_place_writes) if memo is not None else boundary_reach(graph, signature,
                                                                                    in_place_writes=in_place_writes)
    if not markers:
        return reach
    also_marked = set(also_marked)
    if memo is not None:
        seeds = sorted(also_marked.union(memo.meta_marked(top_level_markers)), key=memo.order.__getitem__)
    else:
        seeds = [n for n in graph.nodes if n in also_marked or marked(n, top_level_markers)]
    return with_markers(reach, seeds)


def boundary_reach(graph: torch.fx.Graph, signature: Any = None, *, in_place_writes: bool = False) -> StateReach:
    """``state_reach`` without markers: the paths to the state the graph writes (one backward sweep)."""
    reach = StateReach(next_hop={BUFFER: {}, INPUT: {}, MARKER: {}})
    nodes = list(graph.nodes)
    for w in state_writes(graph, signature):
        if w.via == "in-place" and not in_place_writes:
            continue
        reach.boundary.setdefault(w.node, w.description)
        reach.terminal.add(w.node)
        for src in w.sources:
            reach.next_hop[w.kind].setdefault(src, w.node)
    terminal, kinds = reach.terminal, (reach.next_hop[BUFFER], reach.next_hop[INPUT])
    # One backward sweep: users come after their producers in an FX graph.
    for n in reversed(nodes):
        for user in n.users:
            if user in terminal:
                continue
            for hops in kinds:
                if user in hops and n not in hops:
                    hops[n] = user
    return reach


def with_markers(reach: StateReach, seeds: Iterable[Node]) -> StateReach:
    """``reach`` (no markers) with the marker boundaries ``seeds`` (in graph order) added: a new
    ``StateReach`` sharing the other kinds' tables. Only the markers' ancestors are visited: a node
    reaches a marker when one of its users does (a write into state ends a path), and its next hop
    is the first such user, as a sweep of the whole graph finds it."""
    seeds = list(seeds)
    terminal = reach.terminal
    hops: dict[Node, Node] = {n: n for n in seeds}
    reached = set(seeds)
    stack = [n for n in seeds if n not in terminal]
    while stack:
        for p in stack.pop().all_input_nodes:
            if p not in reached:
                reached.add(p)
                if p not in terminal:
                    stack.append(p)
    for n in reached:
        if n not in hops:
            hops[n] = next(u for u in n.users if u not in terminal and u in reached)
    next_hop = {k: h for k, h in reach.next_hop.items() if k != MARKER}
    next_hop[MARKER] = hops
    boundary = dict(reach.boundary)
    for n in seeds:
        boundary[n] = f"marker on {n.name}"
    return StateReach(next_hop=next_hop, boundary=boundary, terminal=terminal)


class ReachMemo:
    """What ``state_reach`` reads of a graph that is never modified, computed once: the reach of the
    state it writes (per ``in_place_writes``) and the nodes whose meta carries a marker (per
    ``top_level_markers``). Its owner keeps it with the graph (a decider with its stage graph);
    the tables handed out are shared, never to be changed."""

    def __init__(self, graph: torch.fx.Graph, signature: Any = None, order: dict | None = None) -> None:
        self.graph, self.signature = graph, signature
        self.order = order if order is not None else {n: i for i, n in enumerate(graph.nodes)}
        self._boundaries: dict[bool, StateReach] = {}
        self._marked: dict[bool, tuple[Node, ...]] = {}

    def boundaries(self, in_place_writes: bool) -> StateReach:
        if in_place_writes not in self._boundaries:
            self._boundaries[in_place_writes] = boundary_reach(self.graph, self.signature,
                                                               in_place_writes=in_place_writes)
        return self._boundaries[in_place_writes]

    def meta_marked(self, top_level_markers: bool) -> tuple[Node, ...]:
        if top_level_markers not in self._marked:
            self._marked[top_level_markers] = tuple(n for n in self.graph.nodes if marked(n, top_level_markers))
        return self._marked[top_level_markers]


# ---------------------------------------------------------------- outputs, recurrence, ids


def output_values(graph: torch.fx.Graph, signature: Any = None, user_only: bool = False) -> list:
    """What the graph's output node returns, flattened in order (nested lists and tuples opened):
    nodes, or the constants and Nones a graph may return. With ``user_only`` and an exported
    program's ``signature``, only the user outputs (not the mutated buffers and inputs it returns
    too). Empty without an output node."""
    out = next((n for n in reversed(graph.nodes) if n.op == "output"), None)
    if out is None or not out.args:
        return []
    values: list = []
    stack = [out.args[0]]
    while stack:
        value = stack.pop()
        if isinstance(value, (list, tuple)):
            stack.extend(reversed(value))
        else:
            values.append(value)
    if user_only and signature is not None:

        values = [v for v, spec in zip(values, signature.output_specs) if spec.kind == OutputKind.USER_OUTPUT]
    return values


def recurrent_reach(graph: torch.fx.Graph, signature: Any, recurrent: dict) -> dict[Node, int]:
    """Nodes reaching a user output the model declares recurrent (``recurrent``: output index ->
    input index, a model's ``RECURRENT``) -> that output's index; the output values included.

    One backward sweep; a node reaching several recurrent outputs takes the index its first
    reaching user (in ``users`` order) takes.
    """
    if not recurrent:
        return {}
    values = output_values(graph, signature, user_only=True)
    reach: dict[Node, int] = {}
    for idx in recurrent:
        if 0 <= idx < len(values) and isinstance(values[idx], Node):
            reach.setdefault(values[idx], idx)
    for n in reversed(list(graph.nodes)):
        for user in n.users:
            if user in reach and n not in reach:
                reach[n] = reach[user]
    return reach


def unique_ids(names: Iterable[str]) -> list[str]:
    """``names`` in order, each that occurs more than once numbered ``#1``, ``#2``, ... in order."""
    names = list(names)
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    seen: dict[str, int] = {}
    out = []
    for name in names:
        if counts[name] == 1:
            out.append(name)
        else:
            seen[name] = seen.get(name, 0) + 1
            out.append(f"{name}#{seen[name]}")
    return out


def reaches_output(graph: torch.fx.Graph) -> set[Node]:
    """The nodes whose value reaches the graph's output node (one backward sweep)."""
    out = next((n for n in reversed(graph.nodes) if n.op == "output"), None)
    if out is None:
        return set()
    reach = {out}
    for n in reversed(list(graph.nodes)):
        if n not in reach and any(u in reach for u in n.users):
            reach.add(n)
    reach.discard(out)
    return reach


# Ops that compute no value of the model's own (attribution's aligned ids leave them out).
ALIGNED_SKIP_OPS = ("getitem", "_guards_fn", "_assert", "sym_size", "alias")


def aligned_ids(program) -> tuple[dict[str, str], dict[str, tuple[str, str, int]]]:
    """Aligned ids of the exported program's nodes: ``<module or root>:<op>`` (``#k`` when repeated),
    and (module, op, order) per node name."""

    kinds = {s.arg.name: s.kind for s in program.graph_signature.input_specs if getattr(s.arg, "name", None)}
    buffers = {s.arg.name: s.target for s in program.graph_signature.input_specs if s.kind == InputKind.BUFFER}
    base: dict[str, str] = {}
    meta: dict[str, tuple[str, str, int]] = {}
    for order, n in enumerate(program.graph.nodes):
        if n.op == "placeholder":
            if kinds.get(n.name) == InputKind.USER_INPUT:
                module, op = "", "input"
            elif n.name in buffers:
                module, op = "", "state"
            else:
                continue  # weights and constants are not values the model computes
            text = f"{op}:{buffers.get(n.name, n.name)}"
        elif n.op == "call_function":
            module = module_path(n)
            op = op_name(n).removeprefix("aten.").split(".")[0] or getattr(n.target, "__name__", "op")
            if op in ALIGNED_SKIP_OPS:
                continue
            text = f"{module or 'root'}:{op}"
        else:
            continue
        base[n.name] = text
        meta[n.name] = (module, op, order)
    return dict(zip(base, unique_ids(base.values()))), meta
