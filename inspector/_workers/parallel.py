"""What compare's and the sweep's worker processes share: the cores, the program archive, ``__main__``.

The workers themselves are ``pool.py``'s (a warm pool per process, a pipe per worker, so that a
worker that dies costs only its task). Workers are never forked from this process (it may hold
OpenMP thread pools, the widget's threads or a Jupyter kernel's): they come from the pool's
single-threaded fork server, or are spawned where there is none, and receive data, never live
modules: the target's exported program as a ``torch.export.save`` archive written by this
process, read back through the safe loader.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import types

import torch


def available_workers() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


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
