"""The lowering stage: the graph the installed pass receives inside ExecuTorch's own ``to_edge_transform_and_lower``.

The truth here is ExecuTorch's own flow with a hook on ``FoldScalarMulIntoConvPass.call`` that counts the muls
before and after each call (``self.exported_program is None`` marks the transform-for-annotation call): no
inspector code runs in it. The folded sites ``analyze`` reports at ``tfa`` and at ``lowering`` must be what that
hook counts in the same call, for the INT flows (tosa-int, ethos-u55-128) and the FP flow (tosa-fp), and what
``compare`` counts per phase. A quantize and a lowering per (model, accelerator) is a few seconds: the models
are a representative few (the issue's conv1d and conv1d + conv2d cases, a fold at tfa, a site behind a view,
a shared weight, state); test_samples.py checks every sample's expected verdicts at lowering on tosa-int.
"""

from __future__ import annotations

import copy
import json
import re

import pytest
import torch
from torch import nn

import inspector
import sample_models
from inspector import InspectorError
from conftest import LOWERING_SAMPLES

ACCELERATORS = ("tosa-int", "ethos-u55-128", "tosa-fp")
INT_ACCELERATORS = ACCELERATORS[:2]
# conv1d_mul never folds in the INT flow (FP: in lowering); conv_view_scale is a mul behind a view;
# stateful_conv_mul folds at tfa and writes a buffer (test_samples.py decides the same ones at lowering).
SAMPLES = LOWERING_SAMPLES
MIXED = "conv1d + conv2d"


class Conv1dThenConv2d(nn.Module):
    """The issue's mixed case: a conv1d site feeding a conv2d site (INT flow: the conv2d folds at tfa, the conv1d
    nowhere; FP flow: both fold in lowering)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.c1 = nn.Conv1d(3, 4, 3, padding=1)
        self.c2 = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c1(x) * 0.5
        return self.c2(y.unsqueeze(2)) * 0.25


def _model(name: str) -> tuple[nn.Module, tuple]:
    model = Conv1dThenConv2d() if name == MIXED else sample_models.get(name)
    return model, (torch.rand(1, 3, 16, generator=torch.Generator().manual_seed(1)),) if name == MIXED \
        else model.example_inputs()


# ---------------------------------------------------------------- ExecuTorch's own flow, counted by a hook


def _muls(graph_module) -> int:
    return sum(1 for n in graph_module.graph.nodes if n.op == "call_function"
               and re.fullmatch(r"(aten\.)?mul_?\.\w+", getattr(n.target, "__name__", "")))


class _Stop(Exception):
    """The last TOSA partition's fold call is over: nothing after it changes the counts."""


def own_flow_counts(model: nn.Module, inputs: tuple, accelerator: str) -> dict[str, list[int]]:
    """The muls ``FoldScalarMulIntoConvPass`` removes in each call of ExecuTorch's own flow for ``accelerator``
    (``{"tfa": [...], "lowering": [...]}``, one entry per call), counted by a hook on its ``call``."""
    from executorch.backends.arm._passes import arm_pass_manager
    from executorch.backends.arm._passes.fold_scalar_mul_into_conv_pass import FoldScalarMulIntoConvPass
    from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
    from executorch.backends.arm.quantizer import EthosUQuantizer, TOSAQuantizer, get_symmetric_quantization_config
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    counts: dict[str, list[int]] = {"tfa": [], "lowering": []}
    partitions: list[int] = []

    class Counting(FoldScalarMulIntoConvPass):
        def call(self, graph_module):
            before = _muls(graph_module)
            result = super().call(graph_module)
            counts["tfa" if self.exported_program is None else "lowering"].append(before - _muls(graph_module))
            if self.exported_program is not None and len(counts["lowering"]) >= partitions[0]:
                raise _Stop()  # the last partition's call: the rest of the lowering folds nothing
            return result

    program = torch.export.export(copy.deepcopy(model), inputs)
    if accelerator == "tosa-fp":
        partitioner = TOSAPartitioner(TosaCompileSpec("TOSA-1.0+FP"))
    else:
        if accelerator == "tosa-int":
            spec = TosaCompileSpec("TOSA-1.0+INT")
            quantizer, partitioner = TOSAQuantizer(spec), TOSAPartitioner(spec)
        else:
            spec = EthosUCompileSpec(accelerator)
            quantizer, partitioner = EthosUQuantizer(spec), EthosUPartitioner(spec)
        quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
    partition = partitioner.partition

    def counted(exported_program):
        result = partition(exported_program)
        partitions.append(len(result.partition_tags))
        return result

    partitioner.partition = counted
    bound = arm_pass_manager.FoldScalarMulIntoConvPass  # put back after (the inspector binds its own there)
    arm_pass_manager.FoldScalarMulIntoConvPass = Counting
    try:
        if accelerator != "tosa-fp":
            prepared = prepare_pt2e(program.module(check_guards=False), quantizer)
            with torch.no_grad():
                prepared(*copy.deepcopy(inputs))
            program = torch.export.export(convert_pt2e(prepared), copy.deepcopy(inputs))
        to_edge_transform_and_lower(program, partitioner=[partitioner])
    except Exception as exc:  # the stop, wrapped by the pass manager
        cause = exc
        while cause is not None and not isinstance(cause, _Stop):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
    finally:
        arm_pass_manager.FoldScalarMulIntoConvPass = bound
    return counts


