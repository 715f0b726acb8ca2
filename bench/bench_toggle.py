"""Marker toggle on a ~1,000-node model: re-deciding every site with the real pass, no re-export.

Target from the widgets issue: a toggle re-decides in under 150 ms. Prints the best
and median of repeated toggles measured in this run, and the same for the widget's
whole toggle (re-decide plus re-rendering its rows and its focused graph).
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
warnings.filterwarnings("ignore")

import inspector  # noqa: E402
from sample_models.generated import tfa_blocks  # noqa: E402

TARGET_MS = 150


def main() -> None:
    gm = tfa_blocks(230)
    nodes = len(gm.graph.nodes)
    analysis = inspector.analyze_graph(gm, policy="state-aware", name="generated")
    site = analysis.sites[0].id
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        analysis = analysis.toggle_marker(site)
        times.append(time.perf_counter() - t0)
    best, median = min(times) * 1e3, statistics.median(times) * 1e3
    print(f"re-decide after a marker toggle, {nodes} nodes, {len(analysis.sites)} sites: "
          f"best {best:.0f} ms, median {median:.0f} ms (target < {TARGET_MS} ms: {median / TARGET_MS:.2f}x of it)")

    try:
        from widgets.app import FoldInspector
    except ImportError as exc:  # pragma: no cover
        print(f"widget toggle: skipped ({exc})")
        return
    app = FoldInspector(analysis)
    app.select_site(site)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        app.toggle_marker(site)
        times.append(time.perf_counter() - t0)
    print(f"widget toggle (re-decide + rows + focused graph), {nodes} nodes: "
          f"median {statistics.median(times) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
