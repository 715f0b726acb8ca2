"""Behaviour of ``inspector.analyze`` beyond the sample matrix: safety, markers, shapes of results."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import inspector
import sample_models
from inspector import InspectorError
from inspector._base.errors import FoldPassCrash
from conftest import ROOT, assert_bit_identical, flat, state_of


# ---------------------------------------------------------------- the caller's model is never touched


@pytest.mark.parametrize("stage", ["aten", "tfa", "edge"])
def test_public_calls_never_mutate_the_callers_module(stage):
    model = sample_models.get("conv_mul_channel_scale")
    inputs = model.example_inputs()
    snap, inputs_snap = state_of(model), [x.clone() for x in inputs]
    eager = model(*inputs)
    result = inspector.analyze(model, example_inputs=inputs, stage=stage)
    assert [s.decision for s in result.sites] == ["fold"]
    result.with_rule("off").with_rule("state-aware-strict")
    result.toggle_marker(result.sites[0].id)
    result.with_stage("edge" if stage != "edge" else "tfa")
    result.run_after()
    assert_bit_identical(snap, model)
    assert all(torch.equal(a, b) for a, b in zip(inputs, inputs_snap))
    torch.testing.assert_close(model(*inputs), eager, rtol=0, atol=0)


def test_the_program_holds_private_weights_copied_beside_the_export():
    # the weights are copied on a second thread while the caller's model is exported, then swapped in
    from inspector._targets.load import load

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(3, 3, 3, padding=1)
            self.b = nn.Conv2d(3, 3, 3, padding=1)
            self.b.weight = self.a.weight  # one Parameter in two modules

        def forward(self, x):
            return self.b(self.a(x)) * 0.5

    model = Tied().eval()
    inputs = (torch.rand(1, 3, 8, 8),)
    target = load(model, inputs)
    callers = {id(p) for p in model.parameters()}
    state = target.exported.state_dict
    assert state and not any(id(v) in callers for v in state.values())
    private = dict(target.model.named_parameters(remove_duplicate=False))
    assert private["b.weight"] is private["a.weight"]  # tied weights stay tied in the copy
    assert all(state[k] is private[k] for k in state if k in private)  # the program holds the copy's
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items() if k in state)
    with torch.no_grad():
        model.a.weight.mul_(2.0)  # the caller trains on: the program keeps what was loaded
    assert not torch.equal(state["a.weight"], model.a.weight)
    torch.testing.assert_close(target.exported.module()(*inputs), target.model(*inputs), rtol=0, atol=0)


def test_stateful_buffer_of_the_caller_is_untouched():
    model = sample_models.get("stateful_conv_mul")
    snap = state_of(model)
    for stage in ("aten", "tfa", "edge"):
        inspector.analyze(model, stage=stage, rule="state-aware-strict").run_after()
    assert_bit_identical(snap, model)


def test_exported_program_target_is_untouched():
    model = sample_models.get("conv_mul_scalar")
    program = torch.export.export(model, model.example_inputs())
    snap = {k: v.clone() for k, v in program.state_dict.items()}
    nodes = [n.name for n in program.graph.nodes]
    for stage in ("aten", "tfa", "edge"):
        result = inspector.analyze(program, stage=stage)
        assert [s.decision for s in result.sites] == ["fold"]
    assert [n.name for n in program.graph.nodes] == nodes
    assert all(torch.equal(v, program.state_dict[k]) for k, v in snap.items())


def test_pt2_round_trip(tmp_path):
    model = sample_models.get("conv_mul_multiple_users")
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, model.example_inputs()), path)
    result = inspector.analyze(str(path), stage="tfa")
    assert [s.reason_codes for s in result.sites] == [("conv-has-other-users",)]
    assert result.name == "m.pt2"


class _Payload:
    """Unpickling this runs code: it touches a file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def _hostile_pt2(tmp_path) -> tuple[Path, Path]:
    """A real .pt2 whose example-inputs entry is a pickle that runs code when unpickled."""
    import io
    import zipfile

    model = sample_models.get("conv_mul_scalar")
    good = tmp_path / "good.pt2"
    torch.export.save(torch.export.export(model, model.example_inputs()), good)
    marker = tmp_path / "pwned"
    payload = io.BytesIO()
    torch.save(_Payload(str(marker)), payload)
    bad = tmp_path / "bad_inputs.pt2"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(item, payload.getvalue() if item.filename.endswith("sample_inputs/model.pt") else data)
    return bad, marker


