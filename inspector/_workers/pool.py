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

Workers are forked from a fork server of the pool's own: one long-lived process, started with
``subprocess``, that has imported what the layers above name with ``boot_with`` (torch, executorch, the
quantizer, and one tiny model run through the whole flow) and then forks a worker whenever the pool asks,
handing it a pipe the pool sent over a socket (``socket.send_fds``): a worker costs a fork, not the 4 s of
imports and 7 s of first calls a spawned process pays. ``start_server()`` starts that server in the
background (the first comparison or widget does), so its warm-up overlaps the parent's own export and
capture. Only public APIs are used (``subprocess``, ``os.fork``, ``socket``, ``multiprocessing.connection``),
so the pool runs alike on every Python the project supports. On a platform without ``os.fork`` workers are
spawned.
"""

from __future__ import annotations

import atexit
import contextlib
import heapq
import importlib
import json
import multiprocessing
import os
import pickle
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
import weakref
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any
from collections.abc import Iterator

from .._base.cache import also_clear
from . import kinds as _kinds
from .._base.errors import InspectorError, quoted
from .._base import quiet as _quiet
from .parallel import available_workers
from .parallel import main_not_imported

Event = tuple

EXECUTORS = ("local", "ray")


@dataclass(order=True, kw_only=True)
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
        heapq.heappush(self._jobs, _Job(priority=priority, serial=self._serial, key=key, kind=kind, payload=payload,
                                        background=background))

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


def _worker_main(conn) -> None:
    """A worker's whole life: run tasks sent over ``conn`` until the parent closes it. Its first message is
    its share of the cores and the parent's environment, working folder, import path and memory cap at the
    worker's start (a worker forked from the fork server would otherwise see the server's, from when it
    started)."""

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # A script reads the parent's stdout (`sweep --format json | jq`): whatever native code or a
    # model's forward prints in a worker goes to stderr instead.
    with contextlib.suppress(OSError):
        os.dup2(2, 1)
    try:
        threads, setup = _recv(conn)
    except (EOFError, OSError):
        return  # the parent gave up on this worker before it started
    os.environ.clear()
    os.environ.update(setup["environ"])
    with contextlib.suppress(OSError):
        os.chdir(setup["cwd"])
    sys.path[:] = setup["path"]
    import torch  # already imported by the fork server's warm-up: free here

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


@dataclass(frozen=True, kw_only=True)
class _Pickled:
    """A task's payload as its pickle: the worker reads it inside the task (``run_one``), so what cannot be
    read there (a rule that travels by its file, and the file changed) is that task's error."""

    data: bytes

    @classmethod
    def of(cls, payload) -> _Pickled:
        return cls(data=pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))


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
                          lambda phase, fraction, key=job.key, progress=progress:
                              progress.append(("progress", key, phase, fraction)))

    def close(self) -> None:
        self._jobs.clear()


class LocalPool(_Queued):
    """``workers`` worker processes (forked from the warm fork server), one task each at a time; a dead worker
    costs its task only."""

    name = "local"

    def __init__(self, workers: int, cores: int | None = None) -> None:
        super().__init__()
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
        parent, child = multiprocessing.Pipe(duplex=True)
        setup = {"environ": dict(os.environ), "cwd": os.getcwd(), "path": list(sys.path),
                 "memory": os.environ.get(MEMORY_LIMIT_ENV)}
        try:
            if _FORK_SERVER:
                process = _fork_worker(child, f"fold-inspector-worker-{self.started}")
            else:
                process = multiprocessing.get_context("spawn").Process(
                    target=_worker_main, args=(child,), daemon=True, name=f"fold-inspector-worker-{self.started}")
                with main_not_imported(), _sigint_ignored():
                    process.start()  # born ignoring Ctrl-C (Python keeps an inherited SIG_IGN): the parent handles it
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()  # the worker holds its end: when it dies, this pipe says so
        with contextlib.suppress(OSError):
            _send(parent, (self.threads, setup))  # a worker dead already is found at its first task
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
#
# A process of the pool's own, started with subprocess (never multiprocessing's spawn, which would import the
# parent's __main__ there: a script without a __name__ guard would run again). It imports the boot modules,
# then forks a worker for each request on its control socket. A request carries two descriptors
# (socket.send_fds): the worker's end of its pipe to the pool, and the write end of a status pipe the server
# keeps. On that status pipe the server writes the worker's pid as it forks, and its exit code once it has
# reaped it; the pool's end of it is the worker's sentinel, as a multiprocessing process has one. So a worker
# that dies is seen at once (its pipe closes) and its exit code is known (a signal, OUT_OF_MEMORY), although it
# is the server's child, not the pool's.


