"""fold-inspector UI: ipywidgets over the ``inspector`` core (imports ``inspector``, never the reverse)."""

from .app import FoldInspector

__all__ = ["FoldInspector"]
