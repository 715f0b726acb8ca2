"""A toggle re-decided on regions (the installed pass run on the changed clusters only, and on the
part a focused picture shows) gives what the whole-graph run gives: every site record, the
scaled weights, the drawn picture and the after-graph. The whole-graph run is the reference."""

from __future__ import annotations

import random

import pytest
import torch

import inspector
from inspector import InspectorError
from inspector._base.errors import FoldPassCrash
from conftest import NO_LOWERING as STAGES  # lowering: test_lowering_stage.py
from conftest import flat
from test_analysis import BufferWeights

GUARDS = ("state-aware", "state-aware-strict")


def whole(analysis: inspector.Analysis) -> inspector.Analysis:
    """The same configuration decided by running the pass on a copy of the whole graph."""
    return analysis.with_rule(analysis.rule.name)  # no base: every site, the pass on the whole graph


def drawn_whole(analysis: inspector.Analysis, focus: str, hops: int = 2) -> str:
    """The focused before | after pair drawn from the whole graphs: the renderer given the pristine
    stage graph and the whole after-graph (the analysis may draw either from a region)."""
    from inspector.present.render import Verdicts, render_pair

    sg, marked = analysis.stage_graph, frozenset(analysis.marked)
    sides = []
    for which, (gm, program) in (("before", (sg.graph_module, sg.program)), ("after", analysis.decider.after(analysis))):
        signature = program.graph_signature if program is not None else None
        sides.append((gm, Verdicts(sites=analysis.sites, after=which == "after", signature=signature,
                                   caption=tuple(analysis.caption(which)),
                                   marked=marked)))
    return render_pair(sides[0][0], sides[1][0], (sides[0][1], sides[1][1]), caption=analysis.caption(None),
                       focus=focus, hops=hops).source


def records(analysis: inspector.Analysis) -> list[dict]:
    return [s.to_dict() for s in analysis.sites]


def toggles(analysis: inspector.Analysis, rng: random.Random, n: int) -> list[str]:
    """Markers to toggle: mostly site ids, sometimes a node downstream of a site (a marker by name)."""
    graph = analysis.stage_graph.graph_module.graph
    ops = [node.name for node in graph.nodes if node.op == "call_function"]
    ids = [s.id for s in analysis.sites]
    return [rng.choice(ids) if ids and rng.random() < 0.75 else rng.choice(ops) for _ in range(n)]


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "generated_blocks" else n
                                  for n in inspector.samples.names()])  # slow: the 200-site sample (make check leaves it out)
def test_toggles_on_regions_equal_the_whole_graph_run(stage_analyses, name, stage):
    base = stage_analyses(name, stage)  # some have no site at some stage (BatchNorm is fused at tfa only)
    rng = random.Random(f"{name}/{stage}")
    on_regions = 0
    for policy in ("upstream",) + GUARDS:
        current = base.with_rule(policy)
        for marker in toggles(current, rng, 4):
            current = current.toggle_marker(marker)
            on_regions += current.from_regions  # else a marker guarded much of a big graph at once
            reference = whole(current)
            assert records(current) == records(reference), (policy, current.markers)
            focused = {marker} & {s.id for s in current.sites} | {rng.choice(current.sites).id} if current.sites else ()
            for focus in focused:
                for hops in (1, 2):
                    drawn = current.render_pair(focus=focus, hops=hops).source
                    assert drawn == drawn_whole(reference, focus, hops), (policy, focus, hops)
    assert on_regions >= 9, f"only {on_regions} of 12 toggles were re-decided on regions"


@pytest.mark.slow  # the 200-site sample at every stage: make test runs it, make check leaves it out
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("policy", GUARDS)
@pytest.mark.parametrize("index", [100, 103], ids=["middle-site", "site-writing-state"])
def test_a_toggle_on_a_big_graph_runs_the_pass_on_regions_only(stage_analyses, stage, policy, index):
    base = stage_analyses("generated_blocks", stage).with_rule(policy)
    nodes = len(base.stage_graph.graph_module.graph.nodes)
    site = base.sites[index]
    toggled = base.toggle_marker(site.id)
    assert toggled.from_regions, "the whole graph ran"
    assert toggled.site(site.id).decision == "skip" and "marked-carried-state" in toggled.site(site.id).reason_codes
    drawn = toggled.render_pair(focus=site.id).source
    assert not toggled.decider.has_after(toggled), "the focused picture was drawn from the whole graph"
    region = toggled.decider.focus_region(toggled, site.id, 2)
    assert region is not None
    assert toggled.decider.pristine_region(site.id, 2) is not None, "the before side was drawn from the whole graph"
    assert len(region.names) < nodes / 10, (len(region.names), nodes)
    reference = whole(toggled)
    assert records(toggled) == records(reference)
    assert drawn == drawn_whole(reference, site.id)
    back = toggled.toggle_marker(site.id)
    assert records(back) == records(base)


