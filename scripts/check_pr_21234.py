"""executorch PR #21234's own pass file, loaded as a rule, checked against what its own functions decide.

The PR's code is not part of this project; a user fetches its two files and points this script at them:

    git fetch https://github.com/pytorch/executorch pull/21234/head      # in any git checkout
    git show FETCH_HEAD:backends/arm/_passes/fold_scalar_mul_into_conv_pass.py > DIR/fold_scalar_mul_into_conv_pass.py
    git show FETCH_HEAD:backends/arm/_passes/arm_pass_utils.py > DIR/arm_pass_utils.py
    .venv/bin/python scripts/check_pr_21234.py DIR        # or FOLD_INSPECTOR_PR_21234=DIR, then without DIR

It is a plain script, not a pytest file: it prints one line per check (``ok`` or ``FAIL`` and why), the table of
what the PR decides at each stage, and exits with 1 on any failure (2 when the files are not there). The checks
were written against the PR's head commit b4c979384051e4d4e10ecb175ace30cd6d2e52a3; files of another commit are
checked all the same, and the script says their bytes differ.

The graphs come from ExecuTorch's own calls, no inspector code in them: ``torch.export.export`` (aten), ``to_edge``
(edge), and a hook on the installed pass's ``call`` bound into the Arm pass manager for the graph
transform-for-annotation hands it inside ``prepare_pt2e`` (tfa), the graph the FP flow's lowering call hands it
inside ``to_edge_transform_and_lower`` for TOSA-1.0+FP (lowering-fp), and the graph the INT flow's lowering call
hands it after ``convert_pt2e`` and the re-export (lowering-int). On each graph:

- the rule ``pr_rule`` registers, run as the inspector runs a rule, folds exactly the muls the PR's class removes
  when called bare on a copy of the same graph, and exactly the sites ``pr_decisions`` says fold;
- ``pr_decisions`` names the PR's own check that kept each other site (the expected table is in ``EXPECTED``);
- the project's re-implementation, ``state-aware``, folds the same muls. Where the two differ, it is in which check
  is said to have kept a site, never in the decision: the PR asks its matcher first and its guard only of a matched
  mul, while ``state-aware`` hides every mul that reaches state from the matcher, matched or not.

The loader itself (the file runs against the installed executorch, which it leaves as it is) is tested in CI with a
pass file of this project's own in the same shape (tests/test_pr_pass_file.py).
"""

from __future__ import annotations

import argparse
import copy
import difflib
import hashlib
import os
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import inspector
from inspector._doors import executorch as _executorch
from inspector._doors import pr_pass_loader
from inspector._rules import pr_pass
from inspector._rules.rules import guarded_muls, run_pass
from inspector._sites import graph as _graph

ENV = "FOLD_INSPECTOR_PR_21234"
PASS_NAME = "fold_scalar_mul_into_conv_pass.py"
HELPER_NAME = "arm_pass_utils.py"
REMOTE = "https://github.com/pytorch/executorch"
COMMIT = "b4c979384051e4d4e10ecb175ace30cd6d2e52a3"  # refs/pull/21234/head when these checks were written
# sha256 of the two files at COMMIT: a folder with other bytes is checked all the same, and said to differ
DIGESTS = {PASS_NAME: "3902a5c6794da0dbe00762e0afc275043b8142e2f57742d630a0b162e81171cd",
           HELPER_NAME: "d294db3af9199e08e23e8de13ad7818ae7168c3b4312452d9acaffb16dc5f0f3"}
KEY = "carried_quant_state"
STAGES = ("aten", "edge", "tfa", "lowering-fp", "lowering-int")


def how_to_get(where: str) -> str:
    """One line: how a user puts the PR's two files in ``where``."""
    return (f"no PR #21234 files in {where}: in any git checkout run `git fetch {REMOTE} pull/21234/head`, then "
            f"`git show FETCH_HEAD:backends/arm/_passes/{PASS_NAME} > {where}/{PASS_NAME}` and "
            f"`git show FETCH_HEAD:backends/arm/_passes/{HELPER_NAME} > {where}/{HELPER_NAME}`, and run "
            f"`python scripts/check_pr_21234.py {where}` (or set {ENV}={where})")


