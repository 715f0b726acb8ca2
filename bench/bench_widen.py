"""What a widening search costs: ``widen`` on Silero's VAD over 79 speech frames (ethos-u85-256, budget
decision-mismatch@0.55=0), against one ``compare`` of the baseline and 16-bit activations everywhere, in the same run.

Each measurement runs in a fresh process into a fresh result store (cold: nothing answered from a cache). Printed:
seconds of each, the ratio (target: at most 4x), the lowerings the search needed, the seconds of each
phase of the search, its answer. docs/widen.md quotes it.
``BENCH_WORKERS`` (default: the cores) is passed as ``workers``; ``BENCH_WIDEN_JSON``, a path: the search's whole
answer (``Widening.to_json()``) is written there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRAMES = 79
COMPARE = ("import inspector, os; w = os.environ.get('BENCH_WORKERS'); "
           "inspector.compare('sample:silero_vad', variants=('upstream', 'upstream@a16w8'), steps=79, "
           "accelerator='ethos-u85-256', metrics=('decision-mismatch@0.55', 'sqnr'), workers=int(w) if w else None)")
WIDEN = ("import inspector, json, os, time; w = os.environ.get('BENCH_WORKERS'); "
         "t0 = time.perf_counter(); phases = []; "
         "say = lambda phase, f: phases and phases[-1][0] == phase or phases.append((phase, time.perf_counter() - t0)); "
         "r = inspector.widen('sample:silero_vad', steps=79, accelerator='ethos-u85-256', "
         "budget='decision-mismatch@0.55=0', workers=int(w) if w else None, progress=say); "
         "j = os.environ.get('BENCH_WIDEN_JSON'); j and open(j, 'w').write(r.to_json()); "
         "print(json.dumps({'lowerings': r.lowerings, 'simulated': r.simulated, 'answer': r.answer(), "
         "'baseline': r.baseline.cycles, 'pick': r.pick.cycles, 'met': r.met, 'phases': phases, "
         "'seconds': time.perf_counter() - t0}))")


def _timed(code: str) -> tuple[float, str]:
    with tempfile.TemporaryDirectory(prefix="bench-widen-") as store:
        env = dict(os.environ, FOLD_INSPECTOR_STORE=store)
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(done.stderr.strip().splitlines()[-1:])
    return seconds, done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def main() -> None:
    unit, _ = _timed(COMPARE)
    seconds, out = _timed(WIDEN)
    found = json.loads(out)
    print(f"compare (baseline and a16w8 everywhere, {FRAMES} frames): {unit:.1f} s")
    print(f"widen (decision-mismatch@0.55=0): {seconds:.1f} s = {seconds / unit:.2f}x one compare; "
          f"{found['lowerings']} lowerings, {found['simulated']} sets on the simulation")
    phases = found["phases"] + [["(end)", found["seconds"]]]
    for (phase, start), (_, end) in zip(phases, phases[1:]):
        print(f"  {end - start:7.1f} s  {phase}")
    print(found["answer"])


if __name__ == "__main__":
    main()
