"""The widget's one way to work in the background: ``BackgroundJob``.

A job runs its work in a thread, reports progress, can be cancelled, and hands its outcome
(the result, or the error) to the screen on the kernel's main thread: inside an ipykernel,
through the kernel's IO loop; elsewhere (scripts, tests) in the worker thread, under the
screen lock that every other change to the screen holds too. One job runs at a time.
"""

from __future__ import annotations

import sys
import threading
from typing import Any
from collections.abc import Callable

import ipywidgets as W

from ._common import describe

Progress = Callable[[str, float], None]


def kernel_loop() -> Any:
    """The IO loop of the running ipykernel (its main thread), or None outside a kernel."""
    kernelbase = sys.modules.get("ipykernel.kernelbase")  # never import ipykernel just to ask
    if kernelbase is None:
        return None
    try:
        if not kernelbase.Kernel.initialized():
            return None
        loop = getattr(kernelbase.Kernel.instance(), "io_loop", None)
    except Exception:  # noqa: BLE001 - a half-started kernel: no loop
        return None
    return loop if callable(getattr(loop, "add_callback", None)) else None


class JobCancelled(Exception):
    """Raised inside a job's work by its progress callback once the job is cancelled."""


class JobProgress:
    """What a job's work reports through: ``progress(phase, fraction)``, and ``progress.show(apply)``
    to put a first answer on the screen before the work ends (a preview); ``apply()`` runs like the
    outcome does (main thread, screen lock), unless the job was cancelled or has ended."""

    def __init__(self, report: Callable[[str, float], None], show: Callable[[Callable[[], None]], None]) -> None:
        self._report, self._show = report, show

    def __call__(self, phase: str, fraction: float) -> None:
        self._report(phase, fraction)

    def show(self, apply: Callable[[], None]) -> None:
        self._show(apply)


class JobView:
    """The controls of one kind of job: the button that starts it, a progress bar and its label."""

    OUTCOMES = {"done": "success", "failed": "danger", "cancelled": "warning"}

    def __init__(self, button: W.Button, bar: W.FloatProgress, label: W.Label) -> None:
        self.button, self.bar, self.label = button, bar, label

    def begin(self) -> None:
        self.button.disabled = True
        self.bar.value = 0.0
        self.bar.bar_style = ""
        self.label.value = "starting"

    def report(self, phase: str, fraction: float) -> None:
        self.bar.value = max(0.0, min(1.0, fraction))
        self.label.value = phase

    def end(self, outcome: str) -> None:
        if outcome == "done":
            self.bar.value = 1.0  # progress reports still queued behind the outcome are dropped
        self.bar.bar_style = self.OUTCOMES[outcome]
        self.label.value = outcome

    def release(self) -> None:
        self.button.disabled = False


class BackgroundJob:
    """At most one job at a time: ``start`` it, ``cancel`` it, ``wait`` for it.

    ``screen`` is the lock held by everything that changes what the widget shows; the outcome is
    applied under it. ``show_error(message, details)`` shows a failure (``None`` clears it).
    """

    def __init__(self, screen: threading.RLock, show_error: Callable[[str | None, str | None], None]) -> None:
        self._screen = screen
        self._show_error = show_error
        self._lock = threading.Lock()  # guards every field below
        self._running = False
        self._cancelled = False
        self._generation = 0  # which job a late progress report belongs to
        self._pending: tuple | None = None  # (view, apply, result, error): computed, not yet applied
        self._computed = threading.Event()
        self._computed.set()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        with self._lock:
            return self._running

    def start(self, view: JobView, work: Callable[[Progress], Any], apply: Callable[[Any], None], *,
              name: str = "fold-inspector-job") -> bool:
        """Run ``work(progress)`` in a thread, then ``apply(result)`` on the main thread.
        False (and nothing started) while another job runs."""
        with self._lock:
            if self._running:
                return False
            self._running, self._cancelled, self._pending = True, False, None
            self._generation += 1
            generation, computed = self._generation, threading.Event()
            self._computed = computed
        try:
            view.begin()
            thread = threading.Thread(target=self._work, args=(generation, computed, view, work, apply),
                                      daemon=True, name=name)
            thread.start()
        except BaseException:
            view.release()
            with self._lock:
                self._running = False
            computed.set()
            raise
        self._thread = thread
        return True

    def cancel(self) -> bool:
        """Ask the running job to stop at its next progress report; its outcome is not applied.
        False when nothing runs."""
        with self._lock:
            if not self._running:
                return False
            self._cancelled = True
            return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job's outcome is on the screen (applied here, if the main thread is the one
        waiting and its loop cannot run it). False if ``timeout`` passed first."""
        with self._lock:
            computed = self._computed
        if not computed.wait(timeout):
            return False
        self._finish()
        return True

    # ------------------------------------------------------------------ the worker thread

    def _work(self, generation, computed, view, work, apply) -> None:
        def progress(phase: str, fraction: float) -> None:
            with self._lock:
                if self._cancelled:
                    raise JobCancelled()
            self._soon(lambda: self._progress(generation, view, phase, fraction))

        reporter = JobProgress(progress, lambda apply: self._soon(lambda: self._partial(generation, apply)))
        result = error = None
        try:
            result = work(reporter)
        except JobCancelled:
            pass
        except BaseException as exc:  # noqa: BLE001 - shown in the panel, never a dead widget
            error = describe(exc)
        with self._lock:
            self._pending = (view, apply, result, error)
        computed.set()
        self._soon(self._finish)

    def _soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the kernel's main thread (later), or here and now outside a kernel."""
        loop = kernel_loop()
        if loop is not None:
            try:
                loop.add_callback(fn)
                return
            except Exception:  # noqa: BLE001 - a closed loop: apply here, under the lock
                pass
        fn()

    # ------------------------------------------------------------------ applying

    def _progress(self, generation: int, view: JobView, phase: str, fraction: float) -> None:
        with self._lock:
            live = self._running and self._pending is None and generation == self._generation
        if live:  # a report that arrives after the outcome is dropped
            view.report(phase, fraction)

    def _partial(self, generation: int, apply: Callable[[], None]) -> None:
        """A first answer of the running job (``JobProgress.show``), if that job still runs."""
        with self._screen:
            with self._lock:
                live = (self._running and self._pending is None and not self._cancelled
                        and generation == self._generation)
            if not live:
                return
            try:
                apply()
            except Exception as exc:  # noqa: BLE001 - the UI must survive anything; the job goes on
                self._show_error(*describe(exc))

    def _finish(self) -> None:
        with self._screen:
            with self._lock:
                pending, self._pending = self._pending, None
                cancelled = self._cancelled
            if pending is None:
                return  # nothing computed, or already applied
            view, apply, result, error = pending
            try:
                if cancelled:
                    view.end("cancelled")
                elif error is not None:
                    view.end("failed")
                    self._show_error(*error)
                else:
                    apply(result)
                    view.end("done")
                    self._show_error(None, None)
            except Exception as exc:  # noqa: BLE001 - the UI must survive anything
                view.end("failed")
                self._show_error(*describe(exc))
            finally:
                view.release()
                with self._lock:
                    self._running = False
