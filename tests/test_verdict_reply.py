"""The verdict's reply, as a reviewer of #21234 reads it: the lead above the first table fits one screen, and each of
its sentences is checked here against numbers computed again (a comparison read from the result store, the installed
pass manager's source, ExecuTorch's own flow with a hook on the pass), never against the sentence's own code.

The verdict is notebook 10's (the same networks, accelerators and steps), so the suite computes it once.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import re
from pathlib import Path

import pytest
import torch

import inspector
import sample_models
from inspector._advise.verdict_records import MARKER, MARKER_ON_PROGRAM, STRUCTURAL, UPSTREAM
from inspector._base.formats import cycles_change, db, db_change
from inspector.present import verdict as words

NETWORKS = ("sample:stateful_conv_mul", "sample:digits_stateful")
ACCELERATORS = ("ethos-u55-128", "ethos-u85-256")
SCREEN = (48, 120)  # lines, columns: one screen of a GitHub comment on a laptop


@pytest.fixture(scope="module")
def verdict():
    return inspector.verdict(NETWORKS, accelerators=ACCELERATORS)


@pytest.fixture(scope="module")
def lead(verdict):
    return words.lead(verdict)


def _one(sentences, start: str) -> str:
    found = [s for s in sentences if s.startswith(start)]
    assert len(found) == 1, (start, sentences)
    return found[0]


@pytest.mark.requires_tosa
def test_the_lead_fits_one_screen_above_the_first_table(verdict, lead):
    reply = verdict.to_markdown()
    above = reply.split("**Where each flow folds")[0]
    rows = sum(max(1, math.ceil(len(line) / SCREEN[1])) for line in above.splitlines())
    assert rows <= SCREEN[0], f"{rows} screen lines above the table"
    assert 3 <= len(lead) <= 2 + len(NETWORKS) + 1  # structural, marker, one per network's cost, the hazard
    assert all(s in words.verdict_text(verdict) for s in lead)  # the reply's own are these, names as code spans


def _registrations() -> dict[str, int]:
    """The installed pass manager's lines that build the fold pass, read from its file."""
    path = Path(importlib.util.find_spec("executorch.backends.arm._passes.arm_pass_manager").origin)
    lines = path.read_text().splitlines()
    return {key: next(i + 1 for i, line in enumerate(lines) if f"FoldScalarMulIntoConvPass({key})" in line)
            for key in ("tfa_pass=True", "exported_program")}


@pytest.mark.requires_tosa
def test_the_structural_sentence_names_the_two_registrations_and_holds(verdict, lead):
    sentence = _one(lead, "In executorch")
    for line in _registrations().values():
        assert f"arm_pass_manager.py:{line}`" in sentence
    flows = [f for n in verdict.networks for f in n.flows if f.error is None]
    assert flows and all(f.decision(STRUCTURAL).folded == f.decision(UPSTREAM).folded for f in flows)
    assert "changed no decision" in sentence and "cannot fire" in sentence


def _kept(verdict, flow: str, key: str) -> tuple[int, int]:
    """(sites feeding state ``key`` kept from folding in every ``flow`` flow, sites feeding state), counted here."""
    kept = total = 0
    for n in verdict.networks:
        flows = [f for f in n.flows if f.name == flow and f.error is None and f.decision(key) is not None]
        for site in n.state_sites if flows else ():
            total += 1
            kept += all(site not in f.decision(key).folded for f in flows)
    return kept, total


@pytest.mark.requires_tosa
def test_the_marker_sentence_counts_what_each_flow_decided(verdict, lead):
    sentence = _one(lead, "So the marker")
    k, t = _kept(verdict, "INT", MARKER)
    assert t == sum(len(n.state_sites) for n in verdict.networks) > 0
    assert f"({k} of {t} site(s) feeding state kept)" in sentence and "before calibration" in sentence
    k_int, t_int = _kept(verdict, "INT", MARKER_ON_PROGRAM)
    k_fp, t_fp = _kept(verdict, "FP", MARKER_ON_PROGRAM)
    assert f"reaches the quantizer's rewrite ({k_int} of {t_int} kept)" in sentence
    assert k_fp == 0 and f"does not reach the FP flow's lowering call (0 of {t_fp} kept)" in sentence
    assert sentence.startswith("So the marker is the PR's whole effect.")


