"""What the advice costs: ``advise`` against one ``compare`` of ``off,upstream`` on the same model and accelerator.

Per model (the samples with a site the pass folds, the three-site test model, and ``BENCH_TIMM=1`` adds two timm
nets at 64x64: nf_resnet26 and nf_regnet_b0, random weights), each measurement the first call of a fresh process
into a fresh result store, on ``BENCH_ACCELERATOR`` (default ethos-u55-128):

1. ``compare(model, ("off", "upstream"), accelerator=...)``;
2. ``advise(model, accelerator=..., budget_db=1)``: the ends on TOSA and Vela, the prices checked (the sites
   lowered alone where the rows do not add up), the sets on the simulation, the candidates lowered on TOSA and
   Vela. Target: <= 3x of (1) for up to 8 sites, with every lowering the checks need.

Printed per model: both times and their ratio, the sites, the search and the sets measured, and the prediction's
gap to TOSA and Vela at the recommended point. ``BENCH_MODELS`` (comma-separated ``sample:NAME``, ``file.py:Class``
or ``name@size``) replaces the model list.
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
TARGET = 3.0
MAX_SITES = 8
TIMM = ("nf_resnet26@64", "nf_regnet_b0@64")
THREE = f"{ROOT / 'tests' / 'data' / 'three_sites.py'}:ThreeSites"
SEED = 0


def _models() -> list[str]:
    given = os.environ.get("BENCH_MODELS")
    if given:
        return [m for m in given.split(",") if m]
    return (["sample:stateful_wide_scale", "sample:conv_mul_chain", "sample:streaming_keyword_spotter",
             "sample:mobilenetv2_inverted_residual", THREE] + (list(TIMM) if os.environ.get("BENCH_TIMM") else []))


def child(spec: str, what: str) -> dict:
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(ROOT))
    import inspector

    target, inputs = bench_target(spec, SEED)
    t0 = time.perf_counter()
    if what == "compare":
        inspector.compare(target, variants=("off", "upstream"), example_inputs=inputs, accelerator=ACCELERATOR)
        return {"seconds": time.perf_counter() - t0}
    a = inspector.advise(target, example_inputs=inputs, accelerator=ACCELERATOR, budget_db=1.0)
    return {"seconds": time.perf_counter() - t0, "sites": sum(s.reachable for s in a.sites), "search": a.search,
            "points": len(a.points), "folded": len(a.folded), "gap": a.prediction_gap,
            "saved_vs_off": a.versus("off").cycles_saved, "db_vs_upstream": a.versus("upstream").db_change,
            "lowerings": a.lowerings, "prices": f"{a.check.source}, {'add up' if a.check.adds_up else 'do not add up'}"}


def _child(spec: str, what: str) -> dict:
    with tempfile.TemporaryDirectory() as store:
        env = dict(os.environ, FOLD_INSPECTOR_STORE=store)
        proc = subprocess.run([sys.executable, __file__, "--child", spec, what], capture_output=True, text=True,
                              cwd=ROOT, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{spec} ({what}) failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_model(spec: str) -> tuple[float, int]:
    one, five, _ = os.getloadavg()
    base, advice = _child(spec, "compare"), _child(spec, "advise")
    ratio = advice["seconds"] / base["seconds"]
    g = advice["gap"]
    gap = (f"TOSA-sim {g['db']:+.3f} dB, Vela-predicted {g['cycles']:+,} cycles"
           if g["db"] is not None and g["cycles"] is not None else "-")
    print(f"{spec.rsplit('/', 1)[-1]:40} compare off,upstream {base['seconds']:6.1f} s  advise {advice['seconds']:6.1f} s "
          f"({ratio:4.2f}x)  {advice['sites']} site(s), {advice['search']}, {advice['points']} sets, "
          f"{advice['lowerings']} lowered (compare: 2), prices from {advice['prices']}; folds "
          f"{advice['folded']}, saves {advice['saved_vs_off']:+,} cycles vs off; gap at the advice: {gap}  "
          f"[load {one:.2f}/{five:.2f}]", flush=True)
    return ratio, advice["sites"]


def main() -> None:
    if any("@" in m for m in _models()):
        ensure_extras()
    results = [bench_model(spec) for spec in _models()]
    bounded = [r for r, n in results if n <= MAX_SITES]
    worst = max(bounded, default=float("nan"))
    print(f"advise vs compare(off, upstream) on {ACCELERATOR}, up to {MAX_SITES} sites: "
          f"{min(bounded, default=float('nan')):.2f}x-{worst:.2f}x (target <= {TARGET}x: "
          f"{'met' if worst <= TARGET else 'NOT met'})")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], sys.argv[3])))
    else:
        main()
