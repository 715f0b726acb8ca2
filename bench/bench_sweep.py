"""sweep(): many models x rules on a pool of worker processes, on Ray, and over a finished out/ store.

Everything is measured in this one run and printed as ratios, each next to its target from the
sweep issue (these machines are noisy: nothing is asserted, except that the tables of two runs
of the same sweep must be equal, which is printed as FAIL when they are not):

1. 12 built-in samples x 3 rules (upstream, state-aware, state-aware-strict) at tfa, compared on
   the TOSA INT reference model (steps=5): ``workers=2`` against ``workers=1`` (local pool), each
   from nothing (``out=None`` with the result store off, ``inspector.clear_cache()`` before it, and new worker processes:
   a warm pool the sweep keeps between calls is stopped first, since a worker's caches would
   answer the run and ``clear_cache`` here does not reach them; a variant answered from a cache
   shows all its phases at 0 s and is reported as FAIL). Target >= 1.7x on 2 cores.
2. The same sweep with ``executor="ray"`` (a local Ray cluster the sweep starts itself) against
   the local pool with ``workers=2``: Ray's overhead <= 15%, and its table equal to the local one
   bit for bit (``to_dict()`` without "run" and every "timings"/"seconds").
3. The same sweep into a new ``out/`` folder (a result store of its own), then again with the same
   arguments over the finished folder: the second < 5% of the first (nothing computed again: ``reused``).
4. What one model costs per phase, from the sweep's own timings (the ``workers=1`` run, a model
   that was not its worker's first, so no imports are in it), next to the plain ExecuTorch flow
   with no inspector (docs/stack-facts.md, "The TOSA INT flow that works") for the same model and
   calibration batches, timed in this process after a warm-up.

If time allows (the whole script within BUDGET_SECONDS), 1. is repeated in the reverse order
(workers=2 first) to show the order does not matter. ``--quick``: 4 samples, steps 2, no reverse
order (a smoke test of the script, not of the targets).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
logging.getLogger("torchao").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")
# Without out=, a sweep keeps and reads its results in the store in use: off, so 1. and 2. compute everything.
os.environ["FOLD_INSPECTOR_STORE"] = "off"

import torch

import inspector
from bench_compare import plain_flow  # the plain flow, for the warm-up
from inspector import samples
from inspector._doors import executorch as _executorch
from inspector._workers import pool as _pool
from inspector._base import quiet as _quiet
from inspector._doors import tosa as _tosa
from inspector._numbers.flow import choose_calibration
from inspector._targets.load import load
from inspector import sweep

SPEEDUP_TARGET = 1.7  # workers=2 against workers=1, on 2 cores
RAY_OVERHEAD_TARGET = 0.15  # ray seconds / local seconds - 1
REUSE_TARGET = 0.05  # a second run over a finished out/, as a fraction of the first
BUDGET_SECONDS = 450  # the optional reverse-order pair runs only if the whole script stays within this

RULES = ("upstream", "state-aware", "state-aware-strict")
# Cheap enough to sweep five times in one run (TOSA lowering is most of a variant's time), and varied:
# one site and several, channel, width and input scales, a mul with several users, batch norm, three
# models with state where the rules decide differently (stateful_conv_mul, stateful_wide_scale,
# streaming_keyword_spotter: 15 variants run on the reference, the other 21 share their decisions)
# and a functional recurrence.
SAMPLES = ("conv_mul_scalar", "conv_mul_chain", "conv_mul_channel_scale", "conv_mul_multiple_users",
           "conv_mul_width_scale", "conv_mul_wide_dynamic_range_scale", "stateful_conv_mul",
           "functional_recurrent_conv_mul", "conv_mul_input_scale", "conv_bn_mul", "stateful_wide_scale",
           "streaming_keyword_spotter")
QUICK_SAMPLES = ("conv_mul_scalar", "conv_mul_chain", "stateful_conv_mul", "conv_bn_mul")
PHASE_MODEL = "conv_mul_chain"  # figure 4: stateless, several sites, second in the list (not a worker's first)
WARM_MODEL = "conv_bn_mul"  # the plain flow's warm-up in this process (another model)
EXCLUDED = ("generated_blocks",)  # about 1,000 nodes: a scaling benchmark of its own


def timed(fn):
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def start_from_nothing() -> None:
    """No cache of this process or of a worker can answer the next sweep: ``clear_cache`` empties this
    process's caches and stops the warm workers (and a local Ray cluster this process started), so the
    next sweep starts new worker processes with empty caches."""
    inspector.clear_cache()
    warm = _pool.warm_workers()
    if warm:
        raise SystemExit(f"FAIL: {warm} warm worker process(es) still alive after stopping the pool")


def run_sweep(targets, steps, **kwargs):
    """One sweep from nothing: no cache of this process or of a worker can answer it."""
    start_from_nothing()
    return timed(lambda: sweep(targets, rules=RULES, stages=("tfa",), steps=steps, **kwargs))


def answered_from_a_cache(result) -> list[str]:
    """Variants a worker answered from its cache instead of running (their phases all take 0 s)."""
    return [f"{v.target} / {v.variant}" for v in result.variants
            if v.error is None and v.shared_with is None and v.timings
            and not any(v.timings.values())]


def comparable(data):
    """A sweep's table without how it ran: no "run", no "timings" or "seconds" anywhere."""
    if isinstance(data, dict):
        return {k: comparable(v) for k, v in data.items() if k not in ("run", "timings", "seconds")}
    if isinstance(data, list):
        return [comparable(v) for v in data]
    return data


