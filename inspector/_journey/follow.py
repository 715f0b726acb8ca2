"""Following one site's nodes from graph to graph while the pipeline runs.

The ``Follower`` is the observer a journey hands the pipeline door (``_doors.pipeline``): before
and after every pass it reads the graph the pass received and the one it returned, and keeps
which node stands for the site's conv, its mul and its output now. A node keeps its role while
it keeps its name; a removed node hands its role to the node that took its place in its users'
arguments, or else to the nodes created from it (torch.fx's ``meta["from_node"]`` provenance).
The weight, bias and scale are read from where the conv and the mul take them, through a
dequantize if there is one. It reads graphs and keeps a structural copy of a graph (no tensors
but the site's own constants, never a model) only around the passes that touched the site.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx import Graph, GraphModule, Node

from .._doors import pipeline as _pipeline
from .._sites import graph as _graph
from .._base.errors import first_line
from .records import Change, Step

ROLES = ("conv", "mul", "output")  # the roles that follow nodes; weight, bias and scale are read off them
CONSTANT_ROLES = ("weight", "bias", "scale")
_QPARAM_KEYS = ("input_qparams", "output_qparams")
_DQ = ("dequantize_per_tensor", "dequantize_per_channel")


@dataclass(kw_only=True)
class _Snap:
    """What one graph says about the site: the names of all nodes, and the site's nodes in detail."""

    names: set[str]
    roles: dict[str, tuple[str, ...]]  # node name -> roles (conv, mul, output)
    facts: dict[str, tuple]  # node name -> (op name, argument names, qparams) for the site's nodes
    ids: dict[str, int]  # node name -> id() of the Node object (a pass that edits in place keeps it)
    users: dict[str, tuple[tuple[str, int], ...]]  # site node -> (user, argument position)
    constants: dict[str, tuple[str, Any]]  # weight/bias/scale -> (node name, tensor or None)
    size: int  # nodes in the graph


def _target(node: Node) -> str:
    if node.op != "call_function":
        return node.op
    return _graph.op_name(node) or str(getattr(node.target, "__name__", node.target))


def _arg_names(node: Node) -> tuple[str, ...]:
    out = []
    for a in node.args:
        if isinstance(a, Node):
            out.append(a.name)
        elif isinstance(a, (list, tuple)):
            out.append("[" + ",".join(x.name if isinstance(x, Node) else repr(x) for x in a) + "]")
        else:
            out.append(repr(a))
    return tuple(out)


def _qparams(node: Node) -> str:
    parts = []
    for key in _QPARAM_KEYS:
        value = node.meta.get(key)
        if value:
            parts.append(f"{key}={_short_qparams(value)}")
    return "; ".join(parts)


def _short_qparams(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_short_qparams(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))) + "}"
    scale, zp = getattr(value, "scale", None), getattr(value, "zp", None)
    if scale is not None:
        if isinstance(scale, (int, float)):
            return f"scale {scale:.4g} zp {zp}"
        return f"per-channel scale ({len(scale) if hasattr(scale, '__len__') else '?'}) zp"
    return type(value).__name__


def from_names(node: Node) -> tuple[str, ...]:
    """The names of the nodes ``node`` was made from, as torch.fx records them (nearest first)."""
    out = []
    for source in node.meta.get("from_node", ()) or ():
        name = getattr(source, "name", None)
        if isinstance(name, str):
            out.append(name)
    return tuple(out)


def ancestry(node: Node) -> set[str]:
    """Every name in ``node``'s provenance tree (``meta["from_node"]``, recursively)."""
    out: set[str] = set()
    stack = list(node.meta.get("from_node", ()) or ())
    while stack and len(out) < 256:
        source = stack.pop()
        name = getattr(source, "name", None)
        if isinstance(name, str):
            out.add(name)
        stack.extend(getattr(source, "from_node", ()) or ())
    return out


def _through(node: Any) -> Any:
    """The constant behind observers, quantizes and dequantizes (the stored weight), or the node itself."""
    for _ in range(4):
        if not isinstance(node, Node) or not node.args or not isinstance(node.args[0], Node):
            break
        if node.op == "call_module" or (node.op == "call_function" and any(
                q in str(node.target) for q in ("quantize_per", "dequantize_per"))):
            node = node.args[0]
        else:
            break
    return node


def _is_constant(node: Any) -> bool:
    return isinstance(node, Node) and _through(node).op in ("get_attr", "placeholder")


