"""What the cost costs: a compare on an Ethos-U (cost included) against the same compare on tosa-int.

Per model (every sample with a site, and two timm nets at 64x64: nf_resnet26 and nf_regnet_b0; random
weights, the project's ``timm`` extra), the variants ``off`` and ``upstream``, ``workers=1``, each
measurement the first ``compare`` of a fresh process:

1. on ``tosa-int``, the result store off;
2. on ``ethos-u55-128`` (``BENCH_ACCELERATOR``), into a fresh store: quantized with the Ethos-U quantizer,
   lowered once with locations, run on the TOSA reference model, priced by Vela. Target: <= 1.15x of (1)
   (Vela's share and the locations');
3. the same as (2) in another fresh process on that store: the cost read back. Target: <= 0.05x of (2).

Printed per model: the three times, the two ratios, Vela's own seconds, the cycles of each variant and
what folding buys (``off`` minus ``upstream``), and the machine's load. ``BENCH_MODELS`` (comma-separated
``sample:NAME`` or ``name@size``) replaces the model list.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

from _timm import ROOT, bench_target, ensure_extras

ACCELERATOR = os.environ.get("BENCH_ACCELERATOR", "ethos-u55-128")
VARIANTS = ("off", "upstream")
SLOWDOWN_TARGET = 1.15
READBACK_TARGET = 0.05
TIMM = ("nf_resnet26@64", "nf_regnet_b0@64")
SEED = 0


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}"


def _models() -> list[str]:
    given = os.environ.get("BENCH_MODELS")
    if given:
        return [m for m in given.split(",") if m]
    sys.path.insert(0, str(ROOT))
    import inspector

    with_sites = [f"sample:{n}" for n in inspector.samples.names()
                  if inspector.analyze(f"sample:{n}", stage="tfa").sites and n != "generated_blocks"]
    return with_sites + list(TIMM)


def child(spec: str, accelerator: str) -> dict:
    """The first ``compare`` of this process on ``spec`` for ``accelerator``."""
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(ROOT))
    import inspector

    target, inputs = bench_target(spec, SEED)
    t0 = time.perf_counter()
    cmp = inspector.compare(target, variants=VARIANTS, example_inputs=inputs, workers=1, accelerator=accelerator)
    seconds = time.perf_counter() - t0
    costs = {r.variant.label: r.cost for r in cmp.results}
    return {"seconds": seconds, "errors": [r.error for r in cmp.errors],
            "cached": [r.cached for r in cmp.results],
            "cycles": {k: (c.cycles if c is not None else None) for k, c in costs.items()},
            "vela": sum(c.vela_seconds for c in costs.values() if c is not None)}


def _child(spec: str, accelerator: str, store: str) -> dict:
    env = dict(os.environ, FOLD_INSPECTOR_STORE=store)
    proc = subprocess.run([sys.executable, __file__, "--child", spec, accelerator], capture_output=True, text=True,
                          cwd=ROOT, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{spec} on {accelerator} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_model(spec: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as store:
        load = _load()
        plain = _child(spec, "tosa-int", "off")
        priced = _child(spec, ACCELERATOR, store)
        again = _child(spec, ACCELERATOR, store)
    slowdown = priced["seconds"] / plain["seconds"]
    readback = again["seconds"] / priced["seconds"]
    off, up = priced["cycles"].get("off"), priced["cycles"].get("upstream")
    buys = f"{off - up:+,} cycles ({(off - up) / off:.1%} of off)" if off and up is not None else "-"
    print(f"{spec:42} tosa-int {plain['seconds']:6.1f} s  {ACCELERATOR} {priced['seconds']:6.1f} s "
          f"({slowdown:4.2f}x, Vela {priced['vela']:.2f} s)  read back {again['seconds']:5.2f} s "
          f"({readback:5.3f}x, cached {all(again['cached'])})  cycles off/upstream {off}/{up}: folding buys {buys}  "
          f"[{load}]", flush=True)
    if priced["errors"] or plain["errors"]:
        print(f"  errors: {plain['errors'] + priced['errors']}")
    return slowdown, readback


def main() -> None:
    if any("@" in m for m in _models()):
        ensure_extras()
    results = [bench_model(spec) for spec in _models()]
    worst_slow = max(s for s, _ in results)
    worst_back = max(r for _, r in results)
    print(f"compare on {ACCELERATOR} vs tosa-int: {min(s for s, _ in results):.2f}x-{worst_slow:.2f}x "
          f"(target <= {SLOWDOWN_TARGET}x: {'met' if worst_slow <= SLOWDOWN_TARGET else 'NOT met'}); "
          f"read back: up to {worst_back:.3f}x (target <= {READBACK_TARGET}x: "
          f"{'met' if worst_back <= READBACK_TARGET else 'NOT met'})")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], sys.argv[3])))
    else:
        main()
