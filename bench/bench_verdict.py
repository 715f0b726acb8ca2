"""What a verdict on #21234 takes: notebook 10's verdict from the command line, against one ``compare`` it contains.

Each measurement is a fresh process (imports included) into a fresh result store (cold), then the same command again
on the store the first left (warm: what a reviewer pays the second time):

1. ``python -m inspector compare sample:stateful_conv_mul --variants upstream,off --accelerator ethos-u55-128``:
   one comparison of two variants, the unit every other figure is a multiple of;
2. ``python -m inspector verdict sample:stateful_conv_mul sample:digits_stateful --accelerator
   ethos-u55-128,ethos-u85-256``: both INT flows, the FP flow, the fold after calibration, and where a marker reaches
   the pass (the verdict notebook 10 runs, at its default steps: 20 and the digits' 1,000).

Printed: seconds cold and warm, and each as a multiple of (1) cold. docs/verdict.md quotes this output.
``BENCH_WORKERS`` (default: the cores) is passed as ``--workers``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NETWORKS = ("sample:stateful_conv_mul", "sample:digits_stateful")
ACCELERATORS = "ethos-u55-128,ethos-u85-256"


def _timed(argv: list[str], store: str) -> float:
    env = dict(os.environ, FOLD_INSPECTOR_STORE=store)
    workers = os.environ.get("BENCH_WORKERS")
    argv = argv + (["--workers", workers] if workers else [])
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "inspector", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.strip().splitlines()[-1:]}")
    return seconds


def main() -> None:
    compare = ["compare", NETWORKS[0], "--variants", "upstream,off", "--accelerator", "ethos-u55-128"]
    verdict = ["verdict", *NETWORKS, "--accelerator", ACCELERATORS]
    rows = []
    for name, argv in (("compare (1 network, 2 variants, ethos-u55-128)", compare),
                       (f"verdict ({', '.join(NETWORKS)}; {ACCELERATORS} and the FP flow)", verdict)):
        with tempfile.TemporaryDirectory(prefix="bench-verdict-") as store:
            cold = _timed(argv, store)
            warm = _timed(argv, store)
        rows.append((name, cold, warm))
    unit = rows[0][1]
    print(f"{'what':80} {'cold s':>8} {'warm s':>8} {'cold / compare':>15} {'warm / compare':>15}")
    for name, cold, warm in rows:
        print(f"{name:80} {cold:8.1f} {warm:8.1f} {cold / unit:15.2f}x {warm / unit:14.2f}x")


if __name__ == "__main__":
    main()
