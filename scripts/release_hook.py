"""Where the installed FoldScalarMulIntoConvPass folds, measured in ExecuTorch's own flow, with no inspector code.

Run it with the Python of the environment to measure (any executorch that ships the pass)::

    python scripts/release_hook.py --samples conv1d_mul,conv_mul_scalar --cycles conv_mul_scalar --out hook.json

For each sample and flow it runs ExecuTorch's own flow (INT: export, the accelerator's quantizer, prepare_pt2e,
one calibration call, convert_pt2e, export again, ``to_edge_transform_and_lower`` with the TOSA or Ethos-U
partitioner; FP: export, ``to_edge_transform_and_lower`` with ``TOSAPartitioner(TosaCompileSpec("TOSA-1.0+FP"))``)
with a hook on the installed pass's own ``call``, which records, per call, whether it was the
transform-for-annotation call (``self.exported_program is None``) or a lowering call, and which mul nodes the
call removed. The lowering stops after the fold call of the last TOSA partition (nothing after it folds), except
for the ``--cycles`` samples on an Ethos-U: those lower to the end, Vela included, and their cycles are read
from the summary CSV Vela writes under ``EthosUCompileSpec.dump_intermediate_artifacts_to(dir)``.

The only project code imported is ``sample_models`` (plain torch modules with their example inputs): the script
runs on any release the inspector may not. It prints (or writes) one JSON document; scripts/check_releases.py
reads it.
"""

from __future__ import annotations

import argparse
import copy
import csv
import hashlib
import json
import os
import platform
import re
import sys
import tempfile
import time
import traceback
import warnings
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

FLOWS = ("tosa-int", "ethos-u55-128", "tosa-fp")
PACKAGES = ("executorch", "torch", "torchao", "tosa-tools", "ethos-u-vela")
_PASS_FILES = ("backends/arm/_passes/fold_scalar_mul_into_conv_pass.py", "backends/arm/_passes/arm_pass_manager.py")


class _Stop(Exception):
    """The fold call of the last TOSA partition is over: nothing after it changes what folded."""


def _muls(graph_module) -> list[str]:
    """The names of the mul nodes of a graph (aten and edge spellings, in-place too)."""
    return [n.name for n in graph_module.graph.nodes if n.op == "call_function"
            and re.fullmatch(r"(aten\.)?mul_?\.\w+", getattr(n.target, "__name__", ""))]


def stack() -> dict[str, str]:
    """The versions of the stack measured, and a digest of the pass file and the pass manager."""
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    import executorch

    root = Path(next(iter(executorch.__path__)))  # a namespace package: no __file__
    for path in _PASS_FILES:
        found[Path(path).name] = hashlib.sha256((root / path).read_bytes()).hexdigest()[:16]
    return found


def own_flow(model, inputs: tuple, flow: str, cycles_dir: str | None = None) -> dict:
    """ExecuTorch's own flow for ``flow`` with a hook on the installed pass's ``call``: per call, its phase and
    the muls it removed; with ``cycles_dir`` (an Ethos-U only) the whole lowering, Vela included, dumping there."""
    import torch
    from executorch.backends.arm._passes.fold_scalar_mul_into_conv_pass import FoldScalarMulIntoConvPass
    from executorch.backends.arm.quantizer import get_symmetric_quantization_config
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    calls: list[dict] = []
    partitions: list[int] = []
    installed_call = FoldScalarMulIntoConvPass.__dict__["call"]

    def call(self, graph_module):  # the hook: the installed call itself, counted around
        before = _muls(graph_module)
        result = installed_call(self, graph_module)
        after = set(_muls(graph_module))
        lowering = getattr(self, "exported_program", None) is not None
        calls.append({"phase": "lowering" if lowering else "tfa", "muls": len(before),
                      "removed": [m for m in before if m not in after]})
        if lowering and cycles_dir is None and sum(c["phase"] == "lowering" for c in calls) >= partitions[0]:
            raise _Stop()
        return result

    program = torch.export.export(copy.deepcopy(model), copy.deepcopy(inputs))
    if flow == "tosa-fp":
        partitioner = TOSAPartitioner(TosaCompileSpec("TOSA-1.0+FP"))
    else:
        if flow == "tosa-int":
            from executorch.backends.arm.quantizer import TOSAQuantizer

            spec = TosaCompileSpec("TOSA-1.0+INT")
            quantizer, partitioner = TOSAQuantizer(spec), TOSAPartitioner(spec)
        else:
            from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
            from executorch.backends.arm.quantizer import EthosUQuantizer

            spec = EthosUCompileSpec(flow)
            if cycles_dir is not None:
                spec.dump_intermediate_artifacts_to(cycles_dir)
            quantizer, partitioner = EthosUQuantizer(spec), EthosUPartitioner(spec)
        quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
    partition = partitioner.partition

    def counted(exported_program):
        result = partition(exported_program)
        partitions.append(len(result.partition_tags))
        return result

    partitioner.partition = counted
    FoldScalarMulIntoConvPass.call = call
    started = time.perf_counter()
    try:
        if flow != "tosa-fp":
            prepared = prepare_pt2e(program.module(check_guards=False), quantizer)
            with torch.no_grad():
                prepared(*copy.deepcopy(inputs))
            program = torch.export.export(convert_pt2e(prepared), copy.deepcopy(inputs))
        to_edge_transform_and_lower(program, partitioner=[partitioner])
    except Exception as exc:  # noqa: BLE001 - the stop, wrapped by the pass manager, or the flow's own failure
        cause = exc
        while cause is not None and not isinstance(cause, _Stop):
            cause = cause.__cause__ or cause.__context__
        if cause is None:  # ExecuTorch's own flow fails here: the calls it made before are kept with the error
            return {"calls": calls, "partitions": partitions[0] if partitions else 0, "error": _one_line(exc),
                    "trace": traceback.format_exc()[-2000:], "seconds": round(time.perf_counter() - started, 2)}
    finally:
        FoldScalarMulIntoConvPass.call = installed_call
    return {"calls": calls, "partitions": partitions[0] if partitions else 0,
            "seconds": round(time.perf_counter() - started, 2)}