# ---------------------------------------------------------------- the models


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class BufferState(nn.Module):
    """``state <- conv(x + state) * 0.25`` written into a buffer with ``copy_``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.register_buffer("state", torch.zeros(1, 4, 8, 8))

    def forward(self, x):
        y = self.conv(x + self.state) * 0.25
        self.state.copy_(y)
        return y


class FunctionalState(nn.Module):
    """State passed in and returned: ``h' = conv(x + h) * 0.25``; returns ``(h' + x, h')``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x, h):
        h2 = self.conv(x + h) * 0.25
        return h2 + x, h2


class SharedConvState(nn.Module):
    """A conv with two users (not foldable) whose scaled output is written into a buffer, next to a plain site."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.a = nn.Conv2d(4, 4, 1)
        self.b = nn.Conv2d(4, 4, 1)
        self.register_buffer("state", torch.zeros(1, 4, 8, 8))

    def forward(self, x):
        c = self.a(x + self.state)
        y = c * 0.5
        self.state.copy_(y + c)
        return self.b(x) * 2.0 + y


def _mark_top_level(program):
    for n in program.graph.nodes:
        if _graph.is_mul(n) and any(_graph.is_conv(a) for a in n.all_input_nodes):
            n.meta[KEY] = True


def _mark_custom(program):
    for n in program.graph.nodes:
        if _graph.is_mul(n) and any(_graph.is_conv(a) for a in n.all_input_nodes):
            n.meta["custom"] = {**(n.meta.get("custom") or {}), KEY: True}


MODELS = {
    "buffer": (BufferState, lambda: (_x(1, 4, 8, 8),), None),
    "functional": (FunctionalState, lambda: (_x(1, 4, 8, 8), _x(1, 4, 8, 8, seed=1)), None),
    "functional+marker": (FunctionalState, lambda: (_x(1, 4, 8, 8), _x(1, 4, 8, 8, seed=1)), _mark_top_level),
    "functional+custom": (FunctionalState, lambda: (_x(1, 4, 8, 8), _x(1, 4, 8, 8, seed=1)), _mark_custom),
    "shared-conv": (SharedConvState, lambda: (_x(1, 4, 8, 8),), None),
}

# What the PR decides on each graph (site mul's fold or the check that kept it), as measured: the buffer write is
# visible to its signature check only at edge; the top-level marker reaches aten and tfa only (to_edge drops it);
# a marker in meta["custom"] is not read; a conv with two users is never matched.
EXPECTED = {
    "buffer": {"aten": ["fold"], "edge": [pr_pass.SIGNATURE], "tfa": ["fold"], "lowering-fp": ["fold"],
               "lowering-int": []},
    "functional": {s: ["fold"] for s in STAGES[:4]} | {"lowering-int": []},
    "functional+marker": {"aten": [pr_pass.MARKER], "edge": ["fold"], "tfa": [pr_pass.MARKER],
                          "lowering-fp": ["fold"], "lowering-int": [pr_pass.NOT_MATCHED]},
    "functional+custom": {s: ["fold"] for s in STAGES[:4]} | {"lowering-int": []},
    "shared-conv": {s: [pr_pass.NOT_MATCHED, "fold"] for s in STAGES[:4]} | {"lowering-int": [pr_pass.NOT_MATCHED]},
}


# ---------------------------------------------------------------- the graphs ExecuTorch's own calls hand the pass


class _Stop(Exception):
    """The INT flow's lowering call has been captured: nothing after it is needed."""


