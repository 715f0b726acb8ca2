"""A site's journey through the installed Arm pipeline: the passes, what each did to the site, its numbers."""

from __future__ import annotations

import contextlib
import copy
import json
from dataclasses import replace

import pytest
import torch.fx.passes.infra.pass_manager as fx_pass_manager

import inspector
from inspector._doors import pipeline as _pipeline

pytestmark = pytest.mark.requires_tosa  # every journey lowers to TOSA

FOLD = "FoldScalarMulIntoConvPass"
TFA = "transform-for-annotation"


@contextlib.contextmanager
def scheduled_arm_passes():
    """What the Arm pass manager schedules, read from torch.fx's PassManager (not from the journey's
    observer): the pass list of every pass manager run whose passes are the Arm backend's."""
    from executorch.exir.pass_manager import ExportedProgramPassManager

    arm_pass = _pipeline._classes()[1]
    seen: list[str] = []
    originals = {cls: cls.__dict__["__call__"] for cls in (fx_pass_manager.PassManager, ExportedProgramPassManager)}

    def recording(original):
        def __call__(self, module, *args, **kwargs):
            inner = [getattr(p, "graph_pass", p) for p in self.passes]  # lowering: adapters around the passes
            if any(isinstance(p, arm_pass) for p in inner):
                seen.extend(_pipeline.pass_name(p) for p in inner)
            return original(self, module, *args, **kwargs)
        return __call__

    for cls, original in originals.items():
        cls.__call__ = recording(original)
    try:
        yield seen
    finally:
        for cls, original in originals.items():
            cls.__call__ = original


@pytest.fixture(scope="module")
def stateful():
    inspector.analyze("sample:stateful_conv_mul", stage="tfa")  # finding the site runs the pipeline's first half too
    with scheduled_arm_passes() as scheduled:
        upstream = inspector.journey("sample:stateful_conv_mul", site=0, variant="upstream")
    off = inspector.journey("sample:stateful_conv_mul", site=0, variant="off")
    return upstream, off, list(scheduled)


@pytest.fixture(scope="module")
def conv_bn():
    return inspector.journey("sample:conv_bn_mul", variant="upstream")


def test_upstream_folds_the_mul_in_transform_for_annotation(stateful):
    upstream, _, _ = stateful
    step = upstream.step(FOLD, TFA)
    assert step is not None, upstream.text()
    removed = [c for c in step.changes if c.kind == "removed" and c.role == "mul"]
    assert removed and removed[0].node == upstream.mul
    assert step.largest_change("weight") > 0
    # The fold is the first step that touches the weight's values, and the mul is gone after it.
    assert upstream.first("constant-changed", "weight") is step
    assert upstream.first("removed", "mul") is step
    assert upstream.ending.where == "delegate"
    assert any(op.startswith("tosa.CONV2D") for _, _, op in upstream.ending.ops)


def test_off_keeps_the_mul_through_the_fold_pass(stateful):
    _, off, _ = stateful
    assert (TFA, FOLD) in off.passes  # the pass ran ...
    assert off.step(FOLD, TFA) is None  # ... and did not touch the site
    assert off.first("removed", "mul").phase != TFA
    roles = {role: op for role, _, op in off.ending.ops}
    assert roles["mul"].startswith("tosa.MUL") and roles["conv"].startswith("tosa.CONV2D")
    assert off.ending.where == "delegate"


def test_batchnorm_is_fused_into_the_weight_before_the_fold(conv_bn):
    first = conv_bn.first("constant-changed", "weight")
    assert first.phase == "prepare" and "BatchNorm" in first.name
    assert first.largest_change("weight") > 0
    fold = conv_bn.step(FOLD, TFA)
    assert fold is not None and fold.index > first.index
    assert f"largest |change| {first.largest_change('weight'):.4g}" in conv_bn.text()


def test_the_pass_list_is_what_the_installed_pipeline_runs(stateful):
    upstream, _, scheduled = stateful
    arm = [name for phase, name in upstream.passes if phase in (TFA, "lowering")]
    assert arm == scheduled
    assert upstream.untouched + len([s for s in upstream.steps if s.run is not None]) == len(upstream.passes)


