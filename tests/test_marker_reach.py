"""Which carried-state marker reaches the fold pass, per flow and per place a model author can set it.

``marker_reach`` runs ExecuTorch's Arm flows through the project's runner and reads the meta of the graph each call
of the pass receives. What it measures on two samples with a site (a buffer written with ``copy_``, and state passed
in and returned) is the table below: the top-level key PR #21234 reads survives ``ep.module()``, ``prepare_pt2e``
(where the INT flow's transform-for-annotation call receives it) and ``convert_pt2e``, and is gone after the
re-export before lowering and after ``to_edge`` in the FP flow; ``meta["custom"]`` reaches every call.
scripts/check_pr_21234.py (run on the PR's files, which a user fetches) sees the same with ExecuTorch's calls alone:
the PR's file keeps a site marked in the top-level key at aten and tfa, and folds it at edge and in the FP flow's
lowering call.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import inspector
from inspector._advise import marker_reach as mr
from inspector._doors.executorch import installed_version

# executorch 1.4.x's own FP lowering of a model whose buffer is written fails before the fold call ("Constant state
# was tagged to be consumed by the buffer ...", docs/stack-facts.md): there the FP records carry that one line.
FP_FAILS_ON_1_4 = {"sample:stateful_conv_mul"}


def _fp_fails(sample: str) -> bool:
    return tuple(int(x) for x in installed_version().split(".")[:2]) < (1, 5) and sample in FP_FAILS_ON_1_4

SAMPLES = ("sample:stateful_conv_mul", "sample:functional_recurrent_conv_mul")
# (flow, call, placement) -> (reached in either form, in the top-level key PR #21234 reads)
EXPECTED = {
    ("INT", "tfa", mr.TOP_PROGRAM): (True, True),
    ("INT", "tfa", mr.CUSTOM_PROGRAM): (True, False),
    ("INT", "tfa", mr.TOP_MODULE): (True, True),
    ("INT", "tfa", mr.CUSTOM_MODULE): (True, False),
    ("INT", "lowering", mr.TOP_PROGRAM): (False, False),
    ("INT", "lowering", mr.CUSTOM_PROGRAM): (True, False),
    ("INT", "lowering", mr.TOP_MODULE): (False, False),
    ("INT", "lowering", mr.CUSTOM_MODULE): (True, False),
    ("FP", "lowering", mr.TOP_PROGRAM): (False, False),
    ("FP", "lowering", mr.CUSTOM_PROGRAM): (True, False),
    ("FP", "lowering", mr.TOP_MODULE): (False, False),
    ("FP", "lowering", mr.CUSTOM_MODULE): (True, False),
}


@pytest.fixture(scope="module")
def measured():
    made: dict = {}

    def get(sample: str):
        if sample not in made:
            made[sample] = mr.marker_reach(sample)
        return made[sample]

    return get


@pytest.mark.parametrize("sample", SAMPLES)
def test_the_marker_that_reaches_the_pass(measured, sample):
    records = measured(sample)
    if _fp_fails(sample):
        assert all(r.error and "Constant state" in r.error for r in records if r.flow == "FP")
        records = [r for r in records if r.flow != "FP"]
    assert not [r.error for r in records if r.error], [r.error for r in records]
    table = {(r.flow, r.call, r.placement): (r.reached, r.pr_reads) for r in records}
    assert table == {k: v for k, v in EXPECTED.items() if k[0] in {r.flow for r in records}}
    for r in records:
        assert r.calls >= 1 and r.received is not None and r.received.found == len(r.sites), r
        assert r.trail[0].point == "set" and r.trail[0].found == len(r.sites)  # the author's marker is there


@pytest.mark.parametrize("sample", SAMPLES)
def test_where_the_top_level_key_is_lost(measured, sample):
    """The top-level key survives ep.module(), prepare_pt2e and convert_pt2e; the re-export drops it in the INT
    flow, to_edge in the FP flow (and an author's own re-export of a marked ep.module(), before the flow starts)."""
    def trail(flow, placement):
        r = next(r for r in measured(sample) if (r.flow, r.placement) == (flow, placement))
        return [(p.point, p.top_level, p.custom) for p in r.trail]

    for placement in (mr.TOP_PROGRAM, mr.TOP_MODULE):
        assert trail("INT", placement) == [("set", True, False), ("start", True, False), ("tfa", True, False),
                                           ("converted", True, False), ("re-exported", False, False),
                                           ("lowering", False, False)]
    flows = ("INT",) if _fp_fails(sample) else ("INT", "FP")
    if "FP" in flows:
        assert trail("FP", mr.TOP_PROGRAM) == [("set", True, False), ("start", True, False),
                                               ("lowering", False, False)]
        assert trail("FP", mr.TOP_MODULE) == [("set", True, False), ("start", False, False),
                                              ("lowering", False, False)]
    for flow in flows:
        for placement in (mr.CUSTOM_PROGRAM, mr.CUSTOM_MODULE):
            assert all(p.custom and not p.top_level for p in
                       next(r for r in measured(sample) if (r.flow, r.placement) == (flow, placement)).trail)


def test_bad_requests_are_one_line():
    with pytest.raises(inspector.InspectorError, match="no site nowhere@x.py:1 in the exported program; its sites"):
        mr.marker_reach("sample:stateful_conv_mul", sites=["nowhere@x.py:1"])
    with pytest.raises(inspector.InspectorError, match="unknown placement"):
        mr.marker_reach("sample:stateful_conv_mul", placements=["on the weights"])
    with pytest.raises(inspector.InspectorError, match="has no site to mark"):
        mr.marker_reach("sample:conv_mul_scalar", sites=[])


class Annotated(nn.Module):
    """State passed in and returned, its site's mul marked in the model's own code with ``torch.fx.traceback.annotate``
    (what ``meta["custom"]`` is for: a user's annotation torch carries through tracing)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x, h):
        y = self.conv(x + h)
        with torch.fx.traceback.annotate({"carried_quant_state": True}):
            h2 = y * 0.25
        return h2 + x, h2


def test_a_marker_set_in_the_models_code_reaches_every_call_where_the_pr_does_not_read_it():
    """Exported under ``preserve_node_meta``, the annotation is in ``meta["custom"]`` of the mul alone, and it reaches
    the transform-for-annotation call and both lowering calls; PR #21234 reads the top-level key, so none of them."""
    inputs = tuple(torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(i)) for i in range(2))
    with torch.fx.traceback.preserve_node_meta():
        program = torch.export.export(Annotated(), inputs)
    records = mr.marker_reach(program, placements=(mr.AS_EXPORTED,))
    assert [(r.flow, r.call, r.reached, r.pr_reads) for r in records] == [
        ("INT", "tfa", True, False), ("INT", "lowering", True, False), ("FP", "lowering", True, False)]
    assert records[0].trail[0].marked == ("mul",)  # the annotation marks the mul, nothing else
    plain = mr.marker_reach(torch.export.export(Annotated(), inputs), placements=(mr.AS_EXPORTED,))
    assert not any(r.reached for r in plain)  # without preserve_node_meta, export keeps no annotation
