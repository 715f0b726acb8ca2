"""Where a sweep's tasks run: a pool of spawned worker processes, a Ray cluster, or this process.

Every executor takes the same tasks (a registered task kind, ``kinds.task_kind``, and a
picklable payload) and reports the same events, so the sweep's scheduler never asks which one
it has:

- ``("progress", key, phase, fraction)`` while a task advances (the local pool only);
- ``("done", key, value)`` when it returned;
- ``("error", key, message, details)`` when it raised (one line, as everywhere);
- ``("died", key, message)`` when the process running it died (a signal, an out-of-memory kill,
  ``os._exit``): only that task is lost; the pool starts a new worker for the others.

``LocalPool`` gives every worker its own pipe, so when a worker dies the pool knows exactly which
task it held. (``concurrent.futures.ProcessPoolExecutor`` cannot: one dead worker breaks every
future of the pool.) Ctrl-C in the parent stops the workers and propagates.

Workers are forked from a fork server (``multiprocessing``'s ``forkserver``) that has imported
what the layers above name with ``boot_with`` (torch, executorch, the quantizer, and one tiny model
run through the whole flow): a worker costs a fork, not the 4 s of imports and 7 s of first calls a
spawned process pays. ``start_server()`` starts that server in the background (the first comparison or
widget does), so its warm-up overlaps the parent's own export and capture. On a platform without
``forkserver`` workers are spawned.
"""

from __future__ import annotations

import resource
from multiprocessing import forkserver
from multiprocessing import spawn, util
from multiprocessing.context import reduction, set_spawning_popen
import atexit
import contextlib
import heapq
import io
import multiprocessing
import multiprocessing.context
import multiprocessing.popen_forkserver as popen_forkserver
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any, Iterator

from .._base.cache import also_clear
from . import kinds as _kinds
from .._base.errors import InspectorError, quoted
from .._base import quiet as _quiet
import torch
from .parallel import available_workers
from .parallel import main_not_imported

Event = tuple

EXECUTORS = ("local", "ray")


@dataclass(order=True)
class _Job:
    priority: float  # lower runs first
    serial: int  # then in submission order
    key: Any = field(compare=False)
    kind: str = field(compare=False)  # a registered task kind (kinds.task_kind)
    payload: Any = field(compare=False)
    background: bool = field(default=False, compare=False)  # gives way on a shared core (see BACKGROUND_NICE)


class _Queued:
    """What every executor shares: the tasks waiting for a worker, lowest priority first, then in
    submission order."""

    def __init__(self) -> None:
        self._jobs: list[_Job] = []  # a heap
        self._serial = 0

    def submit(self, key, kind: str, payload, *, priority: float = 0, background: bool = False) -> None:
        """Queue a task of ``kind`` (lower ``priority`` first); a ``background`` one runs nicer while it shares
        the cores."""
        _kinds.function_of(kind)  # an unknown kind fails here, in the caller, not in a worker
        self._serial += 1
        heapq.heappush(self._jobs, _Job(priority, self._serial, key, kind, payload, background))

    def _next_job(self) -> _Job:
        return heapq.heappop(self._jobs)

    def _put_back(self, job: _Job) -> None:
        """A job taken out that could not start (its worker was gone): first again, in its place."""
        heapq.heappush(self._jobs, job)


# A background task's worker runs this much nicer than the others for the task's duration: when a pool runs
# more tasks than there are cores, the urgent one (the longest, run first) keeps a core of its own while the
# others share what is left, instead of everyone getting the same share until the end.
BACKGROUND_NICE = 10


OUT_OF_MEMORY = 86  # a worker's exit status when a task or its answer did not fit its memory


def signal_text(exitcode: int | None) -> str:
    """What a worker's exit code says, in words a user can act on."""
    if exitcode is None:
        return "it stopped answering"
    if exitcode == OUT_OF_MEMORY:
        return "it ran out of memory taking the task in or sending its answer"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = {"SIGKILL": " (killed: often the kernel's out-of-memory killer)",
                "SIGSEGV": " (a crash in native code)", "SIGBUS": " (a crash in native code)",
                "SIGABRT": " (native code aborted)"}.get(name, "")
        return f"it was killed by {name}{hint}"
    return f"it exited with status {exitcode}"


# ---------------------------------------------------------------- in a worker process


