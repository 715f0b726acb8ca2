"""The header panel: title, model/stage/rule pickers, the one-line summary and the error line."""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as W

import inspector

from ._common import esc, set_quietly


class Header:
    """Owns the title, the stage and rule pickers, the summary and the error line; lays out the
    model picker (owned by ``ModelPicker``) beside them."""

    exposed = ("title", "stage_picker", "rule_picker", "summary", "error")

    def __init__(self, stage: str, rule: str, model_picker: W.Dropdown, *, on_stage: Callable,
                 on_rule: Callable) -> None:
        self.title = W.HTML().add_class("fi-title")
        self.stage_picker = W.Dropdown(options=list(inspector.STAGES), value=stage, description="stage",
                                       layout=W.Layout(width="180px")).add_class("fi-stage")
        self.rule_picker = W.Dropdown(options=list(inspector.rules), value=rule, description="rule",
                                        layout=W.Layout(width="260px"), tooltip=rules_tooltip()).add_class("fi-rule")
        self.summary = W.HTML().add_class("fi-summary")
        self.error = W.HTML().add_class("fi-error")
        self._on_stage, self._on_rule = on_stage, on_rule
        self.stage_picker.observe(on_stage, names="value")
        self.rule_picker.observe(on_rule, names="value")
        self.view = W.VBox([self.title, W.HBox([model_picker, self.stage_picker, self.rule_picker]),
                            self.summary, self.error])

    def show(self, analysis: inspector.Analysis) -> None:
        self.title.value = f"<h3 style='margin:4px 0'>fold inspector: {esc(analysis.name)}</h3>"
        self.summary.value = f"<span class='fi-summary-text'>{esc(analysis.summary())}</span>" + "".join(
            f"<div><small>note: {esc(n)}</small></div>" for n in analysis.notes)

    def show_error(self, message: str | None, details: str | None = None) -> None:
        if message is None:
            self.error.value = ""
            return
        extra = f"<details><summary>details</summary><pre>{esc(details)}</pre></details>" if details else ""
        self.error.value = f"<div class='fi-error-message' style='color:#b00020'>&#9888; {esc(message)}</div>{extra}"

    def set_stage_quietly(self, stage: str) -> None:
        set_quietly(self.stage_picker, stage, self._on_stage)

    def set_rule_quietly(self, rule: str) -> None:
        set_quietly(self.rule_picker, rule, self._on_rule)

    def offer_rules(self) -> None:
        """Offer every registered rule (its help and where it comes from in the tooltip)."""
        if tuple(self.rule_picker.options) != tuple(inspector.rules):
            value = self.rule_picker.value
            self.rule_picker.unobserve(self._on_rule, names="value")
            try:
                self.rule_picker.options = list(inspector.rules)
                self.rule_picker.value = value
            finally:
                self.rule_picker.observe(self._on_rule, names="value")
        self.rule_picker.tooltip = rules_tooltip()


def rules_tooltip() -> str:
    """Every rule on a line of its own: name, what it does, and where it comes from."""
    return "\n".join(f"{name}: {inspector.rules.describe(name)}" for name in inspector.rules)
