"""Pictures of the stage graph before and after the fold: a pure function of (graph, verdicts).

``render(graph, verdicts)`` returns a ``graphviz.Digraph`` (``analysis.render("before" |
"after")`` passes an analysis's own graph and verdicts); nothing
here runs ``dot`` except ``svg`` (and the CLI's PNG), through ``pipe``, the one
door to the executable. Every node's look comes from ``STYLES``, keyed by what
the node is (a folded / skipped / near-miss site, an input, a constant, ...), so
the same graph with the same verdicts draws the same way on every run.

In the SVG, every drawn node's ``class`` is its kind (plus ``marked``), and the
highlighted edges' class is ``state-path`` or ``risk-path``; a node's ``<title>``
is its FX name (``before.``/``after.`` prefixed in ``render_pair``).

Escaping: every model-derived string (node names, targets, module paths, stack
traces, reason details) goes through ``_text`` (``_tooltip`` for tooltips), which
makes it a plain-text DOT string (backslashes doubled, never read as an HTML-like
label); ``dot`` then XML-escapes it in the SVG, so no model string can inject markup.
"""

from __future__ import annotations

import hashlib
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterable

import graphviz
from torch import fx
from torch.fx import Node

from .._sites import graph as _graph
from .._base.errors import InspectorError, quoted
from .._base.formats import db
from .styles import LEGEND, STYLES, site_kind

WHICH = ("before", "after")
# What a session's graph panel offers: which picture, and how much of the graph around the focused site.
GRAPH_VIEWS = ("before", "after", "side by side")
GRAPH_SCOPES = ("focus", "whole")
HIDEABLE = ("constants",)

# Reasons that make the path to the state boundary worth drawing.
STATE_REASONS = frozenset({"feeds-buffer-mutation", "feeds-input-mutation", "marked-carried-state"})
CARRIED_STATE_RISK = "feeds-carried-state"

_GRAPH_ATTR = {"rankdir": "TB", "fontname": "Helvetica", "fontsize": "12", "labelloc": "t", "labeljust": "l",
               "nodesep": "0.25", "ranksep": "0.35"}
_NODE_ATTR = {"fontname": "Helvetica", "fontsize": "11"}
_EDGE_ATTR = {"color": "#777777", "arrowsize": "0.7"}
_CLIP = 60  # longest model string in a label; the full text is in the tooltip
_ID_CLIP = 300  # site ids stay whole in labels (users search for them) up to this length
_CAPTION_CLIP = 400  # longest line of a graph or cluster caption
_MAX_STRING = 8000  # longest label or tooltip: dot refuses strings over 16,384 characters
_MAX_ID = 200  # longer node names get a short, stable DOT id (the full name is in the tooltip)
_LEGEND_ROW = 4  # legend entries per row
HUB_DEGREE = _graph.HUB_DEGREE  # a node with more neighbours ends a neighbourhood walk (see _neighbourhood)


# ---------------------------------------------------------------- public API


@dataclass(frozen=True, kw_only=True)
class Verdicts:
    """What the picture says about one graph: its sites, and what the graph is.

    The per-node facts (a node's site, decision, reasons, state role) are derived from
    these and the graph itself, like ``FxGraphDrawer``'s colours from node kinds.
    """

    sites: tuple = ()  # Site records: decision, reasons, risks, state path, folded weight and bias
    after: bool = False  # the graph after the pass (a folded mul is gone, its conv reads new constants)
    signature: Any = None  # the exported program's graph signature (None for a bare GraphModule, as at tfa)
    caption: tuple[str, ...] = ()  # lines written above the picture
    # Optional layer: measured error per node name (an attribution's NodeError, or any object with
    # ``sqnr_db``); such nodes are filled on the SQNR colour scale and labelled with their SQNR.
    errors: dict = field(default_factory=dict)
    # How a node's stack trace is shown in its tooltip (e.g. only the user's frames, in reports).
    trace: Any = None
    # Nodes to draw as marked carried state besides those whose meta says so (markers set on a
    # copy of this graph: the picture can then be drawn from the pristine graph, uncopied).
    marked: frozenset = frozenset()
    # Set when the graph is part of a larger one: what the picture must say about the rest.
    border: Border | None = None


@dataclass(frozen=True, kw_only=True)
class Border:
    """What a picture of a graph that is part of a larger one needs to know about the rest.

    A focused picture shows the neighbours it leaves out as counts, and the nodes holding
    state as such; a part of a graph draws the same picture when these facts are given for
    the nodes at its edge (whoever cut it out makes sure the part holds what the picture shows).
    """

    outside_users: dict  # node name -> how many of its users lie outside the part
    held: dict  # node name -> "buffer" | "input": the nodes holding carried state in the whole graph


@dataclass(frozen=True, kw_only=True)
class WalkStep:
    """One node a focused picture walks through (see ``focus_walk``)."""

    name: str  # the node's name
    depth: int  # hops from the site
    walks_on: bool  # the walk goes on from it to its neighbours
    constant: bool  # a weight or constant