def test_a_hostile_pt2_does_not_run_code(tmp_path):
    bad, marker = _hostile_pt2(tmp_path)
    with pytest.raises(InspectorError, match="refusing to load bad_inputs.pt2") as info:
        inspector.analyze(str(bad))
    assert "\n" not in str(info.value)
    assert not marker.exists()
    # the same file through torch's own loader does run the payload: the test can fail
    try:
        torch.export.load(str(bad))
    except Exception:  # noqa: BLE001 - the payload is not valid inputs; it has run by then
        pass
    assert marker.exists()
    # and the guard is gone after the load: torch.load is torch's own again
    assert torch.load.__module__.startswith("torch")


# ---------------------------------------------------------------- markers


def test_marker_on_functional_state_makes_state_aware_skip():
    result = inspector.analyze("sample:functional_recurrent_conv_mul", stage="tfa", rule="state-aware")
    site = result.sites[0]
    assert site.decision == "fold"
    assert "feeds-recurrent-output" in [r.code for r in site.risks]
    marked = result.toggle_marker(site.id)
    assert marked.sites[0].decision == "skip" and marked.sites[0].marked
    assert marked.sites[0].reason_codes == ("marked-carried-state",)
    assert "feeds-recurrent-output" not in [r.code for r in marked.sites[0].risks]
    # upstream does not read markers
    assert marked.with_rule("upstream").sites[0].decision == "fold"
    assert marked.toggle_marker(site.id).sites[0].decision == "fold"


def test_marker_downstream_by_node_name_guards_the_site():
    result = inspector.analyze("sample:functional_recurrent_conv_mul", stage="aten", rule="state-aware")
    add = next(n.name for n in result.before.graph.nodes if n.name.startswith("add") and n.name != "add")
    marked = result.with_markers([add])
    site = marked.sites[0]
    assert site.decision == "skip" and site.reason_codes == ("marked-carried-state",)
    assert site.state_path[0] == site.mul and site.state_path[-1] == add
    node = next(n for n in marked.before.graph.nodes if n.name == add)
    assert node.meta["carried_quant_state"] is True and node.meta["custom"]["carried_quant_state"] is True


def test_markers_carry_across_stages_by_site_id():
    result = inspector.analyze("sample:functional_recurrent_conv_mul", stage="aten", rule="state-aware")
    marked = result.with_markers([result.sites[0].mul])  # a node name, valid at aten only
    edge = marked.with_stage("edge")
    assert edge.markers == (result.sites[0].id,)
    assert edge.sites[0].decision == "skip"


def test_unknown_marker_is_a_clear_error():
    with pytest.raises(InspectorError, match="unknown marker 'nope'.*conv@models.py"):
        inspector.analyze("sample:conv_mul_scalar", stage="tfa", markers=["nope"])


def test_state_path_is_recorded_even_when_the_rule_folds():
    result = inspector.analyze("sample:stateful_conv_mul", stage="tfa", rule="upstream")
    site = result.sites[0]
    assert site.decision == "fold"
    assert site.state_path[0] == site.mul and site.state_path[-1].startswith("copy_")
    assert "feeds-carried-state" in [r.code for r in site.risks]


# ---------------------------------------------------------------- models outside the samples


class InputMutation(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x, h):
        y = self.conv(x) * 0.5
        h.copy_(y)
        return y + 1


class NoBiasNoPadding(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, bias=False)

    def forward(self, x):
        return self.conv(x) * 2.0


class IntScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.register_buffer("k", torch.tensor(3))

    def forward(self, x):
        return self.conv(x) * self.k


class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(*[Scaled(i) for i in range(2)])

    def forward(self, x):
        return self.blocks(x)


class Scaled(nn.Module):
    def __init__(self, i):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.s = float(i + 2)

    def forward(self, x):
        return self.conv(x) * self.s


