"""A self-contained HTML report of one analysis and its reference results (for bug reports and triage).

No external resources: graphs are inline SVG, plots inline PNG, styles inline.
Every model-derived string is escaped.
"""

from __future__ import annotations

import base64
import html
import io

from ._present import analysis_html, comparison_html, stale_html
from .errors import InspectorError

_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>fold inspector report: {title}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} .fi-stale{{background:#fff3cd;padding:4px}}
svg{{max-width:100%;height:auto}}</style></head>
<body><h1>fold inspector report: {title}</h1>
<p>stage <code>{stage}</code>, policy <code>{policy}</code>; executorch FoldScalarMulIntoConvPass as installed.</p>
<h2>Sites</h2>{sites}
<h2>Graphs (before | after)</h2>{graphs}
<h2>TOSA INT reference vs float</h2>{results}
</body></html>
"""


def report_html(analysis, comparison=None, *, results_for=None) -> str:
    """The report page as a string. ``results_for`` is the ``(stage, policy, markers)`` the
    comparison was computed for, when that may differ from ``analysis.configuration``."""
    from .render import svg

    try:
        graphs = svg(analysis.render_pair())
    except InspectorError as exc:  # no dot: say so, keep the rest of the report
        graphs = f"<p><i>{html.escape(str(exc))}</i></p>"
    if comparison is None:
        results = "<p><i>no reference run</i></p>"
    else:
        stale = results_for is not None and tuple(results_for) != analysis.configuration
        banner = stale_html(results_for) if stale else ""
        results = banner + comparison_html(comparison) + "".join(
            figure_img(comparison.plot(kind)) for kind in ("drift", "channels"))
    return _PAGE.format(title=html.escape(analysis.name), stage=html.escape(analysis.stage),
                        policy=html.escape(analysis.policy), sites=analysis_html(analysis, comparison), graphs=graphs,
                        results=results)


def figure_img(fig, css_class: str = "fi-plot") -> str:
    """A matplotlib figure as a self-contained ``<img>`` (inline PNG), for reports and widgets."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    data = base64.b64encode(buf.getvalue()).decode()
    return f"<img class='{css_class}' alt='plot' src='data:image/png;base64,{data}'>"