def render(
    graph,
    verdicts: Verdicts | Iterable | str = (),
    *,
    focus: str | None = None,
    hops: int = 2,
    hide: Iterable[str] = ("constants",),
    cluster_by_module: bool = False,
    max_nodes: int | None = 400,
) -> graphviz.Digraph:
    """``graph`` (an FX Graph or GraphModule) with its ``verdicts``, as a ``graphviz.Digraph``.

    A pure function of (graph, verdicts): the same input draws the same DOT source.
    ``verdicts`` is a ``Verdicts`` record or just the sites. For an ``Analysis``,
    ``analysis.render("before" | "after")`` passes its own graph and verdicts.

    Node styles come from ``STYLES`` (a legend cluster lists them). A skipped
    site shows its first reason code, and every reason in its tooltip; a folded
    site's mul is drawn as removed (before) and its conv names the weight and
    bias it reads after the fold (after). The path from a site to the state it
    feeds is drawn thick when that is why it was skipped, light when it folded
    anyway (risk ``feeds-carried-state``).

    ``focus=site_id`` draws only the site and the nodes within ``hops`` edges of
    it. Without a focus, a graph of more than ``max_nodes`` shown nodes draws the
    neighbourhoods of all sites and says what it left out (``max_nodes=None``
    draws everything). ``hide=("constants",)`` leaves out weights, parameters and
    constant buffers, but never a buffer written as state, nor in the after
    graph the weight and bias a folded conv now reads (they are where the scale
    went). ``cluster_by_module`` groups nodes by their ``nn_module_stack`` path.
    """
    _check_graph(graph)
    verdicts = _as_verdicts(verdicts)
    view = _view(graph, verdicts, focus=focus, hops=hops, hide=hide, max_nodes=max_nodes)
    g = _digraph()
    g.attr("graph", label=_text_left(*verdicts.caption, *view.notes))
    _draw(g, view, prefix="", cluster_by_module=cluster_by_module)
    _legend(g)
    if verdicts.errors:
        _error_legend(g)
    return g


def render_pair(before, after, verdicts: tuple, *, caption: Iterable[str] = (), focus: str | None = None,
                hops: int = 2, hide: Iterable[str] = ("constants",), cluster_by_module: bool = False,
                max_nodes: int | None = 400) -> graphviz.Digraph:
    """Before and after side by side: one ``Digraph`` with a cluster each (node ids prefixed
    ``before.`` and ``after.``), from the two graphs and their two ``Verdicts``; takes the keyword
    arguments of ``render`` (``analysis.render_pair()`` passes an analysis's own)."""
    for graph in (before, after):
        _check_graph(graph)
    v_before, v_after = (_as_verdicts(v) for v in verdicts)
    views = [_view(graph, v, focus=focus, hops=hops, hide=hide, max_nodes=max_nodes)
             for graph, v in ((before, v_before), (after, v_after))]
    g = _digraph()
    g.attr("graph", label=_text_left(*caption))
    for which, view in zip(WHICH, views):
        with g.subgraph(name=f"cluster_{which}") as sub:
            sub.attr("graph", label=_text_left(f"{which} the pass", *view.notes), style="rounded", color="#cccccc")
            _draw(sub, view, prefix=f"{which}.", cluster_by_module=cluster_by_module)
    _legend(g)
    if v_before.errors or v_after.errors:
        _error_legend(g)
    return g


def focus_walk(graph, verdicts: Verdicts | Iterable, focus: str, *, hops: int = 2,
               hide: Iterable[str] = ("constants",)) -> tuple[WalkStep, ...]:
    """The nodes a picture of ``render(graph, verdicts, focus=focus, hops=hops, hide=hide)`` walks
    through, with their depth and whether the walk goes on from them: what a caller handing a part
    of a graph must hold (every node walked on from with all its neighbours) for the same picture."""
    _check_graph(graph)
    verdicts = _as_verdicts(verdicts)
    view_hide = _hide(hide)
    site = _focus_site(verdicts, focus)
    facts = _classify(graph, verdicts)
    hidden = _hidden(facts, view_hide)
    depth = _neighbourhood(_seeds(facts, site), hops, hidden, facts)
    return tuple(WalkStep(name=n.name, depth=d, walks_on=_walks_on(n, d, hops, facts),
                          constant=facts.kind[n] == "constant")
                 for n, d in depth.items())


def _check_graph(graph) -> None:
    if not isinstance(graph, (fx.Graph, fx.GraphModule)):
        raise InspectorError(f"cannot draw a {type(graph).__name__}; give an FX graph and its verdicts "
                             "(an Analysis draws itself: analysis.render())")


def _as_verdicts(verdicts) -> Verdicts:
    if isinstance(verdicts, Verdicts):
        return verdicts
    try:
        return Verdicts(sites=tuple(verdicts))
    except TypeError:
        raise InspectorError(f"verdicts must be a Verdicts record or a sequence of sites, got {quoted(verdicts)}") from None


