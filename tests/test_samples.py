"""Every sample x stage x policy: the decisions are the real pass's, the reasons the expected codes.

The lowering stage (the graph the pass receives inside ``to_edge_transform_and_lower`` on tosa-int: a quantize and
a lowering per sample) is decided once per sample, in the session fixture test_lowering_stage.py shares.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import inspector
import sample_models
from inspector._doors import executorch as _executorch
from inspector._sites import graph as _graph
from inspector._doors import tosa as _tosa
from inspector._doors.fold_swap import swapped_fold_pass
from conftest import LOWERING_SAMPLES, NO_LOWERING, flat

MATRIX = [(n, s) for n in sample_models.names() for s in NO_LOWERING]
# A few samples at lowering (tosa-int, the default accelerator; a quantize and a lowering each, shared with
# test_lowering_stage.py): every sample declares its expectations there, and bench-free runs of all of them are
# in the lowering-stage issue's report.
LOWERING = [pytest.param(n, "lowering", marks=pytest.mark.requires_tosa) for n in LOWERING_SAMPLES]


@pytest.mark.parametrize("name,stage", MATRIX + LOWERING)
def test_decisions_and_reasons_match_expectations(stage_analyses, name, stage):
    base = stage_analyses(name, stage)
    model = sample_models.get(name)
    for policy in inspector.rules:
        with warnings.catch_warnings():
            warnings.simplefilter("error", inspector.ExplanationMismatchWarning)
            result = base.with_rule(policy)
        got = tuple((s.decision, s.reason_codes) for s in result.sites)
        assert got == model.expected(stage, policy), f"{policy}: {result.summary()}"
        assert result.mismatches == ()
        for s in result.skipped:
            assert all(r.message and r.detail for r in s.reasons)


@pytest.mark.parametrize("name,stage", MATRIX + LOWERING)
def test_upstream_decisions_equal_the_unwrapped_installed_pass(stage_analyses, name, stage):
    """Run the installed class itself (no inspector subclass) and see which muls it removed."""
    result = stage_analyses(name, stage)
    gm, program = result.stage_graph.fresh_copy()
    muls = {n.name for n in gm.graph.nodes if _graph.is_mul(n)}
    cls = _executorch.fold_pass_class()
    (cls(program) if program is not None else cls(tfa_pass=True))(gm)
    removed = muls - {n.name for n in gm.graph.nodes}
    assert removed == {s.mul for s in result.folded}


@pytest.mark.parametrize("name", sample_models.names())
def test_tfa_decisions_equal_the_pass_inside_the_quantizer_pipeline(stage_analyses, name):
    """At tfa, the fold that the quantizer's own pipeline runs removes exactly the folded sites."""
    removed: list[str] = []
    base = _executorch.fold_pass_class()

    class Watching(base):
        def call(self, graph_module):
            muls = {n.name for n in graph_module.graph.nodes if _graph.is_mul(n)}
            result = super().call(graph_module)
            removed.extend(sorted(muls - {n.name for n in graph_module.graph.nodes}))
            return result

    model = sample_models.get(name)
    gm = torch.export.export(copy.deepcopy(model), model.example_inputs()).module(check_guards=False)
    with swapped_fold_pass(Watching):  # the real prepare_pt2e: it fuses BatchNorm before the fold
        _tosa.prepare_pt2e(gm, _executorch.tosa_int_quantizer())
    assert sorted(removed) == sorted(s.mul for s in stage_analyses(name, "tfa").folded)


@pytest.mark.parametrize("name,stage", MATRIX)
def test_after_graph_computes_the_same_float_outputs(stage_analyses, name, stage):
    for policy in ("upstream", "state-aware-strict"):
        result = stage_analyses(name, stage).with_rule(policy)
        before, after = flat(result.run_before()), flat(result.run_after())
        reused = any(r.code == "folded-weight-reused" for s in result.sites for r in s.risks)
        if reused:
            # The installed pass's bug: both convs read the first scaled weight.
            assert any(not torch.allclose(b, a, atol=1e-4) for b, a in zip(before, after))
        else:
            for b, a in zip(before, after):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_shared_weight_reuse_is_flagged_only_where_the_pass_reuses():
    result = inspector.analyze("sample:shared_conv_mul", stage="edge")
    assert [s.decision for s in result.sites] == ["fold", "fold"]
    assert result.sites[0].folded_weight == result.sites[1].folded_weight
    assert all("folded-weight-reused" in [r.code for r in s.risks] for s in result.sites)
    chain = inspector.analyze("sample:conv_mul_chain", stage="edge")
    assert not any(r.code == "folded-weight-reused" for s in chain.sites for r in s.risks)


def test_site_ids_are_stable_across_stages_and_runs(stage_analyses):
    for name in sample_models.names():
        ids = {stage: [s.id for s in stage_analyses(name, stage).sites] for stage in NO_LOWERING}
        # A site may exist at some stages only (conv_bn_mul: BatchNorm is fused before tfa); where
        # it exists, it has the same id.
        present = [v for v in ids.values() if v]
        assert all(v == present[0] for v in present), name
        again = inspector.analyze("sample:" + name, stage="aten")
        assert [s.id for s in again.sites] == ids["aten"]


def test_every_sample_declares_itself():
    for name in sample_models.names():
        model = sample_models.get(name)
        assert type(model).__doc__ and sample_models.describe(name)
        assert isinstance(model.example_inputs(), tuple)
        for stage in inspector.STAGES:
            for policy in inspector.rules:
                assert all(d in ("fold", "skip") for d, _ in model.expected(stage, policy))
    with pytest.raises(KeyError, match="unknown sample"):
        sample_models.get("nope")


def test_wide_dynamic_range_risk_carries_the_ratio(stage_analyses):
    site = stage_analyses("conv_mul_wide_dynamic_range_scale", "tfa").sites[0]
    risk = next(r for r in site.risks if r.code == "wide-dynamic-range-scale")
    assert risk.value == pytest.approx(1e5, rel=1e-3)
    assert site.scale.kind == "channel" and site.scale.shape == (1, 4, 1, 1)
    narrow = stage_analyses("conv_mul_channel_scale", "tfa").sites[0]
    assert not any(r.code == "wide-dynamic-range-scale" for r in narrow.risks)


@pytest.mark.requires_tosa
def test_site_ids_at_lowering_are_the_tfa_sites_the_int_flow_left_unfolded(stage_analyses):
    """The lowering graph of the INT flow holds the sites the tfa call did not fold, under the same ids (their
    nodes are renamed by then): what tfa folded is gone, and a note names it."""
    assert any(stage_analyses(n, "tfa").folded for n in LOWERING_SAMPLES)
    for name in LOWERING_SAMPLES:
        tfa, lowering = stage_analyses(name, "tfa"), stage_analyses(name, "lowering")
        assert [s.id for s in lowering.sites] == [s.id for s in tfa.skipped], name
        if tfa.folded:
            note = next(n for n in lowering.notes if "folded" in n and "earlier" in n)
            assert all(s.id in note for s in tfa.folded), (name, note)