# What the fork server imports before it forks a worker: named by the layers above (``boot_with``), which
# know what their tasks need warm; this layer names none of them.
_BOOT: list[str] = []


def boot_with(module: str) -> None:
    """Have the fork server import ``module`` (warming what the tasks need) before the first worker forks."""
    if module not in _BOOT:
        _BOOT.append(module)


_FORK_SERVER = hasattr(os, "fork") and hasattr(socket, "send_fds")  # else workers are spawned
_SERVER_LOCK = threading.Lock()
_OTHER_POOLS = 0  # pools of their own open now (a second sweep meanwhile): their workers need the server
_STATUS = struct.Struct("q")  # a pid, then an exit code, on a worker's status pipe


@dataclass(kw_only=True)
class _Server:
    """The running fork server, as the pool sees it."""

    process: subprocess.Popen
    control: socket.socket  # requests go here; closing it asks the server to stop


_SERVER: _Server | None = None

# How the server starts: deaf to Ctrl-C (a terminal sends it to the whole group: the pool's to handle) before it
# imports anything, then the parent's import path (a script's folder, a test's), then this module, by the name
# it has here.
_BOOTSTRAP = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
              "import importlib, json, sys; sys.path[:] = json.loads(sys.argv[1]); "
              "importlib.import_module(sys.argv[2])._server_main(int(sys.argv[3]), json.loads(sys.argv[4]))")


def start_server() -> bool:
    """Start the fork server the workers come from, if it is not running (``inspector.start_workers``).

    Returns at once: the server imports and warms up in its own process (about 10 s of one core), and
    the first worker waits for it. A comparison asked for on workers, and a widget as it opens, call
    it; a script that will compare later may call it first thing. It stops with the workers after
    IDLE_SECONDS idle, and at exit. True when this call started it (False: it was running already, or
    this platform has none): the caller that started it may stop it unused (``stop_server(mid_warm_up=True)``).

    Args:
        (none)
    """
    if not _FORK_SERVER:
        return False

    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is not None and _SERVER.process.poll() is None:
            return False
        _forget_server()  # it died on its own: start another
        ours, theirs = socket.socketpair()
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP, json.dumps([str(p) for p in sys.path]), __name__,
                 str(theirs.fileno()), json.dumps(_BOOT)],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        _SERVER = _Server(process=process, control=ours)
        return True


def stop_server(*, mid_warm_up: bool = False) -> None:
    """Stop the fork server (it holds a warm copy of torch and executorch; it starts again when needed).
    Only once no worker of it is left: it waits for them. ``mid_warm_up``: now, even in the middle of its warm-up
    (for a comparison that started it and then had nothing to run on workers: every variant answered from the
    store, or one left to run here), instead of letting it take a core for about 10 s for nothing."""
    if not _FORK_SERVER:
        return

    global _SERVER
    with _SERVER_LOCK:
        if _OTHER_POOLS or (_SHARED is not None and _SHARED.alive):
            return  # workers are left (a second sweep's meanwhile): stop it next time
        server, _SERVER = _SERVER, None
    if server is None:
        return
    server.control.close()  # a warm server reads this at once and exits
    if mid_warm_up:
        # A server still warming up reads its control socket only after: it is killed instead. It has forked
        # nothing (no worker is alive), so nothing else goes with it.
        with contextlib.suppress(ProcessLookupError):
            server.process.kill()
    try:
        server.process.wait(60)
    except subprocess.TimeoutExpired:  # stuck: nothing of value is left in it
        server.process.kill()
        server.process.wait()


