"""The "Where does the error enter?" panel: per-node error, float vs quantized, per variant and step."""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as W

import inspector
from inspector import InspectorError, present

from ._common import graph_error, scrolled
from ._jobs import JobView

NOT_RUN = "<i>not run yet: uses the variants and steps above</i>"


class AttributionPanel:
    """Owns the run button and its progress, the table, the variant and node pickers, the coloured
    after-graph and the picked node's curve. It shows an ``inspector.Attribution`` it is given."""

    exposed = ("attr_button", "attr_progress", "attr_progress_label", "attr_variant", "attr_node", "attr_table",
               "attr_graph", "attr_curve")

    def __init__(self, *, on_run: Callable, on_variant: Callable, on_node: Callable) -> None:
        self.attr_button = W.Button(description="Where does the error enter?", icon="search",
                                    layout=W.Layout(width="240px")).add_class("fi-attr-run")
        self.attr_progress = W.FloatProgress(value=0.0, min=0.0, max=1.0,
                                             layout=W.Layout(width="300px")).add_class("fi-attr-progress")
        self.attr_progress_label = W.Label("").add_class("fi-attr-progress-label")
        self.attr_variant = W.Dropdown(description="variant", layout=W.Layout(width="300px")).add_class("fi-attr-variant")
        self.attr_node = W.Select(description="node", rows=8, layout=W.Layout(width="380px")).add_class("fi-attr-node")
        self.attr_table = W.HTML(NOT_RUN).add_class("fi-attr-table")
        self.attr_graph = W.HTML().add_class("fi-attr-graph")
        self.attr_curve = W.HTML().add_class("fi-attr-curve")
        self.job_view = JobView(self.attr_button, self.attr_progress, self.attr_progress_label)
        self.attr_button.on_click(on_run)
        self.attr_variant.observe(on_variant, names="value")
        self.attr_node.observe(on_node, names="value")
        self.view = W.VBox([
            W.HTML("<b>Where does the error enter?</b> <small>per-node error, float vs quantized, per variant "
                   "and step; pick a node for its curve</small>"),
            W.HBox([self.attr_button, self.attr_progress, self.attr_progress_label]),
            self.attr_table,
            W.HBox([self.attr_variant]), self.attr_graph,
            W.HBox([self.attr_node, self.attr_curve]),
        ]).add_class("fi-attribution-panel")

    def pick(self, result: inspector.Attribution) -> None:
        """Fill the pickers for a new result: its first variant that folds something, its first entry point."""
        labels = [v.label for v in result.variants]
        self.attr_variant.options = labels
        self.attr_variant.value = next((v for v in labels if v != "off"), labels[0])
        self.attr_node.options = list(result.order)
        entries = [e.node for v in result.variants for e in v.entry_points]
        self.attr_node.value = entries[0] if entries else result.order[0]

    def forget(self) -> None:
        """Another model: the last attribution no longer applies."""
        self.attr_table.value = NOT_RUN
        self.attr_graph.value = self.attr_curve.value = ""
        self.attr_node.options = []
        self.attr_variant.options = []

    def select_node(self, result: inspector.Attribution | None, node: str) -> None:
        if result is None:
            raise InspectorError("no attribution yet: press 'Where does the error enter?' first")
        if node not in result.order:
            raise InspectorError(f"no node {present.quoted(node)}; nodes: {', '.join(result.order[:12])}")
        self.attr_node.value = node

    def render_table(self, result: inspector.Attribution | None, result_for: tuple | None, current: tuple) -> None:
        if result is None:
            return
        banner = present.stale_html(result_for) if result_for != current else ""
        self.attr_table.value = banner + present.attribution_html(result)

    def render(self, result: inspector.Attribution | None, result_for: tuple | None,
               analysis: inspector.Analysis) -> None:
        """The table, the after-graph coloured by the picked variant's error, and the picked node's curve."""
        if result is None:
            return
        self.render_table(result, result_for, analysis.configuration)
        label = self.attr_variant.value
        if label is None:
            return
        variant = result.variant(label)
        rule = variant.rule if variant.rule in inspector.rules else analysis.rule.name
        shown = analysis if analysis.rule.name == rule else analysis.with_rule(rule)
        try:
            svg = present.svg(shown.render("after", errors=variant))
        except InspectorError as exc:
            self.attr_graph.value = graph_error(str(exc))
        else:
            self.attr_graph.value = scrolled(svg)
        self.render_curve(result)

    def render_curve(self, result: inspector.Attribution | None) -> None:
        if result is None or not self.attr_node.value:
            self.attr_curve.value = ""
            return
        self.attr_curve.value = present.figure_img(result.plot("steps", node=self.attr_node.value),
                                                     css_class="fi-plot fi-attr-curve-img")

    def errors_of_picked(self, result: inspector.Attribution | None, result_for: tuple | None, current: tuple):
        """The picked variant's measured error, when the result is for the graph shown now (else None)."""
        if result is not None and result_for == current and self.attr_variant.value:
            return result.variant(self.attr_variant.value)
        return None
