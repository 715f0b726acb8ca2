"""The core stays linear: a 10,000-node graph is analyzed with one state sweep (timings live in bench/)."""

from __future__ import annotations

from inspector import _graph
import inspector
from sample_models.generated import tfa_blocks


def test_ten_thousand_node_graph_is_decided_site_by_site():
    gm = tfa_blocks(1850)
    assert len(gm.graph.nodes) >= 10_000
    result = inspector.analyze_graph(gm, policy="state-aware-strict", name="tfa_blocks")
    assert len(result.sites) == 1850
    for i, site in enumerate(result.sites):
        if i % 5 == 4:
            assert site.reason_codes[-1] == "conv-has-other-users"
        elif i % 4 == 3:
            assert site.reason_codes == ("feeds-buffer-mutation",)
        else:
            assert site.decision == "fold", (i, site.reason_codes)
    assert result.mismatches == ()
    upstream = result.with_policy("upstream")
    assert sum(s.folded for s in upstream.sites) == sum(1 for i in range(1850) if i % 5 != 4)


def test_state_reach_paths_end_at_the_write():
    gm = tfa_blocks(300)
    reach = _graph.state_reach(gm.graph, in_place_writes=True)
    muls = [n for n in gm.graph.nodes if _graph.is_mul(n)]
    assert [reach.reaches(_graph.BUFFER, m) for m in muls[:8]] == [False, False, False, True] * 2
    path = reach.path(_graph.BUFFER, muls[3])
    assert path[0] is muls[3] and path[-1].op == "call_function" and path[-1].name.startswith("copy_")