def _worker_main(conn, threads: int, setup: dict) -> None:
    """A worker's whole life: run tasks sent over ``conn`` until the parent closes it. ``setup`` is
    the parent's environment, working folder, import path and memory cap at the worker's start (a
    worker forked from the fork server would otherwise see the server's, from when it started)."""

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # A script reads the parent's stdout (`sweep --format json | jq`): whatever native code or a
    # model's forward prints in a worker goes to stderr instead.
    with contextlib.suppress(OSError):
        os.dup2(2, 1)
    os.environ.clear()
    os.environ.update(setup["environ"])
    with contextlib.suppress(OSError):
        os.chdir(setup["cwd"])
    sys.path[:] = setup["path"]
    torch.set_num_threads(threads)
    _quiet.install_warning_filters()
    _limit_memory(setup["memory"])
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    while True:
        try:
            message = _recv(conn)
        except (EOFError, OSError):
            return  # the parent has gone
        except MemoryError:
            os._exit(OUT_OF_MEMORY)  # the task alone does not fit: the parent reports it
        if message is None:
            return
        key, kind, module, payload, wanted_threads, background = message
        if wanted_threads != threads:  # the pool was resized: share the cores anew (results do not depend on it)
            threads = wanted_threads
            torch.set_num_threads(threads)

        def report(phase: str, fraction: float, key=key) -> None:
            _send(conn, ("progress", key, phase, fraction))

        if background:
            _renice(nice + BACKGROUND_NICE)
        try:
            event = run_one(key, kind, payload, report, module)
            # back to its niceness before answering (only a privileged process may lower it: one that cannot
            # retires after this answer, and the pool forks a fresh one for the next task)
            restored = not background or _renice(nice)
            if not restored:
                _send(conn, ("retiring", key))
            _send(conn, event)
        except (BrokenPipeError, EOFError, OSError):
            return  # the parent stopped the sweep (Ctrl-C) while this task ran: nobody wants the answer
        except MemoryError:
            os._exit(OUT_OF_MEMORY)  # its answer does not fit
        if not restored:
            return


def _renice(nice: int) -> bool:
    """This process at niceness ``nice`` (for a background task, and back after it); False when it may
    not be (lowering it takes privilege)."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError:
        pass
    return os.getpriority(os.PRIO_PROCESS, 0) == nice


def _send(conn, obj) -> None:
    """Messages are plain pickles: tensors travel by value. (``Connection.send`` pickles with torch's
    sharing reductions, which hand each tensor over as a file descriptor served by a thread the
    sender starts: a worker whose memory is capped could not start it, and hung.)"""
    conn.send_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _recv(conn):
    return pickle.loads(conn.recv_bytes())


@dataclass(frozen=True)
class _Pickled:
    """A task's payload as its pickle: the worker reads it inside the task (``run_one``), so what cannot be
    read there (a rule that travels by its file, and the file changed) is that task's error."""

    data: bytes

    @classmethod
    def of(cls, payload) -> "_Pickled":
        return cls(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))


# A worker's address space may be capped (bytes beyond what it holds once torch is imported): a run that
# needs more fails in that worker, as an out-of-memory would, and never takes the machine.
MEMORY_LIMIT_ENV = "FOLD_INSPECTOR_WORKER_MEMORY"


def _limit_memory(extra: str | None) -> None:
    if not extra:
        return

    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = size + int(extra)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run_one(key, kind: str, payload, report, module: str | None = None) -> Event:
    """Run one task of ``kind`` here and turn what happens into an event (an exception is one line).
    ``payload`` may be its pickle (from another process): read inside, so a payload that cannot be read
    here (a rule whose file changed) is that task's error, not the worker's end."""
    try:
        if isinstance(payload, _Pickled):
            payload = pickle.loads(payload.data)
        return ("done", key, _kinds.function_of(kind, module)(payload, report))
    except InspectorError as exc:
        return ("error", key, str(exc), exc.details)
    except Exception as exc:  # noqa: BLE001 - reported in the parent, in one line
        return ("error", key, f"{type(exc).__name__}: {exc}", traceback.format_exc())


# ---------------------------------------------------------------- executors


