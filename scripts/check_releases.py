"""Every supported executorch, checked: where the installed fold pass folds, and whether the inspector says the same.

For each release (default: every one the inspector supports) this script makes or reuses a virtual environment
under ``--dir`` with exactly that executorch (and torch 2.13.0, tosa-tools, Vela; the inspector installed
editable, without its dependencies, plus the few runtime ones it needs), then runs there:

1. ``scripts/release_hook.py`` (no inspector code): ExecuTorch's own INT flows (tosa-int, ethos-u55-128) and FP
   flow (tosa-fp) on each sample, with a hook on the installed pass's ``call`` that records the muls each call
   removes, at transform-for-annotation (tfa) or in the lowering; Vela's cycles on ethos-u55-128 for the
   ``--cycles`` samples;
2. this script with ``--inside``: the inspector's own answers through its CLI (``analyze --json`` at tfa on both
   INT flows and at lowering on tosa-fp for every sample, at lowering on the INT flows for ``--int-lowering``
   samples; ``compare --json`` on ethos-u55-128 for the ``--cycles`` samples: folds per phase and cycles).

It prints one Markdown report (the table per release, the cycles, the stack) and every mismatch: the inspector
against the hook, the hook against the sample's declared decisions at tfa, an answer that does not name the
release it ran on. The exit status is 1 on any mismatch. Results are kept in ``--dir`` (``hook-X.json``,
``inspector-X.json``) and read back unless ``--fresh``; docs/stack-facts.md has the measured table.

    python scripts/check_releases.py --dir /tmp/releases                     # every release, every sample
    python scripts/check_releases.py --dir /tmp/releases --venv 1.5.1=.venv  # 1.5.1 from the project's own venv
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RELEASES = ("1.4.0", "1.4.1", "1.5.0", "1.5.1")  # inspector/_doors/executorch.py: KNOWN_TO_WORK
STACK = ("torch==2.13.0", "tosa-tools==2026.8.0", "ethos-u-vela==5.1.0")
# What the inspector needs at run time beyond the stack (pinned by the lock when there is one); silero-vad is the
# wheel the silero_vad sample reads its weights from, installed without its own dependencies.
RUNTIME = ("platformdirs", "graphviz", "ruamel-yaml-clib", "pandas", "scikit-learn")
NO_DEPS = ("silero-vad",)
LOCK = REPO / "constraints" / "py3.11.txt"
INT_FLOWS = ("tosa-int", "ethos-u55-128")
FP_FLOW = "tosa-fp"
CYCLES = ("conv_mul_scalar", "nfnet_block")  # Vela's cycles on ethos-u55-128: a scalar fold, and a real block
INT_LOWERING = ("conv1d_mul", "conv_view_scale", "stateful_conv_mul")  # the INT lowering call, asked of analyze too
ACCELERATOR = "ethos-u55-128"


# ---------------------------------------------------------------- inside a release's environment


def _cli(argv: list[str]) -> dict:
    """``python -m inspector ARGV --json``, in this process: its JSON, or the one-line error it printed."""
    from inspector._front.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--json"])
    if code != 0:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        return {"error": lines[-1] if lines else f"exit status {code}"}
    return json.loads(out.getvalue())


def _calibrated_as_the_hook(name: str) -> dict:
    """``compare`` of ``upstream`` on ACCELERATOR calibrated as the hook calibrates (one call with the example inputs):
    the qparams, and with them Vela's cycles, depend on the calibration (nfnet_block on 1.5.1: 224,298 cycles with one
    call, 223,018 with the inspector's default of the inputs and seven noisy copies). Its JSON, or the one line."""
    import inspector
    import sample_models
    from inspector import InspectorError

    try:
        comparison = inspector.compare(f"sample:{name}", variants=["upstream"], accelerator=ACCELERATOR, workers=1,
                                       calibration=[sample_models.get(name).example_inputs()])
    except InspectorError as exc:
        return {"error": str(exc)}
    return comparison.to_dict()