def test_numbers_at_the_boundaries(stateful, conv_bn):
    upstream, off, _ = stateful
    for j in (upstream, off, conv_bn):
        assert [p.point for p in j.numbers] == ["float eager", "after transform-for-annotation", "simulation"]
        assert j.point("simulation").site_sqnr_db < j.point("after transform-for-annotation").site_sqnr_db
    # BatchNorm folding is not exact in float; the fold of a power-of-two scale is.
    assert 0 < conv_bn.point("after transform-for-annotation").site_max_abs < 1e-4
    assert upstream.point("after transform-for-annotation").site_max_abs == 0
    assert any("quantization" in m for m in upstream.moved)


def test_records_json_dataframe_and_text(conv_bn):
    data = json.loads(json.dumps(conv_bn.to_dict()))
    assert data["site"] == conv_bn.site and len(data["passes"]) == len(conv_bn.passes)
    frame = conv_bn.to_dataframe()
    assert list(frame.columns) == ["index", "run", "phase", "name", "kind", "role", "node", "detail", "largest_change"]
    assert len(frame) == sum(len(s.changes) for s in conv_bn.steps)
    text = str(conv_bn)
    assert FOLD in text and "end: in the TOSA program" in text
    assert repr(conv_bn).startswith("<Journey sample:conv_bn_mul")
    assert "<table>" in conv_bn._repr_mimebundle_()["text/html"]


def test_pictures_mark_the_site(conv_bn):
    step = conv_bn.step(FOLD, TFA)
    dot = conv_bn.picture(step).source
    assert "before the pass" in dot and "after the pass" in dot and conv_bn.conv in dot
    with pytest.raises(inspector.InspectorError, match="no picture"):
        conv_bn.picture(replace(step, graph_before=None))


def test_a_copy_handed_out_again_draws_what_a_copy_at_every_pass_draws(conv_bn, monkeypatch):
    """The follower copies the graph before a pass only when its outline moved since the last copy; drawn
    from a copy made before every pass instead, every touched step's picture is the same."""
    from inspector._journey import follow

    reused = [s for s in conv_bn.touched() if s.graph_before is not None]
    assert len(reused) >= 3
    monkeypatch.setattr(follow.Follower, "_copy_before", lambda self, graph_module: follow._copy(graph_module))
    fresh = inspector.journey("sample:conv_bn_mul", variant="upstream")
    assert [(s.phase, s.name) for s in fresh.touched()] == [(s.phase, s.name) for s in conv_bn.touched()]
    for a, b in zip(conv_bn.touched(), fresh.touched()):
        if a.graph_before is not None:
            assert conv_bn.picture(a).source == fresh.picture(b).source, (a.phase, a.name)


@pytest.mark.parametrize("name", ["conv_bn_mul", "stateful_conv_mul", "nfnet_block", "convnext_block"])
def test_the_capture_stopped_at_the_fold_is_the_whole_capture_s_graph(name):
    """A journey finds its site on a prepare_pt2e stopped as the fold receives the graph: the same
    graph, meta and tensors a whole capture keeps (what runs before the fold is not touched)."""
    import torch
    from inspector._decide import stages as _stages
    from inspector._targets import load as _load

    exported = _load.load(f"sample:{name}").exported
    early, whole = _stages.tfa_graph_until_fold(exported), _stages.build(exported, "tfa")
    a, b = early.graph_module, whole.graph_module
    assert str(a.graph) == str(b.graph)
    for x, y in zip(a.graph.nodes, b.graph.nodes, strict=True):
        assert (x.name, x.op, str(x.target), sorted(x.meta)) == (y.name, y.op, str(y.target), sorted(y.meta))
        assert x.meta.get("nn_module_stack") == y.meta.get("nn_module_stack")
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert early.notes == whole.notes == ()


def test_a_journey_keeps_the_graph_it_found_its_site_on():
    """A journey with no analysis before it leaves the tfa graph with its target, so an analysis after
    it decides on that graph without capturing again, and agrees with the journey."""
    from inspector._decide import stages as _stages
    from inspector._targets import load as _load

    target = _load.load("sample:conv_mul_scalar")
    target.facts.clear()
    trip = inspector.journey("sample:conv_mul_scalar", site=0, variant="upstream")
    assert _stages.has_stage_graph(target, "tfa")
    kept = _stages.stage_graph_of(target, "tfa")
    site = inspector.analyze("sample:conv_mul_scalar", stage="tfa").sites[0]
    assert _stages.stage_graph_of(target, "tfa") is kept  # decided on the kept graph, not a new capture
    assert (site.id, site.decision, site.reasons, site.conv, site.mul) == \
        (trip.site, trip.decision, trip.site_record.reasons, trip.conv, trip.mul)


