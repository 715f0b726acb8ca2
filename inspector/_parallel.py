"""Run compare's variants in worker processes, one variant per task.

Workers are spawned (not forked: the parent may hold OpenMP thread pools, the widget's threads
or a Jupyter kernel's), and receive data, never live modules: the target's exported program as
a ``torch.export.save`` archive written by this process, its example inputs, the calibration
batches, the float reference and the variant. Progress comes back through a queue; a failure
comes back as a message (exceptions with custom constructors do not survive pickling); Ctrl-C
terminates the workers.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import queue
import sys
import threading
import time
import types
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .errors import InspectorError

_QUEUE = None  # the worker's end of the progress queue (set by _init)


def available_workers() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Task:
    """Everything a worker needs to run one variant (all picklable data)."""

    index: int  # position among the tasks (for progress)
    program: bytes  # torch.export.save archive of the target's exported program
    name: str
    source: str | None
    inputs: tuple
    recurrent: dict
    key: str
    variant: Any  # _results.Variant
    calibration: Any  # _flow.Calibration
    config: Any  # quantization config (None: the default)
    steps: int
    reference: Any  # float outputs per step
    base_key: tuple  # _variant_cache.base_key: the cache key for everything but the variant


def program_bytes(program) -> bytes:
    """The exported program as an archive in memory (raises if torch cannot save it)."""
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue()


@contextlib.contextmanager
def main_not_imported():
    """Spawned workers re-import the parent's ``__main__`` script unless told otherwise: a user's script
    without an ``if __name__ == "__main__":`` guard would run again in every worker. The workers
    need nothing from it (tasks hold inspector objects and tensors), so while they start, the main
    module they are shown is an empty one."""
    real = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = real


def _init(progress_queue, threads: int) -> None:
    global _QUEUE
    _QUEUE = progress_queue
    torch.set_num_threads(threads)  # the cores are shared with this process's siblings


def _run(work: Callable, task: Task):
    """In a worker: ``work(task, report)``, with progress sent back to the parent."""

    def report(phase: str, fraction: float) -> None:
        if _QUEUE is not None:
            _QUEUE.put((task.index, phase, fraction))

    try:
        return work(task, report)
    except InspectorError as exc:
        return "error", str(exc), exc.details
    except Exception as exc:  # noqa: BLE001 - reported in the parent, in one line
        return "error", f"variant {task.variant.label} failed in a worker process: {type(exc).__name__}: {exc}", ""


def run_tasks(work: Callable, tasks: list[Task], workers: int, report: Callable[[int, str, float], None],
              local: Callable[[], Any] | None = None) -> tuple[Any, list]:
    """Run ``work(task, report)`` for each task on ``workers`` spawned processes (``work`` is a
    module-level function: it travels by name); ``report(index, phase, fraction)`` as they go.
    ``local()``, if given, runs in this process meanwhile (it is warm: no start-up to pay).

    Returns ``(local's result, [(result, decisions) per task, in order])``; raises the first failure
    as an InspectorError. A worker that dies (cannot start, killed) fails the call instead of being
    started again forever.
    """
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    ctx = multiprocessing.get_context("spawn")
    progress = ctx.Queue()
    stop = threading.Event()

    def pump() -> None:
        while not stop.is_set():
            try:
                index, phase, fraction = progress.get(timeout=0.1)
            except queue.Empty:
                continue
            except (EOFError, OSError, ValueError):
                return
            report(index, phase, fraction)

    pumper = threading.Thread(target=pump, daemon=True, name="fold-inspector-progress")
    pumper.start()
    with main_not_imported():
        threads = max(1, available_workers() // (workers + (local is not None)))
        executor = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init,
                                       initargs=(progress, threads))
        futures = [executor.submit(_run, work, task) for task in tasks]  # workers start here
    try:
        here = None
        if local is not None:
            saved = torch.get_num_threads()
            torch.set_num_threads(threads)  # share the cores with the workers (results do not depend on it)
            try:
                here = local()
            finally:
                torch.set_num_threads(saved)
        outcomes = [future.result() for future in futures]
    except BrokenProcessPool:
        _stop(executor)
        raise InspectorError("a worker process died before finishing its variant; rerun with workers=1 "
                             "(--workers 1) to run the variants in this process") from None
    except BaseException:  # Ctrl-C (or any failure here): stop the workers now
        _stop(executor)
        raise
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
        time.sleep(0.15)  # let the last progress messages through
        stop.set()
        pumper.join(1.0)
        progress.close()
    results = []
    for status, *rest in outcomes:
        if status == "error":
            message, details = rest
            raise InspectorError(message, details=details)
        results.append(tuple(rest))
    return here, results


def _stop(executor) -> None:
    """Terminate the workers (Python 3.11 has no public call for it; 3.14 adds terminate_workers)."""
    processes = list((getattr(executor, "_processes", None) or {}).values())
    executor.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(5)
