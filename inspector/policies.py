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
from torch.fx.passes.infra.pass_base import PassResult

from . import _executorch, _graph
from .errors import FoldPassCrash, InspectorError, UnknownMarker, describe, listing, quoted

POLICIES = ("off", "upstream", "state-aware", "state-aware-strict")
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


def policy_pass_class(policy: str, markers: Iterable[str] = (), log: FoldLog | None = None) -> type:
    """A subclass of the installed pass that applies ``policy`` and ``markers`` and reports to ``log``.

    Markers (site ids or node names) are set on the graph the pass receives, in
    ``meta["carried_quant_state"]`` and ``meta["custom"]``, before the guard reads them.
    """
    check_policy(policy)
    base = _executorch.fold_pass_class()
    markers = tuple(markers)

    class PolicyFold(base):  # type: ignore[misc, valid-type]
        __doc__ = f"{base.__name__} under policy {policy!r}."
        inspector_policy = policy
        inspector_markers = markers

        def call(self, graph_module: GraphModule) -> PassResult:
            graph = graph_module.graph
            cands = _graph.candidates(graph)
            ids = _graph.site_ids(cands)
            run = FoldRun(tfa=self.exported_program is None)
            run.site_ids = {c.mul.name: i for c, i in zip(cands, ids)}
            run.convs = {c.mul.name: c.conv.name for c in cands}
            if log is not None and log.snapshots:
                run.before = copy.deepcopy(graph_module)  # pristine: before any marker is set
            found, unknown = resolve_markers(graph, markers, cands, ids)
            if unknown and run.tfa:
                # Where the INT flow folds, a marker that names nothing would silently protect nothing.
                known = listing(ids) or "no sites"
                raise UnknownMarker(f"unknown marker {quoted(unknown[0])} at stage tfa: give a site id ({known}) "
                                    "or a node name of this graph")
            for node in found.values():
                _graph.set_marker(node)
            self._inspector_run = run
            self._inspector_guard = _guard(policy, graph, self.exported_program)
            if policy == "off":
                result = PassResult(graph_module, False)
            else:
                result = super().call(graph_module)
            if log is not None:
                log.add(run)
            return result

        def _match_mul_after_conv(self, node: Node):
            if node in self._inspector_guard:
                return None
            return super()._match_mul_after_conv(node)

        def _fold_scale_into_conv(self, graph, conv_node, mul_node, channel_scale):
            name = mul_node.name
            try:
                result = super()._fold_scale_into_conv(graph, conv_node, mul_node, channel_scale)
            except Exception as exc:  # noqa: BLE001 - name the site the installed pass crashed on
                site_id = self._inspector_run.site_ids.get(name, name)
                raise FoldPassCrash(
                    f"the installed {base.__name__} crashed while folding site {site_id} ({name} after "
                    f"{conv_node.name}): {describe(exc)}",
                    site_id, name,
                ) from exc
            if result is not None:
                self._inspector_run.folded.append(name)
                self._inspector_run.folded_ids.append(self._inspector_run.site_ids.get(name, name))
            return result

    PolicyFold.__name__ = PolicyFold.__qualname__ = f"{base.__name__}[{policy}]"
    return PolicyFold


def _guard(policy: str, graph, program) -> dict[Node, list[str]]:
    """Muls the state guard hides from the pass, with the boundary kinds each one reaches."""
    if policy not in ("state-aware", "state-aware-strict"):
        return {}
    reach = _graph.state_reach(
        graph,
        program.graph_signature if program is not None else None,
        in_place_writes=policy == "state-aware-strict",
    )
    guarded: dict[Node, list[str]] = {}
    for node in graph.nodes:
        if _graph.is_mul(node):
            kinds = [k for k in (_graph.MARKER, _graph.BUFFER, _graph.INPUT) if reach.reaches(k, node)]
            if kinds:
                guarded[node] = kinds
    return guarded