class InlinePool(_Queued):
    """Runs every task in this process, one after another (for rules that live in this process only)."""

    name = "inline"

    def events(self) -> Iterator[Event]:
        while self._jobs:
            job = self._next_job()
            progress: list[Event] = []
            yield run_one(job.key, job.kind, job.payload,
                          lambda phase, fraction, key=job.key: progress.append(("progress", key, phase, fraction)))

    def close(self) -> None:
        self._jobs.clear()


class LocalPool(_Queued):
    """``workers`` spawned processes, one task each at a time; a dead worker costs its task only."""

    name = "local"

    def __init__(self, workers: int, cores: int | None = None) -> None:
        super().__init__()
        self._ctx = _context()
        self._idle: list = []  # (process, conn) ready for a task
        self._busy: dict = {}  # conn -> (process, job)
        self._ended: list[Event] = []  # tasks that ended before a worker took them in
        self._retiring: set = set()  # connections of workers that exit after their answer
        self.started = 0  # workers started so far (replacements included)
        self.resize(workers, cores)

    def resize(self, workers: int, cores: int | None = None) -> None:
        """Run up to ``workers`` tasks at a time from now on, sharing ``cores`` (default: the cores
        available); idle workers beyond that are stopped."""

        self.workers = workers
        self.threads = max(1, (cores or available_workers()) // workers)  # the cores are shared by the workers
        while len(self._idle) + len(self._busy) > workers and self._idle:
            _stop_worker(*self._idle.pop())

    @property
    def alive(self) -> int:
        """Worker processes running now."""
        return len(self._idle) + len(self._busy)

    def release(self) -> None:
        """After a sweep: drop what was not run, keep the idle workers warm for the next one."""
        self._jobs.clear()
        if self._busy:  # interrupted mid-task: those workers are still computing; stop them
            for conn, (process, _) in list(self._busy.items()):
                _stop_worker(process, conn)
            self._busy.clear()

    def _start(self) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        setup = {"environ": dict(os.environ), "cwd": os.getcwd(), "path": list(sys.path),
                 "memory": os.environ.get(MEMORY_LIMIT_ENV)}
        process = self._ctx.Process(target=_worker_main, args=(child, self.threads, setup), daemon=True,
                                    name=f"fold-inspector-worker-{self.started}")
        if self._ctx.get_start_method() == "forkserver":
            start_server()
            process.start()  # forked from the warm server: it ignores Ctrl-C, and never re-imports __main__
        else:
            with main_not_imported(), _sigint_ignored():
                process.start()  # born ignoring Ctrl-C (Python keeps an inherited SIG_IGN): the parent handles it
        child.close()
        self.started += 1
        self._idle.append((process, parent))

    def _dispatch(self) -> None:
        while self._jobs and (self._idle or len(self._busy) < self.workers):
            fresh = not self._idle
            if fresh:
                self._start()
            process, conn = self._idle.pop()
            job = self._next_job()
            try:
                _send(conn, (job.key, job.kind, _kinds.module_of(job.kind), _Pickled.of(job.payload), self.threads,
                             job.background))
            except (BrokenPipeError, OSError):
                conn.close()
                if fresh:  # a new worker died taking this task in (out of memory reading it): the task's end
                    process.join(5)
                    self._ended.append(("died", job.key, signal_text(process.exitcode)))
                else:  # it died while idle: put the job back, start another
                    self._put_back(job)
                continue
            self._busy[conn] = (process, job)

    def events(self) -> Iterator[Event]:
        """Events until every submitted task (and every task submitted meanwhile) has ended."""
        while True:
            self._dispatch()
            while self._ended:
                yield self._ended.pop(0)
            if not self._busy:
                if self._jobs:
                    continue
                return
            sentinels = {process.sentinel: conn for conn, (process, _) in self._busy.items()}
            ready = wait([*self._busy, *sentinels])
            for item in ready:
                conn = sentinels.get(item, item)
                if conn not in self._busy:
                    continue
                process, job = self._busy[conn]
                try:
                    event = _recv(conn) if conn in ready or conn.poll() else None
                except (EOFError, OSError):
                    event = None
                if event is None:  # the process died holding this task
                    del self._busy[conn]
                    conn.close()
                    process.join(5)
                    yield ("died", job.key, signal_text(process.exitcode))
                    continue
                if event[0] == "retiring":  # its answer follows; then it exits (see _worker_main)
                    self._retiring.add(conn)
                    continue
                if event[0] != "progress":
                    del self._busy[conn]
                    if conn in self._retiring:
                        self._retiring.discard(conn)
                        _stop_worker(process, conn)
                    else:
                        self._idle.append((process, conn))
                yield event

    def close(self) -> None:
        """Stop every worker now (tasks not finished are dropped)."""
        self._jobs.clear()
        workers = [*self._idle, *((p, c) for c, (p, _) in self._busy.items())]
        self._idle, self._busy = [], {}
        for process, conn in workers:
            _stop_worker(process, conn, wait=False)
        deadline = time.monotonic() + 2.0
        for process, _ in workers:
            process.join(max(0.0, deadline - time.monotonic()))
            _stop_worker(process, None)


def _stop_worker(process, conn, wait: bool = True) -> None:
    """Ask a worker to stop (it finishes nothing more); terminate it if it does not."""
    if conn is not None:
        with contextlib.suppress(Exception):
            _send(conn, None)
        with contextlib.suppress(Exception):
            conn.close()
    if not wait:
        return
    process.join(0.5)
    if process.is_alive():
        process.terminate()
        process.join(2)
    if process.is_alive():
        process.kill()
        process.join(1)


# ---------------------------------------------------------------- the fork server


# What the fork server imports before it forks a worker: named by the layers above (``boot_with``), which
# know what their tasks need warm; this layer names none of them.
_BOOT: list[str] = []


def boot_with(module: str) -> None:
    """Have the fork server import ``module`` (warming what the tasks need) before the first worker forks."""
    if module not in _BOOT:
        _BOOT.append(module)
_FORKSERVER = "forkserver" in multiprocessing.get_all_start_methods()  # else workers are spawned
_SERVER_LOCK = threading.Lock()
_OTHER_POOLS = 0  # pools of their own open now (a second sweep meanwhile): their workers need the server


def _context():
    """Where workers come from: forked from the warm fork server, or spawned where there is none."""
    if not _FORKSERVER:
        return multiprocessing.get_context("spawn")
    return _WarmContext()


def start_server() -> bool:
    """Start the fork server the workers come from, if it is not running (``inspector.start_workers``).

    Returns at once: the server imports and warms up in its own process (about 10 s of one core), and
    the first worker waits for it. A comparison asked for on workers, and a widget as it opens, call
    it; a script that will compare later may call it first thing. It stops with the workers after
    IDLE_SECONDS idle, and at exit. True when this call started it (False: it was running already, or
    this platform has none): the caller that started it may stop it unused (``stop_server(mid_warm_up=True)``)."""
    if not _FORKSERVER:
        return False

    server = forkserver._forkserver
    with _SERVER_LOCK:
        # The server loads our boot module. It must not import the parent's __main__ (a script without a
        # __name__ guard would run there): that is multiprocessing's default preload, dropped here.
        preload = [m for m in server._preload_modules if m != "__main__"]
        if any(m not in preload for m in _BOOT):
            server.set_forkserver_preload([*preload, *(m for m in _BOOT if m not in preload)])
        before = server._forkserver_pid
        server.ensure_running()
        return server._forkserver_pid != before


def stop_server(*, mid_warm_up: bool = False) -> None:
    """Stop the fork server (it holds a warm copy of torch and executorch; it starts again when needed).
    Only once no worker of it is left: it waits for them. ``mid_warm_up``: now, even in the middle of its warm-up
    (for a comparison that started it and then had nothing to run on workers: every variant answered from the
    store, or one left to run here), instead of letting it take a core for about 10 s for nothing."""
    if not _FORKSERVER:
        return

    with _SERVER_LOCK:
        if _OTHER_POOLS or (_SHARED is not None and _SHARED.alive):
            return  # workers are left (a second sweep's meanwhile): stop it next time
        pid = forkserver._forkserver._forkserver_pid
        if mid_warm_up and pid is not None:
            # The server reads its "stop" (the closed pipe) only once its warm-up is over: it is killed instead. It
            # has forked nothing (no worker is alive), so nothing else goes with it.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            forkserver._forkserver._stop()


def server_pid() -> int | None:
    """The fork server's process id while it runs (for tests and memory accounting)."""
    if not _FORKSERVER:
        return None

    return forkserver._forkserver._forkserver_pid


class _WarmPopen(popen_forkserver.Popen):
    """The forkserver's start, without telling the child to import the parent's ``__main__`` (a
    user's script with no ``if __name__ == "__main__":`` guard would run again there; the workers
    need nothing from it). The body is multiprocessing's own (3.11) with that one change: nothing
    process-wide is swapped, so a start from a background thread is safe."""

    def _launch(self, process_obj):
        prep_data = {k: v for k, v in spawn.get_preparation_data(process_obj._name).items()
                     if k not in ("init_main_from_path", "init_main_from_name")}
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        _parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _WarmProcess(multiprocessing.context.ForkServerProcess):
    """A forkserver process that starts through ``_WarmPopen``."""

    @staticmethod
    def _Popen(process_obj):
        return _WarmPopen(process_obj)


class _WarmContext(multiprocessing.context.ForkServerContext):
    """The forkserver context, whose processes start through ``_WarmPopen``."""

    Process = _WarmProcess


# ---------------------------------------------------------------- the warm pool


# Starting a worker costs seconds (torch, executorch and the quantizer import, and their first
# calls warm up): one pool per process keeps its workers between sweeps, until they have been
# idle for IDLE_SECONDS (FOLD_INSPECTOR_POOL_IDLE) or the process exits.
IDLE_SECONDS = float(os.environ.get("FOLD_INSPECTOR_POOL_IDLE", "300"))
_SHARED: "LocalPool | None" = None
_SHARED_LOCK = threading.Lock()
_IDLE_TIMER: "threading.Timer | None" = None


@contextlib.contextmanager
def warm_pool(workers: int, cores: int | None = None):
    """The process's warm ``LocalPool``, running up to ``workers`` tasks at a time on ``cores``
    (default: the cores available), for one sweep at a time (a second sweep running meanwhile, say
    from a widget's background job, gets a pool of its own)."""
    global _SHARED, _OTHER_POOLS
    if not _SHARED_LOCK.acquire(blocking=False):
        pool = LocalPool(workers, cores)
        with _SERVER_LOCK:
            _OTHER_POOLS += 1
        try:
            yield pool
        finally:
            pool.close()
            with _SERVER_LOCK:
                _OTHER_POOLS -= 1
        return
    try:
        _cancel_idle_timer()
        if _SHARED is None:
            _SHARED = LocalPool(workers, cores)
        else:
            _SHARED.resize(workers, cores)
        try:
            yield _SHARED
        except BaseException:
            _SHARED.close()  # interrupted or failed: start afresh next time
            _SHARED = None
            raise
        _SHARED.release()
        _start_idle_timer()
    finally:
        _SHARED_LOCK.release()


def shutdown() -> None:
    """Stop the warm pool's workers now (they start again when next needed); the fork server stays."""
    global _SHARED
    with _SHARED_LOCK:
        _cancel_idle_timer()
        if _SHARED is not None:
            _SHARED.close()
            _SHARED = None


def warm_workers() -> int:
    """How many warm worker processes this process keeps now."""
    pool = _SHARED
    return pool.alive if pool is not None else 0


def _start_idle_timer() -> None:
    global _IDLE_TIMER
    _IDLE_TIMER = threading.Timer(IDLE_SECONDS, _stop_if_idle)
    _IDLE_TIMER.daemon = True
    _IDLE_TIMER.start()


def _cancel_idle_timer() -> None:
    global _IDLE_TIMER
    if _IDLE_TIMER is not None:
        _IDLE_TIMER.cancel()
        _IDLE_TIMER = None


def _stop_if_idle() -> None:
    """After IDLE_SECONDS with nothing to run: the workers and the fork server go (their memory with them)."""
    global _SHARED
    if _SHARED_LOCK.acquire(blocking=False):  # busy: the sweep that holds it restarts the timer
        try:
            if _SHARED is not None:
                _SHARED.close()
                _SHARED = None
            stop_server()
        finally:
            _SHARED_LOCK.release()




@contextlib.contextmanager
def _sigint_ignored():
    try:
        saved = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread (a widget's background job): nothing to hand down
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, saved)


def _ray_entry(kind: str, module: str, payload):
    """A Ray task: the same function a local worker runs (Ray reports progress per task only)."""
    from .._base import quiet as _quiet  # in the Ray worker, at its first task

    _quiet.install_warning_filters()
    return run_one(None, kind, payload, lambda phase, fraction: None, module)


class RayPool(_Queued):
    """The same tasks as Ray tasks, on the cluster at ``address`` or a local one started here."""

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        try:
            import ray  # lazy: Ray is the optional `ray` extra
        except ImportError:
            raise InspectorError("the Ray executor needs Ray: pip install 'fold-inspector[ray]' "
                                 "(ray==2.60.0), or use executor='local'") from None
        self._ray = ray
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                      "configure_logging": False}
            if address:
                kwargs["address"] = address
            elif workers:
                kwargs["num_cpus"] = workers
            try:
                with _quiet_fd2():
                    ray.init(**kwargs)
            except Exception as exc:  # noqa: BLE001 - a cluster that cannot be reached is one line
                where = f"the Ray cluster at {quoted(address)}" if address else "a local Ray cluster"
                raise InspectorError(f"cannot start or reach {where}: {type(exc).__name__}: "
                                     f"{str(exc).splitlines()[0] if str(exc) else ''}; check --ray-address, "
                                     "or use --executor local") from None
            global _RAY_STARTED
            _RAY_STARTED = True  # kept for the next sweep; stopped at exit or by inspector.clear_cache()
        super().__init__()
        self._remote = ray.remote(max_retries=0, num_cpus=1)(_ray_entry)
        self._pending: dict = {}  # object ref -> key
        # Ray runs what it is given in the order given, so tasks wait here, by priority, until a CPU of
        # the cluster is free (the same order as the local pool's: big variants first).
        try:
            self._slots = max(1, int(ray.cluster_resources().get("CPU", workers or 1)))
        except Exception:  # noqa: BLE001
            self._slots = max(1, workers or 1)

    def _fill(self) -> None:
        while self._jobs and len(self._pending) < self._slots:
            job = self._next_job()
            self._pending[self._remote.remote(job.kind, _kinds.module_of(job.kind), _Pickled.of(job.payload))] = job.key

    def events(self) -> Iterator[Event]:
        ray = self._ray
        self._fill()
        while self._pending:
            ready, _ = ray.wait(list(self._pending), num_returns=1, timeout=0.5)
            for ref in ready:
                key = self._pending.pop(ref)
                try:
                    event = ray.get(ref)
                except ray.exceptions.WorkerCrashedError:
                    yield ("died", key, "its Ray worker died (a crash in native code, or killed: often for "
                                        "memory)")
                    continue
                except ray.exceptions.RayError as exc:
                    yield ("died", key, f"Ray could not run it: {type(exc).__name__}: "
                                        f"{str(exc).splitlines()[0] if str(exc) else ''}")
                    continue
                yield (event[0], key, *event[2:])
            self._fill()

    def close(self) -> None:
        ray = self._ray
        self._jobs.clear()
        for ref in list(self._pending):
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        self._pending.clear()


