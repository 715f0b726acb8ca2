"""Which layers need more bits (``inspector.layers``, ``inspector.widen``, ``python -m inspector widen``).

The models are held out: built here, seen nowhere else in the suite, each with a known sensitive layer. Every number
is the TOSA reference model's and Vela's; the search's pick is checked against every set measured directly, and the
quantizer code it writes is lowered by ExecuTorch's own flow, without the inspector, to the same cycles and outputs.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import itertools
import json
import os
import tempfile
import textwrap

import pytest
import torch

import inspector
from inspector import Variant
from inspector._front import cli

pytestmark = [pytest.mark.requires_tosa, pytest.mark.slow]

NPU = "ethos-u85-256"

# A held-out model: ``wide`` (1x1, 16 -> 6 channels) writes one channel 300 times louder than the rest; ``out`` reads
# only the quiet ones. At 8-bit activations the loud channel sets wide's range: the error enters at wide and at out.
HELD_OUT = textwrap.dedent('''
    import torch
    from torch import nn

    class Quiet(nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(7)
            self.front = nn.Conv2d(6, 16, 3, padding=1)
            self.wide = nn.Conv2d(16, 6, 1)
            self.out = nn.Conv2d(6, 3, 1)
            with torch.no_grad():
                for m in (self.front, self.wide, self.out):
                    m.weight.copy_(torch.randn(m.weight.shape, generator=g) / m.weight[0].numel() ** 0.5)
                    m.bias.zero_()
                self.wide.weight[2] *= 300.0
                self.out.weight[:, 2] = 0.0

        def forward(self, x):
            return self.out(self.wide(torch.relu(self.front(x))))

        def example_inputs(self):
            return (torch.randn(1, 6, 12, 12, generator=torch.Generator().manual_seed(3)),)
''')


@pytest.fixture(scope="module")
def held_out(tmp_path_factory):
    path = tmp_path_factory.mktemp("widen") / "quiet.py"
    path.write_text(HELD_OUT)
    return f"{path}:Quiet"


@pytest.fixture(scope="module")
def widening(held_out):
    return inspector.widen(held_out, accelerator=NPU, budget="sqnr=25", candidates=2, workers=1)


class _Small(torch.nn.Module):
    """Another held-out model: a 1x1 conv whose output one channel dominates, then a 3x3 conv and a head."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(11)
        self.a = torch.nn.Conv2d(4, 8, 1)
        self.b = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.c = torch.nn.Conv2d(8, 2, 1)
        with torch.no_grad():
            for m in (self.a, self.b, self.c):  # every parameter from the seed: the same model in every process
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * 0.3)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
            self.a.weight[5] *= 100.0

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


def test_the_layer_table_adds_up_to_velas_total_and_marks_the_cpu():
    x = (torch.randn(1, 4, 10, 10, generator=torch.Generator().manual_seed(5)),)
    table = inspector.layers(_Small(), example_inputs=x, accelerator=NPU, workers=1)
    assert table.cycles > 0 and abs(table.counted - table.cycles) <= 0.01 * table.cycles
    assert all(layer.where == "npu" for layer in table.layers)
    convs = [layer for layer in table.layers if layer.op == "conv2d"]
    assert len(convs) == 3 and all(layer.cycles for layer in convs) and all(layer.sqnr_db is not None for layer in convs)
    # the error entering at a: its output's range is the loud channel's
    assert max(convs, key=lambda layer: layer.max_abs_error).node in {c.node for c in convs}
    assert list(table.to_dataframe().columns)[:4] == ["node", "vela_name", "op", "module"]

    kept = inspector.layers(_Small(), example_inputs=x, accelerator=NPU, overrides={"b": "float"}, workers=1)
    cpu = [layer for layer in kept.layers if layer.where == "cpu"]
    assert [layer.module for layer in cpu] == ["b"] and cpu[0].cycles is None
    assert abs(kept.counted - kept.cycles) <= 0.01 * kept.cycles
    assert any("Vela does not count it" in n for n in kept.notes)
    assert "not counted" in inspector.present.widen_view.layers_text(kept)


