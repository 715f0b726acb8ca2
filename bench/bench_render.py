"""How long pictures take (one run, times and ratios to the targets printed; no thresholds asserted).

Draws a generated tfa graph of about 1,000 nodes whole to SVG (target: within 3 s)
and one site's focus view to SVG (target: within 200 ms), best of 3 each, and
prints the render time (DOT source, ours) apart from the layout time (graphviz's
``dot``). A linear render gives a render-time ratio near the node ratio between
the 1,000- and 10,000-node graphs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import inspector
from inspector.present.render import svg
from sample_models.generated import tfa_blocks

WHOLE_TARGET = 3.0  # seconds, whole ~1,000-node graph to SVG
FOCUS_TARGET = 0.2  # seconds, one site's neighbourhood to SVG


def analysis_of(blocks: int):
    gm = tfa_blocks(blocks, join="outputs")  # wide and shallow: dot lays out a deep 1,000-node chain for minutes
    return inspector.analyze_graph(gm, rule="state-aware-strict", name="generated")


def timed(analysis, repeats: int = 3, **kw) -> tuple[float, float, int]:
    """(render seconds, dot seconds, nodes drawn): the fastest total of ``repeats`` runs.

    Best of a few, because one run on a shared 2-core machine mostly measures the neighbours.
    """
    best = (float("inf"), float("inf"), 0)
    for _ in range(repeats):
        t0 = time.perf_counter()
        graph = analysis.render(**kw)
        t1 = time.perf_counter()
        svg(graph)
        t2 = time.perf_counter()
        if t2 - t0 < sum(best[:2]):
            drawn = sum(1 for line in graph.body
                        if "[label=" in line and "legend." not in line and not line.lstrip().startswith("graph "))
            best = (t1 - t0, t2 - t1, drawn)
    return best


def render_seconds(analysis, repeats: int = 5) -> float:
    """The fastest of ``repeats`` renders of the whole graph (DOT source only, no ``dot``)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        analysis.render(max_nodes=None)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    small = analysis_of(222)
    nodes = len(small.before.graph.nodes)
    timed(analysis_of(5), repeats=1, max_nodes=None)  # warm-up: first dot start, imports

    for hide, what in ((("constants",), "constants hidden"), ((), "constants shown")):
        r, d, drawn = timed(small, max_nodes=None, hide=hide)
        print(f"whole graph, {nodes:,} nodes ({drawn:,} drawn, {what}): render {r * 1e3:7.1f} ms, "
              f"dot {d * 1e3:7.1f} ms, total {(r + d):.2f} s = {(r + d) / WHOLE_TARGET:.2f} "
              f"of the {WHOLE_TARGET:g} s target")
    site = small.sites[len(small.sites) // 2].id
    r, d, drawn = timed(small, focus=site)
    print(f"focus view of {site} ({drawn} drawn): render {r * 1e3:7.1f} ms, dot {d * 1e3:7.1f} ms, "
          f"total {(r + d) * 1e3:.0f} ms = {(r + d) / FOCUS_TARGET:.2f} of the {FOCUS_TARGET * 1e3:g} ms target")
    r, d, drawn = timed(small)
    print(f"default view (max_nodes=400, {drawn} drawn): render {r * 1e3:7.1f} ms, dot {d * 1e3:7.1f} ms")

    large = analysis_of(2220)
    large_nodes = len(large.before.graph.nodes)
    large_render = render_seconds(large)
    small_render = render_seconds(small)
    print(f"render only (DOT source), {nodes:,} -> {large_nodes:,} nodes: {small_render * 1e3:.0f} ms -> "
          f"{large_render * 1e3:.0f} ms; node ratio {large_nodes / nodes:.1f}x, time ratio "
          f"{large_render / small_render:.1f}x (linear: about equal)")


if __name__ == "__main__":
    main()
