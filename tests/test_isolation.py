"""A native crash or an out-of-memory costs one line, not the kernel.

With ``isolate=True`` (the widget's default) every variant's quantizer, lowering and TOSA reference
run in a worker process of the warm pool. These tests kill those workers mid-run (SIGKILL, SIGSEGV
sent with ``os.kill``), starve one of memory (``resource.setrlimit`` in the worker), and check the
one line naming the variant and the signal, the results kept, and a following run that succeeds.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import inspector
from inspector._base import limits as _limits
from inspector._workers import pool as _pool
from sample_models.big import ConvStack

# Each test here watches a worker do the work (and dies with it): never answered from the run's store.
pytestmark = [pytest.mark.requires_tosa, pytest.mark.crash, pytest.mark.own_store]

TARGET = "sample:stateful_conv_mul"


@pytest.fixture(autouse=True)
def fresh_pool():
    inspector.clear_cache()  # no warm worker and no cached result from another test
    yield
    inspector.clear_cache()


def _busy() -> list:
    """(process, job) of the warm pool's busy workers, read from another thread than the pool's."""
    pool = _pool._SHARED
    for _ in range(100):
        try:
            return list(pool._busy.values()) if pool is not None else []
        except RuntimeError:  # changed size while being read: read again
            continue
    return []


def _kill_when_busy(label: str, sig: int, killed: list, results=None):
    """A progress callback that sends ``sig`` to the worker running ``label``, once it has started."""
    def progress(phase: str, fraction: float) -> None:
        if killed or not phase.startswith(f"{label}: ") or phase.endswith(": cached"):
            return
        for process, job in _busy():
            if getattr(job.payload, "variant", None) is not None and job.payload.variant.label == label:
                os.kill(process.pid, sig)
                killed.append(process.pid)
    return progress


@pytest.mark.parametrize("sig, words", [(signal.SIGKILL, "killed by SIGKILL"), (signal.SIGSEGV, "killed by SIGSEGV")])
def test_a_worker_killed_mid_run_costs_its_variant_only(sig, words):
    killed: list = []
    comparison = inspector.compare(TARGET, variants=("off", "upstream"), steps=2, workers=2, isolate=True,
                                   progress=_kill_when_busy("upstream", sig, killed))
    assert killed, "the test never saw the worker running upstream"
    off, upstream = comparison.results
    assert off.error is None and off.metrics  # the other variant's numbers are kept
    assert upstream.error.startswith("variant upstream: the worker process running it died (it was killed by ")
    assert words in upstream.error and "\n" not in upstream.error
    assert ("out of memory" in upstream.error) == (sig == signal.SIGKILL)
    assert "upstream: not run: variant upstream" in comparison._repr_mimebundle_()["text/plain"]
    again = inspector.compare(TARGET, variants=("off", "upstream"), steps=2, workers=2, isolate=True)
    assert [r.error for r in again.results] == [None, None]
    assert again.results[0].cached  # kept from the first run
    assert _pool.warm_workers() >= 1  # the pool replaced the dead worker


def test_one_worker_is_still_isolation(monkeypatch):
    """workers=1 (the fallback for a one-core machine) runs in a worker too, never in this process."""
    here = []
    real = inspector._numbers.flow.run_variant
    monkeypatch.setattr(inspector._numbers.flow, "run_variant", lambda *a, **k: here.append(1) or real(*a, **k))
    comparison = inspector.compare(TARGET, variants=("off", "upstream"), steps=2, workers=1, isolate=True)
    assert [r.error for r in comparison.results] == [None, None] and not here
    assert _pool.warm_workers() == 1
    plain = inspector.compare(TARGET, variants=("off", "upstream"), steps=2, workers=1)  # cached: the same numbers
    assert [r.metrics for r in plain.results] == [r.metrics for r in comparison.results]
    cached = inspector.compare(TARGET, variants=("off", "upstream"), steps=2, workers=1, isolate=True)  # nothing to run
    assert all(r.cached and r.error is None for r in cached.results)


def test_a_worker_out_of_memory_is_one_line_and_the_next_run_succeeds(monkeypatch):
    # Each worker may grow by 2 MiB past what it holds when it starts (forked from the warm fork server:
    # the server's imports and warm-up included, and memory its warm-up freed can be reused). One 16 MiB
    # activation of this model is more. Both variants run in workers; the float reference runs here.
    big = ConvStack(convs=2, channels=16, size=512, seed=0)
    monkeypatch.setenv(_pool.MEMORY_LIMIT_ENV, str(2 * 2 ** 20))
    with pytest.raises(inspector.InspectorError) as raised:
        inspector.compare(big, variants=("off", "upstream"), workers=2)
    error = str(raised.value)
    assert "\n" not in error and error.startswith(("variant off", "variant upstream")), error
    assert any(w in error.lower() for w in ("memory", "sigkill", "sigabrt", "sigsegv", "alloc")), error
    monkeypatch.delenv(_pool.MEMORY_LIMIT_ENV)
    inspector.clear_cache()  # the next workers start without the limit
    again = inspector.compare(TARGET, variants=("off", "upstream"), steps=2, workers=2)
    assert [r.error for r in again.results] == [None, None]


def test_attribution_in_a_worker_equals_attribution_here_and_survives_a_kill(monkeypatch):
    monkeypatch.setenv("FOLD_INSPECTOR_STORE", "off")  # each attribution below is computed, none read back
    comparison = inspector.compare(TARGET, variants=("off", "upstream"), steps=2, workers=1)
    isolated = inspector.attribution(comparison, isolate=True)
    assert isolated.to_dict() == inspector.attribution(comparison).to_dict()

    killed: list = []

    def kill_when_dispatched() -> None:  # at once: the worker has the whole attribution still to do
        deadline = time.monotonic() + 120
        while not killed and time.monotonic() < deadline:
            for process, job in _busy():
                if job.key == ("attribution", 0):
                    os.kill(process.pid, signal.SIGKILL)
                    killed.append(process.pid)
            time.sleep(0.01)

    killer = threading.Thread(target=kill_when_dispatched)
    killer.start()
    with pytest.raises(inspector.InspectorError, match=r"^the attribution of off, upstream: the worker process "
                                                       r"running it died \(it was killed by SIGKILL"):
        inspector.attribution(comparison, isolate=True)
    killer.join()
    assert killed
    assert inspector.attribution(comparison, isolate=True).to_dict() == isolated.to_dict()


def test_a_run_that_would_not_fit_is_refused_before_anything_starts(monkeypatch):
    monkeypatch.setattr(_limits, "available_memory", lambda: 100 * 2 ** 20)
    with pytest.raises(inspector.InspectorError, match=r"^this comparison needs about \d+\.\d GiB \(2 variant\(s\), "
                                                       r"5 step\(s\), 2 side by side\) but the machine has 0\.1 GiB "
                                                       r"available; try workers=1"):
        inspector.compare(TARGET, variants=("off", "upstream"), steps=5, workers=2, isolate=True)
    assert _pool.warm_workers() == 0  # refused before any worker started
    estimate = _limits.memory_estimate(inspector._targets.load.load(TARGET), 5, 2, 2, isolated=True)
    assert estimate >= 2 * _limits.WORKER_BYTES  # two workers' footprint at least


def test_a_worker_killed_in_the_widgets_reference_run_leaves_a_usable_widget():
    from widgets import FoldInspector

    app = FoldInspector(TARGET, stage="tfa", rule="upstream", variants=("off", "upstream"), steps=2)
    assert app.isolate
    app.run_reference()
    deadline = time.monotonic() + 300
    killed = None
    while killed is None and time.monotonic() < deadline and app.running:
        busy = [(p, j) for p, j in _busy() if getattr(j.payload, "variant", None) is not None
                and j.payload.variant.label == "upstream"]
        if busy:
            killed = busy[0][0].pid
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.05)
    app.wait()
    assert killed is not None, "the test never saw the worker running upstream"
    errors = [r for r in app.comparison.results if r.error]
    assert [r.variant.label for r in errors] == ["upstream"]
    assert "upstream: not run: variant upstream: the worker process running it died" in app.results.value
    assert app.comparison.result("off").metrics
    app.run_reference(wait=True)  # the widget works on: the next run succeeds
    assert [r.error for r in app.comparison.results] == [None, None]
    assert threading.active_count() < 50


def test_the_fork_server_warms_up_and_keeps_no_thread():
    """Workers are forked from a server that imported the stack and ran a tiny model through the whole
    flow: the warm-up must finish, and leave no thread behind (a fork copies only the forking thread)."""
    import subprocess
    import sys

    code = ("import threading, inspector._numbers.worker_boot as boot; "
            "print(boot.FAILED, [t.name for t in threading.enumerate()])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "None ['MainThread']"


@pytest.mark.own_store  # its point is that the work is done again
def test_idle_workers_and_their_fork_server_stop(monkeypatch):
    """The warm pool and the fork server it comes from hold a copy of the stack each: after the idle
    timeout both are gone; a comparison with nothing to run on workers does not leave one warming up; the next
    one with work starts them again with the same numbers."""
    monkeypatch.setattr(_pool, "IDLE_SECONDS", 1.0)
    first = inspector.compare(TARGET, variants=("off", "upstream"), steps=2, workers=2)
    assert _pool.server_pid() is not None
    for _ in range(100):
        if _pool.warm_workers() == 0 and _pool.server_pid() is None:
            break
        time.sleep(0.1)
    assert _pool.warm_workers() == 0 and _pool.server_pid() is None
    # answered from the store: the server this comparison starts (to warm up while it loads) is stopped unused,
    # mid-warm-up, instead of taking a core for ~10 s for nothing
    cached = inspector.compare(TARGET, variants=("off", "upstream"), steps=2, workers=2)
    assert all(r.cached for r in cached.results) and _pool.server_pid() is None
    assert [r.metrics for r in cached.results] == [r.metrics for r in first.results]
    inspector.clear_cache(disk=True)  # computed again by new workers, not read back from the result store
    again = inspector.compare(TARGET, variants=("off", "upstream"), steps=2, workers=2)
    assert [r.metrics for r in again.results] == [r.metrics for r in first.results]