def _best_measured_directly(target, w, budget: float, **kw):
    """Every set of ``w``'s candidate groups and 16-bit everywhere, measured by one compare of their own (nothing
    shared with widen's calls): (cycles, sqnr, overrides or "everywhere") per set, and the cheapest within ``budget``."""
    groups = dict(w.groups)
    sets = []
    for combo in itertools.product((False, True), repeat=len(w.candidates)):
        s = {n: "a16w8" for c, on in zip(w.candidates, combo) if on for n in groups[c]}
        if s not in sets:
            sets.append(s)
    direct = inspector.compare(target, variants=[Variant("upstream", quantization="a8w8", overrides=s) for s in sets]
                               + [Variant("upstream", quantization="a16w8")], accelerator=NPU, workers=1,
                               metrics=("sqnr",), **kw)
    rows = [(r.cost.cycles, r.overall("sqnr"), s) for r, s in zip(direct.results, sets + ["everywhere"])]
    within = [r for r in rows if r[1] >= budget]
    assert within, rows
    return rows, min(within, key=lambda r: (r[0], -r[1]))


def _never_beaten(w):
    for p in w.points:
        if p.measured and p is not w.pick:
            assert not (p.cycles <= w.pick.cycles and p.value >= w.pick.value
                        and (p.cycles < w.pick.cycles or p.value > w.pick.value)), p


def test_the_pick_is_the_best_set_measured_directly_and_no_measured_point_beats_it(held_out, widening):
    w = widening
    assert w.search == "exhaustive" and len(w.candidates) == 2
    rows, best = _best_measured_directly(held_out, w, 25)
    assert w.met and w.pick.cycles == best[0] and abs(w.pick.value - best[1]) < 1e-9
    # the known sensitive layer (wide, conv2d_1) is in the pick (or 16-bit everywhere is cheaper, and then it is)
    assert best[2] == "everywhere" or "conv2d_1" in best[2], rows
    _never_beaten(w)
    assert all(p.measured for p in w.points) and w.lowerings == 2 + len(rows) - 2
    assert w.baseline.value < 25 and not w.baseline.within


def test_a_layer_is_widened_with_the_pattern_it_is_fused_into_and_its_readers():
    """The second held-out model: its loud convolution ``a`` (conv2d) writes into a ReLU, which the quantizer
    annotates with the convolution; widening the ReLU alone, or the convolution alone, changes nothing (the reader
    requantizes to 8 bits). The candidate ``relu`` is widened with conv2d and its reader conv2d_1."""
    x = (torch.randn(1, 4, 10, 10, generator=torch.Generator().manual_seed(5)),)
    w = inspector.widen(_Small(), example_inputs=x, accelerator=NPU, budget="sqnr=39", candidates=3, workers=1)
    groups = dict(w.groups)
    assert groups["relu"] == ("conv2d", "relu", "conv2d_1"), groups
    rows, best = _best_measured_directly(_Small(), w, 39, example_inputs=x)
    assert w.pick.cycles == best[0] and abs(w.pick.value - best[1]) < 1e-9, rows
    _never_beaten(w)
    baseline = next(r for r in rows if r[2] == {})
    assert baseline[1] < 39 and w.baseline.value < 39
    # the loud layer's group, widened as one, meets the budget: a set no single node of it reaches
    fixed = [p for p in w.points if p.measured and p.within and {"conv2d", "conv2d_1"} <= dict(p.overrides).keys()]
    assert fixed, w.points


