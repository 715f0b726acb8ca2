"""The one door every record is drawn through: text, HTML, Jupyter's display, plots, pictures, pages.

Records are data (``Analysis``, ``Comparison``, ``EngineGap``, ``Attribution``, ``Bits``, ``Sweep``,
``Journey``, ``Advice``, ``Verdict``); a record's drawing method (``_repr_mimebundle_``, ``render``, ``plot``,
``to_markdown``, ...)
is one line that hands the record to a function here. This module sits above every record
(``tests/test_house.py`` checks that records reach the presentation through it alone); what it draws
with is the rest of ``present``: ``tables`` (text and HTML tables), ``render`` and ``pictures``
(graphs), ``plots``, ``report``, ``explorer``, ``sweep`` and ``journey``.
"""

from __future__ import annotations

import textwrap

from functools import singledispatch
from collections.abc import Iterable

from .._advise.records import Advice
from .._advise.verdict_records import Verdict
from .._base import display as _display
from .._base.files import write_text
from .._decide.analysis import Analysis
from .._journey.records import Change, Journey, Step
from .._numbers.attribution import Attribution
from .._numbers.bits import Bits
from .._numbers.engines import EngineGap
from .._numbers.results import Comparison
from .._numbers.tradeoff import Tradeoff
from .._sweep.results import Sweep
from .._base.errors import InspectorError
from . import advice as _advice, journey as _journey, plots as _plots, report as _report, sweep as _sweep, tables as _tables
from . import verdict as _verdict
from .pictures import picture
from .render import WHICH, render as _render, render_pair as _render_pair, svg as _svg


# ---------------------------------------------------------------- text and HTML


@singledispatch
def text(record) -> str:
    """``record`` as the plain text a terminal or ``print`` shows."""
    raise InspectorError(f"the presentation draws no {type(record).__name__}")


@singledispatch
def html(record) -> str:
    """``record`` as an HTML fragment (every model-derived string escaped)."""
    raise InspectorError(f"the presentation draws no {type(record).__name__}")


def bundle(record) -> dict[str, str]:
    """What Jupyter shows for ``record``: ``text/plain`` and ``text/html`` from one description."""
    if isinstance(record, EngineGap):  # its display is its table, its text() one line
        return _gap_bundle(record)
    return {"text/plain": text(record), "text/html": html(record)}


text.register(Analysis, _tables.analysis_text)
html.register(Analysis, _tables.analysis_html)
text.register(Comparison, _tables.comparison_text)
html.register(Comparison, _tables.comparison_html)
text.register(EngineGap, _tables.gap_text)
html.register(EngineGap, _tables.gap_table_html)
text.register(Attribution, _tables.attribution_text)
html.register(Attribution, _tables.attribution_html)
text.register(Bits, _tables.bits_text)
html.register(Bits, _tables.bits_html)
text.register(Sweep, repr)
html.register(Sweep, lambda s: _sweep.sweep_html(s, page=False))
text.register(Tradeoff, _tables.tradeoff_text)
html.register(Tradeoff, _tables.tradeoff_html)
text.register(Advice, _advice.advice_text)
text.register(Verdict, _verdict.verdict_text)
html.register(Verdict, _verdict.verdict_html)
html.register(Advice, _advice.advice_html)
text.register(Journey, _journey.journey_text)
html.register(Journey, _journey.journey_html)
text.register(Step, _journey.step_text)
text.register(Change, _journey.change_text)


def _gap_bundle(gap: EngineGap) -> dict[str, str]:
    return {"text/plain": _tables.gap_table_text(gap), "text/html": _tables.gap_table_html(gap)}


# ---------------------------------------------------------------- plots


@singledispatch
def plot(record, *args):
    """A matplotlib Figure of ``record`` (without pyplot's global state)."""
    raise InspectorError(f"the presentation plots no {type(record).__name__}")


plot.register(Comparison, _plots.plot_comparison)
plot.register(Attribution, _plots.plot_attribution)
plot.register(Bits, _plots.plot_bits)
plot.register(Sweep, _sweep.sweep_plot)
plot.register(Advice, _advice.plot_advice)


def markdown(record, limit: int | None = None) -> str:
    """``record`` as a Markdown reply for an issue or a pull request (local paths redacted, GitHub's limit)."""
    if isinstance(record, Verdict):
        return _verdict.verdict_markdown(record, limit)
    if isinstance(record, Advice):
        return _advice.advice_markdown(record, limit)
    if isinstance(record, Comparison):
        return _report.comparison_markdown(record, limit)
    raise InspectorError(f"the presentation writes no Markdown reply for a {type(record).__name__}")


# ---------------------------------------------------------------- an analysis: pictures, reports, Model Explorer


