"""What one run of a fold pass saw and did, and how markers name the nodes of the graph it ran on."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from collections.abc import Iterable

from torch.fx import GraphModule, Node

from .._sites import graph as _graph
from .._base.copies import private_copy
from .._base.errors import UnknownMarker, listing, quoted


@dataclass(kw_only=True)
class FoldRun:
    """What one call of the wrapped pass saw and did."""

    tfa: bool  # the pass ran as a transform-for-annotation pass (no exported program)
    folded: list[str] = field(default_factory=list)  # mul names the installed pass folded, in order
    folded_ids: list[str] = field(default_factory=list)  # their site ids
    site_ids: dict[str, str] = field(default_factory=dict)  # mul name -> site id, before the pass
    convs: dict[str, str] = field(default_factory=dict)  # mul name -> its conv's name (empty: caller gave site_ids)
    before: GraphModule | None = None  # deep copy of the graph the pass received (if snapshots on)


class FoldLog:
    """Collects a ``FoldRun`` per call of a rule's pass; safe to share between threads."""

    def __init__(self, snapshots: bool = False) -> None:
        self.snapshots = snapshots
        self.runs: list[FoldRun] = []
        self._lock = threading.Lock()

    def add(self, run: FoldRun) -> None:
        with self._lock:
            self.runs.append(run)


def resolve_markers(graph, markers: Iterable[str], cands=None, ids=None,
                    by_name: dict[str, Node] | None = None) -> tuple[dict[str, Node], list[str]]:
    """Map each marker (site id or node name) to a node of ``graph``; also return the unknown ones.

    ``cands``, ``ids`` and ``by_name`` (node name -> node) are the graph's candidates, site ids and
    nodes when the caller has them already.
    """
    markers = list(markers)
    if not markers:
        return {}, []
    if cands is None:
        cands = _graph.candidates(graph)
    if ids is None:
        ids = _graph.site_ids(cands)
    by_id = dict(zip(ids, (c.mul for c in cands)))
    if by_name is None:
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


def start_run(graph_module: GraphModule, program, markers: tuple[str, ...], log: FoldLog | None,
              site_ids: dict[str, str] | None = None) -> FoldRun:
    """What a wrapped pass does first on the graph it receives: a ``FoldRun`` naming its sites (found
    here unless the caller gave ``site_ids``), the pristine snapshot when ``log`` keeps them, and
    the markers set (at tfa, where the INT flow folds, a marker that names nothing is an error:
    it would silently protect nothing)."""
    graph = graph_module.graph
    run = FoldRun(tfa=program is None)
    cands = ids = None
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
            raise unknown_marker(unknown[0], "tfa", ids)
        for node in found.values():
            _graph.set_marker(node)
    return run