@pytest.mark.parametrize("stage", ["aten", "tfa"])
def test_a_marker_on_a_write_into_state_is_re_decided_as_the_whole_run_does(stage_analyses, stage):
    # The marker moves no path (a write ends every path) but renames the boundary the sites' paths end at.
    base = stage_analyses("stateful_conv_mul", stage).with_rule("state-aware-strict")
    write = next(n.name for n in base.stage_graph.graph_module.graph.nodes if n.name.startswith("copy_"))
    toggled = base.toggle_marker(write)
    assert toggled.from_regions
    assert records(toggled) == records(whole(toggled))


@pytest.mark.parametrize("stage", STAGES)
def test_the_after_graph_of_a_region_analysis_is_the_whole_run(stage_analyses, stage):
    base = stage_analyses("stateful_conv_mul", stage).with_rule("state-aware-strict")
    inspector.clear_cache()  # other tests may have run this configuration on the whole graph already
    toggled = base.toggle_marker(base.sites[0].id)  # a configuration no whole run has decided since
    assert toggled.from_regions and not toggled.decider.has_after(toggled)
    got = [(n.name, n.op, str(n.target)) for n in toggled.after.graph.nodes]  # built now, and checked
    got_outputs = flat(toggled.run_after())
    reference = whole(toggled)  # another whole run of its own
    assert got == [(n.name, n.op, str(n.target)) for n in reference.after.graph.nodes]
    got, want = got_outputs, flat(reference.run_after())
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))


def test_the_after_graph_check_fails_when_a_region_decided_otherwise(stage_analyses):
    from dataclasses import replace

    base = stage_analyses("generated_blocks", "tfa").with_rule("state-aware")
    toggled = base.toggle_marker(base.sites[3].id)
    forged = replace(toggled.sites[5], decision="skip" if toggled.sites[5].folded else "fold")
    toggled = replace(toggled, sites=toggled.sites[:5] + (forged,) + toggled.sites[6:])
    with pytest.raises(InspectorError, match="decided differently on its region than on the whole graph"):
        toggled.after  # noqa: B018 - a property: reading it builds the after-graph, which checks the regions


@pytest.mark.parametrize("stage", ["aten", "edge"])
def test_a_crash_on_a_region_is_reported_as_the_whole_run_reports_it(stage):
    model, inputs = BufferWeights(), (torch.randn(1, 3, 8, 8),)
    site = inspector.analyze(model, example_inputs=inputs, stage=stage, rule="off").sites[0].id
    marked = inspector.analyze(model, example_inputs=inputs, stage=stage, rule="state-aware", markers=[site])
    assert marked.site(site).decision == "skip"
    with pytest.raises(FoldPassCrash, match=f"crashed while folding site {site}"):
        marked.toggle_marker(site)


def test_an_unknown_marker_is_reported_as_the_whole_run_reports_it(stage_analyses):
    base = stage_analyses("generated_blocks", "tfa").with_rule("state-aware")
    with pytest.raises(InspectorError, match="unknown marker 'no_such_node' at stage tfa"):
        base.toggle_marker("no_such_node")


@pytest.mark.parametrize("stage", STAGES)
def test_regions_leave_the_stage_graph_untouched(stage_analyses, stage):
    base = stage_analyses("generated_blocks", stage).with_rule("state-aware")
    sg = base.stage_graph
    tensors = {k: v.clone() for k, v in sg.graph_module.state_dict().items()}
    program_tensors = {k: v.clone() for k, v in sg.program.state_dict.items()} if sg.program is not None else {}
    names = [n.name for n in sg.graph_module.graph.nodes]
    current = base
    for site in base.sites[10:14]:
        current = current.toggle_marker(site.id)
        current.render_pair(focus=site.id)
    assert [n.name for n in sg.graph_module.graph.nodes] == names
    assert not any(inspector._sites.graph.marked(n) for n in sg.graph_module.graph.nodes)
    for k, v in sg.graph_module.state_dict().items():
        assert torch.equal(v, tensors[k]), k
    for k, v in program_tensors.items():
        assert torch.equal(sg.program.state_dict[k], v), k


def test_clusters_join_sites_that_share_a_conv_or_a_weight(stage_analyses):
    for name, stage in (("shared_conv_mul", "aten"), ("conv_mul_chain", "edge"), ("shared_conv_mul", "tfa")):
        lay = stage_analyses(name, stage).decider.layout
        joined = 0
        for i, a in enumerate(lay.cands):
            for j, b in enumerate(lay.cands[:i]):
                read_a = {x for x in a.conv.args[1:3] if isinstance(x, torch.fx.Node)}
                read_b = {x for x in b.conv.args[1:3] if isinstance(x, torch.fx.Node)}
                same_target = {str(x.target) for x in read_a if x.op == "get_attr"} & \
                    {str(x.target) for x in read_b if x.op == "get_attr"}
                if a.conv is b.conv or read_a & read_b or same_target:
                    assert lay.cluster_of[i] == lay.cluster_of[j], (name, a.mul.name, b.mul.name)
                    joined += 1
        assert joined, f"{name} at {stage} has no sites that share a conv or a weight"
