"""The two engines on real networks: how much faster the simulation preview is, and how far it is from TOSA.

Over timm architectures with random weights (the project's ``timm`` extra): resnet18 at
224x224 (no sites), nf_resnet26 at 224x224 (8 sites, all fold at tfa) and ghostnet_100 at 224x224
(2 sites, both skipped), the variants ``off`` and ``upstream``. Each engine's ``compare`` is the
FIRST call of a FRESH process (one subprocess per model and engine, ``workers=1``, the result
store off so that nothing is answered from disk); the two engines of a model run back to back, so
the ratio is measured within one run. Printed per model: both times and their ratio (target:
simulation <= 0.15x TOSA), and per variant the SQNR on each engine, their difference (target:
within 1 dB) and the largest difference in output quantization steps (``Comparison.gap``).

The widget: timm's convnext_atto at 224x224 opened in ``widgets.FoldInspector`` as a user opens it
(isolated runs, so its worker fork server warms up beside it), a marker toggled, then *Run*: the
time until the preview (the simulation compare ``run_reference`` runs first) is on the screen.
Target: 15 s. The TOSA run that follows is not waited for (the process is stopped).

The machine's load (``os.getloadavg()``) is printed with every figure. ``BENCH_MODELS``
(comma-separated ``name@size``) replaces the model list; ``BENCH_WIDGET=0`` skips the widget.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import warnings

from _timm import ROOT, ensure_extras, import_timm

MODELS = tuple(filter(None, os.environ.get("BENCH_MODELS", "resnet18@224,nf_resnet26@224,ghostnet_100@224").split(",")))
WIDGET_MODEL = os.environ.get("BENCH_WIDGET_MODEL", "convnext_atto@224")
VARIANTS = ("off", "upstream")
RATIO_TARGET = 0.15
DB_TARGET = 1.0
PREVIEW_TARGET_S = 15.0
SEED = 0


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}"


def _model(spec: str):
    import torch

    name, size = spec.split("@")
    timm = import_timm()
    torch.manual_seed(SEED)
    model = timm.create_model(name, pretrained=False).eval()
    torch.manual_seed(SEED + 1)
    return name, model, (torch.rand(1, 3, int(size), int(size)),)


# ---------------------------------------------------------------- children (each a fresh process)


def child_compare(engine: str, spec: str, out: str) -> dict:
    """The first ``compare`` of this process on ``spec``, on ``engine``; the comparison pickled to ``out``."""
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(ROOT))
    import inspector

    name, model, inputs = _model(spec)
    t0 = time.perf_counter()
    cmp = inspector.compare(model, variants=VARIANTS, example_inputs=inputs, workers=1, engine=engine)
    seconds = time.perf_counter() - t0
    with open(out, "wb") as f:  # this bench's own file, read back by its parent
        pickle.dump(dataclasses.replace(cmp, run=None), f)
    phases = {r.variant.label: {k: round(v, 2) for k, v in r.timings.items()} for r in cmp.results}
    return {"seconds": seconds, "phases": phases, "errors": [r.error for r in cmp.errors]}


def child_widget(spec: str) -> dict:
    """Open the widget on ``spec``, toggle a marker, press Run: seconds until the preview is shown."""
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(ROOT))
    import widgets

    name, model, inputs = _model(spec)
    t0 = time.perf_counter()
    app = widgets.FoldInspector(model, inputs)
    opened = time.perf_counter() - t0
    shown = []
    render = app._render_results

    def watched():  # the results panel is redrawn: note when the preview first reaches it
        if app.comparison is not None and app.comparison.engine == "simulation" and not shown:
            shown.append(time.perf_counter())
        return render()

    app._render_results = watched
    # no site to mark on this network: the marker goes on its first operation (a new configuration all the same)
    node = next(n.name for n in app.analysis.before.graph.nodes if n.op == "call_function")
    t1 = time.perf_counter()
    app.set_markers((node,))
    toggled = time.perf_counter() - t1
    t2 = time.perf_counter()
    app.run_reference()
    while not shown and time.perf_counter() - t2 < 600:
        if app.last_error:
            raise SystemExit(f"the widget said: {app.last_error}")
        time.sleep(0.05)
    if not shown:
        raise SystemExit("no preview within 600 s")
    preview = shown[0] - t2
    timings = {r.variant.label: {k: round(v, 2) for k, v in r.timings.items()} for r in app.comparison.results}
    return {"open": opened, "toggle": toggled, "marker": node, "preview": preview, "phases": timings}


def _child(args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, FOLD_INSPECTOR_STORE="off")
    proc = subprocess.Popen([sys.executable, __file__, "--child", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env, start_new_session=True)
    out, err = proc.communicate()
    try:  # the widget child leaves its worker fork server behind: stop its whole session
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


# ---------------------------------------------------------------- the report


def bench_model(spec: str) -> None:
    sys.path.insert(0, str(ROOT))
    got, cmps = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for engine in ("tosa", "simulation"):
            before = _load()
            path = os.path.join(tmp, f"{engine}.pkl")
            got[engine] = _child(["compare", engine, spec, path])
            got[engine]["load"] = before
            with open(path, "rb") as f:
                cmps[engine] = pickle.load(f)
    tosa, sim = got["tosa"]["seconds"], got["simulation"]["seconds"]
    ratio = sim / tosa
    print(f"{spec}: TOSA compare {tosa:.1f} s ({got['tosa']['load']}), simulation {sim:.1f} s "
          f"({got['simulation']['load']}): {ratio:.3f}x (target <= {RATIO_TARGET:.2f}x, "
          f"{'met' if ratio <= RATIO_TARGET else 'NOT met'})", flush=True)
    for engine in ("tosa", "simulation"):
        for label, phases in got[engine]["phases"].items():
            print(f"  {engine:<10} {label:<9} phases (s): {phases}")
    gap = cmps["simulation"].gap(cmps["tosa"])
    for label in VARIANTS:
        rows = [g for g in gap.outputs if g.variant == label]
        if not rows:
            print(f"  {label}: no numbers on both engines")
            continue
        for g in rows:
            steps = "n/a" if g.max_steps is None else f"{g.max_steps:.1f}"
            verdict = "within target" if abs(g.db) <= DB_TARGET else "OVER target"
            print(f"  {label:<9} output {g.output}: SQNR TOSA {g.other_sqnr_db:.2f} dB, simulation "
                  f"{g.sqnr_db:.2f} dB, difference {g.db:+.2f} dB (target within {DB_TARGET:.0f} dB, {verdict}); "
                  f"largest difference {steps} quantization steps")
    folds = {r.variant.label: dict(r.folds) for r in cmps["tosa"].results}
    print(f"  folds (TOSA run): {folds}", flush=True)


def bench_widget(spec: str) -> None:
    before = _load()
    got = _child(["widget", spec])
    verdict = "met" if got["preview"] <= PREVIEW_TARGET_S else "NOT met"
    print(f"widget, {spec}: opened in {got['open']:.1f} s; marker toggled on {got['marker']} in "
          f"{got['toggle'] * 1000:.0f} ms; Run -> preview on screen {got['preview']:.1f} s "
          f"(target <= {PREVIEW_TARGET_S:.0f} s, {verdict}; {before}, after: {_load()})")
    for label, phases in got["phases"].items():
        print(f"  preview {label:<19} phases (s): {phases}", flush=True)


def main() -> None:
    ensure_extras()
    print(f"cores available: {len(os.sched_getaffinity(0))}; {_load()}; every compare the first of a fresh "
          f"process, workers=1, result store off; variants {', '.join(VARIANTS)}", flush=True)
    for spec in MODELS:
        bench_model(spec)
    if os.environ.get("BENCH_WIDGET", "1") != "0":
        bench_widget(WIDGET_MODEL)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        kind, rest = sys.argv[2], sys.argv[3:]
        result = child_compare(*rest) if kind == "compare" else child_widget(*rest)
        print(json.dumps(result), flush=True)
        os._exit(0)  # the widget's TOSA run is not waited for
    else:
        main()
