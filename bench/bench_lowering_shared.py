"""A warm variant's lowering, with the shared work done once, against ExecuTorch's own call on the same program.

Each sample goes through ExecuTorch's flow up to the lowering, ExecuTorch alone (export; in the INT flow the
accelerator's quantizer, one calibration call, convert, re-export). Its program is then lowered, warm (each path has
lowered it once already), in three ways that alternate, ``REPEATS`` times each, the median counting:

- ``executorch``: ``to_edge_transform_and_lower`` with the TOSA partitioner for the accelerator's TOSA specification,
  nothing of the inspector around it;
- ``decompositions``: the same call inside ``shared_decompositions()`` alone (inspector/_doors/decompositions.py:
  torch.export's listing of CompositeImplicitAutograd operators materialised once a listing, py_impl's closures
  kept);
- ``door``: the inspector's lowering (``_doors/tosa.lower``): that scope, the provenance records shared, and no
  cyclic collection inside the call. Each timed call of every path ends with a collection of the young generation
  (``gc.collect(0)``), so the garbage the door leaves to the collector is paid inside its time.

Prints, per (sample, accelerator), the seconds of each and the ratios to ExecuTorch's own (the target for the door:
<= 0.75x), then the medians. No thresholds are asserted: the machine is shared and its speed moves within minutes.
"""

from __future__ import annotations

import copy
import gc
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

os.environ["FOLD_INSPECTOR_STORE"] = "off"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
warnings.filterwarnings("ignore")

import torch

import sample_models
from inspector._base import quiet as _quiet
from inspector._doors import decompositions as _decompositions, tosa as _tosa

TARGET = 0.75
REPEATS = 5
CASES = (("conv_mul_scalar", "tosa-int"), ("stateful_conv_mul", "ethos-u55-128"), ("conv1d_mul", "tosa-fp"),
         ("resnet_basic_block", "ethos-u85-256"), ("nfnet_block", "ethos-u55-128"))


def program_for(name: str, accelerator: str):
    """ExecuTorch's own flow up to the lowering, ExecuTorch alone: (program, TOSA specification)."""
    from executorch.backends.arm.ethosu import EthosUCompileSpec
    from executorch.backends.arm.quantizer import EthosUQuantizer, TOSAQuantizer, get_symmetric_quantization_config
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    model = sample_models.get(name)
    inputs = model.example_inputs()
    program = torch.export.export(copy.deepcopy(model), copy.deepcopy(inputs))
    if accelerator == "tosa-fp":
        return program, "TOSA-1.0+FP"
    if accelerator == "tosa-int":
        spec = "TOSA-1.0+INT"
        quantizer = TOSAQuantizer(TosaCompileSpec(spec))
    else:
        ethos = EthosUCompileSpec(accelerator)
        spec, quantizer = str(ethos.tosa_spec), EthosUQuantizer(ethos)
    quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(program.module(check_guards=False), quantizer)
    with torch.no_grad():
        prepared(*copy.deepcopy(inputs))
    return torch.export.export(convert_pt2e(prepared), copy.deepcopy(inputs)), spec


def executorch_lower(program, spec: str):
    """ExecuTorch's own call, nothing of the inspector around it."""
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import to_edge_transform_and_lower

    return to_edge_transform_and_lower(program, partitioner=[TOSAPartitioner(TosaCompileSpec(spec))])


def decompositions_lower(program, spec: str):
    with _decompositions.shared_decompositions():
        return executorch_lower(program, spec)


PATHS = {"executorch": executorch_lower, "decompositions": decompositions_lower, "door": _tosa.lower}


def timed(lower, program, spec: str) -> float:
    program = copy.deepcopy(program)  # outside the time: every path lowers a private copy
    t0 = time.perf_counter()
    lower(program, spec)
    gc.collect(0)  # the young garbage left behind is paid here, by every path
    return time.perf_counter() - t0


def main() -> int:
    print(f"cores available: {len(os.sched_getaffinity(0))}; {_decompositions.status().reason}")
    door, shortcut = [], []
    for name, accelerator in CASES:
        with _quiet.captured_fds(), _quiet.quiet_loggers("executorch.backends.arm"):
            program, spec = program_for(name, accelerator)
            for lower in PATHS.values():  # warm: each path has lowered this program once
                timed(lower, program, spec)
            seconds = {path: [] for path in PATHS}
            for _ in range(REPEATS):
                for path, lower in PATHS.items():
                    seconds[path].append(timed(lower, program, spec))
        median = {path: statistics.median(values) for path, values in seconds.items()}
        door.append(median["door"] / median["executorch"])
        shortcut.append(median["decompositions"] / median["executorch"])
        verdict = "within target" if door[-1] <= TARGET else "OVER target"
        print(f"{name:<20} {accelerator:<14} executorch {median['executorch']:6.2f} s, decompositions shared "
              f"{median['decompositions']:6.2f} s ({shortcut[-1]:4.2f}x), the door's lowering {median['door']:6.2f} s "
              f"({door[-1]:4.2f}x, {verdict} <= {TARGET})")
    print(f"median ratio: the door's lowering {statistics.median(door):.2f}x (worst {max(door):.2f}x), decompositions "
          f"shared alone {statistics.median(shortcut):.2f}x (worst {max(shortcut):.2f}x); target <= {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