class Follower:
    """The journey's observer: every pass run, and what each one did to the site's nodes."""

    def __init__(self, roles: dict[str, tuple[str, ...]], *, all_passes: bool = False) -> None:
        self.roles = dict(roles)  # the site's nodes now, by name
        self.aliases: dict[str, set[str]] = {name: {name} for name in roles}  # every name a node has had
        self.all_passes = all_passes
        self.phase = ""  # what runs outside the Arm pass manager's pipelines (prepare, convert, to_edge)
        self.gap = ""  # the name of what changed the graph between two observed passes
        self.gap_phase = ""
        self.passes: list[tuple[str, str]] = []  # (phase, pass) of every pass run, in order
        self.steps: list[Step] = []
        self.untouched = 0
        self.notes: list[str] = []
        self.program: Any = None  # the exported program the lowering passes hold (for placeholder constants)
        self.last: _Snap | None = None
        self.last_graph: Graph | None = None
        self.last_module: Any = None
        self._before: tuple | None = None
        self.final: dict[str, tuple[str, str]] = {}  # role -> (node name, op) in the last graph holding the site
        self.final_around: tuple[str, ...] = ()
        # (id, storage, version, dtype, shape) of a constant read -> (the tensor, a copy of its values)
        self._copies: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self._spare: tuple[tuple, Graph] | None = None  # (outline, copy) of the last graph copied before a pass

    # ------------------------------------------------------------ the door's observer

    def before(self, pass_: Any, graph_module: Any) -> None:
        program = _pipeline.program_of(pass_)
        if program is not None:
            self.program = program
        if not isinstance(graph_module, GraphModule):
            self._before = None
            return
        snap = self.snap(graph_module)
        if snap is not None and self.last is not None and self.gap:
            self._diff_step(self.gap, self.gap_phase, self.last, snap, self.last_graph, graph_module)
        self.gap = ""
        self._before = (snap, graph_module, self._copy_before(graph_module) if snap is not None else None)

    def _copy_before(self, graph_module: GraphModule) -> Graph | None:
        """A copy of the graph as this pass gets it, for the picture if the pass touches the site. Most
        passes leave a graph as they found it: the last copy is handed out again while the graph's
        outline (every node's name, op, inputs, and the objects its meta holds for value and qparams)
        is the one it was copied from; reading the outline costs a tenth of a copy."""
        outline = _outline(graph_module.graph)
        if self._spare is not None and self._spare[0] == outline:
            return self._spare[1]
        copied = _copy(graph_module)
        self._spare = (outline, copied) if copied is not None else None
        return copied

    def after(self, pass_: Any, graph_module: Any, result: Any) -> None:
        phase = _pipeline.current_pipeline() or self.phase
        name = _pipeline.pass_name(pass_)
        self.passes.append((phase, name))
        before = self._before
        self._before = None
        out = getattr(result, "graph_module", None) or graph_module
        if before is None or before[0] is None or not isinstance(out, GraphModule):
            self.untouched += 1
            return
        snap_before, _, graph_before = before
        snap_after = self.snap(out)
        if snap_after is None:  # the site's nodes are all gone without a trace
            snap_after = _Snap(names=set(n.name for n in out.graph.nodes), roles={}, facts={}, ids={}, users={},
                               constants={}, size=len(out.graph.nodes))
        self._diff_step(name, phase, snap_before, snap_after, graph_before, out, index=len(self.passes) - 1)

    def failed(self, exc: Exception) -> None:
        note = f"the journey could not follow a pass: {type(exc).__name__}: {first_line(exc)}"
        if note not in self.notes:
            self.notes.append(note)

    # ------------------------------------------------------------ boundaries the driver names

    def expect(self, gap: str, phase: str) -> None:
        """What changes the graph before the next observed pass (``prepare_pt2e``'s own steps, ...)."""
        self.gap, self.gap_phase = gap, phase

    def settle(self, gap: str, phase: str, graph_module: GraphModule) -> None:
        """``graph_module`` is what came out of ``gap``: a step if it changed the site."""
        snap = self.snap(graph_module)
        if snap is None:
            return
        if self.last is not None:
            self._diff_step(gap, phase, self.last, snap, self.last_graph, graph_module)
        else:
            self._remember(snap, graph_module)
        self.gap = ""

    def start(self, graph_module: GraphModule) -> None:
        snap = self.snap(graph_module)
        if snap is not None:
            self._remember(snap, graph_module)

    # ------------------------------------------------------------ reading graphs

    def snap(self, graph_module: GraphModule) -> _Snap | None:
        """The graph's view of the site, or None when none of the site's nodes is in it."""
        nodes = {n.name: n for n in graph_module.graph.nodes}
        roles = {name: r for name, r in self.roles.items() if name in nodes}
        if not roles:  # renamed wholesale (to_edge, a partition): the nodes made from the site's nodes
            roles = self._heirs(graph_module.graph)
            if not roles:
                return None
        facts, users, ids = {}, {}, {}
        for name in roles:
            n = nodes[name]
            ids[name] = id(n)
            facts[name] = (_target(n), _arg_names(n), _qparams(n))
            users[name] = tuple((u.name, i) for u in n.users for i, a in enumerate(u.all_input_nodes) if a is n)
        constants = {}
        conv = next((nodes[n] for n, r in roles.items() if "conv" in r), None)
        mul = next((nodes[n] for n, r in roles.items() if "mul" in r), None)
        if conv is not None:
            for role, pos in (("weight", 1), ("bias", 2)):
                if len(conv.args) > pos and isinstance(conv.args[pos], Node):
                    constants[role] = self._constant(_through(conv.args[pos]), graph_module)
        if mul is not None:
            other = [a for a in mul.args if _is_constant(a)]
            if other:
                constants["scale"] = self._constant(_through(other[-1]), graph_module)
            elif len(mul.args) > 1 and isinstance(mul.args[1], (int, float)):
                constants["scale"] = (repr(mul.args[1]), torch.tensor(float(mul.args[1])))
        return _Snap(names=set(nodes), roles=roles, facts=facts, ids=ids, users=users, constants=constants,
                     size=len(nodes))

    def _heirs(self, graph: Graph) -> dict[str, tuple[str, ...]]:
        out: dict[str, tuple[str, ...]] = {}
        taken: set[str] = set()
        computed = [n for n in graph.nodes if n.op == "call_function" and not _is_qdq(n)]
        for n in computed:  # the nearest provenance first
            for old in set(from_names(n)) & set(self.roles):
                if old not in taken:
                    taken.add(old)
                    out[n.name] = tuple(dict.fromkeys((*out.get(n.name, ()), *self.roles[old])))
                    self.aliases.setdefault(n.name, {n.name}).update(self.aliases.get(old, {old}))
        for n in computed:
            history = ancestry(n)
            for old in (o for o in self.roles if self.aliases.get(o, {o}) & history):
                if old not in taken:
                    taken.add(old)
                    out[n.name] = tuple(dict.fromkeys((*out.get(n.name, ()), *self.roles[old])))
                    self.aliases.setdefault(n.name, {n.name}).update(self.aliases.get(old, {old}))
        return out

    def _constant(self, node: Node, graph_module: GraphModule) -> tuple[str, Any]:
        value = None
        if node.op == "get_attr":
            value = _attr(graph_module, str(node.target))
        elif node.op == "placeholder" and self.program is not None:
            try:
                value = _graph.constant_tensor(node, self.program)
            except Exception:  # noqa: BLE001 - a program whose signature moved on: no value, no claim
                value = None
        return node.name, self._kept(value) if isinstance(value, torch.Tensor) else None

    def _kept(self, value: torch.Tensor) -> torch.Tensor:
        """A copy of a constant's values as they are now. The graph's tensor is read at every pass
        (three times each); it is copied again only when it is another tensor, or the same one
        written in place (torch counts every in-place write in its version, the fold's own
        ``copy_`` into a get_attr weight among them): a copy per pass was most of a journey's watching."""
        try:
            key = (id(value), value.data_ptr(), value._version, value.dtype, tuple(value.shape))
        except RuntimeError:  # an inference-mode tensor counts no versions: always copied
            return value.detach().clone()
        kept = self._copies.get(key)
        if kept is None:  # (the tensor is held beside its copy, so no other tensor can take its id meanwhile)
            kept = (value, value.detach().clone())
            self._copies[key] = kept
            while len(self._copies) > 8:  # the site has three constants; older tensors are let go
                del self._copies[next(iter(self._copies))]
        return kept[1]

    # ------------------------------------------------------------ one step

    def _diff_step(self, name: str, phase: str, before: _Snap, after: _Snap, graph_before, graph_after,
                   index: int | None = None) -> None:
        changes = self._changes(before, after, graph_after)
        touched = bool(changes)
        if touched or self.all_passes:
            self.steps.append(Step(index=len(self.steps), run=index, phase=phase, name=name, changes=tuple(changes),
                                   nodes_before=before.size, nodes_after=after.size,
                                   synthetic=index is None, graph_before=graph_before if touched else None,
                                   graph_after=_copy(graph_after) if touched else None))
        elif index is not None:
            self.untouched += 1
        self._remember(after, graph_after, copy=touched)

    def _remember(self, snap: _Snap, graph_module, copy: bool = True) -> None:
        self.last = snap
        self.last_graph = _copy(graph_module) if copy or self.last_graph is None else self.last_graph
        nodes = {n.name: n for n in graph_module.graph.nodes}
        self.final = {}
        around: set[str] = set()
        for node_name, roles in self.roles.items():
            n = nodes.get(node_name)
            if n is None:
                continue
            for r in roles:
                self.final.setdefault(r, (node_name, _target(n)))
            for m in (*n.all_input_nodes, *n.users):
                if m.op == "call_function" and m.name not in self.roles:
                    around.add(_target(m))
        self.final_around = tuple(sorted(around))

    def _changes(self, b: _Snap, a: _Snap, graph_after: GraphModule) -> list[Change]:
        changes: list[Change] = []
        nodes = {n.name: n for n in graph_after.graph.nodes}
        roles_were = dict(self.roles)
        # A name is the same node if the Node object is (an edit in place) or the new node was made from
        # it (a retrace); a retrace may give a site's name to another node (layer_norm's mul is "mul" now).
        reused = {name for name in b.roles if name in nodes and id(nodes[name]) != b.ids.get(name)
                  and ancestry(nodes[name]) and not (self.aliases.get(name, {name}) & ancestry(nodes[name]))}
        new = (a.names - b.names) | reused
        new_in_order = [n.name for n in graph_after.graph.nodes if n.name in new]
        moved: dict[str, set[str]] = {}  # node name -> roles it takes over
        for name, roles in b.roles.items():
            if name in a.names and name not in reused:
                op_b, args_b, q_b = b.facts[name]
                n = nodes[name]
                op_a, args_a, q_a = _target(n), _arg_names(n), _qparams(n)
                if op_a != op_b:
                    changes.append(Change(kind="op-changed", role=roles[0], node=name, detail=f"{op_b} -> {op_a}"))
                if args_a != args_b:
                    changes.append(Change(kind="inputs-changed", role=roles[0], node=name,
                                          detail=f"({', '.join(args_b)}) -> ({', '.join(args_a)})"))
                if q_a != q_b:
                    kind = "qparams-attached" if not q_b else "qparams-changed"
                    changes.append(Change(kind=kind, role=roles[0], node=name, detail=q_a or "(removed)"))
                continue
            # Removed: who takes its place in its users' arguments, or what was made from it.
            heirs = []
            for user, pos in b.users.get(name, ()):
                u = nodes.get(user)
                inputs = u.all_input_nodes if u is not None else ()
                if pos < len(inputs) and inputs[pos].name != name:
                    heirs.append(inputs[pos].name)
            known = self.aliases.get(name, {name})
            # Made from it: by the nearest provenance first (a name may have been given to another node
            # before, so the whole history can point at two nodes), else by every name it has had.
            made = [m for m in new_in_order if name in from_names(nodes[m]) and m != name] or \
                [m for m in new_in_order if known & ancestry(nodes[m]) and m != name]
            computed = [m for m in made if not _is_qdq(nodes[m]) and nodes[m].op == "call_function"]
            heirs = list(dict.fromkeys(heirs))
            shown = heirs or computed[:1] or made[:1]
            changes.append(Change(kind="removed", role=roles[0], node=name,
                                  detail=f"replaced by {', '.join(shown)}" if shown else "gone"))
            for role in roles:
                if role == "output":  # what the users read now
                    heir = (heirs or computed or made)[:1]
                else:  # the node made from it that does its job (conv -> tosa CONV2D), else what took its place
                    heir = ([h for h in heirs if role in _target(nodes[h]).lower()][:1]
                            or [m for m in computed if role in _target(nodes[m]).lower()][:1] or heirs[:1] or computed[:1])
                if role == "mul" and heir and ("conv" in self.roles.get(heir[0], ()) or "conv" in moved.get(heir[0], ())):
                    continue  # the mul folded into its conv: no node is the mul any more
                for h in heir:
                    moved.setdefault(h, set()).add(role)
                    self.aliases.setdefault(h, {h}).update(known)
        for name in sorted(new):
            n = nodes[name]
            history = ancestry(n)
            sources = {old for old in b.roles if self.aliases.get(old, {old}) & history}
            touching = [m.name for m in (*n.all_input_nodes, *n.users) if m.name in self.roles or m.name in moved]
            if name in moved:
                detail = "from " + ", ".join(sorted(sources)) if sources else "in its place"
                changes.append(Change(kind="created", role=sorted(moved[name])[0], node=name,
                                      detail=f"{_target(n)} {detail}"))
            elif sources or touching:
                detail = (f"from {', '.join(sorted(sources))}" if sources else f"next to {', '.join(sorted(touching)[:3])}")
                changes.append(Change(kind="created", role="neighbour", node=name, detail=f"{_target(n)} {detail}"))
        lost_output = any("output" in r for n, r in b.roles.items() if n not in a.names or n in reused) and \
            not any("output" in r for r in moved.values())
        # The roles move before the constants are compared: a new conv reads the new weight.
        for name in list(self.roles):
            if name not in a.names or name in reused:
                del self.roles[name]
                self.aliases.pop(name, None)
        for name, roles in moved.items():
            self.roles[name] = tuple(dict.fromkeys((*self.roles.get(name, ()), *sorted(roles))))
        if lost_output:  # no node took its place: the site's output is what its mul (or, folded, its conv) computes
            holder = next((n for n, r in self.roles.items() if "mul" in r), None) or \
                next((n for n, r in self.roles.items() if "conv" in r), None)
            if holder is not None:
                self.roles[holder] = (*self.roles[holder], "output")
                changes.append(Change(kind="created", role="output", node=holder,
                                      detail="no node took the output's place: the site's output is read here again"))
        # Read again only if the roles moved: most passes leave them, and ``a`` is this graph read with them.
        after = (self.snap(graph_after) or a) if self.roles != roles_were else a
        for role in CONSTANT_ROLES:
            was, now = b.constants.get(role), after.constants.get(role)
            if was is None or now is None:
                if was is not None and now is None and any("conv" in r for r in after.roles.values()) and role != "scale":
                    changes.append(Change(kind="constant-removed", role=role, node=was[0],
                                          detail="the conv no longer reads it"))
                continue
            change = _constant_change(role, was, now)
            if change is not None:
                changes.append(change)
        return changes