def vela_summary(folder: str) -> dict:
    """The one summary row Vela wrote under ``folder`` (``output/out_summary_*.csv``), or why there is none."""
    output = os.path.join(folder, "output")
    names = sorted(n for n in os.listdir(output) if n.startswith("out_summary_") and n.endswith(".csv")) \
        if os.path.isdir(output) else []
    if len(names) != 1:
        return {"error": f"Vela wrote {len(names)} summary files"}
    with open(os.path.join(output, names[0]), newline="") as f:
        row = next(csv.DictReader(f))
    return {"cycles_total": int(float(row["cycles_total"])), "cycles_npu": int(float(row["cycles_npu"])),
            "passes_before_fusing": int(float(row["passes_before_fusing"]))}


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def measure(samples: list[str], flows: list[str], cycles: list[str], log=sys.stderr, keep=None) -> dict:
    """Every sample x flow, counted by the hook; Vela's cycles for the ``cycles`` samples on every Ethos-U flow.
    ``keep(result)`` is called after each sample (the script writes its file then: a long run stopped keeps them)."""
    import sample_models

    out: dict = {"stack": stack(), "when": time.strftime("%Y-%m-%d"), "flows": flows, "samples": {}}
    for name in samples:
        model = sample_models.get(name)
        inputs = model.example_inputs()
        entry: dict = {"expected_tfa": [d for d, _ in model.expected_upstream("tfa")]}
        for flow in flows:
            dump = tempfile.mkdtemp(prefix="release-hook-") if name in cycles and flow.startswith("ethos-u") else None
            try:
                entry[flow] = own_flow(model, inputs, flow, dump)
                if dump is not None:
                    entry[flow]["vela"] = vela_summary(dump)
            except Exception as exc:  # noqa: BLE001 - one sample's failure is a row, the others stand
                entry[flow] = {"error": _one_line(exc), "trace": traceback.format_exc()[-2000:]}
            finally:
                if dump is not None:
                    import shutil

                    shutil.rmtree(dump, ignore_errors=True)
            got = entry[flow]
            print(f"{name:<36} {flow:<14} " + f"{got.get('seconds', 0):6.1f} s  "
                  + "  ".join(f"{c['phase']}:-{len(c['removed'])}" for c in got.get("calls", ()))
                  + (f"  cycles {got['vela'].get('cycles_total')}" if "vela" in got else "")
                  + (f"  error: {got['error']}" if "error" in got else ""), file=log, flush=True)
        out["samples"][name] = entry
        if keep is not None:
            keep(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=str(Path(__file__).resolve().parents[1]),
                        help="the checkout whose sample_models to import (default: this script's)")
    parser.add_argument("--samples", default="", help="comma-separated sample names (default: every sample)")
    parser.add_argument("--flows", default=",".join(FLOWS), help=f"comma-separated, of {', '.join(FLOWS)}")
    parser.add_argument("--cycles", default="", help="comma-separated samples whose Ethos-U lowering runs Vela")
    parser.add_argument("--out", default=None, help="write the JSON here (default: stdout)")
    args = parser.parse_args(argv)
    sys.path.insert(0, args.repo)
    warnings.filterwarnings("ignore")
    import logging

    logging.disable(logging.WARNING)  # the Arm passes log each rewrite at WARNING
    import sample_models

    samples = [s for s in args.samples.split(",") if s] or sample_models.names()
    cycles = [s for s in args.cycles.split(",") if s]
    keep = (lambda result: Path(args.out).write_text(json.dumps(result, indent=1))) if args.out else None
    result = measure(samples, [f for f in args.flows.split(",") if f], cycles, keep=keep)
    if not args.out:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