def server_pid() -> int | None:
    """The fork server's process id while it runs (for tests and memory accounting)."""
    server = _SERVER
    if server is None or server.process.poll() is not None:
        return None
    return server.process.pid


def _forget_server() -> None:
    """Drop a server that died or broke its word (called with _SERVER_LOCK held): a next one starts afresh."""
    global _SERVER
    if _SERVER is not None:
        _SERVER.control.close()
        with contextlib.suppress(ProcessLookupError):
            _SERVER.process.kill()
        _SERVER.process.wait()
        _SERVER = None


def _fork_worker(child: Connection, name: str) -> _Worker:
    """A worker forked from the fork server (started here if it is not running), holding ``child``'s end of its
    pipe to the pool. Waits while the server warms up; a server that died is started again once."""
    for attempt in (1, 2):
        start_server()
        status_r, status_w = os.pipe()
        try:
            with _SERVER_LOCK:
                server = _SERVER
                try:
                    if server is None:
                        raise ConnectionError("the fork server was stopped")
                    socket.send_fds(server.control, [b"F"], [child.fileno(), status_w])
                except OSError:
                    if attempt == 2:
                        raise
                    _forget_server()
                    continue
            os.close(status_w)
            status_w = -1
            pid = _read_status(status_r)  # the server forks once its warm-up is over
            if pid is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    server.process.wait(1)
                if server.process.poll() is None:  # it lives on for the other workers
                    raise ChildProcessError("the fork server could not fork (out of memory or processes?)")
                if attempt == 2:
                    raise ConnectionError("the fork server exited")
                with _SERVER_LOCK:  # it died before it forked: start another
                    if _SERVER is server:
                        _forget_server()
                continue
            worker = _Worker(pid, status_r, name)
            status_r = -1
            return worker
        except OSError as exc:
            raise InspectorError(f"cannot start a worker process: {type(exc).__name__}: {exc}") from exc
        finally:
            for fd in (status_r, status_w):
                if fd >= 0:
                    os.close(fd)
    raise AssertionError("unreachable")


def _read_status(fd: int) -> int | None:
    """One number from a status pipe; None at its end (the server is gone)."""
    data = b""
    while len(data) < _STATUS.size:
        chunk = os.read(fd, _STATUS.size - len(data))
        if not chunk:
            return None
        data += chunk
    return _STATUS.unpack(data)[0]


class _Worker:
    """A worker forked by the fork server, with what the pool asks of a process (``multiprocessing.Process``'s
    names): its ``pid``, a ``sentinel`` ready when it has ended, its ``exitcode`` (a signal's as a negative
    number), ``join``, ``is_alive``, ``terminate``, ``kill``."""

    def __init__(self, pid: int, status: int, name: str) -> None:
        self.pid = pid
        self.name = name
        self.sentinel = status  # the status pipe's read end: readable once the server has reaped it
        self.exitcode: int | None = None
        self._ended = False
        # closed with this object; not at exit before the pool's own atexit stop has joined it
        weakref.finalize(self, os.close, status).atexit = False

    def _poll(self, timeout: float | None = 0.0) -> bool:
        if not self._ended and wait([self.sentinel], timeout):
            self.exitcode = _read_status(self.sentinel)  # None: the server went without saying
            self._ended = True
        return self._ended

    def join(self, timeout: float | None = None) -> None:
        """Wait until it has ended (at most ``timeout`` seconds)."""
        self._poll(timeout)

    def is_alive(self) -> bool:
        return not self._poll()

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        if not self._poll():  # reaped: its pid may be another process's by now
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, sig)


