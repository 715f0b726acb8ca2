"""The first edge analysis of a real network against the plain flow it is built on.

``inspector.analyze(model, stage="edge")`` of timm's nfnet_l0 and efficientnet_b0 (random
weights, 64x64 input) against ``torch.export.export`` + ``executorch.exir.to_edge`` of the same
model: the target of the speed issue is at most 1.10x. Every figure is one call in a fresh
process that has never seen the model (new model object, new seeded weights), after that process
warmed its own path on a small unrelated model (the first ``to_edge`` of a process loads
executorch's operator YAML; the inspector's first call also imports the Arm backend). The two
sides alternate (plain first in even repeats, the inspector first in odd ones), and each repeat's
ratio is taken between the two runs next to each other, so a busy machine slows both. Prints each
model's median ratio next to the target, the spread, and where each side spends its time (the
inspector's steps are timed by wrapping its functions in the child process). On a shared 2-core
machine the whole calls swing by 20-50 % between runs; the inspector's own work (everything but its
export and to_edge, which are the plain flow's) is printed apart, as a share of the plain flow.

It also measures the order a user meets it in (``BENCH_IN_ORDER``, default nfnet_l0; empty skips
it): one fresh process per repeat, no warm-up, the plain ``torch.export`` + ``to_edge`` of the model
and then the inspector's first ``analyze(stage="edge")`` of the same model, so that the inspector
pays its own first-use costs (the Arm backend's import among them) after the plain flow paid its
own. Printed: the median ratio of wall-clock times against the same 1.10x target, the ratio of the
two sides' CPU seconds (steadier on a busy machine; the weights are copied on a second thread
while the model is exported, which lowers wall time and not CPU time), the load average of each
repeat and where the inspector's time goes.

timm and torchvision come with the project's ``timm`` extra (make setup installs it); ``bench/_timm.py``
imports them as the inspector does. ``BENCH_REPEATS`` (default 3) sets the repeats, ``BENCH_MODELS`` (comma-separated) the models.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import warnings

from _timm import ROOT, ensure_extras, import_timm

MODELS = tuple(filter(None, os.environ.get("BENCH_MODELS", "nfnet_l0,efficientnet_b0").split(",")))
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
TARGET_RATIO = 1.10
SIDES = ("plain", "inspector")
IN_ORDER = tuple(filter(None, os.environ.get("BENCH_IN_ORDER", "nfnet_l0").split(",")))


# ---------------------------------------------------------------- one measurement (child process)


def _small():
    import torch

    class Small(torch.nn.Module):  # the warm-up: unrelated to the measured models
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.bn = torch.nn.BatchNorm2d(4)

        def forward(self, x):
            return torch.relu(self.bn(self.conv(x))) * 0.5

    return Small().eval(), (torch.rand(1, 3, 16, 16),)


class _Clock:
    """Seconds spent in wrapped functions, by label (a nested call counts in its own label only)."""

    def __init__(self):
        self.spent: dict[str, float] = {}
        self._nested: list[float] = []  # per open call: seconds spent in the wrapped calls inside it

    def wrap(self, owner, name: str, label: str) -> None:
        inner = getattr(owner, name, None)
        if inner is None:  # a step this version of the inspector does not have
            return
        clock = self

        def timed(*args, **kwargs):
            clock._nested.append(0.0)
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - t0
                inside = clock._nested.pop()
                if clock._nested:
                    clock._nested[-1] += elapsed
                clock.spent[label] = clock.spent.get(label, 0.0) + elapsed - inside

        setattr(owner, name, timed)


def child(side: str, name: str, seed: int) -> dict:
    """One first call of ``side`` on a new ``name`` in this (fresh) process, after a warm-up."""
    import gc

    warnings.filterwarnings("ignore")
    import torch

    timm = import_timm()
    sys.path.insert(0, str(ROOT))
    clock = _Clock()
    if side == "plain":
        from executorch.exir import to_edge

        def run(model, inputs):
            t0 = time.perf_counter()
            exported = torch.export.export(model, inputs)
            t1 = time.perf_counter()
            to_edge(exported).exported_program()
            clock.spent.update({"export": t1 - t0, "to_edge": time.perf_counter() - t1})
    else:
        import inspector

        def run(model, inputs):
            inspector.analyze(model, example_inputs=inputs, stage="edge")

    t0 = time.perf_counter()
    run(*_small())
    warm = time.perf_counter() - t0
    if side == "inspector":  # wrapped after the warm-up: only the measured call is counted
        _wrap_inspector_steps(clock)
    torch.manual_seed(seed)
    model = timm.create_model(name, pretrained=False).eval()
    inputs = (torch.rand(1, 3, 64, 64),)
    params = sum(p.numel() for p in model.parameters())
    gc.collect()
    t0 = time.perf_counter()
    run(model, inputs)
    total = time.perf_counter() - t0
    steps = dict(clock.spent)
    steps["other"] = total - sum(steps.values())
    return {"side": side, "model": name, "total": total, "warm_up": warm, "steps": steps, "params": params}


def _wrap_inspector_steps(clock: _Clock) -> None:
    import torch

    from inspector._decide import decide as _decide
    from inspector._decide import stages as _stages
    from inspector._doors import executorch as _executorch
    from inspector._targets import load as _load

    clock.wrap(_executorch, "check_required", "executorch check and Arm imports")
    clock.wrap(_load, "private_copy", "copy of the model")
    clock.wrap(_load, "_sharing_parameters", "copy to export")
    clock.wrap(torch.export, "export", "export")
    clock.wrap(_load, "program_fingerprint", "fingerprint")
    clock.wrap(_stages, "copy_pair", "graph copies")
    clock.wrap(_executorch, "to_edge", "to_edge")
    clock.wrap(_decide.Decider, "decide", "decide")


def child_in_order(name: str, seed: int) -> dict:
    """The order a user meets it, in one process with no warm-up: the imports a script starts with,
    plain ``torch.export`` + ``to_edge`` of ``name``, then the inspector's first ``analyze(stage="edge")``
    of the same model."""
    warnings.filterwarnings("ignore")
    import torch

    timm = import_timm()
    sys.path.insert(0, str(ROOT))
    from executorch.exir import to_edge

    import inspector

    torch.manual_seed(seed)
    model = timm.create_model(name, pretrained=False).eval()
    inputs = (torch.rand(1, 3, 64, 64),)
    c0, t0 = time.process_time(), time.perf_counter()
    exported = torch.export.export(model, inputs)
    t1 = time.perf_counter()
    to_edge(exported).exported_program()
    c2, t2 = time.process_time(), time.perf_counter()
    clock = _Clock()
    _wrap_inspector_steps(clock)
    c3, t3 = time.process_time(), time.perf_counter()
    inspector.analyze(model, example_inputs=inputs, stage="edge")
    total, cpu = time.perf_counter() - t3, time.process_time() - c3
    steps = dict(clock.spent)
    steps["other"] = total - sum(steps.values())
    return {"plain": t2 - t0, "plain_cpu": c2 - c0, "plain_steps": {"export": t1 - t0, "to_edge": t2 - t1},
            "inspector": total, "inspector_cpu": cpu, "steps": steps, "load": os.getloadavg()[0]}


def measure(side: str, name: str, seed: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", side, name, str(seed)], capture_output=True,
                         text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"{side} on {name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the report


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f})"


def in_order(name: str) -> None:
    """Plain export + to_edge, then the inspector's first analysis, in one fresh process per repeat."""
    runs = [measure("in-order", name, seed=2000 + r) for r in range(REPEATS)]
    ratios = [x["inspector"] / x["plain"] for x in runs]
    cpu = [x["inspector_cpu"] / x["plain_cpu"] for x in runs]
    ratio = statistics.median(ratios)
    verdict = "within target" if ratio <= TARGET_RATIO else "OVER target"
    print(f"{name}, in the order a user meets it (one process, no warm-up: plain export + to_edge, then the "
          f"inspector's first analyze(stage='edge')): {ratio:.2f}x (target <= {TARGET_RATIO:.2f}x, {verdict}); "
          f"per repeat {', '.join(f'{x:.2f}' for x in ratios)}; in CPU seconds {_spread(cpu)}x; "
          f"load {', '.join(f'{load:.1f}' for load in (x['load'] for x in runs))}")
    print(f"  plain {_spread([x['plain'] for x in runs])} s, inspector {_spread([x['inspector'] for x in runs])} s")
    labels = list(dict.fromkeys(k for x in runs for k in x["steps"]))
    print("  inspector medians (s): " + ", ".join(
        f"{k} {statistics.median(x['steps'].get(k, 0.0) for x in runs):.2f}" for k in labels))
    print("  plain medians (s): " + ", ".join(
        f"{k} {statistics.median(x['plain_steps'][k] for x in runs):.2f}" for k in ("export", "to_edge")))


