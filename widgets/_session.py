"""The session panel: the session file, Save / Load, the trust question, Export report, the status line."""

from __future__ import annotations

from pathlib import Path
from collections.abc import Callable

import ipywidgets as W

from ._common import esc

SUFFIXES = {"html": ".html", "md": ".md", "json": ".report.json"}


class SessionPanel:
    """Owns the session path, the Save/Load/Export buttons, the report format, the trust box and the
    status line (which other panels write to through ``say``)."""

    exposed = ("session_path", "save_button", "load_button", "trust_box", "report_button", "report_format", "status")

    def __init__(self, *, on_save: Callable, on_load: Callable, on_report: Callable) -> None:
        self.session_path = W.Text(value="fold-session.json", description="file",
                                   layout=W.Layout(width="320px")).add_class("fi-session-path")
        self.save_button = W.Button(description="Save session", icon="save").add_class("fi-save")
        self.load_button = W.Button(description="Load session", icon="folder-open").add_class("fi-load")
        self.trust_box = W.VBox().add_class("fi-trust-box")
        self.report_button = W.Button(description="Export report", icon="file").add_class("fi-report")
        self.report_format = W.Dropdown(options=[("HTML page", "html"), ("Markdown reply", "md"), ("JSON", "json")],
                                        value="html", layout=W.Layout(width="150px")).add_class("fi-report-format")
        self.status = W.Label("").add_class("fi-status")
        self.save_button.on_click(on_save)
        self.load_button.on_click(on_load)
        self.report_button.on_click(on_report)
        self.view = W.VBox([
            W.HBox([self.session_path, self.save_button, self.load_button, self.report_button, self.report_format,
                    self.status]),
            self.trust_box,
        ]).add_class("fi-session")

    def say(self, text: str) -> None:
        self.status.value = text

    def report_path(self) -> Path:
        """Where *Export report* writes: the session file's name with the format's suffix."""
        base = Path(self.session_path.value or "fold-session.json")
        return base.with_suffix(SUFFIXES[self.report_format.value])

    def ask_trust(self, message: str, on_trust: Callable) -> None:
        """Show why a session is refused, with *Trust and load* (runs ``on_trust``) and *Cancel*."""
        trust = W.Button(description="Trust and load", button_style="warning", icon="unlock").add_class("fi-trust")
        cancel = W.Button(description="Cancel").add_class("fi-trust-cancel")
        trust.on_click(lambda _: on_trust())
        cancel.on_click(lambda _: self.clear_trust())
        self.trust_box.children = (W.HTML(f"<div class='fi-trust-message'>&#9888; {esc(message)}</div>"),
                                   W.HBox([trust, cancel]))

    def clear_trust(self) -> None:
        self.trust_box.children = ()
