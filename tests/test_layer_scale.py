"""A layer scale on a conv output (timm's ConvNeXt: ``x + pw(dw(x)).mul(gamma.reshape(...))``) goes
through every door: the quantizer's own constant folding turns ``gamma.reshape`` into a constant
that is not a graph leaf, which ``copy.deepcopy`` refuses; the inspector's private copies must
not stop what the plain flow runs."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

import inspector
from conftest import ROOT
from inspector._decide.stages import STAGES


class LayerScale(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.dw = nn.Conv2d(8, 8, 7, padding=3, groups=8)
        self.pw = nn.Conv2d(8, 8, 1)
        self.gamma = nn.Parameter(torch.full((8,), 1e-6))

    def forward(self, x):
        return x + self.pw(torch.relu(self.dw(x))).mul(self.gamma.reshape(1, -1, 1, 1))


INPUTS = (torch.randn(1, 8, 16, 16),)


def test_the_plain_flow_runs_it_and_deepcopy_refuses_what_the_quantizer_made():
    """The positive control: the graph the fold pass receives in the quantizer's own
    transform-for-annotation really holds a non-leaf constant that deepcopy refuses, and the
    plain flow (prepare_pt2e with the same quantizer) still runs."""
    import copy

    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from inspector._doors import executorch as _executorch
    from inspector._doors.fold_swap import swapped_fold_pass

    seen = []

    class Watching(_executorch.fold_pass_class()):
        def call(self, graph_module):
            tensors = [v for m in graph_module.modules()
                       for v in [*m._parameters.values(), *m._buffers.values(), *vars(m).values()]
                       if isinstance(v, torch.Tensor)]
            seen.append([t for t in tensors if not t.is_leaf])
            try:
                copy.deepcopy(graph_module)
            except RuntimeError as exc:
                seen.append(str(exc))
            return super().call(graph_module)

    model = LayerScale().eval()
    gm = torch.export.export(copy.deepcopy(model), INPUTS).module(check_guards=False)
    with swapped_fold_pass(Watching):
        prepare_pt2e(gm, _executorch.tosa_int_quantizer())
    assert seen and seen[0], "the quantizer left no non-leaf constant: this test no longer tests the defect"
    assert "graph leaves" in seen[1]


@pytest.mark.parametrize("stage", STAGES)
def test_it_is_analysed_at_every_stage(stage):
    model = LayerScale().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    analysis = inspector.analyze(model, example_inputs=INPUTS, stage=stage)
    if stage == "lowering":  # the INT flow folded it at tfa: the lowering call's graph no longer has it, and says so
        tfa = inspector.analyze(model, example_inputs=INPUTS, stage="tfa").sites[0]
        assert analysis.sites == () and any(tfa.id in note and "transform-for-annotation" in note
                                            for note in analysis.notes)
        assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
        return
    assert len(analysis.sites) == 1
    site = analysis.sites[0]
    if stage == "tfa":  # where the quantizer constant-folded the reshape: a per-channel constant scale
        assert site.folded and site.scale.kind == "channel"
    else:  # the scale is computed in forward from a parameter
        assert not site.folded and site.reason_codes[0] == "scale-not-constant"
    for policy in inspector.rules:
        assert analysis.with_rule(policy).sites[0].id == site.id
    assert analysis.toggle_marker(site.id).site(site.id).marked
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


@pytest.mark.requires_tosa
def test_it_is_compared_and_attributed_on_the_reference_model():
    comparison = inspector.compare(LayerScale().eval(), variants=("off", "upstream"), example_inputs=INPUTS, workers=1)
    assert [r.variant.rule.name for r in comparison.results] == ["off", "upstream"]
    assert all(m.sqnr_db == m.sqnr_db for r in comparison.results for m in r.metrics)  # finite or inf, not NaN
    attribution = inspector.attribution(comparison)
    assert {v.label for v in attribution.variants} == {"off", "upstream"}
    assert all(v.nodes for v in attribution.variants)


def test_the_widget_shows_it():
    from widgets import FoldInspector

    app = FoldInspector(LayerScale().eval(), INPUTS, stage="tfa")
    assert app.last_error is None
    assert [s.id for s in app.sites] == [
        s.id for s in inspector.analyze(LayerScale().eval(), example_inputs=INPUTS, stage="tfa").sites]
    app.toggle_marker(app.sites[0].id)
    assert app.last_error is None and app.markers


@pytest.mark.slow  # runs the reproducer in a pytest of its own: make test runs it
def test_a_reproducer_of_it_passes(tmp_path):
    analysis = inspector.analyze(LayerScale().eval(), example_inputs=INPUTS, stage="tfa")
    repro = inspector.reproducer(analysis, site_id=analysis.sites[0].id)
    path = repro.write(tmp_path / "test_repro.py")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "1 passed" in out.stdout
