"""Fold rules (``Policy``), their one registry, and the installed pass wrapped to apply one.

A rule is a small frozen object: a name, a help line, where it comes from, whether it folds at
all and its state guard. Every rule runs as a subclass of the REAL installed
``FoldScalarMulIntoConvPass``; the fold itself is always the installed code. A wrapper only
(a) refuses to run at all (``off``), or (b) hides guarded muls from the pass's matcher (a state
guard such as the one executorch PR #21234 proposes: an open pull request, in no release), and
(c) records which muls the pass really folded.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from collections.abc import Mapping, Sequence
from typing import Iterable

from torch.fx import GraphModule, Node

from . import _executorch, _graph
from ._copies import private_copy
from .errors import FoldPassCrash, InspectorError, UnknownMarker, crash_behind, describe, listing, quoted

@dataclass(frozen=True)
class StateGuard:
    """A structural state guard: a mul is hidden from the pass when it reaches a state boundary."""

    in_place_writes: bool = False  # also count in-place writes into a buffer or input (copy_ at tfa)

    def reach(self, graph, signature, also_marked: Iterable[Node] = ()) -> _graph.StateReach:
        """Which nodes of ``graph`` reach which state boundary, as this guard reads them."""
        return _graph.state_reach(graph, signature, in_place_writes=self.in_place_writes, also_marked=also_marked)


@dataclass(frozen=True)
class Policy:
    """One fold rule: what decides whether the installed pass may fold a site.

    The fold itself is always the installed pass's code; a rule can only keep it from running
    (``folds=False``) or hide muls from its matcher (``guard``). Built-in rules are registered
    exactly as any other (``register``), and nothing else in the inspector branches on a name.
    """

    name: str  # what users type: --policy NAME, analyze(policy=NAME), a variant's label
    help: str  # one line: what the rule does
    source: str  # where the rule comes from (the installed pass, an open upstream PR, this project, a file)
    folds: bool = True  # False: the pass never runs, nothing folds
    guard: StateGuard | None = None  # muls reaching a state boundary are hidden from the pass (None: no guard)

    @property
    def guarded(self) -> bool:
        return self.folds and self.guard is not None

    def reach(self, graph, signature, also_marked: Iterable[Node] = ()) -> _graph.StateReach:
        """What this rule's guard reads on ``graph`` (nothing for a rule without a guard)."""
        if not self.guarded:
            return _graph.StateReach({})
        return self.guard.reach(graph, signature, also_marked)

    def to_dict(self) -> dict:
        return {"name": self.name, "help": self.help, "source": self.source, "folds": self.folds,
                "guard": None if self.guard is None else {"in_place_writes": self.guard.in_place_writes}}

    def __str__(self) -> str:
        return self.name


_REGISTRY: dict[str, Policy] = {}  # the one registry of rules, by name (not a cache: never evicted)
_REGISTRY_LOCK = threading.Lock()


def register(policy: Policy, *, replace: bool = False) -> Policy:
    """Add ``policy`` to the rules every entry point offers (CLI, widget, compare, sessions)."""
    if not isinstance(policy, Policy):
        raise InspectorError(f"a rule is a Policy, got a {type(policy).__name__}")
    if not policy.name or not isinstance(policy.name, str) or any(ch in policy.name for ch in ",@ \n"):
        raise InspectorError(f"a rule's name is one word without ',', '@' or spaces, got {quoted(policy.name)}")
    with _REGISTRY_LOCK:
        if policy.name in _REGISTRY and not replace and _REGISTRY[policy.name] != policy:
            raise InspectorError(f"a rule named {quoted(policy.name)} is registered already; give another name")
        _REGISTRY[policy.name] = policy
    return policy


def unregister(name: str) -> None:
    """Remove the rule ``name`` (tests and plugins that registered one for a while)."""
    with _REGISTRY_LOCK:
        _REGISTRY.pop(name, None)