_RAY_STARTED = False  # this process started the local Ray cluster it uses


def shutdown_ray() -> None:
    """Stop the local Ray cluster this process started (a cluster given by address is left alone)."""
    global _RAY_STARTED
    if not _RAY_STARTED:
        return
    _RAY_STARTED = False

    ray = sys.modules.get("ray")
    if ray is not None:
        with contextlib.suppress(Exception):
            ray.shutdown()


@contextlib.contextmanager
def _quiet_fd2():
    """Ray's start-up prints its banners on stderr; a script's stderr is the inspector's own."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def pool_for(executor: str, workers: int, ray_address: str | None = None, *, inline: bool = False):
    """The executor asked for (``"local"``: the warm pool; ``"ray"``), or this process (``inline``)."""
    if inline:
        pool = InlinePool()
        try:
            yield pool
        finally:
            pool.close()
    elif executor == "local":
        with warm_pool(workers) as pool:
            yield pool
    elif executor == "ray":
        pool = RayPool(ray_address, workers)
        try:
            yield pool
        finally:
            pool.close()
    else:
        raise InspectorError(f"unknown executor {quoted(executor)}; choose one of: {', '.join(EXECUTORS)}")


atexit.register(shutdown)
atexit.register(shutdown_ray)
also_clear(shutdown)  # inspector.clear_cache(): the workers' caches go with them
also_clear(shutdown_ray)

__all__ = ["EXECUTORS", "InlinePool", "LocalPool", "RayPool", "pool_for", "run_one", "server_pid", "shutdown",
           "shutdown_ray", "signal_text", "start_server", "stop_server", "warm_pool", "warm_workers"]
