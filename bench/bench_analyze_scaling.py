"""How deciding sites scales with graph size (rounds of best of 5 per size, ratios printed; no thresholds asserted).

Prints the time to decide every site of generated tfa graphs of about 1,000 and
10,000 nodes, and the ratio: a linear core gives a ratio near the node ratio. Target
from the speed issue: at most 10.5x for 10x the nodes, in every round. The sizes take
turns within a round, so a load that comes and goes on a shared machine weighs on both;
the spread of the rounds' ratios is printed (ROUNDS=n for more or fewer rounds).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import inspector
from sample_models.generated import tfa_blocks

TARGET_RATIO = 10.5
ROUNDS = int(os.environ.get("ROUNDS", "3"))


def analysis_of(blocks: int) -> tuple[int, inspector.Analysis]:
    gm = tfa_blocks(blocks)
    return len(gm.graph.nodes), inspector.analyze_graph(gm, rule="upstream", name="generated")


def decide_seconds(analysis: inspector.Analysis, repeats: int = 5) -> tuple[float, dict]:
    best, timings = float("inf"), {}
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = analysis.with_rule("state-aware-strict")  # re-decide every site with the real pass
        elapsed = time.perf_counter() - t0
        if elapsed < best:
            best, timings = elapsed, result.timings
    return best, timings


def main() -> None:
    decide_seconds(analysis_of(10)[1], repeats=1)  # warm-up: imports executorch once
    (small_nodes, small_a), (large_nodes, large_a) = analysis_of(185), analysis_of(1850)
    ratios = []
    for r in range(ROUNDS):
        small, st = decide_seconds(small_a)
        large, lt = decide_seconds(large_a)
        ratios.append(large / small)
        print(f"round {r + 1}: decide all sites, {small_nodes:6d} nodes: {small * 1e3:8.1f} ms  {_fmt(st)}")
        print(f"round {r + 1}: decide all sites, {large_nodes:6d} nodes: {large * 1e3:8.1f} ms  {_fmt(lt)}  "
              f"ratio {ratios[-1]:.1f}x")
    worst = max(ratios)
    verdict = "within target" if worst <= TARGET_RATIO else "OVER target"
    print(f"node ratio {large_nodes / small_nodes:.1f}x, time ratio {min(ratios):.1f}x to {worst:.1f}x over "
          f"{ROUNDS} rounds, median {statistics.median(ratios):.1f}x "
          f"(target <= {TARGET_RATIO:g}x in every round: {verdict})")


def _fmt(timings: dict) -> str:
    return " ".join(f"{k}={v * 1e3:.0f}ms" for k, v in timings.items())


if __name__ == "__main__":
    main()
