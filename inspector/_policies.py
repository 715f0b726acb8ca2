"""Fold policies: the installed pass class, wrapped so a policy decides which sites it may fold.

Every policy subclasses the REAL installed ``FoldScalarMulIntoConvPass``; the fold
itself is always the installed code. A wrapper only (a) refuses to run at all
(``off``), or (b) hides guarded muls from the pass's matcher (the state guard of
later upstream versions), and (c) records which muls the pass really folded.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Iterable

from torch.fx import GraphModule, Node

from . import _executorch, _graph
from .errors import FoldPassCrash, InspectorError, UnknownMarker, crash_behind, describe, listing, quoted

POLICIES = ("off", "upstream", "state-aware", "state-aware-strict")
# What compare runs when not told: never fold, the installed pass, and the guard that sees state at tfa.
DEFAULT_VARIANTS = ("off", "upstream", "state-aware-strict")
POLICY_HELP = {
    "off": "never fold",
    "upstream": "the installed pass as it is",
    "state-aware": "upstream, but skip muls that reach a BUFFER_MUTATION / USER_INPUT_MUTATION "
    "output of the graph signature or a node marked carried_quant_state",
    "state-aware-strict": "state-aware, and also treat in-place writes into a buffer or an input "
    "(copy_ into a get_attr buffer, as at tfa) as state boundaries",
}


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise InspectorError(f"unknown policy {quoted(policy)}; choose one of: {', '.join(POLICIES)}")
    return policy


@dataclass
class FoldRun:
    """What one call of the wrapped pass saw and did."""

    tfa: bool  # the pass ran as a transform-for-annotation pass (no exported program)
    folded: list[str] = field(default_factory=list)  # mul names the installed pass folded, in order
    folded_ids: list[str] = field(default_factory=list)  # their site ids
    site_ids: dict[str, str] = field(default_factory=dict)  # mul name -> site id, before the pass
    convs: dict[str, str] = field(default_factory=dict)  # mul name -> its conv's name, before the pass
    before: GraphModule | None = None  # deep copy of the graph the pass received (if snapshots on)


class FoldLog:
    """Collects a ``FoldRun`` per call of a policy pass; safe to share between threads."""

    def __init__(self, snapshots: bool = False) -> None:
        self.snapshots = snapshots
        self.runs: list[FoldRun] = []
        self._lock = threading.Lock()

    def add(self, run: FoldRun) -> None:
        with self._lock:
            self.runs.append(run)


def marker_tuple(markers) -> tuple[str, ...]:
    """Markers as a tuple of strings: one string is one marker, not its characters."""
    if markers is None:
        return ()
    if isinstance(markers, str):
        return (markers,)
    try:
        out = tuple(markers)
    except TypeError:
        raise InspectorError(f"markers must be site ids or node names, got {quoted(markers)}") from None
    bad = [m for m in out if not isinstance(m, str)]
    if bad:
        raise InspectorError(f"a marker is a site id or node name (a string), got {quoted(bad[0])}")
    return out


def resolve_markers(graph, markers: Iterable[str], cands=None, ids=None) -> tuple[dict[str, Node], list[str]]:
    """Map each marker (site id or node name) to a node of ``graph``; also return the unknown ones.

    ``cands`` and ``ids`` are the graph's candidates and site ids when the caller has them already.
    """
    markers = list(markers)
    if not markers:
        return {}, []
    if cands is None:
        cands = _graph.candidates(graph)
    if ids is None:
        ids = _graph.site_ids(cands)
    by_id = dict(zip(ids, (c.mul for c in cands)))
    by_name = {n.name: n for n in graph.nodes}
    found, unknown = {}, []
    for m in markers:
        node = by_id.get(m) or by_name.get(m)
        if node is None:
            unknown.append(m)
        else:
            found[m] = node
    return found, unknown


def policy_pass_class(policy: str, markers: Iterable[str] = (), log: FoldLog | None = None,
                      hidden: frozenset[str] | None = None) -> type:
    """A subclass of the installed pass that applies ``policy`` and ``markers`` and reports to ``log``.

    Markers (site ids or node names) are set on the graph the pass receives, in
    ``meta["carried_quant_state"]`` and ``meta["custom"]``, before the guard reads them.
    ``hidden`` names the muls the guard hides instead, when the caller computed the guard on a
    larger graph than the one the pass receives (a region, see ``_region``).
    The subclass is made by the door (``_executorch.fold_pass_subclass``): the fold itself
    is always the installed code.
    """
    check_policy(policy)
    markers = tuple(markers)
    return _executorch.fold_pass_subclass(
        policy, lambda gm, program: _PolicyCall(policy, markers, log, gm, program, hidden))


class _PolicyCall:
    """One call of a policy pass: marks the graph, hides guarded muls, records what folded."""

    def __init__(self, policy: str, markers: tuple[str, ...], log: FoldLog | None, graph_module: GraphModule,
                 program, hidden: frozenset[str] | None = None) -> None:
        graph = graph_module.graph
        cands = _graph.candidates(graph)
        ids = _graph.site_ids(cands)
        run = FoldRun(tfa=program is None)
        run.site_ids = {c.mul.name: i for c, i in zip(cands, ids)}
        run.convs = {c.mul.name: c.conv.name for c in cands}
        if log is not None and log.snapshots:
            run.before = copy.deepcopy(graph_module)  # pristine: before any marker is set
        found, unknown = resolve_markers(graph, markers, cands, ids)
        if unknown and run.tfa:
            # Where the INT flow folds, a marker that names nothing would silently protect nothing.
            raise UnknownMarker(f"unknown marker {quoted(unknown[0])} at stage tfa: give a site id "
                                f"({listing(ids) or 'no sites'}) or a node name of this graph")
        for node in found.values():
            _graph.set_marker(node)
        self.run, self.log = run, log
        self.skip = policy == "off"
        if hidden is None:
            self.guarded = guarded_muls(policy, graph, program)
        else:
            self.guarded = {n: [] for n in graph.nodes if n.name in hidden}

    def hides(self, mul: Node) -> bool:
        return mul in self.guarded

    def folded(self, conv: Node, mul_name: str) -> None:
        self.run.folded.append(mul_name)
        self.run.folded_ids.append(self.run.site_ids.get(mul_name, mul_name))

    def crashed(self, conv: Node, mul_name: str, exc: Exception) -> Exception:
        site_id = self.run.site_ids.get(mul_name, mul_name)
        return FoldPassCrash(
            f"the installed {_executorch.FOLD_PASS} crashed while folding site {site_id} ({mul_name} after "
            f"{conv.name}): {describe(exc)}",
            site_id, mul_name,
        )

    def finished(self) -> None:
        if self.log is not None:
            self.log.add(self.run)


def guard_reach(policy: str, graph, signature, also_marked: Iterable[Node] = ()) -> _graph.StateReach:
    """What ``policy``'s state guard reads on ``graph``: which nodes reach which state boundary
    (nothing for the policies without a guard)."""
    if policy not in ("state-aware", "state-aware-strict"):
        return _graph.StateReach({})
    return _graph.state_reach(graph, signature, in_place_writes=policy == "state-aware-strict",
                              also_marked=also_marked)


def guarded_muls(policy: str, graph, program) -> dict[Node, list[str]]:
    """Muls the state guard hides from the pass, with the boundary kinds each one reaches."""
    reach = guard_reach(policy, graph, program.graph_signature if program is not None else None)
    return {n: list(reach.kinds(n)) for n in graph.nodes if _graph.is_mul(n) and reach.kinds(n)}


def run_pass(graph_module: GraphModule, program, policy: str, markers: tuple[str, ...] = (),
             stage: str = "", hidden: frozenset[str] | None = None) -> FoldRun:
    """Run ``policy``'s pass on ``graph_module`` (rewritten in place: give it a private copy);
    ``hidden``: the muls the guard hides, by name, instead of the guard's own reading of this graph."""
    log = FoldLog()
    pass_class = policy_pass_class(policy, markers, log, hidden)
    fold_pass = pass_class(program) if program is not None else pass_class(tfa_pass=True)
    try:
        with _executorch.fast_signature_lookups():
            fold_pass(graph_module)
    except Exception as exc:  # noqa: BLE001 - the installed pass raised: say where, in one line
        crash = crash_behind(exc)
        if crash is not None:
            raise crash from None
        where = f" at stage {stage}" if stage else ""
        raise InspectorError(f"the installed fold pass raised{where}: {describe(exc)}") from None
    return log.runs[-1]


def folded_site_ids(stage_graph, policy: str, markers: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The ids of the sites ``policy``'s pass folds on ``stage_graph`` (a private copy is rewritten)."""
    gm, program = stage_graph.fresh_copy()
    _, unknown = resolve_markers(gm.graph, markers)
    if unknown:
        ids = _graph.site_ids(_graph.candidates(gm.graph))
        raise UnknownMarker(f"unknown marker {quoted(unknown[0])} at stage {stage_graph.stage}: give a site id "
                            f"({listing(ids) or 'no sites'}) or a node name of this graph")
    return tuple(run_pass(gm, program, policy, markers, stage_graph.stage).folded_ids)
