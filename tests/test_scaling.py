"""The core stays linear: a 10,000-node graph is analyzed with one state sweep (timings live in bench/)."""

from __future__ import annotations

from inspector._sites import graph as _graph
import inspector
from sample_models.generated import tfa_blocks


def test_ten_thousand_node_graph_is_decided_site_by_site():
    gm = tfa_blocks(1850)
    assert len(gm.graph.nodes) >= 10_000
    result = inspector.analyze_graph(gm, rule="state-aware-strict", name="tfa_blocks")
    assert len(result.sites) == 1850
    for i, site in enumerate(result.sites):
        if i % 5 == 4:
            assert site.reason_codes[-1] == "conv-has-other-users"
        elif i % 4 == 3:
            assert site.reason_codes == ("feeds-buffer-mutation",)
        else:
            assert site.decision == "fold", (i, site.reason_codes)
    assert result.mismatches == ()
    upstream = result.with_rule("upstream")
    assert sum(s.folded for s in upstream.sites) == sum(1 for i in range(1850) if i % 5 != 4)


def test_state_reach_paths_end_at_the_write():
    gm = tfa_blocks(300)
    reach = _graph.state_reach(gm.graph, in_place_writes=True)
    muls = [n for n in gm.graph.nodes if _graph.is_mul(n)]
    assert [reach.reaches(_graph.BUFFER, m) for m in muls[:8]] == [False, False, False, True] * 2
    path = reach.path(_graph.BUFFER, muls[3])
    assert path[0] is muls[3] and path[-1].op == "call_function" and path[-1].name.startswith("copy_")


def test_fast_signature_lookups_match_torch_and_touch_only_their_program():
    """The pass's signature lookups are cached while it runs, on the private program alone: the
    same dicts as torch's, rebuilt when the spec list grows or the Arm utilities install a new
    signature, and afterwards the program and every signature are torch's own classes again with
    nothing kept (no class of torch's is patched: another program meanwhile sees torch as it is)."""
    import copy

    import torch
    from torch import nn
    from torch.export import ExportedProgram
    from torch.export.graph_signature import ExportGraphSignature, InputKind, InputSpec, TensorArgument

    from inspector._doors import executorch as _executorch

    program = copy.deepcopy(torch.export.export(nn.Conv2d(2, 2, 1), (torch.ones(1, 2, 4, 4),)))
    other = copy.deepcopy(program)
    expected = dict(program.graph_signature.inputs_to_parameters)
    with _executorch.fast_signature_lookups(program):
        signature = program.graph_signature
        first = signature.inputs_to_parameters
        assert dict(first) == expected and signature.inputs_to_parameters is first
        assert other.graph_signature.inputs_to_parameters is not other.graph_signature.inputs_to_parameters
        spec = InputSpec(kind=InputKind.PARAMETER, arg=TensorArgument(name="p_new"), target="new", persistent=None)
        signature.input_specs.insert(0, spec)
        assert dict(signature.inputs_to_parameters) == {"p_new": "new", **expected}
        program._graph_signature = ExportGraphSignature(list(signature.input_specs), signature.output_specs)
        replaced = program.graph_signature
        assert replaced is not signature and replaced.inputs_to_parameters is replaced.inputs_to_parameters
    assert type(program) is ExportedProgram
    for sig in (signature, replaced):
        assert type(sig) is ExportGraphSignature and "_inspector_lookups" not in vars(sig)
    assert "_inspector_signatures" not in vars(program)
    assert ExportGraphSignature.inputs_to_parameters.fget.__module__ == "torch.export.graph_signature"
