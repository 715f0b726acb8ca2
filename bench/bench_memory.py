"""Peak memory of analysing a 10,000-node model, against holding its exported program.

Runs in a fresh child process (so nothing else this script did counts) and reads the kernel's
own figures (``/proc/self/status``: VmRSS now, VmHWM the peak, reset through ``clear_refs``):

1. after the imports and a warm-up analysis of a tiny model (executorch's modules loaded): the
   baseline;
2. the generated network (``sample_models.generated.GeneratedBlocks``, exported with
   ``torch.export``) held: what holding its program costs over the baseline;
3. peak while ``inspector.analyze(program, stage="aten")`` decides all its sites: what analysing
   costs over the baseline, program included.

Target from the speed issue: the ratio (3) / (2) at most 2. Linux only (procfs).
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 2.0
BLOCKS = 1760  # about 10,000 nodes at aten


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS


def child() -> None:
    sys.path.insert(0, str(ROOT))
    warnings.filterwarnings("ignore")
    import torch

    import inspector
    from sample_models.generated import GeneratedBlocks

    inspector.analyze(GeneratedBlocks(blocks=4), example_inputs=GeneratedBlocks(blocks=4).example_inputs(),
                      stage="aten")
    inspector.clear_cache()
    gc.collect()
    baseline = _status("VmRSS")

    model = GeneratedBlocks(blocks=BLOCKS)
    inputs = model.example_inputs()
    program = torch.export.export(model, inputs)
    del model
    gc.collect()
    holding = _status("VmRSS") - baseline

    _reset_peak()
    analysis = inspector.analyze(program, example_inputs=inputs, stage="aten", rule="state-aware")
    peak = _status("VmHWM") - baseline
    print(json.dumps({"nodes": len(program.graph.nodes), "sites": len(analysis.sites),
                      "holding": holding, "peak": peak}))


def main() -> None:
    out = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        print(out.stderr[-2000:], file=sys.stderr)
        raise SystemExit(f"the measuring process failed (exit {out.returncode})")
    m = json.loads(out.stdout.strip().splitlines()[-1])
    ratio = m["peak"] / m["holding"]
    verdict = "within target" if ratio <= TARGET_RATIO else "OVER target"
    mib = 1024 * 1024
    print(f"holding the exported program, {m['nodes']} nodes: {m['holding'] / mib:.0f} MiB over the baseline")
    print(f"peak while analysing it ({m['sites']} sites, aten): {m['peak'] / mib:.0f} MiB over the baseline")
    print(f"ratio {ratio:.2f}x (target <= {TARGET_RATIO:.0f}x: {verdict})")


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
    else:
        main()
