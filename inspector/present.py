"""What a screen needs to draw: pictures, tables, pages, and the few limits and words a form shows.

The widget, the notebooks and the reports draw with these; ``inspector``'s own ``__all__`` stays the
user's verbs and records. Everything here is a pure function of records the verbs return.
"""

from ._base.limits import MAX_STEPS, check_steps
from ._front.session import GRAPH_SCOPES, GRAPH_VIEWS
from ._present.explorer import ExplorerFiles
from ._present.render import LEGEND, STYLES, Verdicts, render, render_pair, site_kind, svg
from ._present.report import figure_img, report_html
from ._present.tables import (SiteRow, site_prices, analysis_html, analysis_text, attribution_html, attribution_text, bits_html,
                              bits_text, comparison_html, comparison_text, gap_html, site_rows, stale_html)
from ._sweep.sweep import SweepBar
from ._present.markup import escape
from ._present.advice import advice_html
from ._base.formats import cycles, db
from .errors import quoted

__all__ = [
    # graphs: one picture per (graph, verdicts), colours from one table
    "render", "render_pair", "svg", "Verdicts", "STYLES", "LEGEND", "site_kind",
    # tables: one row per site; each record as text and as HTML
    "SiteRow", "site_rows", "site_prices", "analysis_text", "analysis_html", "comparison_text", "comparison_html", "bits_text",
    "bits_html", "attribution_text", "attribution_html", "stale_html", "gap_html",
    # pages and figures
    "report_html", "figure_img", "ExplorerFiles", "advice_html",
    # what a form offers and checks
    "GRAPH_VIEWS", "GRAPH_SCOPES", "MAX_STEPS", "check_steps", "quoted", "SweepBar",
    # the one HTML escape every page and panel writes with; the one way a dB or a cycle count is written
    "escape", "db", "cycles",
]