class _Names(Sequence):
    """The registered rules' names, in registration order, read live (a rule registered later
    appears in every list built from it)."""

    def _names(self) -> tuple[str, ...]:
        with _REGISTRY_LOCK:
            return tuple(_REGISTRY)

    def __getitem__(self, i):
        return self._names()[i]

    def __len__(self) -> int:
        return len(self._names())

    def __contains__(self, name) -> bool:
        with _REGISTRY_LOCK:
            return isinstance(name, str) and name in _REGISTRY

    def __repr__(self) -> str:
        return repr(self._names())


class _Help(Mapping):
    """Each registered rule's one-line help with where it comes from, by name, read live."""

    def __getitem__(self, name: str) -> str:
        with _REGISTRY_LOCK:
            rule = _REGISTRY[name]
        return f"{rule.help} [{rule.source}]"

    def __iter__(self):
        return iter(POLICIES._names())

    def __len__(self) -> int:
        return len(POLICIES)


POLICIES: Sequence[str] = _Names()
POLICY_HELP: Mapping[str, str] = _Help()

_INSTALLED = f"the installed pass (executorch {_executorch.SUPPORTED})"
OFF = register(Policy("off", "never fold", "this project: the fold turned off, for comparison", folds=False))
UPSTREAM = register(Policy("upstream", "the installed pass as it is", _INSTALLED))
STATE_AWARE = register(Policy(
    "state-aware",
    "upstream, but skip muls that reach a BUFFER_MUTATION / USER_INPUT_MUTATION output of the graph signature "
    "or a node marked carried_quant_state",
    "executorch PR #21234 as proposed (an open pull request, in no release)", guard=StateGuard()))
STATE_AWARE_STRICT = register(Policy(
    "state-aware-strict",
    "state-aware, and also treat in-place writes into a buffer or an input (copy_ into a get_attr buffer, "
    "as at tfa) as state boundaries",
    "this project's proposal", guard=StateGuard(in_place_writes=True)))
# What compare runs when not told: never fold, the installed pass, and the guard that sees state at tfa.
DEFAULT_VARIANTS = (OFF.name, UPSTREAM.name, STATE_AWARE_STRICT.name)


def get_policy(policy: "str | Policy") -> Policy:
    """The registered rule ``policy`` names (a Policy is returned as it is, registered or not)."""
    if isinstance(policy, Policy):
        return policy
    with _REGISTRY_LOCK:
        rule = _REGISTRY.get(policy) if isinstance(policy, str) else None
    if rule is None:
        raise InspectorError(f"unknown policy {quoted(policy)}; choose one of: {', '.join(POLICIES)}")
    return rule


def check_policy(policy: "str | Policy") -> str:
    """The name of the rule ``policy`` (raises one line if it names none)."""
    return get_policy(policy).name


@dataclass
class FoldRun:
    """What one call of the wrapped pass saw and did."""

    tfa: bool  # the pass ran as a transform-for-annotation pass (no exported program)
    folded: list[str] = field(default_factory=list)  # mul names the installed pass folded, in order
    folded_ids: list[str] = field(default_factory=list)  # their site ids
    site_ids: dict[str, str] = field(default_factory=dict)  # mul name -> site id, before the pass
    convs: dict[str, str] = field(default_factory=dict)  # mul name -> its conv's name (empty: caller gave site_ids)
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


def unknown_marker(marker: str, stage: str, ids: Iterable[str]) -> UnknownMarker:
    """The one-line error for a marker that names no site and no node of the graph at ``stage``."""
    return UnknownMarker(f"unknown marker {quoted(marker)} at stage {stage}: give a site id "
                         f"({listing(ids) or 'no sites'}) or a node name of this graph")


def policy_pass_class(policy: "str | Policy", markers: Iterable[str] = (), log: FoldLog | None = None,
                      hidden: frozenset[str] | None = None, site_ids: dict[str, str] | None = None) -> type:
    """A subclass of the installed pass that applies ``policy`` and ``markers`` and reports to ``log``.

    Markers (site ids or node names) are set on the graph the pass receives, in
    ``meta["carried_quant_state"]`` and ``meta["custom"]``, before the guard reads them.
    ``hidden`` names the muls the guard hides instead, when the caller computed the guard on a
    larger graph than the one the pass receives (a region, see ``_region``); ``site_ids`` (mul name
    -> site id) when the caller found the sites already (the call does not look for them again).
    The subclass is made by the door (``_executorch.fold_pass_subclass``): the fold itself
    is always the installed code.
    """
    policy = get_policy(policy)
    markers = tuple(markers)
    return _executorch.fold_pass_subclass(
        policy.name, lambda gm, program: _PolicyCall(policy, markers, log, gm, program, hidden, site_ids))