class InPlaceMul(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return y.mul_(0.5)


class NoSites(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2


X = (torch.randn(1, 3, 8, 8),)
CASES = [
    # model, inputs, stage, policy, expected verdicts
    (InputMutation, (torch.randn(1, 2, 6, 6), torch.zeros(1, 2, 6, 6)), "edge", "state-aware",
     [("skip", ("feeds-input-mutation",))]),
    (InputMutation, (torch.randn(1, 2, 6, 6), torch.zeros(1, 2, 6, 6)), "edge", "upstream", [("fold", ())]),
    (NoBiasNoPadding, X, "tfa", "upstream", [("skip", ("conv-op-not-matched",))]),
    (NoBiasNoPadding, X, "edge", "upstream", [("fold", ())]),
    # to_edge casts the int buffer to float with a _to_copy node: a computed scale there
    (IntScale, X, "edge", "upstream", [("skip", ("scale-not-constant",))]),
    # Arm's int64 pre-passes turn the buffer into a cast node and mark the mul disallowed
    (IntScale, X, "tfa", "upstream", [("skip", ("disallowed-by-quantizer", "scale-not-constant", "scale-not-float"))]),
    (Nested, X, "tfa", "upstream", [("fold", ()), ("fold", ())]),
    (Nested, X, "edge", "off", [("skip", ("rule-off",)), ("skip", ("rule-off",))]),
    (NoSites, X, "edge", "upstream", []),
]


@pytest.mark.parametrize("cls,inputs,stage,policy,expected", CASES, ids=lambda v: getattr(v, "__name__", None))
def test_models_outside_the_samples(cls, inputs, stage, policy, expected):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", inspector.ExplanationMismatchWarning)
        result = inspector.analyze(cls(), example_inputs=inputs, stage=stage, rule=policy)
    assert [(s.decision, s.reason_codes) for s in result.sites] == expected
    for b, a in zip(flat(result.run_before()), flat(result.run_after())):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


class BufferWeights(nn.Module):
    """F.conv2d with weights held in buffers: the installed pass crashes folding it with a program."""

    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.randn(4, 3, 3, 3))
        self.register_buffer("b", torch.randn(4))

    def forward(self, x):
        return torch.nn.functional.conv2d(x, self.w, self.b, padding=1) * 0.5


@pytest.mark.parametrize("stage", ["aten", "edge"])
def test_a_crash_of_the_installed_pass_names_the_site(stage):
    with pytest.raises(FoldPassCrash, match=r"^the installed FoldScalarMulIntoConvPass crashed while "
                                                      r"folding site root@test_analysis.py:\d+ .*persistent_buffer") as info:
        inspector.analyze(BufferWeights(), example_inputs=X, stage=stage)
    assert "\n" not in str(info.value) and info.value.site_id.startswith("root@test_analysis.py:")
    # where the pass rewrites get_attr tensors in place (tfa) it folds fine, and off never calls it
    assert inspector.analyze(BufferWeights(), example_inputs=X, stage="tfa").sites[0].decision == "fold"
    assert inspector.analyze(BufferWeights(), example_inputs=X, stage=stage, rule="off").sites[0].decision == "skip"


def test_input_mutation_at_tfa_needs_the_strict_rule():
    inputs = (torch.randn(1, 2, 6, 6), torch.zeros(1, 2, 6, 6))
    result = inspector.analyze(InputMutation(), example_inputs=inputs, stage="tfa", rule="state-aware")
    assert result.sites[0].decision == "fold"
    strict = result.with_rule("state-aware-strict").sites[0]
    assert strict.reason_codes == ("feeds-input-mutation",)
    # the Arm pipeline fails on this model after the fold; the analysis says so instead of failing
    assert any("ScalarsToAttributePass" in note for note in result.notes)


def test_nested_module_paths_give_distinct_ids():
    result = inspector.analyze(Nested(), example_inputs=X, stage="edge")
    assert [s.id.split("@")[0] for s in result.sites] == ["blocks.0.conv", "blocks.1.conv"]
    assert len({s.id for s in result.sites}) == 2


def test_in_place_mul_is_a_site_the_pass_does_not_match():
    result = inspector.analyze(InPlaceMul(), example_inputs=X, stage="aten")
    # torch 2.13's export keeps the in-place mul_ at aten (it is not functionalized into mul)
    assert [s.mul for s in result.sites] == ["mul_"]
    site = result.sites[0]
    assert site.mismatch is None
    assert site.decision == "skip"
    assert site.reason_codes == ("mul-op-not-matched",)


# ---------------------------------------------------------------- result shapes


def test_to_dict_is_json_ready_and_complete():
    result = inspector.analyze("sample:conv_mul_wide_dynamic_range_scale", stage="edge")
    data = json.loads(json.dumps(result.to_dict()))
    assert data["stage"] == "edge" and data["rule"]["name"] == "upstream"
    site = data["sites"][0]
    assert {"id", "conv", "mul", "conv_op", "decision", "reasons", "risks", "scale"} <= site.keys()
    assert site["scale"]["ratio"] == pytest.approx(1e5, rel=1e-3)
    assert site["risks"][0]["code"] == "wide-dynamic-range-scale"


def test_site_is_frozen_and_repr_is_one_line():
    result = inspector.analyze("sample:conv_mul_scalar", stage="aten")
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.sites[0].decision = "skip"
    assert "\n" not in repr(result) and "1 site, 1 folded" in repr(result)
    bundle = result._repr_mimebundle_()
    assert "conv@models.py" in bundle["text/plain"] and "<table" in bundle["text/html"]


def test_model_derived_strings_are_escaped_in_html():
    evil = "<script>alert(1)</script>"
    model = nn.Module()
    model.add_module(evil, nn.Conv2d(3, 4, 3, padding=1))

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x):
            return getattr(self.inner, evil)(x) * 0.5

    result = inspector.analyze(Wrap(), example_inputs=X, stage="aten")
    assert evil in result.sites[0].id
    html = result._repr_mimebundle_()["text/html"]
    assert evil not in html and "&lt;script&gt;" in html