def _server_main(control_fd: int, boot: list[str]) -> None:
    """The fork server's whole life (in its own process): import ``boot``, then fork a worker for each request
    on the control socket, and report each worker's pid and exit code on its status pipe, until the pool closes
    the control socket and no worker of it is left."""
    control = socket.socket(fileno=control_fd)
    for module in boot:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - a warm-up that fails only leaves the workers cold
            traceback.print_exc()
    # A child's end wakes the loop below: SIGCHLD writes to this pipe (a handler must be set for that).
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    statuses: dict[int, int] = {}  # pid of a live worker -> the write end of its status pipe
    listening = True
    while listening or statuses:
        ready = wait([control, wake_r] if listening else [wake_r], timeout=1.0)
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 4096):
                    pass
        if control in ready:
            try:
                request, fds, _, _ = socket.recv_fds(control, 1, 2)
            except OSError:
                request, fds = b"", []
            if not request or len(fds) != 2:
                for fd in fds:
                    os.close(fd)
                listening = False  # the pool has gone or asks the server to stop
                control.close()
            else:
                conn_fd, status_w = fds
                try:
                    pid = os.fork()
                except OSError:  # no memory or processes left: this worker's end (the pool says so), not the server's
                    os.close(conn_fd)
                    os.close(status_w)
                    continue
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for fd in (wake_r, wake_w, status_w, *statuses.values()):
                        os.close(fd)
                    control.close()
                    _worker_process(conn_fd)
                os.close(conn_fd)  # the worker holds it now: when the worker ends, the pool's end says so
                with contextlib.suppress(OSError):
                    os.write(status_w, _STATUS.pack(pid))
                statuses[pid] = status_w
        _reap(statuses)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # nothing to tidy in a process that only forks (and torch's teardown is slow)


def _reap(statuses: dict) -> None:
    """Tell the pool the exit code of every worker that has ended."""
    while statuses:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = statuses.pop(pid, None)
        if fd is not None:
            with contextlib.suppress(OSError):  # the pool may have let go of this worker already
                os.write(fd, _STATUS.pack(os.waitstatus_to_exitcode(status)))
            os.close(fd)


def _worker_process(conn_fd: int) -> None:
    """A freshly forked worker: runs ``_worker_main`` and never returns into the server's loop."""
    code = 1
    try:
        _worker_main(Connection(conn_fd))
        code = 0
    except BaseException:  # noqa: BLE001 - the exit code tells the pool
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


# ---------------------------------------------------------------- the warm pool


# Starting a worker costs seconds (torch, executorch and the quantizer import, and their first
# calls warm up): one pool per process keeps its workers between sweeps, until they have been
# idle for IDLE_SECONDS (FOLD_INSPECTOR_POOL_IDLE) or the process exits.
IDLE_SECONDS = float(os.environ.get("FOLD_INSPECTOR_POOL_IDLE", "300"))
_SHARED: LocalPool | None = None
_SHARED_LOCK = threading.Lock()
_IDLE_TIMER: threading.Timer | None = None


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
        except Exception:  # noqa: BLE001 - a cluster that cannot say its CPUs: as many as asked for
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


# At exit (run in the reverse order): the workers stop first, then their fork server, at once even mid-warm-up.
atexit.register(lambda: stop_server(mid_warm_up=True))
atexit.register(shutdown)
atexit.register(shutdown_ray)
also_clear(shutdown)  # inspector.clear_cache(): the workers' caches go with them
also_clear(shutdown_ray)

__all__ = ["EXECUTORS", "InlinePool", "LocalPool", "RayPool", "pool_for", "run_one", "server_pid", "shutdown",
           "shutdown_ray", "signal_text", "start_server", "stop_server", "warm_pool", "warm_workers"]
