"""More variants at once than cores: the longest keeps a core, the others run nicer and share the rest.

``compare`` runs up to twice as many variants at once as cores, so that no core waits at the end.
With every process at the same priority the longest variant (the one that folds least, run first)
would get the same share as the short ones until they end; a ``background`` task's worker runs
``BACKGROUND_NICE`` nicer for that task instead, then returns to its niceness (a worker that may
not lower it, as an unprivileged process may not, retires and the pool forks a fresh one).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import inspector
from inspector._workers import pool as _pool
from inspector._workers.kinds import task_kind
from sample_models.big import ConvStack

pytestmark = [pytest.mark.requires_tosa]


@task_kind("test-niceness")
def niceness(payload, report):
    """A pool task: the niceness it ran at."""
    return os.getpriority(os.PRIO_PROCESS, 0)


@task_kind("test-unprivileged")
def unprivileged(payload, report):
    """A pool task: this worker becomes an unprivileged process (as a user's worker is)."""
    if os.geteuid() == 0:
        os.setgid(65534)
        os.setuid(65534)
    return os.geteuid()


def _base() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


@pytest.fixture(autouse=True)
def fresh_pool():
    inspector.clear_cache()
    yield
    inspector.clear_cache()


def test_a_background_task_runs_nicer_and_its_worker_returns_to_its_niceness():
    base = _base()
    with _pool.warm_pool(2, 2) as pool:
        pool.submit("urgent", "test-niceness", None, priority=0)
        pool.submit("background", "test-niceness", None, priority=1, background=True)
        seen = {event[1]: event[2] for event in pool.events() if event[0] == "done"}
        assert seen == {"urgent": base, "background": min(19, base + _pool.BACKGROUND_NICE)}
        workers = [process for process, _ in pool._idle]
        if os.geteuid() == 0:  # may lower its niceness again: both workers stay, at the base niceness
            assert len(workers) == 2
            assert [os.getpriority(os.PRIO_PROCESS, p.pid) for p in workers] == [base, base]
        # whichever worker takes the next tasks (a retired one is replaced), they run at the base niceness
        pool.submit("again", "test-niceness", None)
        pool.submit("and again", "test-niceness", None)
        assert [event[2] for event in pool.events() if event[0] == "done"] == [base, base]


def test_a_worker_that_may_not_lower_its_niceness_again_retires_and_is_replaced():
    base = _base()
    with _pool.warm_pool(1, 1) as pool:
        pool.submit("drop", "test-unprivileged", None, priority=0)
        pool.submit("background", "test-niceness", None, priority=1, background=True)
        pool.submit("next", "test-niceness", None, priority=2)
        seen = {event[1]: event[2] for event in pool.events()}
        assert seen["drop"] != 0
        assert seen["background"] == min(19, base + _pool.BACKGROUND_NICE)
        assert seen["next"] == base  # a fresh worker, not the one stuck nicer
        assert pool.started == 2


def test_a_process_that_may_not_lower_its_niceness_says_so():
    code = textwrap.dedent("""
        import os, sys
        sys.path.insert(0, sys.argv[1])
        from inspector._workers.pool import _renice
        if os.geteuid() == 0:  # as an unprivileged user would run it
            os.setgid(65534)
            os.setuid(65534)
        base = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, 0, base + 5)
        print(_renice(base), os.getpriority(os.PRIO_PROCESS, 0) - base)
    """)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code, root], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.split() == ["False", "5"]


@pytest.mark.own_store  # its point is that the work is done again
def test_compare_gives_the_longest_variant_a_core_and_the_others_the_background():
    base = _base()
    seen: dict = {}

    def progress(phase: str, fraction: float) -> None:
        pool = _pool._SHARED
        for process, job in list(pool._busy.values()) if pool is not None else []:
            try:
                nice = os.getpriority(os.PRIO_PROCESS, process.pid)
            except OSError:
                continue
            label = job.payload.variant.label  # a tasks.VariantTask
            seen.setdefault(label, set()).add((job.background, nice))

    model = ConvStack(convs=2, channels=4, size=8, seed=3)
    comparison = inspector.compare(model, variants=("off", "upstream", "upstream@a8w8-per-tensor"), workers=2,
                                   progress=progress)
    assert all(r.error is None for r in comparison.results)
    background = min(19, base + _pool.BACKGROUND_NICE)
    # "off" folds nothing (the most ops to lower): it runs first, in the foreground
    assert seen["off"] <= {(False, base)}, seen
    for label in ("upstream", "upstream@a8w8-per-tensor"):
        assert seen.get(label, set()) <= {(True, base), (True, background)}, seen  # base: not yet reniced
        assert (True, background) in seen[label], seen
    # the same numbers as one after another in this process
    inspector.clear_cache(disk=True)  # computed again, not read back from the result store
    alone = inspector.compare(model, variants=("off", "upstream", "upstream@a8w8-per-tensor"), workers=1)
    for a, b in zip(comparison.results, alone.results):
        assert [t.tolist() for step in a.outputs for t in step] == [t.tolist() for step in b.outputs for t in step]
