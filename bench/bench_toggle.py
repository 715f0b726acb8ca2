"""A marker toggle in the widget, as a user waits for it: re-decide the sites with the real pass
(on the region of the clusters the toggle changed), rebuild the site rows and redraw the focused
before | after graph (its after side from a region run of the pass too).

Measured through the widget's public methods (``FoldInspector.toggle_marker``) on models built
through the public API: the built-in ``sample:generated_blocks`` (about 1,000 nodes) at every
stage, and a generated tfa graph of about 10,000 nodes (``inspector.analyze_graph``). Prints the
median of repeated toggles next to the target from the speed issue, and what one toggle spends
where: the re-decide's own timings (explain: reach and explainer; fold: the installed pass on the
region; sites) and the redraw (rows and the focused before | after picture, with graphviz's dot).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
warnings.filterwarnings("ignore")

import inspector
from sample_models.generated import tfa_blocks
from widgets import FoldInspector

TARGET_1K_MS = 100
TARGET_10K_MS = 100


def toggle_ms(app: FoldInspector, site: str, repeats: int) -> tuple[float, dict]:
    """Median whole-toggle time in ms, and where a toggle spends it: the re-decide's own timings
    (median of each) and the redraw (rows and focused graph: the whole toggle less the re-decide)."""
    app.toggle_marker(site)  # warm: the first toggle builds what every later one reuses
    times, parts = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        app.toggle_marker(site)
        times.append(time.perf_counter() - t0)
        timings = dict(app.analysis.timings)
        timings["redraw"] = times[-1] - sum(timings.values())
        parts.append(timings)
    return statistics.median(times) * 1e3, {k: statistics.median(p[k] for p in parts) for k in parts[0]}


def line(label: str, nodes: int, sites: int, median: float, target: float, timings: dict) -> str:
    verdict = "within target" if median <= target else "OVER target"
    parts = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in timings.items())
    return (f"{label:<44} {nodes:6d} nodes {sites:4d} sites: median {median:7.0f} ms "
            f"(target < {target} ms: {median / target:5.2f}x, {verdict}; medians: {parts})")


def main() -> None:
    print(f"cores available: {len(os.sched_getaffinity(0))}")
    for stage in inspector.STAGES:
        analysis = inspector.analyze("sample:generated_blocks", stage=stage, rule="state-aware")
        nodes = len(analysis.stage_graph.graph_module.graph.nodes)
        middle = len(analysis.sites) // 2
        # A site in the middle, and the next one whose output is written into state (at edge its
        # picture reaches the graph's output): the sites a user of this tool toggles most.
        writer = next(s.index for s in analysis.sites[middle:]
                      if s.state_boundary and not s.state_boundary.startswith("marker"))
        for index, what in ((middle, "middle site"), (writer, "site writing state")):
            app = FoldInspector(analysis)
            site = analysis.sites[index].id
            app.select_site(site)
            median, timings = toggle_ms(app, site, repeats=7)
            print(line(f"widget toggle at {stage}, {what}", nodes, len(analysis.sites), median, TARGET_1K_MS,
                       timings))

    gm = tfa_blocks(1850)
    analysis = inspector.analyze_graph(gm, rule="state-aware", name="generated 10k")
    app = FoldInspector(analysis)
    site = analysis.sites[len(analysis.sites) // 2].id
    app.select_site(site)
    median, timings = toggle_ms(app, site, repeats=3)
    print(line("widget toggle, tfa graph", len(gm.graph.nodes), len(analysis.sites), median, TARGET_10K_MS,
               timings))


if __name__ == "__main__":
    main()
