"""The presentation, on top of the core: what a screen needs to draw, and the one place that draws.

Graph pictures, text and HTML tables, plots, reports and Model Explorer files, each a pure function of the
records the verbs return and of graphs: nothing here decides or computes a number. The widget, the notebooks,
the CLI and the reports draw with the names below; ``inspector``'s own ``__all__`` stays the user's verbs and
records. A record asks the ground floor's table (``_base.display``) to be drawn; importing this package fills the
table with ``drawing``'s functions (the one door), so nothing below it ever imports it.
"""

from .._base.limits import MAX_STEPS, check_steps
from .._decide.stages import STEPS_HELP, default_steps
from . import drawing as _drawing  # noqa: F401 - imported for what it does: it fills the ground floor's drawing table
from .explorer import ExplorerFiles
from .render import GRAPH_SCOPES, GRAPH_VIEWS, LEGEND, STYLES, Verdicts, render, render_pair, site_kind, svg
from .report import failures_html, figure_img, report_html
from .tables import (SiteRow, site_prices, analysis_html, analysis_text, attribution_html, attribution_text, bits_html,
                     bits_text, comparison_html, comparison_text, compiler_of, gap_html, site_rows, stale_html)
from .._sweep.records import SweepBar
from .markup import escape
from .advice import advice_html
from .._base.formats import cycles, db
from .._base.errors import quoted
from .._cost.accelerators import TOSA_INT
from .._numbers.engines import SIMULATION

__all__ = [
    # graphs: one picture per (graph, verdicts), colours from one table
    "render", "render_pair", "svg", "Verdicts", "STYLES", "LEGEND", "site_kind",
    # tables: one row per site; each record as text and as HTML
    "SiteRow", "site_rows", "site_prices", "analysis_text", "analysis_html", "comparison_text", "comparison_html", "bits_text",
    "bits_html", "attribution_text", "attribution_html", "stale_html", "gap_html", "compiler_of",
    # pages and figures
    "report_html", "figure_img", "ExplorerFiles", "advice_html", "failures_html",
    # what a form offers and checks
    "GRAPH_VIEWS", "GRAPH_SCOPES", "MAX_STEPS", "check_steps", "default_steps", "STEPS_HELP", "quoted", "SweepBar",
    # the accelerator a form starts at, and the engine a screen previews with (registry objects, never names)
    "TOSA_INT", "SIMULATION",
    # the one HTML escape every page and panel writes with; the one way a dB or a cycle count is written
    "escape", "db", "cycles",
]
