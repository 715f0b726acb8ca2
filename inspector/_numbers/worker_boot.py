"""What the worker pool's fork server loads once, so that every worker starts warm.

``_workers/pool.py`` forks worker processes from a fork server of its own (a process it starts, which
forks a worker on request) that imports this module first. Importing it imports torch, executorch,
the Arm quantizer, its TOSA backend and the reference model, then runs one tiny model (one 3x3 conv
and a mul, 4 channels, 8x8) through the whole flow a variant takes: export, the tfa capture, quantize, calibrate,
convert, lower, the reference model, and a ``.pt2`` round trip. A fresh process pays about 4 s
of imports and 7 s of first calls (executorch's edge dialect reads its operator YAML, torch's
export and the lowering warm their caches: docs/stack-facts.md); a worker forked from this
server inherits all of it and starts on its first task at once.

The fork server must stay single-threaded (a fork copies only the forking thread): torch runs
with one thread here, and nothing started here keeps a thread. Whatever goes wrong in the
warm-up is kept in ``FAILED`` and costs nothing else: the workers then warm on their first task.
The server's stdout is the parent's; the reference model's C++ warnings are captured.
"""

from __future__ import annotations

import gc
import signal

# Ctrl-C at a terminal reaches the whole process group: the server is the parent's to stop.
signal.signal(signal.SIGINT, signal.SIG_IGN)

FAILED: str | None = None  # why the warm-up did not finish, if it did not


def _warm_up() -> None:
    import torch  # the warm-up imports what every worker inherits: this module is the fork server's only
    from torch import nn

    try:
        import tqdm  # optional: a progress bar in the stack would start a monitor thread

        tqdm.tqdm.monitor_interval = 0  # no monitor thread (a progress bar in the stack would start one)
    except ImportError:
        pass

    torch.set_num_threads(1)  # no thread pool: a fork copies the forking thread only

    # imported to be inherited by every worker forked from here
    from . import flow as _flow
    from .._targets import load as _load, pt2 as _pt2
    from .._base import quiet as _quiet
    from .._doors import tosa as _tosa  # noqa: F401 - imported for the forks to inherit
    from .._workers.parallel import program_bytes
    from .quantization import DEFAULT, Plan, quantizations
    from .results import Variant

    _quiet.install_warning_filters()

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):
            return torch.relu(self.conv(x) * 0.5)

    torch.manual_seed(0)
    with _quiet.captured_fds(), _quiet.quiet_imports():
        target = _load.load(Tiny().eval(), (torch.randn(1, 4, 8, 8),))
        _pt2.load_pt2_bytes(program_bytes(target.exported))
        calibrated = _flow.choose_calibration(target, None, 1)
        reference = _flow.float_reference(target, 1)
        _flow.run_variant(target, Variant(rule="upstream"), calibrated, Plan.of(quantizations.get(DEFAULT), {}), 1,
                          reference, lambda phase, fraction: None)
    _load.clear_targets()
    import threading  # checked after the warm-up: no thread may be left in the server

    others = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    if others:
        raise RuntimeError(f"threads left running: {', '.join(others)}")
    # What the server holds now (the stack's modules, about a million objects) is never garbage: the
    # workers' collector skips it, instead of walking it at every full collection and writing into each
    # object's header, which copies every page a fork shares (Python's advice for processes that fork).
    gc.collect()
    gc.freeze()


try:
    _warm_up()
except BaseException as exc:  # noqa: BLE001 - a warm-up that fails only leaves the workers cold
    FAILED = f"{type(exc).__name__}: {exc}"
