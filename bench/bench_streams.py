"""What a stream costs: ``compare`` of Silero's VAD over 79 speech frames on ethos-u85-256 against ExecuTorch's own flow
doing the same.

Each side is the first call of a fresh process (a fresh result store for the inspector):

1. ExecuTorch alone: the sample's module (``sample:silero_vad``, weights read from the silero-vad package),
   ``EthosUQuantizer`` for ethos-u85-256 (per-channel a8w8), calibrated on the clip's 125 frames and one copy with
   seeded noise (what the inspector calibrates on), converted, exported again, lowered once with the TOSA
   partitioner for the accelerator's TOSA specification, 79 frames on the TOSA reference model from a fresh state,
   the float model over the same 79 frames, and Vela on the delegate's flatbuffer;
2. ``inspector.compare("sample:silero_vad", variants=("off", "upstream"), steps=79, accelerator="ethos-u85-256")``: the same
   work (the VAD has no conv->mul site, so both variants fold alike and run once), plus every measurement per frame.

Target: (2) <= 1.20x (1). Printed: both times, the ratio, the machine's load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.20
FRAMES = 79
ACCELERATOR = "ethos-u85-256"


def executorch_alone() -> float:
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(ROOT))
    import copy

    import torch
    from executorch.backends.arm.arm_vela import vela_compile
    from executorch.backends.arm.ethosu import EthosUCompileSpec
    from executorch.backends.arm.quantizer import EthosUQuantizer, get_symmetric_quantization_config
    from executorch.backends.arm.test.runner_utils import TosaReferenceModelDispatch
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    import sample_models

    t0 = time.perf_counter()
    model = sample_models.get("silero_vad")
    stream = [frame for frame in model.example_stream()]
    gen = torch.Generator().manual_seed(0)
    noisy = [tuple(x + torch.randn(x.shape, generator=gen) * 0.1 * float(x.std()) for x in f) for f in stream]
    spec = EthosUCompileSpec(ACCELERATOR)
    quantizer = EthosUQuantizer(spec)
    quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
    module = torch.export.export(copy.deepcopy(model), stream[0]).module(check_guards=False)
    prepared = prepare_pt2e(module, quantizer)
    state = {k: v.clone() for k, v in model.named_buffers() if k in ("h", "c", "context")}  # what carries over

    def reset(m):
        for name, buf in m.named_buffers():
            if name in state and buf.shape == state[name].shape:
                buf.copy_(state[name])

    with torch.no_grad():
        for frames in (stream, noisy):
            reset(prepared)
            for f in frames:
                prepared(*f)
        reset(prepared)
    converted = convert_pt2e(prepared)
    lowered = to_edge_transform_and_lower(torch.export.export(converted, stream[0]),
                                          partitioner=[TOSAPartitioner(TosaCompileSpec(str(spec.tosa_spec)))])
    program = lowered.exported_program()
    run = program.module()
    reset(run)
    with torch.no_grad(), TosaReferenceModelDispatch():
        quantized = [run(*f) for f in stream[:FRAMES]]
    reference = sample_models.get("silero_vad")
    with torch.no_grad():
        floats = [reference(*f) for f in stream[:FRAMES]]
    for node in program.graph_module.graph.nodes:
        if node.op == "call_function" and "executorch_call_delegate" in str(node.target):
            delegate = getattr(program.graph_module, node.args[0].target)
            with tempfile.TemporaryDirectory() as folder:
                vela_compile(bytes(delegate.processed_bytes), [*spec.compiler_flags, f"--output-dir={folder}"])
    assert len(quantized) == len(floats) == FRAMES
    return time.perf_counter() - t0


def inspector_compare() -> float:
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(ROOT))
    import inspector

    t0 = time.perf_counter()
    c = inspector.compare("sample:silero_vad", variants=("off", "upstream"), steps=FRAMES, accelerator=ACCELERATOR,
                          workers=1)
    assert not c.errors and c.steps == FRAMES
    return time.perf_counter() - t0


def _child(what: str) -> float:
    with tempfile.TemporaryDirectory() as store:
        proc = subprocess.run([sys.executable, __file__, "--child", what], capture_output=True, text=True, cwd=ROOT,
                              env=dict(os.environ, FOLD_INSPECTOR_STORE=store))
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    one, five, _ = os.getloadavg()
    alone = _child("executorch")
    ours = _child("inspector")
    ratio = ours / alone
    print(f"silero_vad, {FRAMES} frames on {ACCELERATOR}: ExecuTorch's own flow {alone:6.1f} s, inspector.compare "
          f"(off, upstream) {ours:6.1f} s: {ratio:.2f}x (target <= {TARGET}x: {'met' if ratio <= TARGET else 'NOT met'})"
          f"  [load {one:.2f}/{five:.2f}]")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(executorch_alone() if sys.argv[2] == "executorch" else inspector_compare()))
    else:
        main()