def same_table(a, b) -> tuple[bool, str]:
    """Whether two sweeps' tables are equal bit for bit (floats compared by their exact repr in JSON;
    NaN is written "nan", so it compares equal to itself); and the first difference if not."""
    left, right = comparable(a.to_dict()), comparable(b.to_dict())
    if json.dumps(left, sort_keys=True) == json.dumps(right, sort_keys=True):
        return True, ""
    return False, first_difference(left, right, "")


def first_difference(a, b, where: str) -> str:
    if type(a) is not type(b):
        return f"{where or '/'}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{where}/{k}: only in the {'first' if k in a else 'second'}"
            if json.dumps(a[k], sort_keys=True) != json.dumps(b[k], sort_keys=True):
                return first_difference(a[k], b[k], f"{where}/{k}")
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            if json.dumps(x, sort_keys=True) != json.dumps(y, sort_keys=True):
                return first_difference(x, y, f"{where}[{i}]")
    return f"{where}: {str(a)[:80]!r} vs {str(b)[:80]!r}"


def failures(result) -> list[str]:
    """Models and variants of a sweep that did not run, or did not run from nothing (a benchmark of
    failures or of cache hits measures nothing)."""
    out = [f"{m.target}: {m.error}" for m in result.models if m.error]
    out += [f"{v.target} / {v.variant}: {v.error}" for v in result.variants if v.error]
    out += [f"{what}: answered from a worker's cache, not run" for what in answered_from_a_cache(result)]
    return out


def check_ran(label: str, result, problems: list[str]) -> None:
    """Say loudly (now, and again at the end) when a timed sweep did not compute everything itself."""
    for line in failures(result):
        problems.append(f"FAIL: the {label} sweep: {line}")
        print(f"  !!! {problems[-1]}")


def describe_run(label: str, seconds: float, result) -> str:
    computed = sum(1 for v in result.variants if v.error is None and v.shared_with is None)
    return (f"  {label:<34} {seconds:6.1f} s  ({len(result.models)} models, {len(result.variants)} variants, "
            f"{computed} run on the reference, the others sharing their fold decisions; reused {result.reused})")


def plain_flow_phases(model, inputs, batches) -> dict[str, float]:
    """bench_compare.plain_flow step by step, each step timed: the same calls, nothing else."""
    timings = {}
    clock = time.perf_counter()

    def mark(phase):
        nonlocal clock
        now = time.perf_counter()
        timings[phase] = now - clock
        clock = now

    quantizer = _executorch.tosa_int_quantizer()  # TOSAQuantizer(TosaCompileSpec("TOSA-1.0+INT")), symmetric
    ep = torch.export.export(copy.deepcopy(model), inputs)
    mark("export")
    gm = _tosa.prepare_pt2e(ep.module(check_guards=False), quantizer)
    for batch in batches:
        gm(*batch)
    gm = _tosa.convert_pt2e(gm)
    mark("quantize")
    lowered = _tosa.lower(torch.export.export(gm, inputs))  # to_edge_transform_and_lower, TOSAPartitioner
    mark("lower")
    with _tosa.reference_dispatch(), _quiet.captured_fds():
        lowered.exported_program().module()(*inputs)
    mark("reference")
    return timings