@pytest.mark.slow
def test_observing_changes_nothing_that_runs(stateful, conv_bn):
    """The plain flow (no observer) lowers the same program as the journey, sample by sample."""
    from inspector._doors import tosa as _tosa
    from inspector._doors.fold_swap import swapped_fold_pass
    from inspector._journey.journey import program_digest
    from inspector._numbers import flow as _flow
    from inspector._numbers.quantization import DEFAULT, Plan, quantizations
    from inspector._numbers.results import Variant
    from inspector._rules.rules import FoldLog, rule_pass_class
    from inspector._targets import load as _load
    import torch

    upstream, off, _ = stateful
    convnext = inspector.journey("sample:convnext_block", site=0, variant="upstream")
    for j in (upstream, off, conv_bn, convnext):
        target = _load.load(j.target)
        plan = Plan.of(quantizations.get(DEFAULT))
        calibration = _flow.choose_calibration(target, None, 1)
        with swapped_fold_pass(rule_pass_class(j.variant, (), FoldLog())):
            _, converted = _flow.quantize(target, Variant(rule=j.variant), calibration, plan)
            program = torch.export.export(converted, copy.deepcopy(target.inputs))
            lowered = _tosa.lower(program, plan.spec)
        assert program_digest(lowered) == j.program_digest, j.target


def test_one_line_errors():
    with pytest.raises(inspector.InspectorError, match="sites"):
        inspector.journey("sample:conv_mul_chain", site="no-such-site")
    with pytest.raises(inspector.InspectorError):
        inspector.journey("sample:stateful_conv_mul", site=0, variant="no-such-rule")


def test_cli_prints_the_timeline_and_json(capsys):
    from inspector._front.cli import main

    assert main(["journey", "sample:conv_mul_scalar", "--site", "0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["variant"] == "upstream" and data["ending"]["where"] == "delegate"
    assert any(s["name"] == FOLD and s["phase"] == TFA for s in data["steps"])
    assert main(["journey", "sample:conv_mul_scalar", "--site", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no site 'nope'") and err.count("\n") == 1


@pytest.mark.requires_dot
def test_widget_journey_panel():
    from widgets import FoldInspector

    app = FoldInspector("sample:conv_mul_scalar", stage="tfa", rule="upstream")
    assert app.journey is None and "not run yet" in app.journey_text.value
    app.journey_variant.value = "off"
    app.run_journey(wait=True)
    assert app.last_error is None, app.last_error
    assert app.journey.variant == "off" and app.journey.site == app.analysis.sites[0].id
    assert app.journey_step.options and "Journey of site" in app.journey_text.value
    assert "<svg" in app.journey_graph.value
    last = app.journey_step.options[-1][1]
    app.journey_step.value = last
    assert f"step {last}: " in app.journey_graph.value  # the picture's caption names the picked step


def test_the_report_can_include_journeys(conv_bn):
    import html

    from inspector.present.report import report

    analysis = inspector.analyze("sample:conv_bn_mul", stage="tfa")
    page = inspector.present.report_html(analysis, journeys=[conv_bn])
    assert "Journeys through the Arm pipeline" in page and html.escape(conv_bn.site) in page
    assert "Journeys through the Arm pipeline" not in inspector.present.report_html(analysis)
    md = report(analysis, format="md", journeys=[conv_bn])
    assert f"Journey of site `{conv_bn.site}`" in md and FOLD in md
    data = json.loads(report(analysis, format="json", journeys=[conv_bn]))
    assert data["journeys"][0]["site"] == conv_bn.site


def test_the_journey_s_tosa_point_is_the_reference_model_s_number():
    """``tosa=True`` runs the lowered program on the TOSA reference model as the flow's run step: its output SQNR is
    the one ``compare`` measures on the reference model for the same variant at its first step."""
    trip = inspector.journey("sample:conv_mul_scalar", site=0, variant="upstream", tosa=True)
    point = next(p for p in trip.numbers if p.point == "TOSA")
    comparison = inspector.compare("sample:conv_mul_scalar", variants=["upstream"], steps=1)
    measured = comparison.results[0].at_step(0).sqnr_db
    assert point.output_sqnr_db is not None and "could not run" not in point.note
    assert point.output_sqnr_db == pytest.approx(measured, rel=1e-9, abs=1e-9)