def _constant_change(role: str, was: tuple[str, Any], now: tuple[str, Any]) -> Change | None:
    (name_b, value_b), (name_a, value_a) = was, now
    renamed = name_b != name_a
    if value_b is None or value_a is None:
        return Change(kind="constant-changed", role=role, node=name_a,
                      detail=f"now {name_a} (was {name_b})") if renamed else None
    if value_b.shape != value_a.shape or value_b.dtype != value_a.dtype:
        return Change(kind="constant-changed", role=role, node=name_a,
                      detail=f"{name_b} {_describe(value_b)} -> {name_a} {_describe(value_a)}")
    if value_b is value_a or torch.equal(value_b, value_a):
        return Change(kind="constant-renamed", role=role, node=name_a,
                      detail=f"{name_b} -> {name_a}, same values") if renamed else None
    if renamed and torch.equal(value_b.flatten().sort().values, value_a.flatten().sort().values):
        return Change(kind="constant-renamed", role=role, node=name_a,
                      detail=f"{name_b} -> {name_a}, same values in a new layout")
    largest = float((value_a.double() - value_b.double()).abs().max()) if value_a.numel() else 0.0
    if not math.isfinite(largest):
        largest = math.inf
    return Change(kind="constant-changed", role=role, node=name_a,
                  detail=(f"{name_b} -> {name_a}, " if renamed else "") + f"largest |change| {largest:.4g}",
                  largest_change=largest)


