"""The model picker: the built-in samples, and the user's own model (kept while samples are browsed)."""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import ipywidgets as W

import inspector

from ._common import set_quietly


class ModelPicker:
    """Owns the model dropdown (values ``"sample:NAME"`` or ``"own"``) and which model is "yours"."""

    exposed = ("model_picker",)

    def __init__(self, own_ref: str | None, *, on_pick: Callable) -> None:
        self.model_picker = W.Dropdown(description="model", layout=W.Layout(width="380px")).add_class("fi-model")
        self.own_analysis: Any = None  # the user's own model (not a sample), kept while samples are browsed
        self.own_ref = own_ref  # how to name it in a session (None: an in-memory model)
        self._on_pick = on_pick

    def start(self, analysis: inspector.Analysis, target_ref: str | None) -> None:
        """Fill the picker for the first model shown, then listen to it."""
        options = [(f"sample:{n}", f"sample:{n}") for n in inspector.samples.names()]
        current = target_ref if target_ref in dict(options).values() else None
        if current is None:
            self.own_analysis = analysis
            options.insert(0, (f"{analysis.name} (your model)", "own"))
        self.model_picker.options = options
        self.model_picker.value = current or "own"
        self.model_picker.observe(self._on_pick, names="value")

    def show(self, analysis: inspector.Analysis, target_ref: str | None) -> None:
        """Put the picker on ``analysis`` without re-analyzing (a model that is no sample becomes "yours")."""
        samples = {v for _, v in self.model_picker.options if v != "own"}
        if target_ref not in samples:
            self.own_analysis, self.own_ref = analysis, target_ref
            options = [o for o in self.model_picker.options if o[1] != "own"]
            self.model_picker.options = [(f"{analysis.name} (your model)", "own"), *options]
        set_quietly(self.model_picker, target_ref if target_ref in samples else "own", self._on_pick)
