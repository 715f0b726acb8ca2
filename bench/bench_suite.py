"""The suite's weight: its test time (the sum of pytest's durations) at HEAD against an earlier commit, side by side.

Both checkouts are cloned from this repository into a temporary folder and run one after the other, in this run, on
this machine, with this venv's Python (its packages cover both: the earlier commit's and today's), each with its own
fresh result store, exactly as ``make test`` runs the suite (every core, ``--dist loadgroup``). Printed: for each
commit the sum of every test's setup, call and teardown durations, the wall time, the tests passed and failed, and
the ratio of the two sums (issue 61's target: HEAD <= 0.85x of ac90f57; issue 52's, 0.80x of d561151, was accepted as
blocked). Nothing else should run meanwhile; it takes as long as two runs of the suite.

``BENCH_BASE`` (default ac90f57) names the earlier commit and ``BENCH_TARGET`` (default 0.85) the ratio to meet;
``BENCH_SUITE_ARGS`` adds pytest arguments (``-k ...`` to try it on a part).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = os.environ.get("BENCH_BASE", "ac90f57")
TARGET = float(os.environ.get("BENCH_TARGET", "0.85"))
_DURATION = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+(\S+)", re.M)
_SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed|error).*?) in ([0-9.]+)s", re.M)
LOGS = Path(os.environ.get("BENCH_SUITE_LOGS", ROOT / "test-artifacts" / "bench-suite"))


def run(commit: str, folder: Path) -> dict:
    """The suite of ``commit``, cloned into ``folder``: its durations summed, its wall time, its summary line."""
    checkout = folder / commit
    subprocess.run(["git", "clone", "-q", str(ROOT), str(checkout)], check=True)
    subprocess.run(["git", "-C", str(checkout), "checkout", "-q", commit], check=True)
    env = dict(os.environ, PYTHONPATH=str(checkout))  # its own inspector, in every process it starts
    env.pop("FOLD_INSPECTOR_STORE", None)
    env.pop("FOLD_INSPECTOR_TEST_RUN_STORE", None)
    args = [sys.executable, "-m", "pytest", "-n", os.environ.get("TEST_WORKERS", "auto"), "--dist", "loadgroup",
            "-q", "-p", "no:cacheprovider", "--durations=0", *shlex.split(os.environ.get("BENCH_SUITE_ARGS", ""))]
    started = time.perf_counter()
    proc = subprocess.run(args, cwd=checkout, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{commit}.log"  # kept: which tests weigh what
    log.write_text(proc.stdout + proc.stderr)
    per_test: dict[str, float] = {}
    for m in _DURATION.finditer(proc.stdout):
        per_test[m.group(3)] = per_test.get(m.group(3), 0.0) + float(m.group(1))
    summary = _SUMMARY.findall(proc.stdout)
    return {"commit": commit, "sum": sum(per_test.values()), "tests": len(per_test), "per_test": per_test,
            "wall": wall, "summary": summary[-1][0] if summary else f"pytest exited {proc.returncode}", "log": log}


def main() -> None:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="bench-suite-") as tmp:
        folder = Path(tmp)
        results = []
        for commit in (BASE, head):
            one, five, _ = os.getloadavg()
            r = run(commit, folder)
            results.append(r)
            print(f"{commit}: test time {r['sum']:,.0f} s (the durations of {r['tests']} tests), wall {r['wall']:,.0f} s; "
                  f"{r['summary']}  [load before {one:.2f}/{five:.2f}]", flush=True)
        ratio = results[1]["sum"] / results[0]["sum"] if results[0]["sum"] else float("nan")
        print(f"HEAD {head} against {BASE}: {ratio:.2f}x of its test time (target <= {TARGET}x: "
              f"{'met' if ratio <= TARGET else 'NOT met'})")
        base, now = results[0]["per_test"], results[1]["per_test"]
        both = set(base) & set(now)
        old, new = sum(base[t] for t in both), sum(now[t] for t in both)
        added = sum(v for t, v in now.items() if t not in base)
        print(f"the {len(both)} tests both commits have: {old:,.0f} s -> {new:,.0f} s ({new / old:.2f}x); "
              f"{len(now) - len(both)} tests new since {BASE}: {added:,.0f} s; logs in {LOGS}")


if __name__ == "__main__":
    main()