@pytest.fixture(scope="module")
def counted():
    """The hook's counts per (model, accelerator), each flow run once."""
    cache: dict = {}

    def get(name: str, accelerator: str) -> dict[str, list[int]]:
        if (name, accelerator) not in cache:
            cache[name, accelerator] = own_flow_counts(*_model(name), accelerator)
        return cache[name, accelerator]

    return get


@pytest.fixture(scope="module")
def analyses(stage_analyses):
    """analyze per (model, stage, accelerator); the samples' tosa-int ones are test_samples.py's (shared)."""
    cache: dict = {}

    def get(name: str, stage: str, accelerator: str) -> inspector.Analysis:
        if accelerator == "tosa-int" and name != MIXED:
            return stage_analyses(name, stage)
        if (name, stage, accelerator) not in cache:
            model, inputs = _model(name)
            cache[name, stage, accelerator] = inspector.analyze(model, example_inputs=inputs, stage=stage,
                                                                accelerator=accelerator)
        return cache[name, stage, accelerator]

    return get


CASES = [(n, a) for n in (*SAMPLES, MIXED) for a in ACCELERATORS]


@pytest.mark.requires_tosa
@pytest.mark.parametrize("name,accelerator", CASES)
def test_folded_sites_are_the_muls_the_installed_pass_removes_in_executorchs_own_flow(counted, analyses, name,
                                                                                       accelerator):
    counts = counted(name, accelerator)
    lowering = analyses(name, "lowering", accelerator)
    assert lowering.stage == "lowering" and lowering.accelerator == accelerator
    assert len(lowering.folded) == sum(counts["lowering"]), (lowering.summary(), counts)
    if accelerator == "tosa-fp":
        assert counts["tfa"] == []  # the FP flow quantizes nothing: transform-for-annotation never runs
        with pytest.raises(InspectorError, match="^the FP flow .* has no tfa stage; choose one of: aten, edge, lowering$"):
            model, inputs = _model(name)
            inspector.analyze(model, example_inputs=inputs, stage="tfa", accelerator=accelerator)
        return
    tfa = analyses(name, "tfa", accelerator)
    assert len(tfa.folded) == sum(counts["tfa"]), (tfa.summary(), counts)
    assert sum(counts["lowering"]) == 0 and not lowering.folded  # the INT flow's lowering sees integers
    assert all(s.reason_codes[0] == "quantized-graph" for s in lowering.sites)


@pytest.mark.requires_tosa
@pytest.mark.parametrize("name,accelerator", [(MIXED, "tosa-int"), ("conv1d_mul", "ethos-u55-128")])
def test_compare_counts_per_phase_what_the_hook_counts(counted, name, accelerator):
    counts = counted(name, accelerator)
    model, inputs = _model(name)
    comparison = inspector.compare(model, variants=["upstream"], example_inputs=inputs, accelerator=accelerator,
                                   workers=1)
    assert comparison.results[0].folds == {"tfa": sum(counts["tfa"]), "lowering": sum(counts["lowering"])}


def test_the_fp_profile_has_no_quantized_numbers_to_compare():
    with pytest.raises(InspectorError, match="tosa-fp is the float TOSA-1.0\\+FP profile: nothing is quantized"):
        inspector.compare("sample:conv_mul_scalar", variants=["upstream"], accelerator="tosa-fp", workers=1)


