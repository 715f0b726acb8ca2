"""The ground floor's door to the presentation: records ask here how they are drawn.

A table from a drawing verb (``bundle``, ``text``, ``html``, ``plot``, ``markdown``, ``render``, ...) to the function
that draws it, filled by the presentation when it is imported (``inspector.present`` registers its ``drawing``; the
package's ``__init__`` imports it, so any record a user holds can be drawn). A record's ``_repr_mimebundle_``,
``to_markdown`` or ``plot`` is one call here: nothing below the presentation imports it, not even inside a
function, and every arrow of the house points down. IPython's own ``display_formatter.formatters[mime].for_type`` is
the same idea.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

from .errors import InspectorError

_VERBS: dict[str, Callable[..., Any]] = {}


def provide(**verbs: Callable[..., Any]) -> None:
    """The presentation's drawings, by verb (called once, when ``inspector.present`` is imported)."""
    _VERBS.update(verbs)


def draw(verb: str, record, *args, **kwargs):
    """``record`` drawn by the presentation's ``verb`` (its arguments after the record)."""
    fn = _VERBS.get(verb)
    if fn is None:
        raise InspectorError(f"nothing draws {verb!r} for a {type(record).__name__}: import inspector (its "
                             "presentation registers every drawing)")
    return fn(record, *args, **kwargs)


__all__ = ["draw", "provide"]
