"""matplotlib figures for comparisons (no pyplot state: safe in scripts, tests and notebooks)."""

from __future__ import annotations

import functools
import io

from .._base.formats import db, plot_db
from .._numbers.measures import metrics
from .._base.errors import InspectorError, quoted


def figure(**kwargs):
    """A matplotlib ``Figure`` without pyplot's global state that shows as an image wherever IPython
    displays it: every plot of a record is one of these."""
    from matplotlib.figure import Figure  # lazy: matplotlib only when a plot is asked for

    fig = Figure(**kwargs)
    # IPython shows a bare Figure as an image only once pyplot's inline backend has registered a formatter for
    # it; a figure's own PNG is shown in any kernel
    fig._repr_png_ = functools.partial(_png, fig)
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def plot_comparison(comparison, kind: str = "drift", output: int = 0, metric: str = "sqnr"):
    """``drift``: ``metric`` (a measurement's name; SQNR by default) of ``output`` per step, per variant;
    ``channels``: its SQNR per channel at the last step."""
    if kind not in ("drift", "channels"):
        raise InspectorError(f"unknown plot kind {quoted(kind)}; choose 'drift' or 'channels'")
    measure = metrics.entry(metric) if metric != "sqnr_db" else metrics.entry("sqnr")
    fig = figure(figsize=(7, 3.5), layout="constrained")
    ax = fig.add_subplot()
    if kind == "drift":
        for r in comparison.measured:
            values = [plot_db(v) if measure.unit == "dB" else (float("nan") if v is None else v)
                      for v in r.drift(output, measure.name)]
            ax.plot(range(1, len(values) + 1), values, marker="o", markersize=3, label=r.variant.label)
        ax.set_xlabel("frame" if comparison.stream else "step")
        ax.set_ylabel(f"{measure.heading if measure.name != 'sqnr' else 'SQNR'} of output {output}"
                      + (" (dB)" if measure.unit == "dB" else ""))
        ax.set_title(f"{comparison.target}: drift over {comparison.steps} step(s) [{comparison.engine}]")
    else:
        width = 0.8 / max(1, len(comparison.measured))
        for i, r in enumerate(comparison.measured):
            m = r.at_step(comparison.steps - 1, output)
            xs = [c + i * width for c in range(len(m.sqnr_per_channel_db))]
            ax.bar(xs, [plot_db(v) for v in m.sqnr_per_channel_db], width=width, label=r.variant.label)
        ax.set_xlabel("output channel")
        ax.set_ylabel("SQNR (dB)")
        ax.set_title(f"{comparison.target}: SQNR per channel, output {output}, last step [{comparison.engine}]")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def plot_attribution(attribution, kind: str = "graph", node: str | None = None):
    """``graph``: SQNR of every recorded node along the exported program's topological order, per
    variant, at the last step; ``steps``: SQNR of ``node`` (an aligned id) per step, per variant."""
    if kind not in ("graph", "steps"):
        raise InspectorError(f"unknown plot kind {quoted(kind)}; choose 'graph' or 'steps'")
    fig = figure(figsize=(7, 3.5), layout="constrained")
    ax = fig.add_subplot()
    if kind == "graph":
        position = {n: i for i, n in enumerate(attribution.order)}
        for v in attribution.variants:
            last = sorted(v.last_step(), key=lambda r: position.get(r.node, r.order))
            ax.plot([position.get(r.node, r.order) for r in last], [plot_db(r.sqnr_db) for r in last],
                    marker="o", markersize=3, label=v.label)
        ticks = [position[n] for n in attribution.order]
        if len(ticks) <= 30:
            ax.set_xticks(ticks, attribution.order, rotation=60, ha="right", fontsize="x-small")
        ax.set_xlabel("node, in topological order")
        ax.set_ylabel("SQNR (dB)")
        ax.set_title(f"{attribution.target}: SQNR along the graph, step {attribution.steps}")
    else:
        if node is None:
            raise InspectorError("plot('steps') needs node=<a node id>; ids: " + ", ".join(attribution.order[:20]))
        if node not in attribution.order:
            raise InspectorError(f"no node {quoted(node)}; ids: " + ", ".join(attribution.order[:20]))
        for v in attribution.variants:
            values = [plot_db(x) for x in v.curve(node)]
            ax.plot(range(1, len(values) + 1), values, marker="o", markersize=3, label=v.label)
        ax.set_xlabel("step")
        ax.set_ylabel(f"SQNR of {node} (dB)")
        ax.set_title(f"{attribution.target}: {node} over {attribution.steps} step(s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def plot_bits(bits):
    """dB each change recovers over the baseline (horizontal bars, the best at the top)."""
    measured = [c for c in bits.changes if c.recovered_db is not None]
    fig = figure(figsize=(7, max(2.0, 0.4 * len(measured) + 1.2)), layout="constrained")
    ax = fig.add_subplot()
    labels = [f"{c.change}: {c.node}" if c.node else c.change for c in measured]
    values = [plot_db(c.recovered_db) for c in measured]
    ax.barh(range(len(values)), values, color=["tab:green" if v >= 0 else "tab:red" for v in values])
    ax.set_yticks(range(len(values)), labels, fontsize="small")
    ax.invert_yaxis()
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel(f"dB recovered over {bits.baseline} ({db(bits.baseline_sqnr_db)} dB), worst output, last step")
    ax.set_title(f"{bits.target}: is it the fold or the bits? ({bits.steps} step(s)) [{bits.engine}]")
    ax.grid(alpha=0.3, axis="x")
    return fig