# ---------------------------------------------------------------- defaults that tell the truth


@pytest.mark.requires_tosa
def test_the_default_stage_is_where_the_accelerators_flow_folds(stage_analyses, counted, capsys):
    default = inspector.analyze("sample:conv1d_mul")
    assert default.stage == "tfa" and default.accelerator == "tosa-int"
    assert [s.decision for s in default.sites] == ["skip"] and sum(counted("conv1d_mul", "tosa-int")["tfa"]) == 0
    fp = inspector.analyze("sample:conv1d_mul", accelerator="tosa-fp")
    assert fp.stage == "lowering" and [s.decision for s in fp.sites] == ["fold"]
    from inspector._front.cli import main

    assert main(["analyze", "sample:conv1d_mul", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["stage"] == "tfa" and printed["accelerator"] == "tosa-int"
    assert [s["decision"] for s in printed["sites"]] == ["skip"]


def test_every_answer_at_edge_says_no_int_flow_hands_the_pass_this_graph(tmp_path):
    edge = inspector.analyze("sample:conv1d_mul", stage="edge")
    note = edge.notes[0]
    assert "no INT flow hands the pass this graph" in note and "FP flow" in note
    assert f"note: {note}" in inspector.present.analysis_text(edge)
    assert inspector.present.escape(note) in inspector.present.analysis_html(edge)
    assert note in edge.report(format="md") and note in edge.report(format="json")
    assert all(not n.startswith("edge") for n in inspector.analyze("sample:conv1d_mul", stage="tfa").notes)


# ---------------------------------------------------------------- bad input: one line that lists what does


def test_a_stage_that_does_not_exist_is_one_line_listing_the_stages(capsys):
    with pytest.raises(InspectorError, match="^unknown stage 'lowered'; choose one of: aten, tfa, edge, lowering$"):
        inspector.analyze("sample:conv_mul_scalar", stage="lowered")
    from inspector._front.cli import main

    assert main(["analyze", "sample:conv_mul_scalar", "--stage", "lowered"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "lowering" in err and "\n" not in err


def test_an_accelerator_the_stack_cannot_lower_for_is_one_line_listing_those_it_can(capsys):
    with pytest.raises(InspectorError, match="^unknown accelerator 'ethos-u99'; choose one of: tosa-int, tosa-fp, "):
        inspector.analyze("sample:conv_mul_scalar", stage="lowering", accelerator="ethos-u99")
    from inspector._front.cli import main

    assert main(["analyze", "sample:conv_mul_scalar", "--stage", "lowering", "--accelerator", "ethos-u99"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "tosa-fp" in err and "\n" not in err


@pytest.mark.requires_tosa
def test_a_tosa_specification_the_backend_has_no_pipeline_for_is_one_line(monkeypatch):
    """An accelerator registered with a TOSA specification the installed Arm backend cannot lower for."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Old(inspector.Accelerator):
        def spec(self, needed: str) -> str:
            return "TOSA-0.80+MI"

    inspector.accelerators.register(Old("tosa-old", "a TOSA 0.80 profile, for this test"), replace=True)
    try:
        with pytest.raises(InspectorError) as info:
            inspector.analyze("sample:conv_mul_scalar", stage="lowering", accelerator="tosa-old")
    finally:
        inspector.accelerators.unregister("tosa-old")
    message = str(info.value)
    assert "\n" not in message and "tosa-old" in message and "the installed stack lowers for: tosa-int, tosa-fp" in message


# ---------------------------------------------------------------- sites behind a view


VIEW_ROUTES = {"aten": "conv2d -> view -> mul", "tfa": "conv2d -> view -> mul",
               "edge": "aten_convolution_default -> aten_view_copy_default -> aten_mul_tensor"}


def test_a_view_scaled_mul_is_a_skipped_site_with_its_path_at_every_float_stage(stage_analyses):
    for stage, route in VIEW_ROUTES.items():
        (site,) = stage_analyses("conv_view_scale", stage).sites
        assert site.decision == "skip" and site.reason_codes == ("scale-behind-view",)
        assert site.reasons[0].detail == route


@pytest.mark.requires_tosa
def test_a_view_scaled_mul_at_lowering_is_behind_a_view_and_quantized(analyses):
    (fp,) = analyses("conv_view_scale", "lowering", "tosa-fp").sites
    assert fp.reason_codes == ("scale-behind-view",) and "view_copy" in fp.reasons[0].detail
    (site,) = analyses("conv_view_scale", "lowering", "tosa-int").sites
    assert site.reason_codes[:2] == ("quantized-graph", "scale-behind-view")
    assert "tosa_rescale" in site.reasons[0].detail and "RESCALE of the int8 constant" in site.reasons[0].detail


def test_a_view_scaled_site_in_the_widget_the_picture_and_the_report():
    from widgets import FoldInspector

    app = FoldInspector("sample:conv_view_scale", isolate=False)
    (site,) = app.sites
    assert app.analysis.stage == "tfa" and app.stage_picker.value == "tfa" and "lowering" in app.stage_picker.options
    assert site.reason_codes == ("scale-behind-view",) and site.path == ("view",)
    app.select_site(site.id)
    _, row = app.sites_box.children  # the header, the site's row
    assert "scale-behind-view" in row.children[1].value and "conv2d -&gt; view -&gt; mul" in row.children[1].value
    nodes = {line.split()[0]: line for line in app.analysis.render("before").source.splitlines()
             if "[label=" in line}
    assert all('class="near-miss"' in nodes[name] for name in ("conv2d", "view", "mul"))  # its way drawn as the site
    assert 'class=op' in nodes["view_1"]
    md = app.analysis.report(format="md")
    assert "scale-behind-view" in md and "conv2d -> view -> mul" in md and "`view` -> `mul`" in md


# ---------------------------------------------------------------- markers and rules at lowering


@pytest.mark.requires_tosa
def test_a_marker_toggle_at_lowering_decides_the_captured_graph_again_without_lowering(analyses, monkeypatch):
    analysis = analyses("conv1d_mul", "lowering", "tosa-fp")
    (site,) = analysis.sites
    from inspector._doors import tosa

    monkeypatch.setattr(tosa, "lower", lambda *a, **k: pytest.fail("a toggle lowered again"))
    strict = analysis.with_rule("state-aware")
    assert [s.decision for s in strict.sites] == ["fold"]
    marked = strict.toggle_marker(site.id)
    assert [s.reason_codes for s in marked.sites] == [("marked-carried-state",)]
    assert [s.decision for s in marked.toggle_marker(site.id).sites] == ["fold"]
    with pytest.raises(InspectorError, match="does not run on the model's inputs"):
        analysis.run_after()


@pytest.mark.requires_tosa
def test_at_lowering_the_fp_flows_signature_is_the_delegates_and_says_so(analyses):
    """The FP flow folds in lowering, where the pass has an exported program: the TOSA delegate's, in which the
    model's buffer enters and leaves as a user input and output. PR #21234's structural guard finds no
    BUFFER_MUTATION there: state-aware folds the site, and the answer says why; a marker still stops it."""
    analysis = analyses("stateful_conv_mul", "lowering", "tosa-fp")
    guarded = analysis.with_rule("state-aware")
    assert [s.decision for s in guarded.sites] == ["fold"]
    assert any("no BUFFER_MUTATION" in n and "only a marker" in n for n in guarded.notes)
    marked = guarded.toggle_marker(guarded.sites[0].id)
    assert [s.reason_codes for s in marked.sites] == [("marked-carried-state",)]


@pytest.mark.requires_tosa
def test_the_widgets_stage_picker_takes_lowering_in_the_accelerators_flow(analyses):
    from widgets import FoldInspector

    analyses("conv_view_scale", "lowering", "tosa-fp")  # captured once: the widget's analyses share them
    app = FoldInspector("sample:conv_view_scale", isolate=False)
    app.set_stage("lowering")
    assert app.last_error is None and (app.analysis.stage, app.analysis.accelerator) == ("lowering", "tosa-int")
    assert app.sites[0].reason_codes[:2] == ("quantized-graph", "scale-behind-view")
    assert "lowering on tosa-int: the quantized graph" in app.summary.value
    app.accelerator_picker.value = "tosa-fp"  # the sites of the accelerator picked: the FP flow's lowering
    assert app.last_error is None and app.analysis.accelerator == "tosa-fp"
    assert app.sites[0].reason_codes == ("scale-behind-view",)
    app.set_stage("tfa")  # the FP flow has none: one line, and the picker stays where it was
    assert "has no tfa stage" in app.last_error and app.stage_picker.value == "lowering"
