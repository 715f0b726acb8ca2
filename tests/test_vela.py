"""The NPU cost of a variant: Vela on the TOSA program the inspector lowers, as ExecuTorch's own Ethos-U flow.

The reference is ExecuTorch's Ethos-U flow with no inspector code in it (``_executorch_flow``: torch,
executorch, torchao and Vela only), the fold turned off by swapping the pass the Arm pass manager
builds. The door (``inspector/_doors/vela.py``) compiles the TOSA partitioner's flatbuffer, lowered
once per configuration with the accelerator's TOSA spec, and must cost it as that flow does. Every
lowering is made once per file (the ``functools.cache`` helpers); docs/stack-facts.md has the numbers.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import functools
import io
import os
import sys
import tempfile

import pytest
import torch

TARGETS = ("ethos-u55-128", "ethos-u85-256")
INPUT_SHAPE = (1, 16, 32, 32)


class ConvTimesHalf(torch.nn.Module):
    """The site the fold is about: a conv whose output is multiplied by a scalar."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 32, 3, padding=1)

    def forward(self, x):
        return self.conv(x) * 0.5


def _model_and_inputs():
    torch.manual_seed(0)  # the same weights and calibration input for every flow of the file
    return ConvTimesHalf().eval(), (torch.randn(*INPUT_SHAPE),)


@contextlib.contextmanager
def _fold(on: bool):
    """The fold as installed (on), or a pass that does nothing in its place (off): the Arm pass manager
    looks ``FoldScalarMulIntoConvPass`` up in its module when it builds each pipeline."""
    from executorch.backends.arm._passes import arm_pass_manager
    from executorch.exir.pass_base import ExportPass
    from torch.fx.passes.infra.pass_base import PassResult

    class NoFold(ExportPass):
        def __init__(self, *args, **kwargs):  # built with (exported_program=...) or (tfa_pass=True)
            super().__init__()

        def call(self, graph_module):
            return PassResult(graph_module, False)

    installed = arm_pass_manager.FoldScalarMulIntoConvPass
    if not on:
        arm_pass_manager.FoldScalarMulIntoConvPass = NoFold
    try:
        yield
    finally:
        arm_pass_manager.FoldScalarMulIntoConvPass = installed


def _quantized(target: str, on: bool):
    """The model exported, quantized with the Ethos-U quantizer for ``target`` and exported again: a
    copy of one made once per configuration (the fold, when on, runs in prepare_pt2e's
    transform-for-annotation, so it is made in a ``_fold`` scope too)."""
    return copy.deepcopy(_quantized_once(target, on))


@functools.cache
def _quantized_once(target: str, on: bool):
    from executorch.backends.arm.ethosu import EthosUCompileSpec
    from executorch.backends.arm.quantizer import EthosUQuantizer, get_symmetric_quantization_config
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    model, inputs = _model_and_inputs()
    with _fold(on):
        module = torch.export.export(model, inputs).module(check_guards=False)
        quantizer = EthosUQuantizer(EthosUCompileSpec(target))
        quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
        prepared = prepare_pt2e(module, quantizer)
        prepared(*inputs)
        return torch.export.export(convert_pt2e(prepared), inputs)


