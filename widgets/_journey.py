"""The "Journey" panel: the selected site followed through the Arm pipeline, a step list and its picture."""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as W

import inspector
from inspector import InspectorError

from ._common import esc, graph_error, scrolled
from ._jobs import JobView

NOT_RUN = "<i>not run yet: follows the selected site (or the first) under the rule picked here</i>"


class JourneyPanel:
    """Owns the run button and its progress, the rule picker, the list of steps that touched the site,
    the timeline and the picture of the picked step. It shows an ``inspector.Journey`` it is given."""

    exposed = ("journey_button", "journey_progress", "journey_progress_label", "journey_variant", "journey_step",
               "journey_text", "journey_graph")

    def __init__(self, *, on_run: Callable, on_step: Callable) -> None:
        self.journey_button = W.Button(description="Follow the site", icon="road",
                                       layout=W.Layout(width="200px")).add_class("fi-journey-run")
        self.journey_progress = W.FloatProgress(value=0.0, min=0.0, max=1.0,
                                                layout=W.Layout(width="300px")).add_class("fi-journey-progress")
        self.journey_progress_label = W.Label("").add_class("fi-journey-progress-label")
        self.journey_variant = W.Dropdown(description="rule", options=("upstream", "off"), value="upstream",
                                          layout=W.Layout(width="240px")).add_class("fi-journey-variant")
        self.journey_step = W.Select(description="step", rows=8, layout=W.Layout(width="460px")).add_class(
            "fi-journey-step")
        self.journey_text = W.HTML(NOT_RUN).add_class("fi-journey-text")
        self.journey_graph = W.HTML().add_class("fi-journey-graph")
        self.job_view = JobView(self.journey_button, self.journey_progress, self.journey_progress_label)
        self.journey_button.on_click(on_run)
        self.journey_step.observe(on_step, names="value")
        self.view = W.VBox([
            W.HTML("<b>Journey</b> <small>the selected site through the installed Arm pipeline: every pass "
                   "that touched it, where it ended, its numbers; pick a step for its picture</small>"),
            W.HBox([self.journey_variant, self.journey_button, self.journey_progress, self.journey_progress_label]),
            W.HBox([self.journey_step]), self.journey_graph, self.journey_text,
        ]).add_class("fi-journey-panel")

    def show(self, result: inspector.Journey) -> None:
        """A new journey: its steps in the list (the first that changed the site picked), its timeline."""
        self.journey_text.value = result.html()
        options = [(f"{s.index}: {s.phase} / {s.name}", s.index) for s in result.steps if s.touched]
        self.journey_step.options = options
        if options:
            self.journey_step.value = options[0][1]

    def forget(self) -> None:
        """Another model: the last journey no longer applies."""
        self.journey_text.value = NOT_RUN
        self.journey_graph.value = ""
        self.journey_step.options = []

    def render_step(self, result: inspector.Journey | None) -> None:
        """The picture of the picked step: the site's neighbourhood before and after it."""
        if result is None or self.journey_step.value is None:
            self.journey_graph.value = ""
            return
        step = result.steps[self.journey_step.value]
        try:
            svg = inspector.present.svg(result.picture(step))
        except InspectorError as exc:
            self.journey_graph.value = graph_error(str(exc))
        else:
            changes = "<br>".join(esc(c.text()) for c in step.changes)
            self.journey_graph.value = f"<div class='fi-journey-changes'>{changes}</div>" + scrolled(svg)
