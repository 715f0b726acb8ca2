"""How deciding sites scales with graph size (one run, best of 5 per size, ratios printed; no thresholds asserted).

Prints the time to decide every site of generated tfa graphs of about 1,000 and
10,000 nodes, and the ratio: a linear core gives a ratio near the node ratio. Target
from the speed issue: at most 12x for 10x the nodes.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import inspector  # noqa: E402
from sample_models.generated import tfa_blocks  # noqa: E402

TARGET_RATIO = 12.0


def decide_seconds(blocks: int, repeats: int = 5) -> tuple[int, float, dict]:
    gm = tfa_blocks(blocks)
    analysis = inspector.analyze_graph(gm, policy="upstream", name="generated")
    best, timings = float("inf"), {}
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = analysis.with_policy("state-aware-strict")  # re-decide every site with the real pass
        elapsed = time.perf_counter() - t0
        if elapsed < best:
            best, timings = elapsed, result.timings
    return len(gm.graph.nodes), best, timings


def main() -> None:
    decide_seconds(10, repeats=1)  # warm-up: imports executorch once
    small_nodes, small, st = decide_seconds(185)
    large_nodes, large, lt = decide_seconds(1850)
    print(f"decide all sites, {small_nodes:6d} nodes: {small * 1e3:8.1f} ms  {_fmt(st)}")
    print(f"decide all sites, {large_nodes:6d} nodes: {large * 1e3:8.1f} ms  {_fmt(lt)}")
    ratio = large / small
    verdict = "within target" if ratio <= TARGET_RATIO else "OVER target"
    print(f"node ratio {large_nodes / small_nodes:.1f}x, time ratio {ratio:.1f}x "
          f"(target <= {TARGET_RATIO:.0f}x: {verdict})")


def _fmt(timings: dict) -> str:
    return " ".join(f"{k}={v * 1e3:.0f}ms" for k, v in timings.items())


if __name__ == "__main__":
    main()
