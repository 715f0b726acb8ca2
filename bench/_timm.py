"""timm for the benchmarks: installed on first use, imported with torchvision's C ops skipped.

timm and torchvision are not dependencies of the project: they are installed without their
dependencies into ``.venv/bench-extras`` on first use (``BENCH_EXTRAS=<folder>`` names another
folder that holds them). torchvision's wheel is a CUDA build whose C ops do not load with the CPU
torch; its fake-op registrations are stubbed before import, which is all the model definitions
need.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = Path(os.environ.get("BENCH_EXTRAS") or ROOT / ".venv" / "bench-extras")
PINS = ("timm==1.0.29", "torchvision==0.28.0")


def ensure_extras() -> None:
    """timm and torchvision in ``EXTRAS`` (pip --target, no dependencies), installed if missing."""
    if (EXTRAS / "timm").is_dir() and (EXTRAS / "torchvision").is_dir():
        return
    print(f"installing {' '.join(PINS)} into {EXTRAS} (no dependencies)", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(EXTRAS), *PINS],
                   check=True)


def import_timm():
    """The ``timm`` module, from ``EXTRAS``."""
    if str(EXTRAS) not in sys.path:
        sys.path.insert(0, str(EXTRAS))
    # torchvision's C ops are a CUDA build: skip the fake-op registrations that need them
    sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
    import timm

    return timm


def bench_target(spec: str, seed: int = 0):
    """(model, example inputs) a benchmark runs: ``name@size`` is a timm net with random weights (seeded) and one
    ``size`` x ``size`` image; anything else (``sample:NAME``, ``file.py:Class``) goes to the loader as it is."""
    if "@" not in spec:
        return spec, None
    import torch

    name, size = spec.split("@")
    timm = import_timm()
    torch.manual_seed(seed)
    model = timm.create_model(name, pretrained=False).eval()
    torch.manual_seed(seed + 1)
    return model, (torch.rand(1, 3, int(size), int(size)),)
