"""compare(): overhead over the plain ExecuTorch flow, cached answers, and a 50-conv 3-variant run.

Everything is measured in this one process and printed as ratios against a
baseline measured in the same run (these machines are noisy; no thresholds are
asserted here). Targets from the issue: overhead <= 1.10x, cached answer < 50 ms.
"""

from __future__ import annotations

import copy
import logging
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
logging.getLogger("torchao").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

import torch  # noqa: E402

import inspector  # noqa: E402
from inspector import _executorch, _tosa  # noqa: E402
from inspector.compare import _calibration, clear_cache  # noqa: E402
from inspector._load import load  # noqa: E402
from sample_models.big import ConvStack  # noqa: E402


def plain_flow(model, inputs, batches):
    """The FACTS.md recipe with no inspector: quantize, calibrate, convert, lower, one reference run."""
    quantizer = _executorch.tosa_int_quantizer()
    ep = torch.export.export(copy.deepcopy(model), inputs)
    gm = _tosa.prepare_pt2e(ep.module(check_guards=False), quantizer)
    for batch in batches:
        gm(*batch)
    gm = _tosa.convert_pt2e(gm)
    lowered = _tosa.lower(torch.export.export(gm, inputs))
    with _tosa.reference_dispatch():
        return lowered.exported_program().module()(*inputs)


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    medium = ConvStack(convs=8, channels=16, size=28)
    inputs = medium.example_inputs()
    batches, _ = _calibration(load(medium), None, 1)
    plain_flow(medium, inputs, batches[:1])  # warm-up: imports, kernel caches

    plain, ours = [], []
    for _ in range(3):  # interleaved so drift on the machine hits both alike
        plain.append(timed(lambda: plain_flow(medium, inputs, batches)))
        clear_cache()
        ours.append(timed(lambda: inspector.compare(medium, ("upstream",))))
    p, o = min(plain), min(ours)
    print(f"medium model (8 convs, 16 ch, 28x28), best of 3: plain flow {p:.2f} s, compare(1 variant) {o:.2f} s, "
          f"overhead {o / p:.3f}x (target <= 1.10x)")

    cached = []
    for _ in range(5):
        cached.append(timed(lambda: inspector.compare(medium, ("upstream",))))
    print(f"cached variant: {min(cached) * 1e3:.1f} ms best, {max(cached) * 1e3:.1f} ms worst of 5 (target < 50 ms); "
          f"{o / min(cached):.0f}x faster than computing it")

    big = ConvStack()
    clear_cache()
    stages = {}
    t0 = time.perf_counter()
    result = inspector.compare(big, ("off", "upstream", "state-aware-strict"))
    wall = time.perf_counter() - t0
    for r in result.results:
        for k, v in r.timings.items():
            stages[k] = stages.get(k, 0.0) + v
    print(f"50 convs, 64 ch, 56x56, 3 variants: {wall:.1f} s wall; by stage: "
          + ", ".join(f"{k} {v:.1f} s" for k, v in stages.items()))
    for r in result.results:
        print(f"  {r.variant.label:20} folds tfa {r.folds['tfa']:2d}  SQNR {r.at_step(0).sqnr_db:6.2f} dB"
              f"{'  (cached: same decisions as an earlier variant)' if r.cached else ''}")


if __name__ == "__main__":
    main()