class _PolicyCall:
    """One call of a policy pass: marks the graph, hides guarded muls, records what folded."""

    def __init__(self, policy: Policy, markers: tuple[str, ...], log: FoldLog | None, graph_module: GraphModule,
                 program, hidden: frozenset[str] | None = None, site_ids: dict[str, str] | None = None) -> None:
        graph = graph_module.graph
        run = FoldRun(tfa=program is None)
        if site_ids is None or markers:
            cands = _graph.candidates(graph)
            ids = _graph.site_ids(cands)
            run.site_ids = {c.mul.name: i for c, i in zip(cands, ids)}
            run.convs = {c.mul.name: c.conv.name for c in cands}
        else:
            run.site_ids = dict(site_ids)
        if log is not None and log.snapshots:
            run.before = private_copy(graph_module)  # pristine: before any marker is set
        if markers:
            found, unknown = resolve_markers(graph, markers, cands, ids)
            if unknown and run.tfa:
                # Where the INT flow folds, a marker that names nothing would silently protect nothing.
                raise unknown_marker(unknown[0], "tfa", ids)
            for node in found.values():
                _graph.set_marker(node)
        self.run, self.log = run, log
        self.skip = not policy.folds
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


def guard_reach(policy: "str | Policy", graph, signature, also_marked: Iterable[Node] = ()) -> _graph.StateReach:
    """What ``policy``'s state guard reads on ``graph``: which nodes reach which state boundary
    (nothing for the policies without a guard)."""
    return get_policy(policy).reach(graph, signature, also_marked)


def guarded_muls(policy: "str | Policy", graph, program) -> dict[Node, list[str]]:
    """Muls the state guard hides from the pass, with the boundary kinds each one reaches."""
    reach = guard_reach(policy, graph, program.graph_signature if program is not None else None)
    return {n: list(reach.kinds(n)) for n in graph.nodes if _graph.is_mul(n) and reach.kinds(n)}


def run_pass(graph_module: GraphModule, program, policy: "str | Policy", markers: tuple[str, ...] = (),
             stage: str = "", hidden: frozenset[str] | None = None,
             site_ids: dict[str, str] | None = None) -> FoldRun:
    """Run ``policy``'s pass on ``graph_module`` (rewritten in place: give it a private copy);
    ``hidden``: the muls the guard hides, by name, instead of the guard's own reading of this graph;
    ``site_ids``: mul name -> site id, when the caller found the sites already."""
    log = FoldLog()
    pass_class = policy_pass_class(policy, markers, log, hidden, site_ids)
    fold_pass = pass_class(program) if program is not None else pass_class(tfa_pass=True)
    try:
        with _executorch.fast_signature_lookups(program):
            fold_pass(graph_module)
    except Exception as exc:  # noqa: BLE001 - the installed pass raised: say where, in one line
        crash = crash_behind(exc)
        if crash is not None:
            raise crash from None
        where = f" at stage {stage}" if stage else ""
        raise InspectorError(f"the installed fold pass raised{where}: {describe(exc)}") from None
    return log.runs[-1]


def folded_site_ids(stage_graph, policy: "str | Policy", markers: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The ids of the sites ``policy``'s pass folds on ``stage_graph`` (a private copy is rewritten)."""
    gm, program = stage_graph.fresh_copy()
    _, unknown = resolve_markers(gm.graph, markers)
    if unknown:
        raise unknown_marker(unknown[0], stage_graph.stage, _graph.site_ids(_graph.candidates(gm.graph)))
    return tuple(run_pass(gm, program, policy, markers, stage_graph.stage).folded_ids)