def _read_csv(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@functools.cache
def _executorch_flow(target: str, on: bool) -> tuple[dict, ...]:
    """ExecuTorch's own Ethos-U flow, no inspector code: for each Vela call, the TOSA flatbuffer it was
    handed, its summary row with the compile spec's flags, and the per-layer rows of the same call
    with ``--verbose-performance`` added (a second Vela run on the same flatbuffer, no second lowering)."""
    from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
    from executorch.backends.arm.ethosu import backend as ethosu_backend
    from executorch.exir import to_edge_transform_and_lower

    calls = []
    installed = ethosu_backend.vela_compile

    def collecting(flatbuffer, args, **kwargs):
        folder = kwargs["intermediate_path"]
        with contextlib.redirect_stdout(io.StringIO()):  # Vela prints kilobytes per call
            result = installed(flatbuffer, list(args), **kwargs)
            (summary,) = [n for n in os.listdir(os.path.join(folder, "output")) if n.startswith("out_summary_")]
            row = _read_csv(os.path.join(folder, "output", summary))[0]
            with tempfile.TemporaryDirectory() as again:  # every delegate overwrites the same out_* files
                installed(flatbuffer, [*args, "--verbose-performance"], intermediate_path=again)
                layers = _read_csv(os.path.join(again, "output", "out_per-layer.csv"))
                row_again = _read_csv(os.path.join(again, "output", summary))[0]
        calls.append({"flatbuffer": bytes(flatbuffer), "summary": row, "layers": layers, "summary_again": row_again})
        return result

    with tempfile.TemporaryDirectory() as folder, _fold(on):
        spec = EthosUCompileSpec(target)
        spec.dump_intermediate_artifacts_to(folder)  # without it Vela's CSVs are written in a folder it removes
        ethosu_backend.vela_compile = collecting
        try:
            to_edge_transform_and_lower(_quantized(target, on), partitioner=[EthosUPartitioner(spec)])
        finally:
            ethosu_backend.vela_compile = installed
    return tuple(calls)


@functools.cache
def _tosa_flow(target: str, on: bool, locations: bool = False):
    """The inspector's plan: one lowering with the TOSA partitioner and the accelerator's TOSA spec
    (the program the TOSA reference model runs), and Vela on its flatbuffer."""
    from executorch.backends.arm.common.arm_compile_spec import ArmCompileSpec
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from inspector._doors import vela

    config = vela.vela_config(target)
    with tempfile.TemporaryDirectory() as folder, _fold(on):
        spec = TosaCompileSpec(config.tosa_spec)
        if locations:
            spec.dump_intermediate_artifacts_to(folder).dump_debug_info(ArmCompileSpec.DebugMode.TOSA)
        lowered = to_edge_transform_and_lower(_quantized(target, on), partitioner=[TOSAPartitioner(spec)])
    return config, lowered


def _cycles(row: dict[str, str]) -> int:
    return int(float(row["cycles_total"]))


@pytest.mark.requires_tosa
@pytest.mark.parametrize("target", TARGETS)
def test_executorch_s_own_ethos_u_flow_costs_the_unfolded_mul(target):
    """Fold off leaves a Mul on the NPU: more cycles, one more operation, a Mul row of its own."""
    (on,), (off,) = _executorch_flow(target, True), _executorch_flow(target, False)
    assert _cycles(off["summary"]) > _cycles(on["summary"])
    assert int(off["summary"]["passes_after_fusing"]) == int(on["summary"]["passes_after_fusing"]) + 1
    off_muls = [r for r in off["layers"] if r["Original Operator"] == "Mul"]
    assert len(off_muls) == 1 and int(off_muls[0]["Op Cycles"]) > 0
    assert not [r for r in on["layers"] if r["Original Operator"] == "Mul"]
    for call in (on, off):
        # the rows add up to the total, and asking for them changes no cycle
        assert sum(int(r["Op Cycles"]) for r in call["layers"]) == _cycles(call["summary"])
        assert _cycles(call["summary_again"]) == _cycles(call["summary"])
        assert float(call["summary"]["inference_time"]) == pytest.approx(
            _cycles(call["summary"]) / float(call["summary"]["core_clock"]))


@pytest.mark.requires_tosa
@pytest.mark.parametrize("on", (True, False), ids=("fold-on", "fold-off"))
@pytest.mark.parametrize("target", TARGETS)
def test_the_door_costs_the_tosa_partitioner_program_as_executorch_does(target, on):
    """The TOSA partitioner's flatbuffer is the one EthosUBackend hands Vela, and the door costs it the same."""
    from inspector._doors import vela

    (reference,) = _executorch_flow(target, on)
    config, lowered = _tosa_flow(target, on)
    flatbuffers = vela.delegates(lowered)
    assert flatbuffers == [reference["flatbuffer"]]
    run = vela.compile(flatbuffers[0], config)
    assert run.total_cycles == pytest.approx(_cycles(reference["summary"]), rel=0.01)
    assert run.passes == int(reference["summary"]["passes_after_fusing"])
    assert run.npu_ops == int(reference["summary"]["passes_before_fusing"]) and run.cpu_ops == 0
    assert sum(layer.op_cycles for layer in run.layers) == run.total_cycles
    assert run.value("core_clock") == config.clock_hz
    assert run.inference_seconds == pytest.approx(run.total_cycles / config.clock_hz)
    assert run.traffic_bytes()["sram"] > 0 and run.memory_used_bytes()["sram"] > 0
    assert run.seconds > 0 and "Network summary" in run.log


@pytest.mark.requires_tosa
@pytest.mark.parametrize("target", TARGETS)
def test_the_unfolded_mul_is_a_row_of_its_own_mapped_to_the_fx_mul(target):
    """Off: one Mul row, from the exported program's ``mul``; the conv's rows from its ``conv2d``. On: no row from ``mul``."""
    from inspector._doors import vela

    model, inputs = _model_and_inputs()
    names = {n.name for n in torch.export.export(model, inputs).graph.nodes}
    assert {"conv2d", "mul"} <= names
    sources = {}
    for on in (True, False):
        config, lowered = _tosa_flow(target, on)
        (module,) = vela.delegate_modules(lowered)
        ops = vela.tosa_ops(module)  # this flatbuffer has no locations: the door lowers the delegate again
        run = vela.compile(bytes(module.processed_bytes), config)
        sources[on] = [(layer, vela.layer_source(layer, ops)) for layer in run.layers]
        # a row's source_id is its TOSA op's position: Conv2D -> CONV2D, Mul -> MUL, Transpose -> TRANSPOSE
        assert [ops[layer.tosa_index].op for layer in run.layers] == [layer.operator.upper() for layer in run.layers]
        assert all(source in names for _, source in sources[on])
        assert {source for layer, source in sources[on] if layer.operator == "Conv2D"} == {"conv2d"}
        nodes = vela.layer_nodes(module)
        assert all(nodes[layer.name] == source for layer, source in sources[on] if layer.name in nodes)
    (mul,) = [(layer, source) for layer, source in sources[False] if layer.operator == "Mul"]
    assert mul[1] == "mul" and mul[0].op_cycles > 0 and mul[0].target == "NPU"
    assert "mul" not in {source for _, source in sources[True]}


@pytest.mark.requires_tosa
def test_a_flatbuffer_lowered_with_locations_maps_itself_and_costs_the_same():
    """Lowered with DebugMode.TOSA, the flatbuffer carries each op's node: the same ops and sources as the
    door's second lowering, the same cycles, and the TOSA reference model runs it."""
    from executorch.backends.arm.test.runner_utils import TosaReferenceModelDispatch

    from inspector._doors import vela

    config, plain = _tosa_flow("ethos-u55-128", False)
    _, located = _tosa_flow("ethos-u55-128", False, locations=True)
    (plain_module,), (located_bytes,) = vela.delegate_modules(plain), vela.delegates(located)
    assert len(located_bytes) > len(plain_module.processed_bytes)
    key = [(o.op, o.inputs, o.outputs, o.source) for o in vela.tosa_ops(located_bytes)]
    assert key == [(o.op, o.inputs, o.outputs, o.source) for o in vela.tosa_ops(plain_module)]
    assert [o.source for o in vela.tosa_ops(bytes(plain_module.processed_bytes))] == [None] * len(key)
    assert vela.compile(located_bytes, config).total_cycles == vela.compile(
        bytes(plain_module.processed_bytes), config).total_cycles
    _, inputs = _model_and_inputs()
    with torch.no_grad(), TosaReferenceModelDispatch(), contextlib.redirect_stdout(io.StringIO()):
        expected = plain.exported_program().module()(*inputs)
        got = located.exported_program().module()(*inputs)
    assert torch.equal(got[0] if isinstance(got, tuple) else got, expected[0] if isinstance(expected, tuple) else expected)


@pytest.mark.requires_tosa
def test_every_accelerator_has_executorch_s_config_and_vela_s_clock():
    from ethosu.vela.architecture_features import Accelerator
    from executorch.backends.arm.ethosu import EthosUCompileSpec

    from inspector._doors import vela

    assert tuple(Accelerator.member_list()) == vela.ACCELERATORS
    for accelerator in vela.ACCELERATORS:
        config = vela.vela_config(accelerator)
        spec = EthosUCompileSpec(accelerator)
        assert config.flags == tuple(spec.compiler_flags) and config.tosa_spec == str(spec.tosa_spec)
        assert config.tosa_spec.endswith("+cf" if "u85" in accelerator else "+u55")
        assert config.macs_per_cycle == int(accelerator.rsplit("-", 1)[1])
    u55, u85 = vela.vela_config("ethos-u55-128"), vela.vela_config("ethos-u85-256")
    assert (u55.system_config, u55.memory_mode, u55.clock_hz) == ("Ethos_U55_High_End_Embedded", "Shared_Sram", 500e6)
    assert (u85.system_config, u85.memory_mode, u85.clock_hz) == ("Ethos_U85_SYS_DRAM_Mid", "Sram_Only", 1e9)
    assert vela.vela_config("ethos-u55-128", system_config="Ethos_U55_Deep_Embedded").clock_hz == 200e6


@pytest.mark.requires_tosa
def test_what_vela_cannot_do_is_one_line_and_nothing_is_printed(capfd):
    from inspector._doors import vela
    from inspector._base.errors import InspectorError

    with pytest.raises(InspectorError, match=r"^unknown Ethos-U accelerator 'ethos-u55-7'; choose one of: "):
        vela.vela_config("ethos-u55-7")
    with pytest.raises(InspectorError, match=r"^unknown system config 'Nope' for ethos-u55-128; with Shared_Sram Vela "
                                             r"takes \(Arm/vela.ini\): Ethos_U55_Deep_Embedded, "):
        vela.vela_config("ethos-u55-128", system_config="Nope")
    config = vela.vela_config("ethos-u55-128")
    with pytest.raises(InspectorError, match=r"^Vela could not compile the TOSA flatbuffer for ethos-u55-128: ") as info:
        vela.compile(b"\0" * 64, config)
    assert "\n" not in str(info.value)
    # ExecuTorch's own flow calls vela.main itself (which sets the limit to 1000): made before the limit is raised,
    # so that only the door's call runs under it (alone, the flow was not yet cached and this test failed)
    flatbuffer = _executorch_flow("ethos-u55-128", True)[0]["flatbuffer"]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit + 1234)
    try:
        capfd.readouterr()
        run = vela.compile(flatbuffer, config)
        assert capfd.readouterr() == ("", "")  # Vela's kilobytes are in run.log, not on the screen
        assert sys.getrecursionlimit() == limit + 1234  # vela.main sets it to 1000; the door puts it back
    finally:
        sys.setrecursionlimit(limit)
    assert run.log and not [n for n in os.listdir(tempfile.gettempdir()) if n.startswith("inspector-vela-")]


