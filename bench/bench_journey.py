"""A journey of every sample through both pipelines against one compare of that sample.

A journey follows one site through both of the Arm backend's pipelines: transform-for-annotation inside
``prepare_pt2e`` (where the fold runs in the INT flow) and the lowering of
``to_edge_transform_and_lower``. For each sample with a site at ``tfa``, in one run: the time of
``inspector.journey`` of its first site under ``upstream`` (a full run of the quantized flow, watched
pass by pass, without the reference model), and the time of one ``inspector.compare`` of the same
sample (its default variants on the TOSA reference model, one worker). Caches are cleared before each
and the result store is off, so neither reuses the other's work. Prints the ratio journey / compare
per sample (the target from the journey issue: below 1.0 for every sample), and, for a teacher who
follows the site under both rules, the journey under ``off`` too and the ratio of the two journeys
together (not a target: ``compare`` runs one lowering per distinct set of fold decisions, so where
nothing folds it lowers once for all its variants). Journeys and compare alternate, twice, and the best
time of each counts. No thresholds are asserted: the machine is shared and its speed moves within minutes.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ["FOLD_INSPECTOR_STORE"] = "off"  # every number computed, none read back from disk

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import inspector

TARGET_RATIO = 1.0
REPEATS = 2  # journeys and compare alternate; the best time of each is kept


def seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(names: list[str]) -> int:
    worst = 0.0
    print(f"{'sample':36} {'journey s':>9} {'compare s':>9} {'ratio':>6} {'+off s':>7} {'both/compare':>12}")
    for name in names:
        target = f"sample:{name}"
        inspector.clear_cache()
        try:
            sites = inspector.analyze(target, stage="tfa").sites
        except inspector.InspectorError as exc:
            print(f"{name:36} skipped: {exc}")
            continue
        if not sites:
            print(f"{name:36} skipped: no site at tfa")
            continue
        times: dict[str, float] = {}
        try:
            for _ in range(REPEATS):  # interleaved, the best of each: a busy minute slows one run, not the ratio
                for rule in ("upstream", "off"):
                    inspector.clear_cache()  # each journey finds its site itself (one prepare_pt2e), as a user's would
                    took = seconds(lambda rule=rule, target=target: inspector.journey(target, site=0, variant=rule))
                    times[rule] = min(times.get(rule, took), took)
                inspector.clear_cache()
                took = seconds(lambda target=target: inspector.compare(target, workers=1))
                times["compare"] = min(times.get("compare", took), took)
        except inspector.InspectorError as exc:
            print(f"{name:36} failed: {exc}")
            continue
        compared = times["compare"]
        ratio = times["upstream"] / compared
        worst = max(worst, ratio)
        both = (times["upstream"] + times["off"]) / compared
        print(f"{name:36} {times['upstream']:9.1f} {compared:9.1f} {ratio:6.2f} {times['off']:7.1f} {both:12.2f}",
              flush=True)
    print(f"worst ratio journey / compare {worst:.2f} (target: below {TARGET_RATIO})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or inspector.samples.names()))
