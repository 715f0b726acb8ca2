"""``state-aware`` is executorch PR #21234 as proposed, checked against a hand-written oracle.

The oracle is written from the PR's description, not from ``inspector._sites.graph.state_reach``:

- boundary names: ``spec.arg.name`` of every ``BUFFER_MUTATION`` / ``USER_INPUT_MUTATION``
  output spec of the exported program's graph signature (none at tfa: there is no program),
  and every node whose TOP-LEVEL ``node.meta["carried_quant_state"]`` is truthy;
- the guard fires on a site when a depth-first walk over ``.users`` from its mul (the mul
  counts), with no op filter, reaches a boundary name.

Under ``state-aware`` a site is then skipped for a state reason exactly where the guard fires
and the installed pass would otherwise fold it; a marker found only in ``meta["custom"]``
is ignored (risk ``marker-ignored-by-pr``), as the PR would ignore it.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.export.graph_signature import OutputKind

import inspector
from conftest import NO_LOWERING

KEY = "carried_quant_state"
STATE_REASONS = {"feeds-buffer-mutation", "feeds-input-mutation", "marked-carried-state"}
SAMPLES = inspector.samples.names()


# ---------------------------------------------------------------- the oracle


def boundary_names(graph, program) -> set[str]:
    names = set()
    if program is not None:
        for spec in program.graph_signature.output_specs:
            if spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION):
                names.add(spec.arg.name)
    return names | {n.name for n in graph.nodes if n.meta.get(KEY)}


def downstream(node) -> set[str]:
    """Names of ``node`` and of everything a depth-first walk over ``.users`` reaches from it."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(n.users)
    return {n.name for n in seen}


def guard_fires(analysis: inspector.Analysis, marked: set[str] = frozenset()) -> dict[str, bool]:
    """site id -> whether the PR's guard fires on it (``marked``: node names an inspector marker names)."""
    graph = analysis.stage_graph.graph_module.graph  # the pristine graph, as the pass receives it
    boundaries = boundary_names(graph, analysis.stage_graph.program) | set(marked)
    by_name = {n.name: n for n in graph.nodes}
    return {s.id: bool(downstream(by_name[s.mul]) & boundaries) for s in analysis.sites}


# ---------------------------------------------------------------- the check


def check(state_aware: inspector.Analysis, upstream: inspector.Analysis, fires: dict[str, bool], where) -> int:
    """state-aware skips for a state reason exactly where the guard fires and upstream folds; returns
    how many sites the guard kept from the pass."""
    assert state_aware.rule.name == "state-aware" and upstream.rule.name == "upstream"
    kept = 0
    for sa, up in zip(state_aware.sites, upstream.sites):
        assert (sa.id, sa.mul) == (up.id, up.mul)
        here = (*where, sa.id)
        state = STATE_REASONS & set(sa.reason_codes)
        guard_skipped = sa.decision == "skip" and up.folded and bool(state)
        assert guard_skipped == (fires[sa.id] and up.folded), (here, sa.reason_codes, fires[sa.id], up.decision)
        assert bool(state) == (sa.decision == "skip" and fires[sa.id]), (here, sa.reason_codes, fires[sa.id])
        if guard_skipped:
            kept += 1
            first = next(code for code in sa.reason_codes if code != "disallowed-by-quantizer")
            assert first in STATE_REASONS, (here, sa.reason_codes)
        elif sa.decision != up.decision:
            # conv(x) * a * b with a kept from the pass: b no longer multiplies the conv
            before = next(s for s in state_aware.sites if s.mul == sa.chained_after) if sa.chained_after else None
            assert before is not None and not before.folded and sa.reason_codes == ("follows-unfolded-mul",), \
                (here, sa.decision, up.decision, sa.reason_codes)
        assert sa.mismatch is None, here
    return kept


@pytest.mark.parametrize("stage", NO_LOWERING)
def test_state_aware_is_the_pr_on_every_sample(stage_analyses, stage):
    kept = 0
    for name in SAMPLES:
        upstream = stage_analyses(name, stage)
        if stage == "tfa":
            assert upstream.stage_graph.program is None
        state_aware = upstream.with_rule("state-aware")
        kept += check(state_aware, upstream, guard_fires(state_aware), (name, stage, "no markers"))
    # Only edge's signature lists the buffer writes: at aten (torch.export's IR) and tfa they are in-place
    # copy_ nodes, which the PR does not read, so without a marker it keeps nothing there.
    if stage == "edge":
        assert kept, "no sample feeds a buffer or input mutation at edge: the test proves nothing"