def inside(samples: list[str], cycles: list[str], int_lowering: list[str], log=sys.stderr) -> dict:
    """The inspector's answers on this environment's executorch (see the module's docstring)."""
    from inspector._doors.executorch import installed_version

    def folded(answer: dict) -> list[str] | dict:
        if "error" in answer:
            return answer
        return {"folded": sorted(s["mul"] for s in answer["sites"] if s["decision"] == "fold"),
                "sites": len(answer["sites"]), "executorch": answer.get("executorch"),
                "source": answer["rule"].get("source", "")}

    result: dict = {"executorch": installed_version(), "analyze": {}, "compare": {}}
    for name in samples:
        cases = [(flow, "tfa") for flow in INT_FLOWS] + [(FP_FLOW, "lowering")]
        cases += [(flow, "lowering") for flow in INT_FLOWS if name in int_lowering]
        for flow, stage in cases:
            started = time.perf_counter()
            answer = folded(_cli(["analyze", f"sample:{name}", "--stage", stage, "--accelerator", flow]))
            result["analyze"][f"{name}|{flow}|{stage}"] = answer
            print(f"analyze {name:<36} {flow:<14} {stage:<8} {time.perf_counter() - started:6.1f} s  "
                  + (answer["error"] if "error" in answer else f"folded {len(answer['folded'])}"), file=log, flush=True)
    for name in cycles:
        answer = _calibrated_as_the_hook(name)
        if "error" not in answer:
            variant = answer["variants"][0]
            answer = {"folds": variant.get("folds"), "cycles": (variant.get("cost") or {}).get("cycles"),
                      "error": variant.get("error"), "executorch": installed_version()}
            if answer["error"] is None:
                del answer["error"]
        result["compare"][name] = answer
        print(f"compare {name:<36} {ACCELERATOR:<14} {answer}", file=log, flush=True)
    return result


# ---------------------------------------------------------------- the environments


def _run(cmd: list[str], log: Path, env: dict | None = None) -> None:
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(cmd)}; see {log}")


def _lock_pins() -> dict[str, str]:
    if not LOCK.exists():
        return {}
    pins = {}
    for line in LOCK.read_text().splitlines():
        found = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", line.strip())
        if found:
            pins[found.group(1).lower().replace("_", "-").replace(".", "-")] = found.group(2)
    return pins


def ensure_venv(release: str, where: Path, python: str, log: Path) -> Path:
    """``where``'s environment with executorch ``release`` and the inspector (made once; ``.ready`` marks it)."""
    ready = where / ".ready"
    if ready.exists():
        return where
    bin_ = where / "bin"
    if not (bin_ / "python").exists():
        _run([python, "-m", "venv", str(where)], log)
    pip = [str(bin_ / "python"), "-m", "pip", "install", "-q"]
    _run([*pip, f"executorch=={release}", *STACK], log)
    frozen = subprocess.run([str(bin_ / "python"), "-m", "pip", "freeze"], capture_output=True, text=True,
                            check=True).stdout
    keep = where / "stack-constraints.txt"  # installing the rest never moves the stack under test
    keep.write_text("".join(line + "\n" for line in frozen.splitlines()
                            if re.match(r"(torch|executorch|torchao|tosa-tools|ethos-u-vela|numpy)==", line)))
    pins = _lock_pins()
    spec = lambda name: f"{name}=={pins[name]}" if name in pins else name
    _run([*pip, "-c", str(keep), *map(spec, RUNTIME)], log)
    _run([*pip, "--no-deps", *map(spec, NO_DEPS)], log)
    _run([*pip, "--no-deps", "-e", str(REPO)], log)
    ready.write_text(release + "\n")
    return where


def measure(release: str, venv: Path, out: Path, samples: list[str], cycles: list[str], int_lowering: list[str],
            fresh: bool, skip_inspector: bool) -> tuple[dict, dict | None]:
    """The hook's and the inspector's JSON for ``release`` (computed, or read back from ``out``)."""
    python = str(venv / "bin" / "python")
    hook, ours = out / f"hook-{release}.json", out / f"inspector-{release}.json"
    arguments = ["--samples", ",".join(samples), "--cycles", ",".join(cycles)]
    env = {**os.environ, "FOLD_INSPECTOR_STORE": "off"}  # every answer computed on this release, none read back
    if fresh or not hook.exists():
        _run([python, str(REPO / "scripts" / "release_hook.py"), "--repo", str(REPO), *arguments, "--out", str(hook)],
             out / f"hook-{release}.log", env)
    if not skip_inspector and (fresh or not ours.exists()):
        _run([python, str(Path(__file__).resolve()), "--inside", *arguments, "--int-lowering", ",".join(int_lowering),
              "--out", str(ours)], out / f"inspector-{release}.log", env)
    return json.loads(hook.read_text()), (json.loads(ours.read_text()) if ours.exists() and not skip_inspector
                                          else None)


# ---------------------------------------------------------------- the comparison and the report


def removed(entry: dict, phase: str) -> list[str] | None:
    """The muls the hook saw removed in ``phase`` (every call of it, sorted), or None where the flow failed before
    it made them all (the transform-for-annotation call; a lowering call per TOSA partition)."""
    calls = [c for c in entry.get("calls", ()) if c["phase"] == phase]
    if phase == "tfa" and not calls or phase == "lowering" and not 0 < entry.get("partitions", 0) <= len(calls):
        return None
    return sorted(m for call in calls for m in call["removed"])


