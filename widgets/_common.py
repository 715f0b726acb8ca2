"""Small pieces the panels share."""

from __future__ import annotations

import traceback
from typing import Any
from collections.abc import Callable

from inspector import InspectorError
from inspector.present import escape as esc  # the one HTML escape the inspector writes with


def scrolled(svg: str) -> str:
    """A graph's SVG in a box that scrolls instead of growing the page."""
    return f"<div style='overflow:auto;max-height:600px'>{svg}</div>"


def graph_error(message: str) -> str:
    """Why a graph could not be drawn, where the graph would be."""
    return f"<div class='fi-graph-error'>{esc(message)}</div>"


def set_quietly(control: Any, value: Any, observer: Callable) -> None:
    """Set a control's value without running its observer (the caller already did the work)."""
    control.unobserve(observer, names="value")
    try:
        control.value = value
    finally:
        control.observe(observer, names="value")


def describe(exc: BaseException) -> tuple[str, str | None]:
    """An exception as the widget shows it: one line, and behind a toggle the traceback (an ``InspectorError``'s
    ``details``: its cause's traceback and what it carried; None when it has none)."""
    if isinstance(exc, InspectorError):
        return str(exc), exc.details or None
    return f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
