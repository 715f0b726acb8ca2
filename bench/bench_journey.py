"""Journeys of every sample at both pipelines (upstream and off) against one compare of that sample.

For each sample, in one run: the time of ``inspector.journey`` of its first site under ``upstream``
plus under ``off`` (each a full run of the quantized flow, watched pass by pass, without the reference
model), and the time of one ``inspector.compare`` of the same sample (its default variants on the TOSA
reference model, one worker, caches cleared first so neither reuses the other's work). Prints the ratio
journeys / compare per sample; the target from the journey issue is below 1.0 for every sample. No
thresholds are asserted: the machine is shared and its speed moves within minutes.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import inspector  # noqa: E402

TARGET_RATIO = 1.0


def seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(names: list[str]) -> int:
    worst = 0.0
    print(f"{'sample':36} {'journeys s':>10} {'compare s':>10} {'ratio':>7}")
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
        inspector.clear_cache()  # each journey finds its site itself (one prepare_pt2e), as a user's would
        try:
            journeys = sum(seconds(lambda rule=rule: inspector.journey(target, 0, rule)) for rule in ("upstream", "off"))
        except inspector.InspectorError as exc:
            print(f"{name:36} journey failed: {exc}")
            continue
        inspector.clear_cache()
        try:
            compared = seconds(lambda: inspector.compare(target, workers=1))
        except inspector.InspectorError as exc:
            print(f"{name:36} compare failed: {exc}")
            continue
        ratio = journeys / compared
        worst = max(worst, ratio)
        print(f"{name:36} {journeys:10.1f} {compared:10.1f} {ratio:7.2f}", flush=True)
    print(f"worst ratio {worst:.2f} (target: below {TARGET_RATIO})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or inspector.samples.names()))
