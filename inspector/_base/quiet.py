"""Keep the stack's own noise off the user's screen, and keep it for ``--debug``.

What torch, torchao, executorch and the TOSA reference model print says nothing
about the user's model: import-time logs (optional CUDA kernels, pytree
deprecations), deprecation warnings from deep copies, a dump of the graph before
an export error, and the reference model's C++ warnings, which it writes straight
to file descriptor 1 where Python-level redirection cannot catch them
(docs/stack-facts.md, "Traps that lose data or mislead").
Scripts piping ``--json`` need stdout to hold exactly one JSON document.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass
from collections.abc import Iterator
import ctypes

# Loggers that only speak at import time about things the inspector does not use.
_IMPORT_LOGGERS = ("torchao", "torch.utils._pytree")
# Deprecation noise raised inside torch's own deep copies and tree utilities.
_NOISE = (
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
)


def install_warning_filters() -> None:
    """Ignore the stack's known deprecation noise (targeted by message; other warnings still show)."""
    for category, message in _NOISE:
        warnings.filterwarnings("ignore", message=message, category=category)


@contextlib.contextmanager
def quiet_loggers(*names: str, level: int = logging.ERROR) -> Iterator[None]:
    """Raise these loggers to ``level`` for this scope (restored after)."""
    saved = [(logging.getLogger(n), logging.getLogger(n).level) for n in names]
    for logger, _ in saved:
        logger.setLevel(level)
    try:
        yield
    finally:
        for logger, old in saved:
            logger.setLevel(old)


def quiet_imports():
    """Raise the import-time loggers of torchao and torch's pytree to ERROR for this scope."""
    return quiet_loggers(*_IMPORT_LOGGERS)


# torch logs tracebacks of the failed meta kernel before raising an export error the inspector
# reports in one line anyway.
EXPORT_LOGGERS = ("torch._subclasses.fake_tensor", "torch.export", "torch._export",
                  "torch.fx.experimental.symbolic_shapes", "torch._dynamo")


@dataclass(kw_only=True)
class Captured:
    """What the code inside ``captured_output`` printed (Python and C++ alike); filled on exit."""

    text: str = ""

    def lines(self) -> list[str]:
        return [line for line in self.text.splitlines() if line.strip()]


_FD_LOCK = threading.RLock()


@contextlib.contextmanager
def captured_fds() -> Iterator[Captured]:
    """Capture what is written to file descriptors 1 and 2 in this scope (C++ output included).

    Process-wide for the duration, so such scopes are serialized. Python's own
    ``sys.stdout`` objects are left alone: in Jupyter they do not write to these
    descriptors, so a notebook's other output is never swallowed; in a script,
    Python writes reach the descriptors after a flush and are captured too.
    Anything that must stay visible meanwhile (a progress bar) writes to its own
    duplicate of the descriptor, made before the scope.
    """
    captured = Captured()
    with _FD_LOCK, tempfile.TemporaryFile(mode="w+b") as sink:
        try:
            with _redirect_fds(sink):
                yield captured
        finally:
            sink.flush()
            sink.seek(0)
            captured.text = sink.read().decode("utf-8", "replace")


@contextlib.contextmanager
def captured_python() -> Iterator[Captured]:
    """Capture Python-level writes to ``sys.stdout`` / ``sys.stderr`` in this scope (e.g. torch
    printing the graph before an export error). Swaps the process's ``sys`` streams: use it
    only around short synchronous calls, never around background work."""
    captured = Captured()
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            yield captured
    finally:
        captured.text = buffer.getvalue()


def _flush_c_stdio() -> None:
    with contextlib.suppress(Exception):

        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def _redirect_fds(sink) -> Iterator[None]:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = []
    try:
        for fd in (1, 2):
            try:
                saved.append((fd, os.dup(fd)))
            except OSError:  # no such descriptor (a detached process): nothing to redirect
                continue
            os.dup2(sink.fileno(), fd)
        yield
    finally:
        for stream in (sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(Exception):
                stream.flush()
        _flush_c_stdio()  # C/C++ output still in libc's buffers belongs to this scope
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
