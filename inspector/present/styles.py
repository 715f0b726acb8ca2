"""The colours and kinds of a verdict, in one table: the graph, the site tables and Model Explorer
all draw from it (no graphviz needed to read it)."""

from __future__ import annotations

# One table for the whole picture: graphviz attributes per node kind (and the two
# path edge kinds). A node has one kind; ``marked`` is drawn over it (border only),
# so a marked site keeps its site colour. A site's conv and mul share the site's
# kind, so the same site has the same colour before and after the pass.
STYLES: dict[str, dict[str, str]] = {
    "folded": {"shape": "box", "style": "rounded,filled", "fillcolor": "#a6dba0", "color": "#1b7837", "penwidth": "2"},
    "removed": {"shape": "box", "style": "rounded,filled,dashed", "fillcolor": "#a6dba0", "color": "#1b7837",
                "penwidth": "2", "fontcolor": "#555555"},
    "skipped": {"shape": "box", "style": "rounded,filled", "fillcolor": "#f4a582", "color": "#b2182b", "penwidth": "2"},
    "near-miss": {"shape": "box", "style": "rounded,filled", "fillcolor": "#fee08b", "color": "#b8860b",
                  "penwidth": "2"},
    "marked": {"color": "#7b3294", "penwidth": "3", "peripheries": "2"},
    "boundary": {"shape": "cylinder", "style": "filled", "fillcolor": "#fddbc7", "color": "#b2182b", "penwidth": "2"},
    "op": {"shape": "box", "style": "rounded,filled", "fillcolor": "#ffffff", "color": "#888888"},
    "input": {"shape": "invhouse", "style": "filled", "fillcolor": "#deebf7", "color": "#4292c6"},
    "output": {"shape": "house", "style": "filled", "fillcolor": "#deebf7", "color": "#4292c6"},
    "constant": {"shape": "note", "style": "filled", "fillcolor": "#f0f0f0", "color": "#bbbbbb",
                 "fontcolor": "#666666", "fontsize": "10"},
    "state-path": {"color": "#b2182b", "penwidth": "3.5"},
    "risk-path": {"color": "#f4a582", "penwidth": "2.5", "style": "dashed"},
}

# What each style means, in the legend (same keys as STYLES, same order).
LEGEND: dict[str, str] = {
    "folded": "folded site (conv, mul)",
    "removed": "mul removed by the fold",
    "skipped": "skipped site",
    "near-miss": "near-miss: the pass\ndoes not match it",
    "marked": "marked carried state",
    "boundary": "state boundary\n(buffer/input write)",
    "op": "op",
    "input": "input or state buffer",
    "output": "output",
    "constant": "weight / constant",
    "state-path": "path to state\n(skipped for state)",
    "risk-path": "path to state\n(folded: risk)",
}

# A skipped site whose first reason says the pass never even matched it.
NEAR_MISS_REASONS = frozenset({"conv-op-not-matched", "transposed-conv", "mul-op-not-matched", "follows-unfolded-mul",
                               "scale-behind-view", "quantized-graph"})


def site_kind(site) -> str:
    """``folded``, ``skipped`` or ``near-miss`` (the pass does not even match it): the site's key in STYLES."""
    if site.folded:
        return "folded"
    return "near-miss" if site.reasons and site.reasons[0].code in NEAR_MISS_REASONS else "skipped"
