"""``make fuzz``: a fuzzing campaign of the readers of untrusted input, with a random seed, until stopped.

The mutators and the rules are tests/fuzzing.py's (the suite runs them with a fixed seed in
tests/test_fuzz.py). Environment:

* ``FUZZ_SECONDS``: stop after this many seconds (default: run until Ctrl-C);
* ``FUZZ_SEED``: the seed (default: a random one, printed first); the same seed makes the same cases;
* ``FUZZ_KINDS``: which readers, of ``pt2,session,cli,store`` (default: all four).

Prints cases/s and findings as it goes. Every failing input is saved in tests/fuzz_corpus/ with a
note of what failed, and tests/test_fuzz.py replays it from then on. Exits 1 if anything was found.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import random
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import fuzzing  # found through the path above

SCHEDULE = ("pt2", "pt2", "session", "pt2", "pt2", "session", "cli", "store")  # archives are the widest door
ANALYZE_EVERY = 20  # of the archives that load, analyze one in this many (~1 s each)
PROGRESS_SECONDS = 10.0


def main() -> int:
    logging.getLogger("torch").setLevel(logging.ERROR)  # torch logs every archive it fails to read as a warning
    warnings.simplefilter("ignore")  # and warns about odd dtypes and pickle protocols the mutations make
    seed = int(os.environ.get("FUZZ_SEED") or random.SystemRandom().randrange(1 << 32))
    budget = float(os.environ.get("FUZZ_SECONDS") or "inf")
    kinds = [k for k in os.environ.get("FUZZ_KINDS", ",".join(fuzzing.KINDS)).split(",") if k]
    unknown = sorted(set(kinds) - set(fuzzing.KINDS))
    if unknown or not kinds:
        print(f"error: FUZZ_KINDS must name some of {','.join(fuzzing.KINDS)}, got {unknown or 'none'}", file=sys.stderr)
        return 2
    schedule = [k for k in SCHEDULE if k in kinds]
    print(f"fuzz: seed {seed} (FUZZ_SEED={seed} replays it), {','.join(kinds)}, "
          f"{'until Ctrl-C' if budget == float('inf') else f'{budget:g} s'}", flush=True)
    with tempfile.TemporaryDirectory(prefix="fold-fuzz-") as folder, fuzzing.arena(Path(folder)) as arena:
        campaign = Campaign(fuzzing.Judge(arena), seed)
        try:
            campaign.run(schedule, budget)
        except KeyboardInterrupt:
            print("\nfuzz: interrupted", flush=True)
        campaign.summary()
    return 1 if campaign.findings else 0


class Campaign:
    """Cases in schedule order, each kind numbered on its own (seed, kind, index names a case)."""

    def __init__(self, judge: fuzzing.Judge, seed: int) -> None:
        self.judge = judge
        self.seed = seed
        self.index = collections.Counter()  # per kind: cases made
        self.outcomes = collections.Counter()
        self.findings: list[str] = []
        self.start = time.monotonic()

    def run(self, schedule: list[str], budget: float) -> None:
        last = self.start
        for n in itertools.count():  # the budget or Ctrl-C ends it
            if time.monotonic() - self.start >= budget:
                return
            self.one(schedule[n % len(schedule)])
            if time.monotonic() - last >= PROGRESS_SECONDS:
                last = time.monotonic()
                self.progress()

    def one(self, kind: str) -> None:
        index = self.index[kind]
        self.index[kind] += 1
        case = fuzzing.make_case(self.judge.arena.bases, kind, self.seed, index)
        verdict = self.judge.judge(case, analyze=kind == "pt2" and index % ANALYZE_EVERY == 0)
        self.outcomes[f"{kind} {verdict.outcome}"] += 1
        if verdict.problem:
            path = fuzzing.save_finding(case, verdict)
            self.findings.append(path.name)
            print(f"FINDING {case.label[:200]}\n  {verdict.problem[:300]}\n  saved {path.relative_to(fuzzing.ROOT)}",
                  flush=True)

    def progress(self) -> None:
        cases = sum(self.index.values())
        seconds = time.monotonic() - self.start
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.index.items()))
        print(f"fuzz: {cases} cases in {seconds:.0f} s ({cases / seconds:.1f}/s; {kinds}), "
              f"{len(self.findings)} findings", flush=True)

    def summary(self) -> None:
        self.progress()
        for outcome, n in sorted(self.outcomes.items()):
            print(f"  {outcome}: {n}")
        print(f"fuzz: seed {self.seed}; findings: {', '.join(self.findings) or 'none'}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
