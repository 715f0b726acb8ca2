"""The trade-off view: which sites should fold on an Ethos-U (``inspector.advise``), the frontier, the current
decisions as a point that moves when a marker is toggled, and a point clicked sets its markers."""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as W

from inspector import present

from ._jobs import JobView

NOT_RUN = "<i>no advice yet: pick an Ethos-U above, a budget, and Advise</i>"


class TradeoffPanel:
    """Owns the budget, the Advise button and its progress, the frontier, the points and the current point."""

    exposed = ("budget_input", "advise_button", "frontier", "point_buttons", "current_point")

    def __init__(self, *, on_run: Callable, on_point: Callable[[int], None]) -> None:
        self.budget_input = W.BoundedFloatText(value=1.0, min=0.0, max=200.0, step=0.5, description="budget dB",
                                               tooltip="the SQNR (worst output, worst step) you accept losing "
                                                       "against the most accurate set found, on the calibration "
                                                       "inputs", layout=W.Layout(width="180px")).add_class("fi-budget")
        self.advise_button = W.Button(description="Advise: which sites fold?", icon="compass",
                                      tooltip="each site's price in cycles (Vela) and dB, every set measured on the "
                                              "simulation, the best within the budget confirmed on TOSA",
                                      layout=W.Layout(width="240px")).add_class("fi-advise-run")
        self.progress = W.FloatProgress(value=0.0, min=0.0, max=1.0, layout=W.Layout(width="300px"))
        self.progress_label = W.Label("")
        self.job_view = JobView(self.advise_button, self.progress, self.progress_label)
        self.advise_button.on_click(on_run)
        self.frontier = W.HTML(NOT_RUN).add_class("fi-frontier")
        self.current_point = W.HTML("").add_class("fi-current")
        self.point_buttons = W.VBox([]).add_class("fi-points")
        self.table = W.HTML("").add_class("fi-advice-table")
        self._on_point = on_point
        self.view = W.VBox([
            W.HTML("<b>Which sites should fold</b> (an Ethos-U: cycles from Vela)"),
            W.HBox([self.budget_input, self.advise_button, self.progress, self.progress_label]),
            self.current_point, self.frontier, self.point_buttons, self.table,
        ]).add_class("fi-tradeoff-view")
        self._points = ()

    @property
    def budget(self) -> float:
        return float(self.budget_input.value)

    def show(self, advice, folded: tuple[str, ...]) -> None:
        """Draw ``advice`` (None: nothing yet) with the current decisions (``folded``) as a point."""
        if advice is None:
            self.frontier.value, self.table.value, self.current_point.value = NOT_RUN, "", ""
            self.point_buttons.children = ()
            self._points = ()
            return
        points = sorted(advice.points, key=lambda p: (p.cycles is None, p.cycles or 0))
        if tuple(points) != self._points:
            self._points = tuple(points)
            self.point_buttons.children = tuple(self._button(i, p, advice) for i, p in enumerate(points))
            self.table.value = present.advice_html(advice)  # its compiler line included
        self.show_current(advice, folded)

    def show_current(self, advice, folded: tuple[str, ...]) -> None:
        here = next((p for p in advice.points if set(p.folded) == set(folded)), None)
        if here is None:
            self.current_point.value = (f"<div>current decisions: {len(folded)} folded, a set the advice did not "
                                        "measure (another stage or rule than the comparison's flow)</div>")
        else:
            self.current_point.value = (
                f"<div>current decisions: {len(here.folded)} folded, "
                f"{present.escape(_figures(here))}"
                f"{' — within the budget' if here.within else ' — outside the budget'}</div>")
        self.frontier.value = present.figure_img(advice.plot(current=here.folded if here is not None else None))

    def _button(self, i: int, p, advice) -> W.Button:
        tag = " (advice)" if p == advice.recommended else " (frontier)" if p.frontier else ""
        label = f"fold {len(p.folded)}: {_figures(p)}{tag}"
        b = W.Button(description=label, layout=W.Layout(width="360px"), disabled=p.markers is None,
                     tooltip=("state-aware with markers: " + (", ".join(p.markers) or "nothing marked"))
                     if p.markers is not None else "no markers pick this set (a marker skips every mul that "
                                                   "reaches it): keep it with Advice.rule()").add_class("fi-point")
        b.on_click(lambda _: self._on_point(i))
        return b

    def point(self, i: int):
        return self._points[i]


def _figures(p) -> str:
    """A point's cycles and dB as measured where it was lowered (Vela, TOSA), else as predicted and simulated."""
    if p.measured:
        return f"{present.cycles(p.vela_cycles)} cycles (Vela), {present.db(p.tosa_db)} dB (TOSA)"
    return f"{present.cycles(p.cycles)} cycles (predicted), {present.db(p.db)} dB (simulation)"