def mismatches(release: str, hook: dict, ours: dict | None) -> tuple[list[str], list[str]]:
    """(every way the inspector, and the samples' declared decisions, disagree with the hook on ``release``; where
    ExecuTorch's own flow fails, which is a fact of the release, not a mismatch)."""
    found, failed = [], []
    if hook["stack"]["executorch"] != release:
        found.append(f"{release}: the environment has executorch {hook['stack']['executorch']}")
    for name, entry in hook["samples"].items():
        for flow in (*INT_FLOWS, FP_FLOW):
            if "error" in entry.get(flow, {}):
                failed.append(f"{release} {name} {flow}: ExecuTorch's own flow fails: {entry[flow]['error'][:160]}")
        for flow in INT_FLOWS:
            tfa = removed(entry[flow], "tfa")
            if tfa is not None and len(tfa) != entry["expected_tfa"].count("fold"):
                found.append(f"{release} {name} {flow}: the pass folds {len(tfa)} at tfa, the sample declares "
                             f"{entry['expected_tfa'].count('fold')}")
            if removed(entry[flow], "lowering"):
                found.append(f"{release} {name} {flow}: the INT lowering call removed {removed(entry[flow], 'lowering')}")
        if ours is None:
            continue
        cases = [(flow, "tfa") for flow in INT_FLOWS] + [(FP_FLOW, "lowering")]
        cases += [(flow, "lowering") for flow in INT_FLOWS if f"{name}|{flow}|lowering" in ours["analyze"]]
        for flow, stage in cases:
            answer = ours["analyze"].get(f"{name}|{flow}|{stage}")
            truth = removed(entry.get(flow, {}), stage)
            what = f"{release} analyze sample:{name} --stage {stage} --accelerator {flow}"
            if answer is None:
                continue
            if truth is None:  # the own flow failed before the call: the inspector must fail too, in one line
                if "error" not in answer:
                    found.append(f"{what}: answers {answer['folded']} where ExecuTorch's own flow fails before the call")
                else:
                    failed.append(f"{what}: {answer['error'][:200]}")
                continue
            if "error" in answer:
                found.append(f"{what}: {answer['error']}")
                continue
            if answer["folded"] != truth:
                found.append(f"{what}: folds {answer['folded']}, the installed pass removed {truth}")
            if answer.get("executorch") != release or release not in answer.get("source", ""):
                found.append(f"{what}: the answer names executorch {answer.get('executorch')} "
                             f"(rule source {answer.get('source')!r})")
    for name, answer in (ours or {}).get("compare", {}).items():
        entry = hook["samples"].get(name, {}).get(ACCELERATOR, {})
        if answer.get("error"):
            found.append(f"{release} compare sample:{name} on {ACCELERATOR}: {answer['error']}")
            continue
        truth = {phase: removed(entry, phase) for phase in ("tfa", "lowering")}
        if None in truth.values():
            continue
        if answer["folds"] != {phase: len(muls) for phase, muls in truth.items()}:
            found.append(f"{release} compare sample:{name}: folds {answer['folds']}, the installed pass removed {truth}")
        vela = entry.get("vela", {}).get("cycles_total")
        if vela is not None and answer["cycles"] != vela:
            found.append(f"{release} compare sample:{name}: {answer['cycles']} cycles, ExecuTorch's own Vela run {vela}")
        if answer.get("executorch") != release:
            found.append(f"{release} compare sample:{name}: the answer names executorch {answer.get('executorch')}")
    return found, failed


def _cell(entry: dict) -> str:
    """tosa-int tfa/lowering · ethos-u55-128 tfa/lowering · tosa-fp lowering: muls removed."""
    parts = []
    for flow in (*INT_FLOWS, FP_FLOW):
        e = entry.get(flow, {})
        counts = [removed(e, phase) for phase in (("lowering",) if flow == FP_FLOW else ("tfa", "lowering"))]
        parts.append("/".join("fails" if c is None else str(len(c)) for c in counts))
    return " · ".join(parts)


