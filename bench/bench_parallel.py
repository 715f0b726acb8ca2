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

Next to them, the ceiling: what this machine's cores give this very work when nothing is shared
and nothing coordinates. Two warm processes run one variant of the same model at the same moment
(each on its own new inputs, as in the second call), against one of them alone; ``2 x alone /
together`` is the most any schedule of two processes can gain here. On a VM whose two vCPUs share a
physical core's resources, it is below 2x and varies with the hour. And the tool's best case: two
variants of equal size (the same variant twice, which compare does not merge: a quantization other
than the default is never predicted alike), workers=2 against one of them with workers=1, in one
warm process: nothing to balance, the coordination included. And per call, two bounds: the longest
variant (no schedule ends before it; each variant's own seconds with workers=1, sum / longest), and the
CPU work of every process of the call (the fork server's imports and warm-up included) spread over the
cores, measured from ``/proc`` for the process and every process under it.
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
import hashlib, json, logging, os, sys, time, warnings
sys.path.insert(0, {root!r})
warnings.filterwarnings("ignore")
logging.getLogger("torchao").setLevel(logging.ERROR)
import torch
import inspector
from sample_models.big import ConvStack


def tree_cpu():  # CPU seconds of this process and every process under it (the fork server, its workers),
    # each with its ended children's (/proc's cutime and cstime, once reaped)
    tick = os.sysconf("SC_CLK_TCK")
    seconds, todo = {{}}, [os.getpid()]
    parents = {{}}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{{entry}}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents.setdefault(int(fields[1]), []).append(int(entry))
            seconds[int(entry)] = sum(int(x) for x in fields[11:15]) / tick
    total = 0.0
    while todo:
        pid = todo.pop()
        total += seconds.get(pid, 0.0)
        todo.extend(parents.get(pid, ()))
    return total


workers = int(sys.argv[1])
model = ConvStack(convs=16, channels=16, size=28, seed=7)
digest = hashlib.sha256()
times = []
cpu = []  # per call: the CPU seconds of every process that worked on it
variants = []  # per call: each variant's own seconds (its phases), as the process that ran it timed them
other = (torch.randn(1, 16, 28, 28, generator=torch.Generator().manual_seed(11)),)
for call, inputs in enumerate((model.example_inputs(), other)):
    c0 = tree_cpu()
    t0 = time.perf_counter()
    result = inspector.compare(model, variants={variants!r}, example_inputs=inputs, workers=workers)
    times.append(time.perf_counter() - t0)
    cpu.append(tree_cpu() - c0)
    variants.append({{r.variant.label: sum(r.timings.values()) for r in result.results}})
    assert all(r.error is None and not r.cached for r in result.results), \
        [(r.variant.label, r.error, r.cached) for r in result.results]
    for r in result.results:
        for step in r.outputs:
            for t in step:
                digest.update(t.contiguous().numpy().tobytes())
print(json.dumps({{"times": times, "cpu": cpu, "variants": variants, "digest": digest.hexdigest(),
                  "sqnr": [[r.variant.label, r.at_step(0).sqnr_db] for r in result.results]}}))
"""


CEILING = r"""
import logging, sys, time, warnings
sys.path.insert(0, {root!r})
warnings.filterwarnings("ignore")
logging.getLogger("torchao").setLevel(logging.ERROR)
import torch
import inspector
from sample_models.big import ConvStack

if sys.argv[2] == "shared":
    torch.set_num_threads(1)  # as in a pool worker (alone it keeps torch's default, as workers=1 does)
model = ConvStack(convs=16, channels=16, size=28, seed=7)
inspector.compare(model, variants=("upstream",), workers=1)  # warm: imports and first calls paid
print("ready", flush=True)
sys.stdin.readline()
inputs = (torch.randn(1, 16, 28, 28, generator=torch.Generator().manual_seed(int(sys.argv[1]))),)
t0 = time.perf_counter()
inspector.compare(model, variants=("upstream",), example_inputs=inputs, workers=1)
print(time.perf_counter() - t0, flush=True)
"""


BEST = r"""
import json, logging, sys, time, warnings
sys.path.insert(0, {root!r})
warnings.filterwarnings("ignore")
logging.getLogger("torchao").setLevel(logging.ERROR)
import torch
import inspector
from sample_models.big import ConvStack

model = ConvStack(convs=16, channels=16, size=28, seed=7)
one = "upstream@a8w8-per-tensor"


def inputs(seed):
    return (torch.randn(1, 16, 28, 28, generator=torch.Generator().manual_seed(seed)),)


inspector.compare(model, variants=(one,), workers=1)  # warm: imports and first calls paid, here and in the workers
inspector.compare(model, variants=(one, one), example_inputs=inputs(1), workers=2)
t0 = time.perf_counter()
inspector.compare(model, variants=(one,), example_inputs=inputs(2), workers=1)
alone = time.perf_counter() - t0
t0 = time.perf_counter()
result = inspector.compare(model, variants=(one, one), example_inputs=inputs(3), workers=2)
pair = time.perf_counter() - t0
assert not any(r.cached for r in result.results)
print(json.dumps({{"alone": alone, "pair": pair}}))
"""


ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


def child(code: str, what: str, *args: str) -> dict:
    """Run ``code`` in a fresh Python process; the JSON document its last line prints."""
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, env=ENV)
    if out.returncode != 0:
        raise SystemExit(f"the {what} run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def best_case() -> dict:
    return child(BEST.format(root=str(ROOT)), "best-case")


def at_once(count: int) -> list[float]:
    """Seconds of one variant's computation in each of ``count`` warm processes started together."""
    code = CEILING.format(root=str(ROOT))
    mode = "shared" if count > 1 else "alone"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(20 + i), mode], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT, env=ENV)
             for i in range(count)]

    def line_of(p, parse):  # the stack may print to stdout too: the first line that parses
        for line in p.stdout:
            try:
                return parse(line.strip())
            except ValueError:
                continue
        raise SystemExit(f"a ceiling process ended early (exit status {p.wait()})")

    def ready(text: str) -> bool:
        if text != "ready":
            raise ValueError(text)
        return True

    for p in procs:
        line_of(p, ready)
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    times = [line_of(p, float) for p in procs]
    for p in procs:
        p.wait()
    return times