def test_the_pasted_config_lowers_to_the_same_cycles_and_outputs_without_the_inspector(held_out, widening):
    """The generated code, exec'd, configures ExecuTorch's own EthosUQuantizer; prepare, calibrate (the comparison's
    batches), convert, lower with EthosUPartitioner (Vela's totals) and with the TOSA partitioner for the same
    specification, run on the TOSA reference model: the same cycles and the same outputs, bit for bit."""
    from executorch.backends.arm.ethosu import EthosUPartitioner
    from executorch.backends.arm.ethosu import backend as ethosu_backend
    from executorch.backends.arm.test.runner_utils import TosaReferenceModelDispatch
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    pick = widening.pick
    comparison = inspector.compare(held_out, variants=[Variant("upstream", quantization=pick.quantization,
                                                               overrides=dict(pick.overrides))],
                                   accelerator=NPU, workers=1)
    ours, batches = comparison.results[0], comparison.run.calibration.batches
    path, _, name = held_out.rpartition(":")
    space: dict = {}
    exec(compile(open(path).read(), path, "exec"), space)  # noqa: S102 - the held-out model's own file
    model = space[name]().eval()
    inputs = model.example_inputs()
    scope: dict = {}
    exec(widening.config, scope)  # noqa: S102 - the code the inspector wrote for the user, run as they would
    quantizer = scope["quantizer"]
    module = torch.export.export(copy.deepcopy(model), inputs).module(check_guards=False)
    prepared = prepare_pt2e(module, quantizer)
    with torch.no_grad():
        for batch in batches:
            prepared(*batch)
    converted = convert_pt2e(prepared)
    totals = []
    installed = ethosu_backend.vela_compile

    def collecting(flatbuffer, args, **kwargs):
        with contextlib.redirect_stdout(io.StringIO()):
            result = installed(flatbuffer, [*args, "--verbose-performance"], **kwargs)
        folder = os.path.join(kwargs["intermediate_path"], "output")
        (summary,) = [n for n in os.listdir(folder) if n.startswith("out_summary_")]
        with open(os.path.join(folder, summary), newline="") as f:
            totals.append(int(float(next(csv.DictReader(f))["cycles_total"])))
        return result

    with tempfile.TemporaryDirectory() as folder:
        spec = scope["compile_spec"].dump_intermediate_artifacts_to(folder)
        ethosu_backend.vela_compile = collecting
        try:
            to_edge_transform_and_lower(torch.export.export(converted, inputs), partitioner=[EthosUPartitioner(spec)])
        finally:
            ethosu_backend.vela_compile = installed
    assert totals and abs(sum(totals) - pick.cycles) <= 0.01 * pick.cycles, (totals, pick.cycles)
    assert ours.cost.cycles == pick.cycles
    lowered = to_edge_transform_and_lower(torch.export.export(converted, inputs),
                                          partitioner=[TOSAPartitioner(TosaCompileSpec(ours.spec))])
    with TosaReferenceModelDispatch():
        theirs = lowered.exported_program().module()(*inputs)
    theirs = theirs if isinstance(theirs, (tuple, list)) else (theirs,)
    assert len(theirs) == len(ours.outputs[0])
    for a, b in zip(theirs, ours.outputs[0]):
        assert torch.equal(a, b), float((a - b).abs().max())