def report(results: dict[str, tuple[dict, dict | None]], found: list[str], failed: list[str]) -> str:
    releases = list(results)
    first = results[releases[0]][0]
    samples = list(dict.fromkeys(n for hook, _ in results.values() for n in hook["samples"]))
    lines = [f"Measured {first['when']} with scripts/check_releases.py; Python {first['stack']['python']}.", "",
             "| release | torch | torchao | tosa-tools | Vela | pass file | arm_pass_manager.py | hook s | inspector |",
             "|---|---|---|---|---|---|---|---|---|"]
    for release, (hook, ours) in results.items():
        s = hook["stack"]
        seconds = sum(e.get(f, {}).get("seconds", 0) for e in hook["samples"].values() for f in hook["flows"])
        lines.append(f"| {release} | {s['torch']} | {s['torchao']} | {s['tosa-tools']} | {s['ethos-u-vela']} | "
                     f"`{s['fold_scalar_mul_into_conv_pass.py']}` | `{s['arm_pass_manager.py']}` | {seconds:.0f} | "
                     + ("not run" if ours is None else "agrees" if not [m for m in found if m.startswith(release + " ")]
                        else "MISMATCH") + " |")
    lines += ["", "Muls the installed pass removes per phase, counted by the hook: tosa-int tfa/lowering · "
              "ethos-u55-128 tfa/lowering · tosa-fp lowering.", "",
              "| sample | declared at tfa | " + " | ".join(releases) + " | same in all |",
              "|---|---|" + "---|" * len(releases) + "---|"]
    for name in samples:
        cells = [_cell(results[r][0]["samples"][name]) if name in results[r][0]["samples"] else "not run"
                 for r in releases]
        declared = next(h["samples"][name] for h, _ in results.values() if name in h["samples"])["expected_tfa"].count("fold")
        lines.append(f"| {name} | {declared} | " + " | ".join(cells) + f" | {'yes' if len(set(cells)) == 1 else 'NO'} |")
    cycled = [n for n in samples if any("vela" in h["samples"].get(n, {}).get(ACCELERATOR, {}) for h, _ in results.values())]
    if cycled:
        lines += ["", f"Vela's total cycles on {ACCELERATOR} (ExecuTorch's own flow, upstream; in brackets the "
                  "inspector's compare):", "", "| sample | " + " | ".join(releases) + " |",
                  "|---|" + "---|" * len(releases)]
        for name in cycled:
            cells = []
            for r in releases:
                hook, ours = results[r]
                vela = hook["samples"].get(name, {}).get(ACCELERATOR, {}).get("vela", {})
                theirs = (ours or {}).get("compare", {}).get(name, {}).get("cycles")
                cells.append(f"{vela.get('cycles_total', vela.get('error', '-'))}"
                             + (f" ({theirs})" if theirs is not None else ""))
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", f"Where ExecuTorch's own flow fails (the inspector must fail there too): {len(failed)}",
              *(f"- {m}" for m in failed)]
    lines += ["", f"Mismatches: {len(found)}", *(f"- {m}" for m in found)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/fold-inspector-releases", help="where the environments and results go")
    parser.add_argument("--releases", default=",".join(RELEASES), help="comma-separated executorch releases")
    parser.add_argument("--venv", action="append", default=[], metavar="RELEASE=PATH",
                        help="use this environment for RELEASE instead of making one (it must have the inspector)")
    parser.add_argument("--python", default=sys.executable, help="the Python that makes the environments (3.11)")
    parser.add_argument("--samples", default="", help="comma-separated samples (default: every sample)")
    parser.add_argument("--cycles", default=",".join(CYCLES), help="samples whose Vela cycles are read")
    parser.add_argument("--int-lowering", default=",".join(INT_LOWERING),
                        help="samples analyze also decides at the INT flows' lowering call")
    parser.add_argument("--fresh", action="store_true", help="measure again even where results are kept")
    parser.add_argument("--skip-inspector", action="store_true", help="run the hook only")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    split = lambda text: [s for s in text.split(",") if s]
    sys.path.insert(0, str(REPO))
    import sample_models

    samples = split(args.samples) or sample_models.names()
    if args.inside:
        import logging
        import warnings

        warnings.filterwarnings("ignore")
        logging.disable(logging.WARNING)
        Path(args.out).write_text(json.dumps(inside(samples, split(args.cycles), split(args.int_lowering)), indent=1))
        return 0
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    given = dict(v.split("=", 1) for v in args.venv)
    results = {}
    for release in split(args.releases):
        venv = Path(given[release]).absolute() if release in given else \
            ensure_venv(release, out / f"et-{release}", args.python, out / f"venv-{release}.log")
        print(f"executorch {release}: {venv}", file=sys.stderr, flush=True)
        results[release] = measure(release, venv, out, samples,
                                   split(args.cycles), split(args.int_lowering), args.fresh, args.skip_inspector)
    found, failed = [], []
    for release, (hook, ours) in results.items():
        mismatched, fails = mismatches(release, hook, ours)
        found += mismatched
        failed += fails
    print(report(results, found, failed))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