@pytest.mark.parametrize("stage", NO_LOWERING)
def test_state_aware_is_the_pr_with_a_marker_on_each_site(stage_analyses, stage):
    kept = 0
    for name in SAMPLES:
        upstream = stage_analyses(name, stage)
        state_aware = upstream.with_rule("state-aware")
        for site in upstream.sites:
            marked_sa = state_aware.with_markers([site.id])
            marked_up = upstream.with_markers([site.id])
            assert marked_sa.marked == (site.mul,)
            fires = guard_fires(marked_sa, {site.mul})
            assert fires[site.id]  # the mul counts
            kept += check(marked_sa, marked_up, fires, (name, stage, f"marker on {site.id}"))
            assert "marker-ignored-by-pr" not in marked_sa.site(site.id).risk_codes
    assert kept


# ---------------------------------------------------------------- markers set by hand


class Tiny(nn.Module):
    """Two sites: ``a``'s mul feeds a relu then an add (where the markers go), ``b``'s feeds an output."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Conv2d(2, 3, 1)
        self.b = nn.Conv2d(2, 3, 1)

    def forward(self, x):
        y = torch.relu(self.a(x) * 0.5)
        return y + 1.0, self.b(x) * 2.0


INPUTS = (torch.randn(1, 2, 4, 4, generator=torch.Generator().manual_seed(0)),)
PLACEMENTS = ("custom-only", "top-level-only", "both")


def place(graph, placement: str) -> str:
    """Mark the relu after site ``a``'s mul by hand; returns its name."""
    relu = next(n for n in graph.nodes if n.op == "call_function" and n.target == torch.ops.aten.relu.default)
    if placement in ("top-level-only", "both"):
        relu.meta[KEY] = True
    if placement in ("custom-only", "both"):
        relu.meta["custom"] = {**(relu.meta.get("custom") or {}), KEY: True}
    return relu.name


def hand_marked(stage: str, placement: str) -> tuple[inspector.Analysis, inspector.Analysis]:
    """(upstream, state-aware) analyses of Tiny with the relu marked by hand at ``stage``."""
    if stage == "tfa":
        gm = torch.export.export(Tiny(), INPUTS).module()  # weights as get_attr: the tfa form
        place(gm.graph, placement)
        before = [(n.name, dict(n.meta.get("custom") or {}), n.meta.get(KEY)) for n in gm.graph.nodes]
        upstream = inspector.analyze_graph(gm, name="tiny")
        assert [(n.name, dict(n.meta.get("custom") or {}), n.meta.get(KEY)) for n in gm.graph.nodes] == before
    else:
        program = torch.export.export(Tiny(), INPUTS)
        place(program.graph, placement)
        upstream = inspector.analyze(program, example_inputs=INPUTS, stage=stage)
    return upstream, upstream.with_rule("state-aware")


@pytest.mark.parametrize("stage", NO_LOWERING)
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_state_aware_reads_top_level_markers_only(stage, placement):
    upstream, state_aware = hand_marked(stage, placement)
    assert [s.decision for s in upstream.sites] == ["fold", "fold"]
    fires = guard_fires(state_aware)
    check(state_aware, upstream, fires, ("tiny", stage, placement))
    a, b = state_aware.sites
    assert not fires[b.id] and b.folded and "marker-ignored-by-pr" not in b.risk_codes
    graph = state_aware.stage_graph.graph_module.graph
    relu = next(n for n in graph.nodes if n.op == "call_function" and "relu" in str(n.target))
    top, custom = bool(relu.meta.get(KEY)), bool((relu.meta.get("custom") or {}).get(KEY))
    if placement == "custom-only":
        assert not top and not fires[a.id]
        assert custom, f"the custom marker did not reach the {stage} graph"
        assert a.folded and a.reason_codes == () and "marker-ignored-by-pr" in a.risk_codes, (a.decision, a.risk_codes)
    elif top:  # a top-level marker reaches every stage but edge (to_edge keeps meta['custom'] only)
        assert fires[a.id] and not a.folded and a.reason_codes[0] == "marked-carried-state"
        assert "marker-ignored-by-pr" not in a.risk_codes
    if placement != "custom-only" and stage != "edge":
        assert top, f"the top-level marker did not reach the {stage} graph"
    if placement == "both" and stage == "edge":  # only the custom copy survived: the PR would not see it
        assert custom and not top and a.folded and "marker-ignored-by-pr" in a.risk_codes