@pytest.mark.requires_tosa
def test_each_cost_sentence_is_a_comparisons_mean_and_worst(verdict, lead):
    for n in verdict.networks:
        if not n.state_sites:
            continue
        (sentence,) = [s for s in lead if s.startswith(f"Skipping the {len(n.state_sites)} site")
                       and f"feeding state of {n.target.removeprefix('sample:')} (" in s]
        for chip in ACCELERATORS:
            up, skipped = inspector.compare(n.target, variants=["upstream", ("state-aware", list(n.state_sites))],
                                            steps=n.steps, accelerator=chip).results
            worst = [[min(m.sqnr_db for m in r.metrics if m.step == s) for s in range(n.steps)] for r in (up, skipped)]
            means = [sum(w) / len(w) for w in worst]
            abs_means = [sum(m.value("mean-abs") for m in r.metrics) / len(r.metrics) for r in (up, skipped)]
            better = sum(a > b for a, b in zip(*worst))
            worse = sum(a < b for a, b in zip(*worst))
            assert f"{cycles_change(skipped.cost.cycles - up.cost.cycles)} cycles on {chip}" in sentence
            if worst[0] == worst[1] and abs_means[0] == abs_means[1]:  # a scalar scale: the same numbers either way
                assert (f"the same SQNR at every step ({db(means[0])} dB on average, {db(up.overall('sqnr'))} at "
                        "worst) and the same mean |error|") in sentence
                continue
            assert f"mean SQNR {db(means[0])} -> {db(means[1])} dB" in sentence
            assert f"worst {db(up.overall('sqnr'))} -> {db(skipped.overall('sqnr'))} dB" in sentence
            assert f"({(abs_means[1] - abs_means[0]) / abs_means[0]:+.1%})" in sentence
            assert f"folding better at {better} and worse at {worse} of {n.steps} steps" in sentence


@pytest.mark.requires_tosa
def test_the_hazard_sentence_says_what_would_have_to_change(verdict, lead):
    sentence = _one(lead, "#21152's mechanism")
    assert all(f.folds["lowering"] == 0 for n in verdict.networks for f in n.flows if f.name == "INT")
    changes = [a.stale.worst_db - a.upstream.worst_db for n in verdict.networks for a in n.accelerators if a.stale]
    assert changes
    span = db_change(min(changes)) if min(changes) == max(changes) else \
        f"{db_change(min(changes))} to {db_change(max(changes))}"
    assert f"moves the worst SQNR by {span} dB" in sentence and "needs a fold after calibration" in sentence


# ---------------------------------------------------------------- what the PR's tests miss, shown with ExecuTorch's calls


def _signatures_the_pass_receives(model, inputs) -> dict[str, list]:
    """ExecuTorch's own FP flow with a hook on the installed pass: the output kinds of the signature each call
    receives (None: transform-for-annotation, no program)."""
    from executorch.backends.arm._passes.fold_scalar_mul_into_conv_pass import FoldScalarMulIntoConvPass
    from executorch.backends.arm._passes import arm_pass_manager
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import to_edge_transform_and_lower

    seen: dict[str, list] = {"lowering": []}

    class Hook(FoldScalarMulIntoConvPass):
        def call(self, graph_module):
            program = self.exported_program
            seen["lowering"].append(None if program is None else
                                    [s.kind.name for s in program.graph_signature.output_specs])
            return super().call(graph_module)

    original = arm_pass_manager.FoldScalarMulIntoConvPass
    arm_pass_manager.FoldScalarMulIntoConvPass = Hook
    try:
        to_edge_transform_and_lower(torch.export.export(copy.deepcopy(model), inputs),
                                    partitioner=[TOSAPartitioner(TosaCompileSpec("TOSA-1.0+FP"))])
    finally:
        arm_pass_manager.FoldScalarMulIntoConvPass = original
    return seen


@pytest.mark.requires_tosa
def test_the_prs_tests_see_a_buffer_mutation_the_flow_never_hands_the_pass(verdict):
    from executorch.exir import EdgeCompileConfig, to_edge

    point = words.tests_point(verdict)
    assert all(f"`{t}`" in point for t in words.PR_TESTS) and point in verdict.to_markdown()
    model = sample_models.get("stateful_conv_mul")
    inputs = model.example_inputs()
    # what the PR's tests hand the pass: the top-level to_edge program, whose signature writes the buffer
    edge = to_edge(torch.export.export(copy.deepcopy(model), inputs),
                   compile_config=EdgeCompileConfig(_check_ir_validity=False)).exported_program()
    assert "BUFFER_MUTATION" in [s.kind.name for s in edge.graph_signature.output_specs]
    # what the pipeline hands it: no BUFFER_MUTATION in any call
    calls = _signatures_the_pass_receives(model, inputs)["lowering"]
    assert calls and all(kinds is not None and "BUFFER_MUTATION" not in kinds for kinds in calls)


@pytest.mark.requires_tosa
def test_a_reply_keeps_networks_with_a_site_and_counts_the_others():
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    v = inspector.verdict(["sample:stateful_conv_mul", (plain, (torch.rand(1, 3, 8, 8),))], accelerators=["tosa-int"],
                          fp=False)
    (without,) = [n.target for n in v.networks if not n.sites]
    reply = v.to_markdown()
    assert "1 of the 2 given had none" in reply and "FP flow" not in reply.split("\n\n")[-1]
    assert without not in re.sub(r"_Measured on.*?_\n", "", reply)