def run(workers: int) -> dict:
    return child(CHILD.format(root=str(ROOT), variants=VARIANTS), f"workers={workers}", str(workers))


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
    # Two bounds per call. No schedule finishes before its longest variant: with each variant's own seconds as
    # workers=1 timed them (one after another, each alone on the machine), (sum of all) / (the longest) bounds
    # what side by side can gain (the workers' own timings would include the waits of a shared core). Nor before
    # its processes' CPU work is done on the cores there are: workers=2 does more work than workers=1 (the fork
    # server imports the stack and warms it up, each worker pays its own first calls on this model, and the model
    # and results travel); (all of its CPU seconds) / cores bounds it from below too.
    cores = len(os.sched_getaffinity(0))
    for call, what in ((0, "first call"), (1, "second call")):
        own = one["variants"][call]
        longest = max(own, key=own.get)
        print(f"  {what}: each variant's own seconds (workers=1) {', '.join(f'{k} {v:.1f}' for k, v in own.items())}; "
              f"the longest ({longest}) bounds side by side at {sum(own.values()) / own[longest]:.2f}x")
        a, b = one["cpu"][call], two["cpu"][call]
        print(f"  {what}: CPU seconds of every process, workers=1 {a:.1f}, workers=2 {b:.1f} ({b - a:+.1f}); "
              f"on {cores} cores workers=2 cannot end before {b / cores:.1f} s: at most "
              f"{one['times'][call] / (b / cores):.2f}x")
    print(f"  bit-identical outputs across the two: {same}; SQNR: "
          + ", ".join(f"{label} {db:.2f} dB" for label, db in two["sqnr"]))
    alone = at_once(1)[0]
    together = at_once(2)
    ceiling = 2 * alone / max(together)
    print(f"ceiling: one variant alone {alone:.1f} s, two at once {together[0]:.1f} s and {together[1]:.1f} s: "
          f"two cores give this work {ceiling:.2f}x here (no schedule of two processes gains more)")
    best = best_case()
    print(f"best case: two equal variants, workers=2 {best['pair']:.1f} s against one with workers=1 "
          f"{best['alone']:.1f} s: {2 * best['alone'] / best['pair']:.2f}x (nothing to balance)")


if __name__ == "__main__":
    main()