@pytest.mark.requires_tosa
def test_every_name_the_vela_door_reads_is_there():
    from inspector._doors import executorch as _executorch
    from inspector._doors import vela

    _executorch.check_required(vela.REQUIRED)
    _executorch.check_required(vela.VELA_REQUIRED, vela.SUPPORTED, "ethos-u-vela")
    _executorch.check_required(vela.SCHEMA_REQUIRED, "2026.8.0", "tosa-tools")


@pytest.mark.requires_tosa
def test_sharing_provenance_lowers_the_same_program():
    """The door lowers with torch.fx's provenance records shared instead of copied (``shared_provenance``, a
    quarter of a lowering): the same flatbuffer, byte for byte, as ExecuTorch's own call, the same ops and
    sources with locations, and torch's class as it was after."""
    import torch.fx.traceback as fx_traceback

    from inspector._doors import tosa, vela

    config, plain = _tosa_flow("ethos-u55-128", False)
    _, located = _tosa_flow("ethos-u55-128", False, locations=True)
    shared = tosa.lower(_quantized("ethos-u55-128", False), config.tosa_spec)
    shared_located = tosa.lower(_quantized("ethos-u55-128", False), config.tosa_spec, locations=True)
    assert vela.delegates(shared) == vela.delegates(plain)
    key = lambda ops: [(o.op, o.inputs, o.outputs, o.source) for o in ops]
    assert key(vela.tosa_ops(vela.delegates(shared_located)[0])) == key(vela.tosa_ops(vela.delegates(located)[0]))
    assert "__deepcopy__" not in vars(fx_traceback.NodeSource)