def own_graphs(model: nn.Module, inputs: tuple, mark=None, pass_class=None) -> dict[str, tuple]:
    """stage -> (graph module, exported program or None) as ExecuTorch's own calls hand them to the pass, each a
    private copy taken before the pass ran; ``mark(program)`` edits the exported program first (a model author's
    marker). ``pass_class`` (default: the installed pass) is the class the hook subclasses: what it folds in
    transform-for-annotation is what the INT flow's lowering call no longer receives."""
    from executorch.backends.arm._passes import (
        arm_pass_manager,  # the stack under check, imported where used
    )
    from executorch.backends.arm._passes.fold_scalar_mul_into_conv_pass import (
        FoldScalarMulIntoConvPass,
    )
    from executorch.backends.arm.quantizer import (
        TOSAQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import to_edge, to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    program = torch.export.export(copy.deepcopy(model), copy.deepcopy(inputs))
    if mark is not None:
        mark(program)
    out = {"aten": (program.graph_module, program)}
    edge = to_edge(copy.deepcopy(program)).exported_program()
    out["edge"] = (edge.graph_module, edge)
    received: list[tuple] = []
    stop_at_lowering = []

    class Capture(pass_class or FoldScalarMulIntoConvPass):  # type: ignore[misc, valid-type]
        def call(self, graph_module):
            p = self.exported_program
            received.append((copy.deepcopy(graph_module), None) if p is None else
                            tuple(reversed(copy.deepcopy((p, graph_module)))))
            if p is not None and stop_at_lowering:
                raise _Stop()
            return super().call(graph_module)

    bound = arm_pass_manager.FoldScalarMulIntoConvPass  # put back after
    arm_pass_manager.FoldScalarMulIntoConvPass = Capture
    try:
        spec = TosaCompileSpec("TOSA-1.0+INT")
        quantizer = TOSAQuantizer(spec)
        quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
        prepared = prepare_pt2e(copy.deepcopy(program).module(check_guards=False), quantizer)
        [out["tfa"]] = received
        received.clear()
        to_edge_transform_and_lower(copy.deepcopy(program),
                                    partitioner=[TOSAPartitioner(TosaCompileSpec("TOSA-1.0+FP"))])
        [out["lowering-fp"]] = received
        received.clear()
        with torch.no_grad():
            prepared(*copy.deepcopy(inputs))
        reexported = torch.export.export(convert_pt2e(prepared), copy.deepcopy(inputs))
        stop_at_lowering.append(True)
        try:
            to_edge_transform_and_lower(reexported, partitioner=[TOSAPartitioner(spec)])
        except Exception as exc:
            cause = exc
            while cause is not None and not isinstance(cause, _Stop):
                cause = cause.__cause__ or cause.__context__
            if cause is None:
                raise
        [out["lowering-int"]] = received
    finally:
        arm_pass_manager.FoldScalarMulIntoConvPass = bound
    return out


def _copy(gm, program):
    if program is None:
        return copy.deepcopy(gm), None
    program, gm = copy.deepcopy((program, gm))
    return gm, program


def _bare_pr_folds(rule, gm, program) -> list[str]:
    """The muls the PR's class removes when called bare (no inspector subclass) on a copy of the graph."""
    gm, program = _copy(gm, program)
    before = [n.name for n in gm.graph.nodes if _graph.is_mul(n)]
    fold_pass = rule.pass_class(program) if program is not None else rule.pass_class(tfa_pass=True)
    fold_pass.call(gm)
    left = {n.name for n in gm.graph.nodes}
    return [m for m in before if m not in left]


def _rule_folds(rule, gm, program, markers=()) -> list[str]:
    return list(run_pass(*_copy(gm, program), rule, markers).folded)


# ---------------------------------------------------------------- the checks


def check_loader(folder: Path, rule) -> None:
    """The PR's file loads without changing the installed executorch; its helper comes from its arm_pass_utils."""
    from executorch.backends.arm._passes import (
        arm_pass_utils,  # the installed modules the loader must leave alone
    )
    from executorch.backends.arm._passes import (
        fold_scalar_mul_into_conv_pass as installed,
    )

    loaded = pr_pass_loader.load_pass_file(folder / PASS_NAME)
    assert not hasattr(arm_pass_utils, "is_carried_quant_state"), "the installed arm_pass_utils gained the helper"
    assert sys.modules[arm_pass_utils.__name__] is arm_pass_utils
    assert sys.modules[installed.__name__] is installed
    assert not hasattr(installed.FoldScalarMulIntoConvPass, "_feeds_state_boundary")
    assert [(b.module, b.name) for b in loaded.borrowed] == [(arm_pass_utils.__name__, "is_carried_quant_state")], \
        loaded.borrowed
    assert loaded.function("is_carried_quant_state").__code__.co_filename == str((folder / HELPER_NAME).resolve())
    assert loaded.function("get_param_tensor") is arm_pass_utils.get_param_tensor  # the rest: installed, as is
    assert rule.pass_class.__name__ == "FoldScalarMulIntoConvPass" and rule.name in inspector.rules


def check_the_file_is_the_installed_pass_plus_the_guard(folder: Path, rule) -> None:
    """The PR's file is executorch's installed pass file, every line of it kept in order, with the guard added."""
    from executorch.backends.arm._passes import (
        fold_scalar_mul_into_conv_pass as installed,  # the stack, here
    )

    ours = (folder / PASS_NAME).read_text().splitlines()
    theirs = Path(installed.__file__).read_text().splitlines()
    diff = [line for line in difflib.ndiff(theirs, ours) if line[:1] in "+-"]
    removed = [line for line in diff if line.startswith("-")]
    assert removed == ["- from torch.export.graph_signature import InputKind"], removed
    added = "\n".join(line[2:] for line in diff if line.startswith("+"))
    for needed in ("is_carried_quant_state,", "OutputKind.BUFFER_MUTATION", "def _feeds_state_boundary",
                   "if self._feeds_state_boundary(node, state_boundary_names):"):
        assert needed in added, needed


def check_without_its_helper_it_is_one_line(folder: Path, rule) -> None:
    """The pass file alone (no arm_pass_utils.py beside it) is one line naming what to put there."""
    with tempfile.TemporaryDirectory() as tmp:
        lonely = Path(tmp) / PASS_NAME
        shutil.copy(folder / PASS_NAME, lonely)
        try:
            pr_pass.pr_rule(lonely, register_it=False)
        except inspector.InspectorError as exc:
            text = str(exc)
            assert "\n" not in text and "imports is_carried_quant_state from" in text and \
                "put the pull request's arm_pass_utils.py beside it" in text, text
        else:
            raise AssertionError("the pass file loaded without its helper")


def check_the_rule_folds_what_the_pr_functions_decide(graphs, rule) -> dict[str, dict[str, list[str]]]:
    """Per model and stage: the rule and the bare class fold what ``pr_decisions`` says; the table as EXPECTED."""
    table = {}
    for name in MODELS:
        seen = {}
        for stage in STAGES:
            gm, program = graphs(name)[stage]
            decided = pr_pass.pr_decisions(rule, gm, program)
            assert decided or stage == "lowering-int", (name, stage, "no site: the check proves nothing")
            folds = [d.mul for d in decided if d.decision == "fold"]
            assert _bare_pr_folds(rule, gm, program) == folds, (name, stage)
            assert _rule_folds(rule, gm, program) == folds, (name, stage)
            for d in decided:
                assert (d.decision == "fold") == (not d.checks), (name, stage, d)
                assert d.guarded == bool(d.reached), (name, stage, d)
            seen[stage] = ["fold" if d.decision == "fold" else d.checks[0] for d in decided]
        table[name] = seen
    _print_table(table)
    wrong = {name: {s: (table[name][s], EXPECTED[name][s]) for s in STAGES if table[name][s] != EXPECTED[name][s]}
             for name in MODELS}
    wrong = {name: cells for name, cells in wrong.items() if cells}
    assert not wrong, f"measured != expected: {wrong}"
    return table


def check_the_reimplementation_decides_as_the_pr(graphs, rule) -> None:
    """``state-aware`` folds exactly what the PR's file folds on every graph, and where the PR's guard kept a site,
    it hides that mul for the same kind of boundary."""
    kinds = {_graph.BUFFER: pr_pass.SIGNATURE, _graph.INPUT: pr_pass.SIGNATURE, _graph.MARKER: pr_pass.MARKER}
    for name in MODELS:
        for stage in STAGES:
            gm, program = graphs(name)[stage]
            decided = pr_pass.pr_decisions(rule, gm, program)
            assert _rule_folds("state-aware", gm, program) == [d.mul for d in decided if d.decision == "fold"], \
                (name, stage)
            hidden = {n.name: {kinds[k] for k in ks}
                      for n, ks in guarded_muls("state-aware", gm.graph, program).items()}
            for d in decided:
                if d.guarded:
                    assert hidden.get(d.mul) == {c for c in d.checks if c in pr_pass.GUARD}, (name, stage, d)


def check_the_one_difference(graphs, rule) -> None:
    """At edge, the shared conv's scaled output is written into the buffer. The PR never asks its guard about it
    (its matcher refuses a conv with two users first); ``state-aware`` hides it for the buffer write before the
    matcher sees it. Both leave it unfolded."""
    gm, program = graphs("shared-conv")["edge"]
    decided = {d.mul: d for d in pr_pass.pr_decisions(rule, gm, program)}
    hidden = {n.name: ks for n, ks in guarded_muls("state-aware", gm.graph, program).items()}
    differ = [m for m, d in decided.items() if (m in hidden) != d.guarded]
    assert len(differ) == 1, (decided, hidden)
    assert decided[differ[0]].checks == (pr_pass.NOT_MATCHED,) and hidden[differ[0]] == [_graph.BUFFER]
    assert decided[differ[0]].decision == "skip"


def check_an_inspector_marker_reaches_the_pr_file(graphs, rule) -> None:
    """A marker given to the inspector (``markers=``) is set in the top-level key the PR's helper reads: the PR's
    file keeps the functional site at tfa, like the marker the author set on the program."""
    gm, program = graphs("functional")["tfa"]
    cands = _graph.candidates(gm.graph)
    [site] = _graph.site_ids(cands)
    assert _rule_folds(rule, gm, program) == [cands[0].mul.name]
    assert _rule_folds(rule, gm, program, markers=(site,)) == []
    assert _rule_folds("state-aware", gm, program, markers=(site,)) == []


def check_analyze_runs_the_pr_rule(graphs, rule) -> None:
    """Registered, the PR's file is a rule like any other: ``analyze`` decides with it at every stage without a
    lowering, and its decisions are those of the PR's functions on the analysis's own graph."""
    model = BufferState()
    for stage in ("aten", "edge", "tfa"):
        analysis = inspector.analyze(model, example_inputs=(_x(1, 4, 8, 8),), stage=stage, rule=rule.name)
        graph = analysis.stage_graph
        decided = pr_pass.pr_decisions(rule, graph.graph_module, graph.program)
        assert [s.decision for s in analysis.sites] == [d.decision for d in decided], stage
        assert [s.decision for s in analysis.sites] == ["skip" if stage == "edge" else "fold"], stage


def _print_table(table: dict[str, dict[str, list[str]]]) -> None:
    print("| model | " + " | ".join(STAGES) + " |")
    print("|---|" + "---|" * len(STAGES))
    for name, seen in table.items():
        print(f"| {name} | " + " | ".join(", ".join(seen[s]) or "(no site)" for s in STAGES) + " |")


# ---------------------------------------------------------------- the run


def _folder(argument: str | None) -> Path:
    where = argument or os.environ.get(ENV) or "DIR"
    folder = Path(where)
    if not ((folder / PASS_NAME).is_file() and (folder / HELPER_NAME).is_file()):
        print(how_to_get(where), file=sys.stderr)
        sys.exit(2)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", nargs="?", help=f"the folder holding {PASS_NAME} and {HELPER_NAME} "
                                                  f"(default: ${ENV})")
    parser.add_argument("--commit", default=COMMIT, help="the commit the files are from, shown in the rule's label")
    args = parser.parse_args(argv)
    folder = _folder(args.folder)
    for name in (PASS_NAME, HELPER_NAME):
        digest = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        same = "the bytes of b4c97938" if digest == DIGESTS[name] else "NOT the bytes of b4c97938"
        print(f"{name}: sha256 {digest[:16]}... ({same})")
    print(f"executorch {_executorch.installed_version()}, torch {torch.__version__}")
    rule = pr_pass.pr_rule(folder / PASS_NAME, commit=args.commit)
    print(f"rule {rule.name}: {rule.source}")
    made: dict = {}

    def graphs(name: str) -> dict:
        if name not in made:
            cls, inputs, mark = MODELS[name]
            made[name] = own_graphs(cls(), inputs(), mark, rule.pass_class)
        return made[name]

    checks: list[tuple[Callable, tuple]] = [
        (check_loader, (folder, rule)),
        (check_the_file_is_the_installed_pass_plus_the_guard, (folder, rule)),
        (check_without_its_helper_it_is_one_line, (folder, rule)),
        (check_the_rule_folds_what_the_pr_functions_decide, (graphs, rule)),
        (check_the_reimplementation_decides_as_the_pr, (graphs, rule)),
        (check_the_one_difference, (graphs, rule)),
        (check_an_inspector_marker_reaches_the_pr_file, (graphs, rule)),
        (check_analyze_runs_the_pr_rule, (graphs, rule)),
    ]
    failed = 0
    try:
        for check, args_ in checks:
            try:
                check(*args_)
            except Exception as exc:  # noqa: BLE001 - every check runs; each failure is one line, the trace below
                failed += 1
                print(f"FAIL {check.__name__}: {type(exc).__name__}: {exc}")
                traceback.print_exc(file=sys.stderr)
            else:
                print(f"ok   {check.__name__}")
    finally:
        inspector.rules.unregister(rule.name)
    print(f"{len(checks) - failed} of {len(checks)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
