"""The first ``analyze(stage="lowering")`` of a model against ExecuTorch's own flow up to the same call.

``inspector.analyze(model, stage="lowering", accelerator=A)`` captures the graph the installed
``FoldScalarMulIntoConvPass`` receives inside ``to_edge_transform_and_lower`` for ``A`` (in the INT flow:
``prepare_pt2e``, one calibration call, ``convert_pt2e``, re-export, then the backend's passes up to the fold
call) and decides it. The plain flow here is the same work written with ExecuTorch alone (no inspector code):
export, the accelerator's quantizer, one calibration call, convert, re-export, ``to_edge_transform_and_lower``
with the TOSA partitioner for the accelerator's TOSA specification, stopped by a hook right after the fold
pass's call in the last TOSA partition. Both start from a fresh copy of the sample; they alternate, and the
median of ``REPEATS`` runs of each counts. Prints the ratio analyze / plain per (sample, accelerator), the
target from the lowering-stage issue being <= 1.10, and the median time of a marker toggle on the lowering
analysis (it re-decides the captured graph, never lowers again; target < 100 ms). No thresholds are asserted:
the machine is shared and its speed moves within minutes.
"""

from __future__ import annotations

import copy
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

os.environ["FOLD_INSPECTOR_STORE"] = "off"  # every number computed, none read back from disk
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
warnings.filterwarnings("ignore")

import torch

import inspector
import sample_models

TARGET_RATIO = 1.10
TARGET_TOGGLE_MS = 100
REPEATS = 3
SAMPLES = ("conv_mul_scalar", "conv1d_mul", "shared_conv_mul", "nfnet_block")
ACCELERATORS = ("tosa-int", "ethos-u55-128", "tosa-fp")


class _Stop(Exception):
    """The fold pass's call in the last partition is over: the plain flow stops there."""


def plain_flow(name: str, accelerator: str) -> None:
    """ExecuTorch's own flow for ``accelerator`` up to (and including) the fold pass's call in the last TOSA
    partition, written with ExecuTorch alone."""
    from executorch.backends.arm._passes import arm_pass_manager
    from executorch.backends.arm._passes.fold_scalar_mul_into_conv_pass import FoldScalarMulIntoConvPass
    from executorch.backends.arm.ethosu import EthosUCompileSpec
    from executorch.backends.arm.quantizer import EthosUQuantizer, TOSAQuantizer, get_symmetric_quantization_config
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    model = sample_models.get(name)
    inputs = model.example_inputs()
    program = torch.export.export(copy.deepcopy(model), inputs)
    if accelerator == "tosa-fp":
        spec = TosaCompileSpec("TOSA-1.0+FP")
    else:
        if accelerator == "tosa-int":
            spec = TosaCompileSpec("TOSA-1.0+INT")
            quantizer = TOSAQuantizer(spec)
        else:
            ethos = EthosUCompileSpec(accelerator)
            quantizer = EthosUQuantizer(ethos)
            spec = TosaCompileSpec(str(ethos.tosa_spec))
        quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
        prepared = prepare_pt2e(program.module(check_guards=False), quantizer)
        with torch.no_grad():
            prepared(*copy.deepcopy(inputs))
        program = torch.export.export(convert_pt2e(prepared), copy.deepcopy(inputs))
    partitioner = TOSAPartitioner(spec)
    partitions, calls = [], []
    partition = partitioner.partition

    def counting(exported_program):
        result = partition(exported_program)
        partitions.append(len(result.partition_tags))
        return result

    partitioner.partition = counting

    class Stopping(FoldScalarMulIntoConvPass):
        def call(self, graph_module):
            result = super().call(graph_module)
            if self.exported_program is not None:
                calls.append(1)
                if len(calls) >= partitions[0]:
                    raise _Stop()
            return result

    bound = arm_pass_manager.FoldScalarMulIntoConvPass  # whatever is bound there now (the inspector binds one)
    arm_pass_manager.FoldScalarMulIntoConvPass = Stopping
    try:
        to_edge_transform_and_lower(program, partitioner=[partitioner])
    except Exception as exc:  # the stop, wrapped by the pass manager
        while exc is not None and not isinstance(exc, _Stop):
            exc = exc.__cause__ or exc.__context__
        if exc is None:
            raise
    finally:
        arm_pass_manager.FoldScalarMulIntoConvPass = bound


def first_analyze(name: str, accelerator: str) -> inspector.Analysis:
    """``analyze`` at lowering of a fresh copy of the sample (nothing of an earlier one reused)."""
    inspector.clear_cache()
    model = sample_models.get(name)
    return inspector.analyze(model, example_inputs=model.example_inputs(), stage="lowering", accelerator=accelerator)


def seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def toggle_ms(analysis: inspector.Analysis, repeats: int = 7) -> tuple[float, float] | None:
    """Median times of a marker toggle on the first site of ``analysis`` under ``state-aware`` (whose guard
    reads the markers): the core's re-decide, and the widget's whole toggle (re-decide, site rows, the focused
    before | after picture); None when there is no site to mark."""
    from widgets import FoldInspector

    if not analysis.sites:
        return None
    site = analysis.sites[0].id
    guarded = analysis.with_rule("state-aware")
    guarded.toggle_marker(site)  # warm
    core = statistics.median(seconds(lambda: guarded.toggle_marker(site)) for _ in range(repeats))
    app = FoldInspector(guarded, isolate=False)
    app.select_site(site)
    app.toggle_marker(site)  # warm
    widget = statistics.median(seconds(lambda: app.toggle_marker(site)) for _ in range(repeats))
    return core * 1e3, widget * 1e3


def main(names: list[str]) -> int:
    print(f"cores available: {len(os.sched_getaffinity(0))}")
    for accelerator in ACCELERATORS:  # warm both paths once (imports, the fork of nothing: all in this process)
        plain_flow("conv_mul_scalar", accelerator)
        first_analyze("conv_mul_scalar", accelerator)
    ratios = []
    for name in names:
        for accelerator in ACCELERATORS:
            plain, ours = [], []
            analysis = None
            for _ in range(REPEATS):
                plain.append(seconds(lambda name=name, accelerator=accelerator: plain_flow(name, accelerator)))
                t0 = time.perf_counter()
                analysis = first_analyze(name, accelerator)
                ours.append(time.perf_counter() - t0)
            a, p = statistics.median(ours), statistics.median(plain)
            ratios.append(a / p)
            toggle = toggle_ms(analysis)
            verdict = "within target" if a / p <= TARGET_RATIO else "OVER target"
            print(f"{name:<24} {accelerator:<14} analyze(stage='lowering') {a:6.2f} s, plain flow to the fold call "
                  f"{p:6.2f} s: {a / p:4.2f}x ({verdict} <= {TARGET_RATIO}); {analysis.summary()}; "
                  + (f"marker toggle {toggle[0]:.1f} ms (the widget's, redrawn: {toggle[1]:.0f} ms; target < "
                     f"{TARGET_TOGGLE_MS} ms)" if toggle is not None else "no site to toggle"))
    print(f"median ratio {statistics.median(ratios):.2f}x, worst {max(ratios):.2f}x (target <= {TARGET_RATIO})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or list(SAMPLES)))