def _vela_command_line(flatbuffer: bytes, target: str, system_config: str, memory_mode: str) -> int:
    """Vela's own command line (the ``vela`` script of this environment, in a process of its own) on a TOSA
    flatbuffer with the settings given: its summary's total cycles."""
    import subprocess

    vela_script = os.path.join(os.path.dirname(sys.executable), "vela")
    with tempfile.TemporaryDirectory() as folder:
        network = os.path.join(folder, "net.tosa")
        with open(network, "wb") as f:
            f.write(flatbuffer)
        subprocess.run([vela_script, network, f"--accelerator-config={target}", "--config=Arm/vela.ini",
                        f"--system-config={system_config}", f"--memory-mode={memory_mode}", "--output-format=raw",
                        f"--output-dir={folder}"], check=True, capture_output=True)
        (summary,) = [n for n in os.listdir(folder) if n.startswith("net_summary_")]
        return _cycles(_read_csv(os.path.join(folder, summary))[0])


@pytest.mark.requires_tosa
def test_two_memory_modes_cost_what_vela_s_command_line_says_and_differ():
    """``conv(16->32)*0.5``, fold off, on ethos-u85-256 under ExecuTorch's default memory mode (Sram_Only) and under
    ``ethos-u85-256:Dedicated_Sram``: each comparison's cycles are what Vela's command line gives for the same
    flatbuffer with those settings, each cost names them, and the two differ."""
    import inspector
    from inspector._doors import vela

    (flatbuffer,) = vela.delegates(_tosa_flow("ethos-u85-256", False)[1])
    model, inputs = _model_and_inputs()
    costs = {}
    for name, mode in (("ethos-u85-256", "Sram_Only"), ("ethos-u85-256:Dedicated_Sram", "Dedicated_Sram")):
        comparison = inspector.compare(model, variants=("off",), example_inputs=inputs, calibration=[inputs], workers=1,
                                       accelerator=name)
        assert comparison.accelerator == name
        # the store has the result made under Sram_Only just before: it never answers for another memory mode
        assert mode == "Sram_Only" or not comparison.results[0].cached
        cost = costs[mode] = comparison.results[0].cost
        assert (cost.npu, cost.system_config, cost.memory_mode, cost.vela_version) == (
            "ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", mode, vela.version())
        assert cost.compiler == f"Vela {vela.version()} · ethos-u85-256 · Ethos_U85_SYS_DRAM_Mid · {mode}"
        assert cost.cycles == _vela_command_line(flatbuffer, "ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", mode)
    assert costs["Sram_Only"].cycles != costs["Dedicated_Sram"].cycles
