"""compare() side by side: workers=2 against workers=1, the first call and a second with new inputs.

What a user waits for: a comparison of three variants of a small model (16 convs, 16 channels,
28x28; ``sample_models.big.ConvStack``), each variant its own computation (``off``, ``upstream``,
``upstream@a8w8-per-tensor``). Each configuration runs in a fresh Python process, exactly as a
user's script or kernel would: the first call pays everything a process pays on a model it has not
seen (imports excluded, warm-ups included: for workers=2 the pool's fork server starts with the
call), the second call gives the same model new example inputs (so a new calibration: nothing of
the first call's results can be reused; the workers are warm). Both processes compute the same
numbers (checked: bit-identical outputs). Targets from the speed issue: >= 1.5x on the first call,
>= 1.8x on the second. No thresholds are asserted here; the figures are printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIRST_TARGET = 1.5
SECOND_TARGET = 1.8
VARIANTS = ("off", "upstream", "upstream@a8w8-per-tensor")

CHILD = r"""
import hashlib, json, logging, sys, time, warnings
sys.path.insert(0, {root!r})
warnings.filterwarnings("ignore")
logging.getLogger("torchao").setLevel(logging.ERROR)
import torch
import inspector
from sample_models.big import ConvStack

workers = int(sys.argv[1])
model = ConvStack(convs=16, channels=16, size=28, seed=7)
digest = hashlib.sha256()
times = []
for call, inputs in enumerate((model.example_inputs(), (torch.randn(1, 16, 28, 28, generator=torch.Generator().manual_seed(11)),))):
    t0 = time.perf_counter()
    result = inspector.compare(model, {variants!r}, example_inputs=inputs, workers=workers)
    times.append(time.perf_counter() - t0)
    assert all(r.error is None and not r.cached for r in result.results), [(r.variant.label, r.error, r.cached) for r in result.results]
    for r in result.results:
        for step in r.outputs:
            for t in step:
                digest.update(t.contiguous().numpy().tobytes())
print(json.dumps({{"times": times, "digest": digest.hexdigest(),
                  "sqnr": [[r.variant.label, r.at_step(0).sqnr_db] for r in result.results]}}))
"""


def run(workers: int) -> dict:
    code = CHILD.format(root=str(ROOT), variants=VARIANTS)
    out = subprocess.run([sys.executable, "-c", code, str(workers)], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if out.returncode != 0:
        raise SystemExit(f"the workers={workers} run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    print(f"cores available: {len(os.sched_getaffinity(0))}; variants {', '.join(VARIANTS)}; "
          "16 convs, 16 channels, 28x28; each configuration in a fresh process")
    one = run(1)
    two = run(2)
    same = one["digest"] == two["digest"]
    for call, target, what in ((0, FIRST_TARGET, "first call (a model the process has not seen)"),
                               (1, SECOND_TARGET, "second call, new inputs")):
        a, b = one["times"][call], two["times"][call]
        ratio = a / b
        print(f"compare, 3 variants, {what:46} workers=1 {a:6.1f} s, workers=2 {b:6.1f} s: {ratio:.2f}x "
              f"(target >= {target}x) {'OK' if ratio >= target else 'UNDER'}")
    print(f"  bit-identical outputs across the two: {same}; SQNR: "
          + ", ".join(f"{label} {db:.2f} dB" for label, db in two["sqnr"]))


if __name__ == "__main__":
    main()