DOT_MISSING = ("graphviz's dot is not installed: apt-get install -y graphviz (or conda install graphviz); "
               "Digraph.source still works")


def svg(digraph: graphviz.Digraph) -> str:
    """The SVG text of ``digraph`` (from ``<svg`` on: ready to inline into HTML)."""
    text = pipe(digraph, "svg").decode("utf-8")
    start = text.find("<svg")
    return text[start:] if start >= 0 else text


def pipe(digraph: graphviz.Digraph, fmt: str) -> bytes:
    """Lay out ``digraph`` with ``dot`` into ``fmt`` bytes: the only place that runs ``dot``."""
    try:
        return digraph.pipe(format=fmt, quiet=True)  # dot's warnings (fonts, sizes) are not the user's business
    except graphviz.ExecutableNotFound:
        raise InspectorError(DOT_MISSING) from None
    except graphviz.CalledProcessError as exc:
        err = (exc.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        raise InspectorError(f"dot failed to draw the graph: {err[0] if err else exc}") from exc
    except OSError as exc:  # dot died while reading the graph (a broken pipe)
        raise InspectorError(f"dot failed to draw the graph: {exc.strerror or exc}") from None


# ---------------------------------------------------------------- escaping


def _dot_text(value: Any, clip: int | None = None) -> str:
    """A model-derived string as literal DOT text: backslashes doubled, newlines as DOT's ``\\n``."""
    s = str(value)
    if clip is not None and len(s) > clip:
        s = s[: clip - 1] + "…"
    s = s.replace("\\", "\\\\").replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n")
    # Other control characters have no business in a picture (and some break XML).
    return re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", "?", s)


def _joined(lines, sep: str = "\\n", clip: int | None = None, end: str = "") -> str:
    """Escaped lines joined, the whole kept under ``_MAX_STRING`` characters (dot refuses longer
    strings); a line that does not fit is cut and says so."""
    out, total = [], 0
    for line in lines:
        piece = _dot_text(line, clip if clip is not None else _MAX_STRING // 2) + end
        if total + len(piece) + len(sep) > _MAX_STRING:
            out.append("… (cut: too long to draw)" + end)
            break
        out.append(piece)
        total += len(piece) + len(sep)
    return sep.join(out) if not end else "".join(out)


def _text(*lines: Any) -> str:
    """Lines of already-meant-literal text joined into one plain-text DOT label or tooltip.

    ``nohtml`` stops the graphviz package from reading ``<...>`` as an HTML label.
    """
    return graphviz.nohtml(_joined(lines))


def _tooltip(*lines: Any) -> str:
    """Like ``_text``, for tooltips: a backslash is shown as "⧵" (U+29F5).

    dot 2.43 unescapes tooltips twice, so ``\\\\N`` still turns into the node name
    there; no escaping is right in every graphviz version, a look-alike is.
    """
    return _text(*(str(line).replace("\\", "\u29f5") for line in lines))


def _text_clipped(*lines: Any) -> str:
    """Like ``_text``, each line clipped to ``_CLIP`` characters (the tooltip has it whole)."""
    return graphviz.nohtml(_joined(lines, clip=_CLIP))


def _text_left(*lines: Any) -> str:
    """Like ``_text``, every line left-justified (DOT's ``\\l``): for graph and cluster captions."""
    return graphviz.nohtml(_joined(lines, clip=_CAPTION_CLIP, end="\\l"))


# ---------------------------------------------------------------- building blocks


def _digraph() -> graphviz.Digraph:
    return graphviz.Digraph("fold_inspector", graph_attr=_GRAPH_ATTR, node_attr=_NODE_ATTR, edge_attr=_EDGE_ATTR)


# The SQNR colour scale of the measured-error layer: (lower bound in dB, fill colour), worst first.
ERROR_SCALE: tuple[tuple[float, str], ...] = (
    (float("-inf"), "#b2182b"), (10.0, "#ef8a62"), (20.0, "#fddbc7"), (30.0, "#d1e5f0"), (40.0, "#67a9cf"),
    (50.0, "#2166ac"),
)


_DARK_FILLS = {ERROR_SCALE[0][1], ERROR_SCALE[-1][1]}  # white text on these


def error_colour(sqnr_db: float) -> str:
    """The fill colour of a node whose quantized value has this SQNR (dB) against float."""
    colour = ERROR_SCALE[0][1]
    for bound, fill in ERROR_SCALE:
        if sqnr_db >= bound:
            colour = fill
    return colour


def _error_legend(g: graphviz.Digraph) -> None:
    """The SQNR colour scale, in dB."""
    with g.subgraph(name="cluster_error_legend") as lg:
        lg.attr("graph", label="SQNR, float vs quantized (dB)", style="rounded", color="#cccccc", fontsize="11")
        with lg.subgraph(name="error_legend_row") as row:
            row.attr("graph", rank="same")
            names = []
            for i, (bound, fill) in enumerate(ERROR_SCALE):
                upper = ERROR_SCALE[i + 1][0] if i + 1 < len(ERROR_SCALE) else None
                text = (f"< {upper:g}" if bound == float("-inf") else
                        f"{bound:g} - {upper:g}" if upper is not None else f">= {bound:g}")
                name = f"legend.sqnr.{i}"
                row.node(name, label=_text(text), shape="box", style="filled", fillcolor=fill, fontsize="10",
                         color="#888888", fontcolor="#ffffff" if fill in _DARK_FILLS else "#000000",
                         **{"class": "legend sqnr"})
                names.append(name)
            for a, b in zip(names, names[1:]):
                row.edge(a, b, style="invis")


def _legend(g: graphviz.Digraph) -> None:
    """A cluster with one sample of every style, in rows of ``_LEGEND_ROW`` (read left to right)."""
    with g.subgraph(name="cluster_legend") as lg:
        lg.attr("graph", label="legend", style="rounded", color="#cccccc", fontsize="11")
        kinds = list(LEGEND)
        rows = [kinds[i:i + _LEGEND_ROW] for i in range(0, len(kinds), _LEGEND_ROW)]
        firsts = []
        for r, row in enumerate(rows):
            with lg.subgraph(name=f"legend_row_{r}") as line:
                # Same rank plus invisible edges keep the entries in table order, left to right.
                line.attr("graph", rank="same")
                chain = []
                for kind in row:
                    node_id = f"legend.{kind}"
                    if kind in ("state-path", "risk-path"):
                        # An edge style: a dot, then the edge (horizontal: same rank) to its meaning.
                        line.node(node_id, label="", shape="point", width="0.08")
                        line.node(node_id + ".to", label=_text(LEGEND[kind]), shape="plaintext", fontsize="10")
                        line.edge(node_id, node_id + ".to", **STYLES[kind], **{"class": kind})
                        chain += [node_id, node_id + ".to"]
                        continue
                    attrs = {"fontsize": "10", **(STYLES["op"] if kind == "marked" else {}), **STYLES[kind],
                             "class": f"legend {kind}"}
                    line.node(node_id, label=_text(LEGEND[kind]), **attrs)
                    chain.append(node_id)
                for a, b in zip(chain, chain[1:]):
                    if not (a.endswith("-path") and b == a + ".to"):
                        line.edge(a, b, style="invis")
                firsts.append(chain[0])
        for a, b in zip(firsts, firsts[1:]):
            lg.edge(a, b, style="invis")


def _short_op(node: Node) -> str:
    """``conv2d``, ``mul.Tensor``, ``_operator.getitem``: what a node calls, short and address-free."""
    if node.op != "call_function":
        return str(node.target)
    target = node.target
    if hasattr(target, "_schema"):  # an aten / edge / custom op overload
        return _graph.op_name(node).removeprefix("aten.").removesuffix(".default")
    # A Python callable: its qualified name, never its repr (which may hold an address).
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or type(target).__name__
    return f"{getattr(target, '__module__', None) or ''}.{name}".lstrip(".")


def _shape(node: Node) -> str:
    """``float32[1, 4, 8, 8]`` from the node's recorded value (tuples joined), or ""."""
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    parts = []
    for v in vals:
        if hasattr(v, "shape") and hasattr(v, "dtype"):
            dims = [int(d) if str(d).isdigit() else str(d) for d in v.shape]  # symbolic sizes stay names
            parts.append(f"{str(v.dtype).removeprefix('torch.')}{dims}")
    return ", ".join(parts)


def _module_types(node: Node) -> tuple[str, str]:
    """(dotted module path, short class name) of the innermost module that made ``node``."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", ""
    _, type_name = list(stack.values())[-1]
    type_name = str(getattr(type_name, "__name__", type_name))
    return _graph.module_path(node), type_name.rsplit(".", 1)[-1]


# ---------------------------------------------------------------- classify -> select -> label


@dataclass(kw_only=True)
class _Facts:
    """Per-node facts of one graph under its verdicts (the classify step)."""

    nodes: list[Node]
    after: bool
    kind: dict[Node, str] = field(default_factory=dict)  # a STYLES key per node
    site_of_mul: dict[str, Any] = field(default_factory=dict)  # mul name -> site (not for a folded mul after)
    sites_of_conv: dict[str, list] = field(default_factory=dict)  # conv name -> its sites
    site_of_path: dict[str, Any] = field(default_factory=dict)  # a view or RESCALE between a site's conv and mul
    keep: set[str] = field(default_factory=set)  # constants drawn even when constants are hidden
    path_edges: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)  # (tail, head) -> (kind, why)
    errors: dict = field(default_factory=dict)  # node name -> measured error (has sqnr_db)
    trace: Any = None  # stack trace filter (Verdicts.trace)
    marked: frozenset = frozenset()  # names of nodes marked carried state (Verdicts.marked)
    writes: dict[Node, list] = field(default_factory=dict)  # boundary node -> the state it writes (StateWrite)
    held: dict[Node, str] = field(default_factory=dict)  # node holding carried state -> "buffer" | "input"
    buffer_inputs: set[str] = field(default_factory=set)  # placeholder names of buffers
    constant_inputs: set[str] = field(default_factory=set)  # placeholder names of parameters, buffers, constants
    border: Border | None = None  # set when the graph is part of a larger one
    outside: dict[Node, int] = field(default_factory=dict)  # part of a graph: a node's users outside it

    def inputs(self, n: Node) -> list[Node]:
        """``n``'s inputs in the graph."""
        return n.all_input_nodes

    def user_nodes(self, n: Node) -> list[Node]:
        """``n``'s users in the graph."""
        return list(n.users)

    def degree(self, n: Node) -> int:
        """How many neighbours ``n`` has in the whole graph (in a part of one, those outside counted too)."""
        return len(self.inputs(n)) + len(self.user_nodes(n)) + self.outside.get(n, 0)

    def walked(self, n: Node) -> list[Node]:
        """The neighbours of ``n`` in the graph a walk goes on to."""
        return [*self.inputs(n), *self.user_nodes(n)]

    def is_marked(self, n: Node) -> bool:
        return n.name in self.marked or _graph.marked(n)


def _classify(graph, verdicts: Verdicts) -> _Facts:
    """What every node is: a site's conv or mul (and its verdict), a state boundary, state, input,
    constant, output, op; and which edges lie on a path to state."""
    graph = graph.graph if isinstance(graph, fx.GraphModule) else graph
    facts = _Facts(nodes=list(graph.nodes), after=verdicts.after, errors=dict(verdicts.errors), trace=verdicts.trace,
                   marked=frozenset(verdicts.marked))
    by_name = {n.name: n for n in facts.nodes}
    for s in verdicts.sites:  # membership first: a part of a big graph holds few of the sites
        if s.mul in by_name and not (facts.after and s.folded):
            facts.site_of_mul[s.mul] = s
        if s.conv in by_name:
            facts.sites_of_conv.setdefault(s.conv, []).append(s)
        for name in getattr(s, "path", ()):  # the way a site behind a view takes is drawn as the site
            if name in by_name:
                facts.site_of_path.setdefault(name, s)
        if facts.after and (s.folded_weight in by_name or s.folded_bias in by_name) and s.folded:
            facts.keep.update(n for n in (s.folded_weight, s.folded_bias) if n)  # only this graph's are read
    for s in verdicts.sites:  # the state paths to highlight; thick wins over light
        # An edge is drawn where its head is in this graph (the tail may be the site's conv, after).
        if len(s.state_path) < 2 or not any(name in by_name for name in s.state_path[1:]):
            continue
        if not s.folded and STATE_REASONS & set(s.reason_codes):
            kind = "state-path"
        elif s.folded and CARRIED_STATE_RISK in {r.code for r in s.risks}:
            kind = "risk-path"
        else:
            continue
        path = list(s.state_path)
        if facts.after and s.folded:
            path[0] = s.conv  # the mul is gone: its users now read the conv
        for edge in zip(path, path[1:]):
            if facts.path_edges.get(edge, ("",))[0] != "state-path":
                facts.path_edges[edge] = (kind, f"site {s.id} -> {s.state_boundary}")
    writes = _graph.state_writes(graph, verdicts.signature)
    for w in writes:
        facts.writes.setdefault(w.node, []).append(w)
    border = facts.border = verdicts.border
    if border is None:
        facts.held = _graph.written_state(graph, verdicts.signature, writes)
    else:  # state written through the whole graph's output is not visible in the part's
        facts.held = {n: border.held[n.name] for n in facts.nodes if n.name in border.held}
        for n in facts.nodes:
            k = border.outside_users.get(n.name, 0)
            if k:  # the part's output stands for k users
                facts.outside[n] = k
    facts.buffer_inputs, facts.constant_inputs = _graph.placeholder_roles(verdicts.signature)
    for n in facts.nodes:
        facts.kind[n] = _kind(facts, n)
    return facts


def _kind(facts: _Facts, n: Node) -> str:
    if n.name in facts.site_of_mul:
        s = facts.site_of_mul[n.name]
        return "removed" if s.folded else site_kind(s)
    if n.name in facts.sites_of_conv:
        return site_kind(facts.sites_of_conv[n.name][0])
    if n.name in facts.site_of_path:
        return site_kind(facts.site_of_path[n.name])
    if n in facts.writes:
        return "boundary"  # an in-place write into state, or the output when the signature says it writes state
    if n.op == "output":
        return "output"
    if n.op in ("placeholder", "get_attr"):
        if n in facts.held:  # a buffer the graph writes back into is state, not a constant
            return "input"
        return "constant" if n.op == "get_attr" or n.name in facts.constant_inputs else "input"
    return "op"


@dataclass(kw_only=True)
class _View:
    """The classified graph and what of it to draw (the select step)."""

    facts: _Facts
    shown: list[Node]
    notes: list[str]
    cut: dict[Node, str]  # border nodes of a partial view: what is not shown around them


def _hide(hide) -> tuple[str, ...]:
    hide = (hide,) if isinstance(hide, str) else tuple(hide or ())
    bad = [h for h in hide if h not in HIDEABLE]
    if bad:
        raise InspectorError(f"cannot hide {quoted(bad[0])}; hideable: {', '.join(HIDEABLE)}")
    return hide


def _focus_site(verdicts: Verdicts, focus):
    """The site ``focus`` names (None without a focus); one line if it names none."""
    if focus is None:
        return None
    site = next((s for s in verdicts.sites if s.id == focus), None)
    if site is None:
        known = ", ".join(s.id for s in verdicts.sites) or "none"
        raise InspectorError(f"no site {quoted(focus)}; sites: {known[:240]}")
    return site


def _hidden(facts: _Facts, hide: tuple[str, ...]) -> set[Node]:
    return {n for n in facts.nodes if facts.kind[n] == "constant" and "constants" in hide and n.name not in facts.keep}


def _seeds(facts: _Facts, site) -> list[Node]:
    """Where a focused picture of ``site`` starts: its mul and conv, and the views between them (after a fold,
    its conv)."""
    by_name = {n.name: n for n in facts.nodes}
    names = (site.conv,) if facts.after and site.folded else (site.mul, site.conv, *getattr(site, "path", ()))
    return [by_name[name] for name in names if name in by_name]


def _view(graph, verdicts: Verdicts, *, focus=None, hops=2, hide=("constants",), max_nodes=400) -> _View:
    hide = _hide(hide)
    if not isinstance(hops, int) or isinstance(hops, bool) or hops < 0:
        raise InspectorError(f"hops must be a non-negative integer, got {quoted(hops)}")
    if max_nodes is not None and (not isinstance(max_nodes, int) or max_nodes < 1):
        raise InspectorError(f"max_nodes must be a positive integer or None, got {quoted(max_nodes)}")
    focus_site = _focus_site(verdicts, focus)
    facts = _classify(graph, verdicts)
    return _select(facts, focus_site, hops, hide, max_nodes)


def _select(facts: _Facts, focus_site, hops: int, hide: tuple[str, ...], max_nodes: int | None) -> _View:
    """Which nodes to draw: all, a focused site's neighbourhood, or the sites' neighbourhoods
    shrunk to fit ``max_nodes``; constants hidden unless kept."""
    hidden = _hidden(facts, hide)
    visible = [n for n in facts.nodes if n not in hidden]
    notes: list[str] = []
    if hidden and focus_site is None:
        notes.append(f"{len(hidden):,} constant{'s' * (len(hidden) != 1)} hidden (hide=() shows them)")
    if focus_site is not None:
        # What the picture says is about the focused part alone: a part of the graph draws it the same.
        shown = set(_neighbourhood(_seeds(facts, focus_site), hops, hidden, facts))
        around = {m for n in shown for m in facts.walked(n) if m in hidden}
        if around:
            notes.append(f"{len(around):,} constant{'s' * (len(around) != 1)} around it hidden "
                         "(hide=() shows them)")
        notes.append(f"focus: site {focus_site.id} and {hops} hop{'s' * (hops != 1)} around it "
                     f"({len(shown):,} node{'s' * (len(shown) != 1)})")
    elif max_nodes is not None and len(visible) > max_nodes and not (facts.site_of_mul or facts.sites_of_conv):
        shown = set(visible[:max_nodes])
        notes.append(f"showing the first {max_nodes:,} of {len(visible):,} nodes (no sites here); "
                     "pass max_nodes=None for all")
    elif max_nodes is not None and len(visible) > max_nodes:
        seeds = [n for n in visible if n.name in facts.site_of_mul or n.name in facts.sites_of_conv]
        # Shrink the neighbourhoods until they fit; at 0 hops only the sites themselves remain.
        h = hops
        shown = set(_neighbourhood(seeds, h, hidden, facts))
        while len(shown) > max_nodes and h > 0:
            h -= 1
            shown = set(_neighbourhood(seeds, h, hidden, facts))
        sites = {s.id for s in facts.site_of_mul.values()} | {s.id for ss in facts.sites_of_conv.values() for s in ss}
        notes.append(f"showing {len(shown):,} of {len(visible):,} nodes: the neighbourhoods "
                     f"({h} hop{'s' * (h != 1)}) of {len(sites):,} site{'s' * (len(sites) != 1)}; "
                     "pass max_nodes=None for all")
    else:
        shown = set(visible)
    ordered = [n for n in visible if n in shown]
    # In a partial view, say on each border node how many neighbours were left out.
    cut: dict[Node, str] = {}
    if len(ordered) < len(visible):
        for n in ordered:
            ins = sum(1 for m in facts.inputs(n) if m not in shown and m not in hidden)
            outs = sum(1 for m in facts.user_nodes(n) if m not in shown and m not in hidden)
            outs += facts.outside.get(n, 0)
            parts = [f"{k:,} {what}{'s' * (k != 1)}" for k, what in ((ins, "input"), (outs, "user")) if k]
            if parts:
                cut[n] = "+" + ", ".join(parts) + " not shown"
    return _View(facts=facts, shown=ordered, notes=notes, cut=cut)


def _draw(g: graphviz.Digraph, view: _View, *, prefix: str, cluster_by_module: bool) -> None:
    """Add the shown nodes (optionally inside module clusters) and their edges to ``g``."""
    shown = set(view.shown)
    if cluster_by_module:
        _draw_clusters(g, view, prefix)
    else:
        for n in view.shown:
            _draw_node(g, view, n, prefix)
    for n in view.shown:
        for src in view.facts.inputs(n):
            if src not in shown:
                continue
            path = view.facts.path_edges.get((src.name, n.name))
            if path is None:
                g.edge(_node_id(prefix, src.name), _node_id(prefix, n.name))
            else:
                kind, why = path
                g.edge(_node_id(prefix, src.name), _node_id(prefix, n.name), tooltip=_tooltip(why), **STYLES[kind],
                       **{"class": kind})


def _draw_clusters(g: graphviz.Digraph, view: _View, prefix: str) -> None:
    # A tree of module paths ("a" > "a.b" > "a.b.c") in order of first appearance.
    children: dict[str, list[str]] = {"": []}
    members: dict[str, list[Node]] = {"": []}
    types: dict[str, str] = {}
    for n in view.shown:
        path, type_name = _module_types(n) if n.op == "call_function" else ("", "")
        if path and path not in types:
            types[path] = type_name
        parts = path.split(".") if path else []
        parent = ""
        for i in range(len(parts)):
            sub = ".".join(parts[: i + 1])
            if sub not in members:
                members[sub] = []
                children[sub] = []
                children[parent].append(sub)
            parent = sub
        members[path].append(n)
    counter = iter(range(len(members)))

    def emit(graph, path):
        for n in members[path]:
            _draw_node(graph, view, n, prefix)
        for child in children[path]:
            with graph.subgraph(name=f"cluster_{prefix.rstrip('.') or 'g'}_m{next(counter)}") as c:
                label = child + (f" ({types[child]})" if types.get(child) else "")
                c.attr("graph", label=_text_clipped(label), tooltip=_tooltip(label), style="rounded,dashed",
                       color="#999999", fontsize="10")
                emit(c, child)

    emit(g, "")


def _draw_node(g: graphviz.Digraph, view: _View, n: Node, prefix: str) -> None:
    kind = view.facts.kind[n]
    attrs = dict(STYLES[kind])
    classes = [kind]
    if view.facts.is_marked(n):
        attrs.update(STYLES["marked"])
        classes.append("marked")
    label, tooltip = _label(view, n, kind)
    error = view.facts.errors.get(n.name)
    if error is not None:  # the measured-error layer: fill on the SQNR scale, keep the kind's border
        attrs["fillcolor"] = error_colour(error.sqnr_db)
        if attrs["fillcolor"] in _DARK_FILLS:
            attrs["fontcolor"] = "#ffffff"
        if "filled" not in attrs.get("style", ""):
            attrs["style"] = ",".join(filter(None, (attrs.get("style"), "filled")))
        classes.append("error")
    g.node(_node_id(prefix, n.name), label=label, tooltip=tooltip, **attrs, **{"class": " ".join(classes)})


def _label(view: _View, n: Node, kind: str) -> tuple[str, str]:
    """(label, tooltip): names and verdicts in the label; shapes, details, stack trace in the tooltip."""
    facts = view.facts
    if n.op in ("placeholder", "get_attr"):
        if kind == "constant":
            what = "weight / constant"
        elif n.op == "get_attr" or n.name in facts.buffer_inputs:
            what = "state buffer"
        else:
            what = "input"
    else:
        what = _short_op(n)
    label = [n.name] if n.op != "output" else ["output"]
    if what != n.name and n.op != "output":
        label.append(what)
    tip = [f"{n.name} ({n.op}: {_short_op(n) if n.op == 'call_function' else n.target})"]
    shape = _shape(n)
    if shape:
        tip.append(f"value: {shape}")
    path, type_name = _module_types(n)
    if path or type_name:
        tip.append(f"module: {path or '(root)'} ({type_name})")

    reads: dict[str, None] = {}  # ordered set
    sites = ([facts.site_of_mul[n.name]] if n.name in facts.site_of_mul else []) + facts.sites_of_conv.get(n.name, [])
    for s in sites:
        is_mul = s.mul == n.name
        label.append(f"site {s.id}")
        if is_mul:
            label.append(f"scale: {s.scale.short()}")
        if s.folded:
            if is_mul:
                label.append("removed by fold")
            elif facts.after:
                label.append(f"absorbed the scale ({s.scale.short()})")
                # Chained folds on one conv read the same constants: name them once, below.
                reads.update(dict.fromkeys(f"{role}: {name}" for role, name in
                                           (("weight", s.folded_weight), ("bias", s.folded_bias)) if name))
            else:
                label.append("fold")
        else:
            more = f" (+{len(s.reasons) - 1})" if len(s.reasons) > 1 else ""
            label.append(f"skip: {s.reasons[0].code if s.reasons else '?'}{more}")
        if s.risks:
            label.append("risk: " + ", ".join(r.code for r in s.risks))
        tip.append(f"site {s.id}: {s.decision}; conv {s.conv} ({s.conv_op}) -> mul {s.mul}, "
                   f"scale {s.scale.short()}")
        tip += [f"  {r.code}: {r.detail}" for r in s.reasons]
        tip += [f"  risk {r.code}: {r.detail}" for r in s.risks]
        if s.folded and facts.after and not is_mul:
            tip.append(f"  reads weight {s.folded_weight} and bias {s.folded_bias or '(none)'} after the fold")
        if s.state_boundary:
            tip.append(f"  reaches {s.state_boundary}: {' -> '.join(s.state_path)}")
        if s.mismatch:
            tip.append(f"  MISMATCH: {s.mismatch}")
    label += list(reads)
    if n.name in facts.site_of_path:  # a view (or RESCALE) between a site's conv and its mul
        s = facts.site_of_path[n.name]
        label.append(f"on the way to site {s.id}'s mul")
        tip.append(f"between conv {s.conv} and mul {s.mul} of site {s.id}: the pass matches a mul on the conv only")
    error = facts.errors.get(n.name)
    if error is not None:
        label.append(f"SQNR {db(error.sqnr_db)} dB")
        tip.append(f"float vs quantized: SQNR {db(error.sqnr_db)} dB"
                   + (f", max |error| {error.max_abs_error:.3g}" if hasattr(error, "max_abs_error") else "")
                   + (f", {db(error.drop_db)} dB below its inputs" if getattr(error, "drop_db", None)
                      else ""))
    if n in view.cut:
        label.append(view.cut[n])
    if facts.is_marked(n):
        label.append("marked carried state")
        tip.append("marked carried_quant_state")
    if kind == "boundary":
        writes = facts.writes[n]
        if writes[0].via == "in-place":
            w = writes[0]
            where = f"writes into {'buffer' if w.kind == _graph.BUFFER else 'input'} '{w.target}'"
        else:
            where = "writes " + ", ".join(w.description for w in writes)
        label.append("state: " + where)
        tip.append("state boundary: " + where)
    trace = (n.meta.get("stack_trace") or "").strip()
    if trace and facts.trace is not None:
        trace = facts.trace(trace).strip()
    if trace:
        tip += ["", "stack trace:", trace]
    # Site ids stay whole in labels (they are what the user searches for); other text is clipped.
    clipped = (_dot_text(line, _ID_CLIP if line.startswith("site ") else _CLIP) for line in label)
    return graphviz.nohtml("\\n".join(clipped)), _tooltip(*tip)


def _node_id(prefix: str, name: str) -> str:
    """The DOT id of a node: its FX name, or for a very long name a short stable stand-in."""
    if len(name) <= _MAX_ID:
        return prefix + name

    return f"{prefix}{name[:_MAX_ID // 2]}…{hashlib.sha1(name.encode()).hexdigest()[:12]}"


def _walks_on(n: Node, d: int, hops: int, facts: _Facts) -> bool:
    """Whether a walk reaching ``n`` after ``d`` hops goes on from it: not at the last hop, and not
    from a hub (more than ``HUB_DEGREE`` neighbours, e.g. the input every block reads), or one
    hop would pull in the whole graph."""
    return d < hops and (d == 0 or facts.degree(n) <= HUB_DEGREE)


def _neighbourhood(seeds: list[Node], hops: int, hidden: set[Node], facts: _Facts) -> dict[Node, int]:
    """Nodes within ``hops`` edges of any seed, both directions, not walking through hidden nodes
    nor on from hubs (``_walks_on``); with the hops each took.

    One breadth-first search from all seeds at once: every node is expanded at most once.
    """
    seen = dict.fromkeys(seeds, 0)
    frontier = deque((n, 0) for n in seeds)
    while frontier:
        n, d = frontier.popleft()
        if not _walks_on(n, d, hops, facts):
            continue
        for m in facts.walked(n):
            if m not in seen and m not in hidden:
                seen[m] = d + 1
                frontier.append((m, d + 1))
    return seen