def _describe(t: torch.Tensor) -> str:
    return f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}"


def _is_qdq(node: Node) -> bool:
    return node.op == "call_function" and any(q in str(node.target) for q in ("quantize_per", "dequantize_per"))


def _attr(module, target: str):
    value = module
    for part in target.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


def _outline(graph: Graph) -> tuple:
    """What a picture of ``graph`` is drawn from, as identities: each node's name, op, target, input names
    and the objects its meta holds for its value and qparams (a copy keeps those objects alive, so an
    identity is never reused while the copy is kept)."""
    return tuple((n.name, n.op, n.target if isinstance(n.target, str) else id(n.target),
                  tuple(a.name for a in n.all_input_nodes), id(n.meta.get("val")),
                  id(n.meta.get("input_qparams")), id(n.meta.get("output_qparams")), len(n.meta))
                 for n in graph.nodes)


def _copy(graph_module) -> Graph | None:
    """A structural copy of the graph (nodes and their meta; no module, no tensors) for the pictures."""
    if graph_module is None:
        return None
    graph = graph_module.graph if isinstance(graph_module, GraphModule) else graph_module
    try:
        out = Graph()
        out.output(out.graph_copy(graph, {}))
        return out
    except Exception:  # noqa: BLE001 - no picture for this step, the journey goes on
        return None

