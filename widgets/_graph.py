"""The graph panel: before | after | side by side, focused on the selected site or whole."""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as W

import inspector
from inspector import InspectorError, present

from ._common import graph_error, scrolled


class GraphPanel:
    """Owns the view and scope toggles and the drawn graph."""

    exposed = ("graph_which", "graph_scope", "graph")

    def __init__(self, graph_view: str, focus_selected: bool, *, on_change: Callable) -> None:
        self.graph_which = W.ToggleButtons(options=["before", "after", "side by side"], value=graph_view,
                                           style={"button_width": "100px"}).add_class("fi-graph-which")
        self.graph_scope = W.ToggleButtons(options=["focus", "whole"], value="focus" if focus_selected else "whole",
                                           style={"button_width": "70px"}).add_class("fi-graph-scope")
        self.graph = W.HTML().add_class("fi-graph")
        self.graph_which.observe(on_change, names="value")
        self.graph_scope.observe(on_change, names="value")
        self.view = W.VBox([W.HBox([self.graph_which, self.graph_scope]), self.graph]).add_class("fi-graph-panel")

    def render(self, analysis: inspector.Analysis, selected: str | None) -> None:
        focus = selected if self.graph_scope.value == "focus" else None
        which = self.graph_which.value
        try:
            if which == "side by side":
                digraph = analysis.render_pair(focus=focus)
            else:
                digraph = analysis.render(which, focus=focus)
            svg = present.svg(digraph)
        except InspectorError as exc:
            self.graph.value = graph_error(str(exc))
            return
        self.graph.value = scrolled(svg)
