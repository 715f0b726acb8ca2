"""In IPython, show the inspector's user-facing errors as one line, not a traceback.

``InspectorError`` messages already say what was wrong and what to do; a page of
traceback around them hides that. Other exceptions keep IPython's usual display.
"""

from __future__ import annotations

import sys

from inspector import InspectorError


def _one_line(shell, etype, evalue, tb, tb_offset=None):
    sys.last_type, sys.last_value, sys.last_traceback = etype, evalue, tb  # %tb still shows it all
    print(f"{etype.__name__}: {' '.join(str(evalue).split())}  (%tb shows the traceback)", file=sys.stderr)
    return None


def install_error_display() -> bool:
    """Show ``InspectorError`` as one line in this IPython session; False outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    shell.set_custom_exc((InspectorError,), _one_line)
    return True
