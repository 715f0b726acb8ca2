"""The suite's weight: its test time (the sum of pytest's durations) at HEAD against an earlier commit, side by side.

Both checkouts are cloned from this repository into a temporary folder and run one after the other, in this run, on
this machine, with this venv's Python (its packages cover both: the earlier commit's and today's), each with its own
fresh result store, exactly as ``make test`` runs the suite (every core, ``--dist loadgroup``). Printed: for each
commit the sum of every test's setup, call and teardown durations, the wall time, the tests passed and failed, and
the ratio of the two sums (issue 52's target: HEAD <= 0.80x of d561151). Nothing else should run meanwhile; it takes
as long as two runs of the suite.

``BENCH_BASE`` (default d561151) names the earlier commit; ``BENCH_SUITE_ARGS`` adds pytest arguments (``-k ...``
to try it on a part).
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
BASE = os.environ.get("BENCH_BASE", "d561151")
TARGET = 0.80
_DURATION = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+\S+", re.M)
_SUMMARY = re.compile(r"=+ (.*) in ([0-9.]+)s")


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
    (folder / f"{commit}.log").write_text(proc.stdout + proc.stderr)
    durations = [float(m.group(1)) for m in _DURATION.finditer(proc.stdout)]
    summary = _SUMMARY.findall(proc.stdout)
    return {"commit": commit, "sum": sum(durations), "tests": len(durations), "wall": wall,
            "summary": summary[-1][0] if summary else f"pytest exited {proc.returncode}", "log": folder / f"{commit}.log"}


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
            print(f"{commit}: test time {r['sum']:,.0f} s (the sum of {r['tests']} durations), wall {r['wall']:,.0f} s; "
                  f"{r['summary']}  [load before {one:.2f}/{five:.2f}]", flush=True)
        ratio = results[1]["sum"] / results[0]["sum"] if results[0]["sum"] else float("nan")
        print(f"HEAD {head} against {BASE}: {ratio:.2f}x of its test time (target <= {TARGET}x: "
              f"{'met' if ratio <= TARGET else 'NOT met'})")


if __name__ == "__main__":
    main()