def test_the_command_line_prints_one_json_document(held_out, widening, capsys):
    assert cli.main(["widen", held_out, "--accelerator", NPU, "--budget", "sqnr=25", "--candidates", "2",
                     "--workers", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= {"pick", "points", "layers", "config", "lowerings"}
    for p in doc["points"]:
        assert set(p) >= {"overrides", "cycles", "value", "measured"} and isinstance(p["cycles"], int)
        assert all(v in ("a16w8", "float") for v in p["overrides"].values())
    assert doc["pick"] == widening.pick.to_dict() and doc["config"] == widening.config
    for layer in doc["layers"]:
        assert layer["where"] in ("npu", "cpu") and (layer["cycles"] is None) == (layer["where"] == "cpu")
        assert {"node", "sqnr_db", "max_abs_error", "drop_db"} <= set(layer)


def test_a_budget_is_checked_before_any_work():
    with pytest.raises(inspector.InspectorError, match="MEASURE=VALUE"):
        inspector.widen(_Small(), example_inputs=(torch.zeros(1, 4, 4, 4),), budget="sqnr")
    with pytest.raises(inspector.InspectorError, match="no cost model"):
        inspector.widen(_Small(), example_inputs=(torch.zeros(1, 4, 4, 4),), accelerator="tosa-int")


# ---------------------------------------------------------------- Vela's rows back to the exported program's nodes


def _op(index, op, outputs, *, inputs=(), node=None, source=None):
    from inspector._doors.vela import TosaOp

    return TosaOp(index=index, op=op, inputs=tuple(inputs), outputs=tuple(outputs), node=node, source=source,
                  module_path="", stack_trace="")


def _row(name, operator, tosa_index):
    from inspector._doors.vela import VelaLayer

    return VelaLayer(name=name, operator=operator, tosa_index=tosa_index, target="NPU", op_cycles=1, npu_cycles=1,
                     sram_cycles=0, dram_cycles=0, on_chip_flash_cycles=0, off_chip_flash_cycles=0, macs=0, staging_bytes=0,
                     mac_utilisation=0.0)


# A TOSA main block as ExecuTorch writes it for a conv, a sigmoid and a mul: CONST_SHAPE operators among the others
# (Vela's source ids skip them), and the sigmoid's TABLE made by a backend pass with no from_node (its location
# names only itself); its table's constant is named after the edge node it replaces.
_BLOCK = (
    _op(0, "CONST_SHAPE", ["shape0"]),
    _op(1, "CONST", ["b_aten_sigmoid_default_table_constant"]),
    _op(2, "CONV2D", ["c"], inputs=["x"], node="tosa_conv2d_default", source="conv"),
    _op(3, "CONST_SHAPE", ["shape1"]),
    _op(4, "RESCALE", ["r"], inputs=["c"], node="tosa_rescale_default", source="conv"),
    _op(5, "TABLE", ["t"], inputs=["r", "b_aten_sigmoid_default_table_constant"], node="tosa_table_default",
        source="tosa_table_default"),
    _op(6, "CONST_SHAPE", ["shape2"]),
    _op(7, "MUL", ["m"], inputs=["t", "r"], node="tosa_mul_default", source="mul"),
)


def test_velas_rows_reach_the_nodes_they_come_from():
    from types import SimpleNamespace

    from inspector._cost.measure import _sources
    from inspector._doors.vela import layer_source

    edge_node = SimpleNamespace(op="call_function", name="aten_sigmoid_default",
                                meta={"from_node": [SimpleNamespace(name="sigmoid", from_node=[])]})
    module = SimpleNamespace(original_module=SimpleNamespace(graph_module=SimpleNamespace(
        graph=SimpleNamespace(nodes=[edge_node]))))
    sources = _sources(module, _BLOCK)
    # Vela numbers the block without its CONST_SHAPE operators: its operator 1 is the conv (the block's 2), 3 the TABLE
    assert layer_source(_row("r", "Conv2D", 1), _BLOCK, sources) == "conv"
    assert layer_source(_row("t", "Table", 3), _BLOCK, sources) == "sigmoid"  # through its table's edge node
    assert layer_source(_row("m", "Mul", None), _BLOCK, sources) == "mul"  # no source id: by the tensor it writes
    assert layer_source(_row("m", "Mul", 1), _BLOCK, sources) == "mul"  # a source id of another kind: by the tensor
    # without the edge program, the TABLE goes to the one node its output feeds
    assert layer_source(_row("t", "Table", 3), _BLOCK, _sources(None, _BLOCK)) == "mul"


def test_the_records_read_back_from_their_dict_form(widening):
    from inspector import Layers, Widening

    doc = json.loads(widening.to_json())
    assert doc["kind"] == "widening" and doc["table"]["counted"] == widening.layers.counted
    again = Widening.from_dict(doc)
    assert again.layers == widening.layers and again.config == widening.config
    assert again.pick.overrides == widening.pick.overrides and again.pick.cycles == widening.pick.cycles
    assert Layers.from_dict(widening.layers.to_dict()) == widening.layers
    doc["table"]["counted"] += 1  # the rows' sum follows from the rows: a document that says otherwise is refused
    with pytest.raises(ValueError, match="counted"):
        Widening.from_dict(doc)


def test_the_report_has_a_section_for_the_widening(held_out, widening):
    analysis = inspector.analyze(held_out, stage="tfa")
    md = analysis.report(format="md", widening=widening)
    assert "## Which layers need more bits" in md and widening.pick.label in md
    html = analysis.report(format="html", widening=widening)
    assert "<h2>Which layers need more bits</h2>" in html and widening.config.splitlines()[0] in html.replace("&quot;", '"')
    doc = json.loads(analysis.report(format="json", widening=widening))
    assert doc["widening"]["pick"] == widening.pick.to_dict()
    assert "Which layers need more bits" not in analysis.report(format="md")


def test_the_layer_table_draws_in_model_explorer(held_out, widening, tmp_path):
    from inspector.present import explorer

    analysis = inspector.analyze(held_out, stage="tfa")
    files = analysis.to_model_explorer(tmp_path, cost=widening.layers)
    names = {p.name for p in files.node_data}
    assert {explorer.CYCLES_FILE, explorer.ENTERING_FILE} <= names
    data = json.loads((tmp_path / explorer.CYCLES_FILE).read_text())
    shown = {k: v["value"] for k, v in data["results"].items()}
    table = {x.node: x for x in widening.layers.layers if x.node is not None and x.where == "npu"}
    # each layer the stage graph has shows the table's cycles (a stage graph's node names are the exported program's
    # for these convolutions)
    assert set(shown) & set(table) and all(shown[name] == table[name].cycles for name in shown if name in table)
    entering = json.loads((tmp_path / explorer.ENTERING_FILE).read_text())["results"]
    worst = widening.layers.ranked()[0]
    assert entering[worst.node]["value"] == round(worst.drop_db, 2)
