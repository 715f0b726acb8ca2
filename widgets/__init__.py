"""fold-inspector UI: ipywidgets over the ``inspector`` core (imports ``inspector``, never the reverse).

Importing it in IPython or Jupyter also shows the inspector's errors as one line
(``install_error_display``).
"""

from ._errors import install_error_display
from .app import FoldInspector

__all__ = ["FoldInspector", "install_error_display"]

install_error_display()