def verdicts(analysis: Analysis, which: str = "before", *, errors=None, step: int | None = None,
             focus: str | None = None, hops: int = 2, hide: Iterable[str] = ("constants",)):
    """(graph module, ``Verdicts``) of ``which`` graph of ``analysis`` (``pictures.picture``)."""
    return picture(analysis.decider, analysis, which, errors=errors, step=step, focus=focus, hops=hops, hide=hide)


def caption(analysis: Analysis, which: str | None) -> list[str]:
    """The lines above a picture of ``analysis`` (``which`` None: the before | after pair)."""
    what = f"{which} the pass" if which else "before | after the pass"
    lines = [f"{analysis.name}: {analysis.stage}, rule {analysis.rule.name}, {what}", analysis.summary()]
    if analysis.markers:
        lines.append("markers: " + ", ".join(analysis.markers))
    if analysis.stage_note:  # what this graph is in the flow the user ships (edge: no INT flow's)
        lines += textwrap.wrap(analysis.stage_note, 110)
    return lines


def render(analysis: Analysis, which: str = "before", *, errors=None, step: int | None = None,
           focus: str | None = None, hops: int = 2, hide: Iterable[str] = ("constants",), **kw):
    """``which`` graph of ``analysis`` as a ``graphviz.Digraph``."""
    graph, marks = verdicts(analysis, which, errors=errors, step=step, focus=focus, hops=hops, hide=hide)
    return _render(graph, marks, focus=focus, hops=hops, hide=hide, **kw)


def render_pair(analysis: Analysis, *, focus: str | None = None, hops: int = 2,
                hide: Iterable[str] = ("constants",), **kw):
    """Before and after side by side in one ``graphviz.Digraph``."""
    (before, v_before), (after, v_after) = (verdicts(analysis, w, focus=focus, hops=hops, hide=hide) for w in WHICH)
    return _render_pair(before, after, (v_before, v_after), caption=caption(analysis, None), focus=focus, hops=hops,
                        hide=hide, **kw)


def svg(analysis: Analysis, which: str = "before", **kw) -> str:
    """The SVG text of ``render(analysis, which, **kw)``; needs graphviz's ``dot``."""
    return _svg(render(analysis, which, **kw))


def report(analysis: Analysis, comparison=None, *, format: str = "html", out=None, results_for=None,
           full_traces: bool = False, advice: Advice | None = None, widening=None):
    """``analysis``'s report (html, md or json), with ``advice``'s section when given and ``widening``'s (an
    ``inspector.widen`` result: which layers need more bits); with ``out``, written there and the path returned."""
    parts = None
    if advice is not None:
        parts = {"html": _advice.advice_html(advice) + _report.figure_img(_advice.plot_advice(advice)),
                 "md": _advice.advice_markdown(advice, limit=12_000), "json": advice.to_dict()}
    wide = None
    if widening is not None:
        from . import widen_view as _widen  # the widening's own drawing

        wide = {"html": _widen.widening_html(widening), "md": _widen.widening_markdown(widening),
                "json": widening.to_dict()}
    written = _report.report(analysis, comparison, format=format, results_for=results_for, full_traces=full_traces,
                             advice=parts, widening=wide)
    return write_text(out, written) if out is not None else written


def to_model_explorer(analysis: Analysis, folder, *, errors=None, step: int | None = None, which: str = "before",
                      cost=None):
    """``analysis``'s whole graph and overlays for Google's Model Explorer, written into ``folder``."""
    from .explorer import to_model_explorer as write  # lazy: the explorer extra is optional

    return write(analysis, folder, errors=errors, step=step, which=which, cost=cost)


# ---------------------------------------------------------------- a sweep's formats; a journey's picture

sweep_json, sweep_csv, sweep_format, sweep_page = _sweep.sweep_json, _sweep.sweep_csv, _sweep.sweep_format, _sweep.sweep_page
sweep_markdown = _sweep.sweep_comment  # a comment for a pull request, local paths redacted


journey_picture = _journey.journey_picture


__all__ = ["bundle", "caption", "html", "journey_picture", "markdown", "plot", "render", "render_pair", "report", "svg",
           "sweep_csv", "sweep_format", "sweep_json", "sweep_markdown", "sweep_page", "text", "to_model_explorer",
           "verdicts"]


# The ground floor's table: every record below the presentation draws itself through ``_base.display.draw``.
_display.provide(bundle=bundle, text=text, html=html, plot=plot, markdown=markdown, caption=caption,
                 verdicts=verdicts, render=render, render_pair=render_pair, svg=svg, report=report,
                 to_model_explorer=to_model_explorer, sweep_json=sweep_json, sweep_csv=sweep_csv,
                 sweep_format=sweep_format, sweep_page=sweep_page, sweep_markdown=sweep_markdown,
                 journey_picture=journey_picture, verdict_answer=_verdict.answer)