def main() -> None:
    ensure_extras()
    for name in IN_ORDER:
        in_order(name)
    print(f"cores available: {len(os.sched_getaffinity(0))}; {REPEATS} repeats, each side in a fresh warmed "
          f"process, alternating; target <= {TARGET_RATIO:.2f}x the plain export + to_edge")
    for name in MODELS:
        runs: dict[str, list[dict]] = {side: [] for side in SIDES}
        ratios = []
        for r in range(REPEATS):
            order = SIDES if r % 2 == 0 else SIDES[::-1]
            got = {side: measure(side, name, seed=1000 + r) for side in order}
            for side in SIDES:
                runs[side].append(got[side])
            ratios.append(got["inspector"]["total"] / got["plain"]["total"])
        plain = [x["total"] for x in runs["plain"]]
        insp = [x["total"] for x in runs["inspector"]]
        ratio = statistics.median(ratios)
        verdict = "within target" if ratio <= TARGET_RATIO else "OVER target"
        print(f"{name} ({runs['plain'][0]['params'] / 1e6:.1f}M parameters, 64x64): "
              f"analyze(stage='edge') / plain = {ratio:.2f}x (target <= {TARGET_RATIO:.2f}x, {verdict}); "
              f"per repeat {', '.join(f'{x:.2f}' for x in ratios)}")
        print(f"  plain {_spread(plain)} s, inspector {_spread(insp)} s, extra {_spread([i - p for i, p in zip(insp, plain)])} s")
        # The inspector's own work (everything but export and to_edge, which both sides run alike)
        # does not swing with the machine's load the way the two whole calls do.
        own = [x["total"] - x["steps"].get("export", 0.0) - x["steps"].get("to_edge", 0.0) for x in runs["inspector"]]
        print(f"  the inspector's own work (outside export and to_edge): {_spread(own)} s, "
              f"{statistics.median(own) / statistics.median(plain) * 100:.1f}% of the plain flow's median "
              f"(1 + own / plain = {1 + statistics.median(own) / statistics.median(plain):.2f}x)")
        for side in SIDES:
            labels = list(dict.fromkeys(k for x in runs[side] for k in x["steps"]))
            parts = ", ".join(f"{k} {statistics.median(x['steps'].get(k, 0.0) for x in runs[side]):.2f}"
                              for k in labels)
            print(f"  {side:<9} medians (s): {parts}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        side, name, seed = sys.argv[2], sys.argv[3], int(sys.argv[4])
        print(json.dumps(child_in_order(name, seed) if side == "in-order" else child(side, name, seed)))
    else:
        main()
