"""matplotlib figures for comparisons (no pyplot state: safe in scripts, tests and notebooks)."""

from __future__ import annotations

import math


def plot_comparison(comparison, kind: str = "drift", output: int = 0):
    from matplotlib.figure import Figure

    from .errors import InspectorError, quoted

    if kind not in ("drift", "channels"):
        raise InspectorError(f"unknown plot kind {quoted(kind)}; choose 'drift' or 'channels'")
    fig = Figure(figsize=(7, 3.5), layout="constrained")
    ax = fig.add_subplot()
    if kind == "drift":
        for r in comparison.results:
            values = [_finite(v) for v in r.drift(output)]
            ax.plot(range(1, len(values) + 1), values, marker="o", markersize=3, label=r.variant.label)
        ax.set_xlabel("step")
        ax.set_ylabel(f"SQNR of output {output} (dB)")
        ax.set_title(f"{comparison.target}: drift over {comparison.steps} step(s)")
    else:
        width = 0.8 / max(1, len(comparison.results))
        for i, r in enumerate(comparison.results):
            m = r.at_step(comparison.steps - 1, output)
            xs = [c + i * width for c in range(len(m.sqnr_per_channel_db))]
            ax.bar(xs, [_finite(v) for v in m.sqnr_per_channel_db], width=width, label=r.variant.label)
        ax.set_xlabel("output channel")
        ax.set_ylabel("SQNR (dB)")
        ax.set_title(f"{comparison.target}: SQNR per channel, output {output}, last step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def _finite(v: float) -> float:
    # an exact match has infinite SQNR; draw it at a visible ceiling
    return 200.0 if math.isinf(v) and v > 0 else (-50.0 if math.isinf(v) else v)