def test_bad_targets_give_one_line_errors(tmp_path):
    cases = [
        ("sample:nope", "unknown sample"),
        (str(tmp_path / "missing.pt2"), "no such file"),
        ("weird-thing", "cannot tell what"),
        (42, "cannot analyze a int"),
    ]
    for target, message in cases:
        with pytest.raises(InspectorError, match=message) as info:
            inspector.analyze(target)
        assert "\n" not in str(info.value)
    with pytest.raises(InspectorError, match="needs example inputs"):
        inspector.analyze(NoSites())
    with pytest.raises(InspectorError, match="torch.export failed"):
        inspector.analyze(sample_models.get("conv_mul_scalar"), example_inputs=(torch.randn(1, 5, 8, 8),))
    with pytest.raises(InspectorError, match="NaN or Inf"):
        inspector.analyze(NoSites(), example_inputs=(torch.tensor([float("nan")]),))
    with pytest.raises(InspectorError, match="^unknown stage 'during'; choose one of: aten, tfa, edge, lowering$"):
        inspector.analyze("sample:conv_mul_scalar", stage="during")
    with pytest.raises(InspectorError, match="unknown rule"):
        inspector.analyze("sample:conv_mul_scalar", rule="sometimes")
    (tmp_path / "bad.pt2").write_bytes(b"not a zip")
    with pytest.raises(InspectorError, match="cannot load bad.pt2"):
        inspector.analyze(str(tmp_path / "bad.pt2"))


def test_stage_build_failures_are_one_line_errors():
    """torch's FX codegen cannot name a module with a quote; the user gets one line, not a traceback."""
    model = nn.Module()
    model.add_module('blk"q', nn.Conv2d(3, 4, 3, padding=1))

    class Quoted(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x):
            return getattr(self.inner, 'blk"q')(x) * 0.5

    assert inspector.analyze(Quoted(), example_inputs=X, stage="aten").sites[0].decision == "fold"
    with pytest.raises(InspectorError, match=r"^building the tfa graph of Quoted failed: ") as info:
        inspector.analyze(Quoted(), example_inputs=X, stage="tfa")
    assert "\n" not in str(info.value)


def test_core_imports_no_ui():
    code = (
        "import sys; sys.modules['ipywidgets'] = None; sys.modules['IPython'] = None\n"
        "import inspector, inspector._front.cli, inspector._decide.analysis, inspector._doors.fold_swap\n"
        "r = inspector.analyze('sample:conv_mul_scalar', stage='aten'); print(r.summary())"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "1 site, 1 folded" in out.stdout


def test_fold_swap_restores_on_error():
    from inspector._doors import fold_swap
    from inspector._rules.rules import rule_pass_class

    installed = fold_swap.active_fold_pass()
    with pytest.raises(RuntimeError):
        with fold_swap.swapped_fold_pass(rule_pass_class("off")) as cls:
            assert fold_swap.active_fold_pass() is cls
            raise RuntimeError("boom")
    assert fold_swap.active_fold_pass() is installed


def test_op_facts_are_kept_for_op_overloads_only():
    """op names and in-place schemas are looked up once per op overload; a plain Python function
    target may close over anything (a model), so nothing about it is kept."""
    import gc
    import weakref

    from inspector._sites import graph as _graph

    graph = torch.fx.Graph()
    x = graph.placeholder("x")

    def plain(t):
        return t + 1

    local = graph.call_function(plain, (x,))
    mul = graph.call_function(torch.ops.aten.mul_.Tensor, (local, x))
    graph.output(mul)
    assert _graph.op_name(local) == "plain" and _graph._inplace_destination(local) is None
    assert _graph.op_name(mul) == "aten.mul_.Tensor" and _graph.is_mul(mul)
    assert _graph._inplace_destination(mul) is local  # the in-place mul writes into its first argument
    gone = weakref.ref(plain)
    del plain, local, mul, x, graph
    gc.collect()
    assert gone() is None
