"""fold-inspector UI: ipywidgets over the ``inspector`` core (imports ``inspector``, never the reverse).

The interactive ``FoldInspector`` arrives with the widgets issue; until then the
quickstart notebook shows the core's rich tables directly.
"""

__all__: list[str] = []