def measure_plain_flow(steps: int) -> tuple[dict[str, float], int]:
    """The plain flow's phases for PHASE_MODEL in this process, after a warm-up on another model,
    with the calibration batches the sweep uses (and the number of batches)."""
    start_from_nothing()
    warm = samples.get(WARM_MODEL)
    plain_flow(warm, warm.example_inputs(), list(choose_calibration(load(warm), None, steps).batches))  # warm-up
    model = samples.get(PHASE_MODEL)
    batches = list(choose_calibration(load(model), None, steps).batches)  # the batches the sweep calibrates with
    phases = plain_flow_phases(samples.get(PHASE_MODEL), model.example_inputs(), batches)
    inspector.clear_cache()  # what load() kept here
    return phases, len(batches)


def sweep_phases(result, label: str) -> tuple[dict[str, float], dict[str, float]]:
    """One model's phases from a sweep: the model's analysis, and its baseline variant's flow."""
    model = next(m for m in result.models if m.target == label)
    variant = next(v for v in result.variants if v.target == label and v.variant == RULES[0])
    return dict(model.timings), dict(variant.timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 samples, steps 2: a smoke test of the script")
    args = parser.parse_args()
    t_script = time.perf_counter()

    names = QUICK_SAMPLES if args.quick else SAMPLES
    steps = 2 if args.quick else 5
    known = samples.names()
    missing = [n for n in names if n not in known]
    if missing:
        sys.exit(f"unknown samples {missing}; the built-in ones are {known}")
    targets = [f"sample:{n}" for n in names]
    cores = len(os.sched_getaffinity(0))
    load_avg = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"cores available: {cores}; load average at start: {load_avg}"
          + (" (--quick: a smoke test, the targets are for the full run)" if args.quick else ""))
    left_out = [n for n in known if n not in names]
    print(f"{len(names)} samples x {len(RULES)} rules ({', '.join(RULES)}) at tfa, compared for {steps} "
          f"steps on the TOSA INT reference: {', '.join(names)}")
    print(f"  left out: {', '.join(left_out)} ({', '.join(EXCLUDED)}: about 1,000 nodes)")
    problems: list[str] = []  # FAIL lines, repeated at the end
    rows: list[tuple[str, str, str, str]] = []  # figure, measured, target, met

    # ---------------------------------------------------------------- 1. workers=2 against workers=1
    print("1. local pool, each run from nothing (out=None, caches cleared, new worker processes):")
    t1, one = run_sweep(targets, steps, workers=1, executor="local", out=None)
    print(describe_run("workers=1", t1, one))
    plain, n_batches = measure_plain_flow(steps)  # figure 4, measured now: next in time to the run it is set against
    t2, two = run_sweep(targets, steps, workers=2, executor="local", out=None)
    print(describe_run("workers=2", t2, two))
    check_ran("workers=1", one, problems)
    check_ran("workers=2", two, problems)
    speedup = t1 / t2
    print(f"  workers=2 is {speedup:.2f}x faster than workers=1 (target >= {SPEEDUP_TARGET}x on 2 cores) "
          f"{'OK' if speedup >= SPEEDUP_TARGET else 'UNDER'}")
    equal, diff = same_table(one, two)
    print(f"  workers=1 and workers=2 tables equal bit for bit: {'yes' if equal else 'NO: ' + diff}")
    if not equal:
        problems.append(f"FAIL: workers=1 and workers=2 give different tables: {diff}")
    rows.append(("workers=2 vs workers=1 (local)", f"{speedup:.2f}x", f">= {SPEEDUP_TARGET}x",
                 "yes" if speedup >= SPEEDUP_TARGET else "no"))

    # ---------------------------------------------------------------- 2. Ray against the local pool
    print("2. executor='ray' (a local Ray cluster started by the sweep, 2 CPUs) against the local pool, workers=2:")
    t_ray, on_ray = run_sweep(targets, steps, workers=2, executor="ray", out=None)
    print(describe_run("ray, workers=2", t_ray, on_ray))
    check_ran("Ray", on_ray, problems)
    overhead = t_ray / t2 - 1
    print(f"  Ray {t_ray:.1f} s against local {t2:.1f} s: overhead {overhead:+.1%} "
          f"(target <= {RAY_OVERHEAD_TARGET:.0%}) {'OK' if overhead <= RAY_OVERHEAD_TARGET else 'OVER'}; "
          f"executor recorded: {on_ray.executor}")
    equal_ray, diff = same_table(two, on_ray)
    if equal_ray:
        print("  Ray table equals the local one bit for bit: yes")
    else:
        line = f"FAIL: the Ray table differs from the local one: {diff}"
        print("  " + "!" * 20 + " " + line + " " + "!" * 20)
        problems.append(line)
    rows.append(("Ray overhead vs local (workers=2)", f"{overhead:+.1%}", f"<= {RAY_OVERHEAD_TARGET:.0%}",
                 "yes" if overhead <= RAY_OVERHEAD_TARGET else "no"))
    rows.append(("Ray table == local table (bit for bit)", "equal" if equal_ray else "DIFFERENT", "equal",
                 "yes" if equal_ray else "no"))
    # The same on a cluster that is already running (as a cluster a sweep outgrows one machine for is):
    # its worker processes are new, so they import the stack as the local pool's do; only the cluster's
    # own start (ray.init) is left out.
    import ray

    start_from_nothing()
    t_init, _ = timed(lambda: ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                                       configure_logging=False))
    try:
        t_running, on_running = timed(lambda: sweep(targets, rules=RULES, stages=("tfa",), steps=steps, workers=2,
                                                    executor="ray"))
    finally:
        ray.shutdown()
    check_ran("Ray, running cluster", on_running, problems)
    running = t_running / t2 - 1
    print(describe_run("ray, cluster running", t_running, on_running))
    print(f"  starting the local cluster took {t_init:.1f} s; on a running cluster Ray's overhead is {running:+.1%} "
          f"(target <= {RAY_OVERHEAD_TARGET:.0%}) {'OK' if running <= RAY_OVERHEAD_TARGET else 'OVER'}")
    rows.append(("Ray overhead, cluster already running", f"{running:+.1%}", f"<= {RAY_OVERHEAD_TARGET:.0%}",
                 "yes" if running <= RAY_OVERHEAD_TARGET else "no"))

    # ---------------------------------------------------------------- 3. over a finished out/
    print("3. into a new out/ folder (local, workers=2), then again with the same arguments:")
    with tempfile.TemporaryDirectory(prefix="bench-sweep-out-") as folder:
        t_first, first = run_sweep(targets, steps, workers=2, executor="local", out=folder)
        print(describe_run("first run, out=DIR", t_first, first))
        check_ran("first out=DIR", first, problems)
        t_again, again = run_sweep(targets, steps, workers=2, executor="local", out=folder)
        print(describe_run("again over the finished out/", t_again, again))
        files = sum(1 for p in (Path(folder) / "entries").glob("sweep-*.entry"))
    expected = sum(len(RULES) + len(RULES) for m in first.models if m.error is None)
    fraction = t_again / t_first
    print(f"  the second run took {t_again * 1e3:.0f} ms, {fraction:.2%} of the first (target < {REUSE_TARGET:.0%}) "
          f"{'OK' if fraction < REUSE_TARGET else 'OVER'}; results read back: {again.reused} "
          f"(every row and variant: {expected}); the sweep's entries in out/: {files}")
    if first.reused:
        problems.append(f"FAIL: the first run into a new out/ reused {first.reused} results")
    if again.reused != expected:
        problems.append(f"FAIL: the run over a finished out/ reused {again.reused} results, not {expected}: "
                        "something was computed again")
    equal_out, diff = same_table(first, again)
    equal_fresh, diff_fresh = same_table(two, again)
    print(f"  table read back equals the one computed: {'yes' if equal_out else 'NO: ' + diff}; "
          f"equals the out=None run's: {'yes' if equal_fresh else 'NO: ' + diff_fresh}")
    if not equal_out:
        problems.append(f"FAIL: the table read back from out/ differs from the one written: {diff}")
    if not equal_fresh:
        problems.append(f"FAIL: the table read back from out/ differs from the out=None run's: {diff_fresh}")
    print(f"  (Ray against this local workers=2 run, the first into out/: {t_ray / t_first - 1:+.1%})")
    rows.append(("rerun over finished out/ / first run", f"{fraction:.2%} ({t_again * 1e3:.0f} ms)",
                 f"< {REUSE_TARGET:.0%}", "yes" if fraction < REUSE_TARGET else "no"))
    rows.append(("results reused by the rerun", f"{again.reused} of {expected}", f"{expected}",
                 "yes" if again.reused == expected else "no"))

    # ---------------------------------------------------------------- 4. one model, by phase
    label = f"sample:{PHASE_MODEL}"
    model_t, variant_t = sweep_phases(one, label)
    v = variant_t.get
    ours = {
        "export/load": model_t.get("load", 0.0),
        "stages": sum(x for k, x in model_t.items() if k.startswith("stage ")),
        "decide": sum(x for k, x in model_t.items() if k.startswith("decide ")),
        "float reference + predict": model_t.get("float reference", 0.0) + model_t.get("predict", 0.0),
        "quantize": v("export", 0.0) + v("prepare", 0.0) + v("calibrate", 0.0) + v("convert", 0.0),
        "lower": v("re-export", 0.0) + v("lower", 0.0),
        "reference": v("reference", 0.0) + v("metrics", 0.0),
    }
    theirs = {"export/load": plain["export"], "quantize": plain["quantize"], "lower": plain["lower"],
              "reference": plain["reference"]}
    print(f"4. one model, {label}, by phase: the sweep's own timings (workers=1 run: its model task and its "
          f"{RULES[0]!r} variant, {steps} steps) and the plain ExecuTorch flow in this process "
          f"({n_batches} calibration batches, one reference call; timed right after the workers=1 run, after a "
          f"warm-up on sample:{WARM_MODEL}):")
    print(f"  {'phase':<28}{'sweep':>9}{'plain flow':>12}")
    for phase, seconds in ours.items():
        other = theirs.get(phase)
        print(f"  {phase:<28}{seconds:8.2f}s{(f'{other:11.2f}s' if other is not None else '          -'):>12}")
    total_ours, total_plain = sum(ours.values()), sum(theirs.values())
    print(f"  {'total':<28}{total_ours:8.2f}s{total_plain:11.2f}s   ({total_ours / total_plain:.2f}x the plain flow; "
          f"quantize is the variant's export + prepare + calibrate + convert, lower is re-export + lower, "
          f"reference includes the metrics)")
    print("  sweep phases as recorded: model " + ", ".join(f"{k} {x:.2f} s" for k, x in model_t.items())
          + "; variant " + ", ".join(f"{k} {x:.2f} s" for k, x in variant_t.items()))
    rows.append((f"one model ({PHASE_MODEL}): sweep / plain flow", f"{total_ours / total_plain:.2f}x "
                 f"({total_ours:.1f} s / {total_plain:.1f} s)", "- (for information)", "-"))

    # ---------------------------------------------------------------- 1b. the reverse order, if time allows
    elapsed = time.perf_counter() - t_script
    estimate = 1.1 * (t1 + t2)
    if args.quick:
        print("1b. reverse order: not in --quick")
    elif elapsed + estimate <= BUDGET_SECONDS:
        print("1b. the reverse order (workers=2 first, then workers=1), each from nothing:")
        r2, two_again = run_sweep(targets, steps, workers=2, executor="local", out=None)
        print(describe_run("workers=2", r2, two_again))
        check_ran("reverse-order workers=2", two_again, problems)
        r1, one_again = run_sweep(targets, steps, workers=1, executor="local", out=None)
        print(describe_run("workers=1", r1, one_again))
        check_ran("reverse-order workers=1", one_again, problems)
        reverse = r1 / r2
        print(f"  workers=2 is {reverse:.2f}x faster than workers=1 in this order (first order: {speedup:.2f}x)")
        for run in (two_again, one_again):
            equal_again, diff = same_table(run, one)
            if not equal_again:
                problems.append(f"FAIL: a reverse-order run gives a different table: {diff}")
        rows.append(("workers=2 vs workers=1, reverse order", f"{reverse:.2f}x", f">= {SPEEDUP_TARGET}x",
                     "yes" if reverse >= SPEEDUP_TARGET else "no"))
    else:
        print(f"1b. reverse order skipped: about {estimate:.0f} s more after {elapsed:.0f} s would pass the "
              f"{BUDGET_SECONDS} s budget of this script")

    # ---------------------------------------------------------------- the table
    total = time.perf_counter() - t_script
    clean = not any(line.startswith("FAIL: the ") and " sweep: " in line for line in problems)
    rows.append(("every timed sweep ran everything, from nothing", "yes" if clean else "NO (see FAIL below)",
                 "yes", "yes" if clean else "no"))
    print()
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}} | {'measured':<24} | {'target':<20} | met")
    print(f"{'-' * width}-+-{'-' * 24}-+-{'-' * 20}-+-----")
    for figure, measured, target, met in rows:
        print(f"{figure:<{width}} | {measured:<24} | {target:<20} | {met}")
    print(f"script: {total:.0f} s; load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}"
          + (" (--quick)" if args.quick else ""))
    for line in problems:
        print(line)
    start_from_nothing()  # stop any warm workers this script left (ray has been shut down by the sweep)


if __name__ == "__main__":
    main()
