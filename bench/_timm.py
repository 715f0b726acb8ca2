"""timm for the benchmarks: the project's own `timm` extra (make setup installs it), imported as the
inspector imports it (``inspector/_targets/timm_nets.py``: torchvision's C ops are a CUDA build, skipped).

A benchmark's ``name@size`` is the inspector's ``timm:name@size`` target: random weights from seed 0, one
``size`` x ``size`` image from seed 1, the same model in every process.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from inspector._targets import timm_nets
from inspector._base.errors import InspectorError


def ensure_extras() -> None:
    """Stop with the one line that says how to install timm when it is missing."""
    try:
        timm_nets.import_timm()
    except InspectorError as exc:
        raise SystemExit(f"bench: {exc}") from None


def import_timm():
    """The ``timm`` module."""
    return timm_nets.import_timm()


def bench_target(spec: str, seed: int = timm_nets.WEIGHT_SEED):
    """(target, example inputs) a benchmark runs: ``name@size`` is ``timm:name@size`` (the inspector builds it);
    anything else (``sample:NAME``, ``file.py:Class``, ``timm:...``) goes to the loader as it is."""
    if seed != timm_nets.WEIGHT_SEED:
        raise ValueError(f"timm targets are built from seed {timm_nets.WEIGHT_SEED}")
    if "@" in spec and ":" not in spec:
        return timm_nets.PREFIX + spec, None
    return spec, None
