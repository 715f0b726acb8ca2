"""A pull request's pass file, loaded against the installed executorch and run as a rule.

These tests use a pass file this project wrote in the shape of executorch PR #21234's
(``tests/data/pr_shaped/``): a module-level ``FoldScalarMulIntoConvPass`` that imports the installed pass and a
helper, ``is_carried_quant_state``, that the installed ``arm_pass_utils`` lacks and the ``arm_pass_utils.py``
beside it defines. Its ``call`` keeps a mul from folding when the mul or a node downstream of it carries the
top-level ``carried_quant_state`` marker. With it they check the mechanism: the loader leaves every installed
module alone, takes only the borrowed definition (and what it uses) from the helper file, and says in one line
what is missing; the rule ``pr_rule`` makes registers and runs where the installed pass would; ``pr_decisions``
names the check of the file that kept each site.

The PR's own file is not part of the project. ``scripts/check_pr_21234.py DIR`` runs the comparisons that need it
(the file against the installed pass, its decisions against ``state-aware`` on graphs from ExecuTorch's own flows)
on a folder holding the two files of the PR's head commit.
"""

from __future__ import annotations

import copy
import sys

import pytest
import torch
from conftest import ROOT
from torch import nn

import inspector
from inspector._doors import pr_pass_loader
from inspector._rules import pr_pass
from inspector._rules.rules import run_pass
from inspector._sites import graph as _graph

SHAPED = ROOT / "tests" / "data" / "pr_shaped"
PASS_FILE = SHAPED / "fold_scalar_mul_into_conv_pass.py"
HELPER = SHAPED / "arm_pass_utils.py"
KEY = "carried_quant_state"
UTILS = "executorch.backends.arm._passes.arm_pass_utils"


class ThreeSites(nn.Module):
    """Three conv->mul sites: a plain one, one whose output goes through a relu, and a conv with two users."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.plain = nn.Conv2d(4, 4, 1)
        self.state = nn.Conv2d(4, 4, 1)
        self.shared = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        c = self.shared(x)
        return self.plain(x) * 2.0 + torch.relu(self.state(x) * 0.5) + c * 3.0 + c


def _x(seed: int = 0):
    return (torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(seed)),)


def _program(mark=None):
    """ThreeSites exported; ``mark(nodes by name)`` sets markers on the exported program, as a model author would."""
    program = torch.export.export(ThreeSites(), _x())
    if mark is not None:
        mark({n.name: n for n in program.graph.nodes})
    return program


def _copy(program):
    """A private (graph module, program) pair: the copied program owns the copied module."""
    copied, gm = copy.deepcopy((program, program.graph_module))
    return gm, copied


def _site_muls(program) -> list[str]:
    return [c.mul.name for c in _graph.candidates(program.graph)]


@pytest.fixture(scope="module")
def rule():
    made = pr_pass.pr_rule(PASS_FILE, name="pr-shaped", commit="tests/data/pr_shaped")
    yield made
    inspector.rules.unregister(made.name)


# ---------------------------------------------------------------- the loader


def test_the_pass_file_loads_without_changing_the_installed_executorch():
    from executorch.backends.arm._passes import (  # what the loader must leave alone, read here
        arm_pass_utils,
        fold_scalar_mul_into_conv_pass as installed,
    )

    modules = dict(sys.modules)
    loaded = pr_pass_loader.load_pass_file(PASS_FILE)
    added = {k: sys.modules[k] for k in set(sys.modules) - set(modules)}
    # one module made by hand: the pass file's own, under a private name; the rest are installed modules imported
    # the ordinary way (the loader's version check imports a few), none a shim standing in for one
    made = {k for k, m in added.items() if m.__spec__ is None}
    assert made == {loaded.pass_class.__module__}, made
    assert loaded.pass_class.__module__.startswith("_fold_inspector_pr_pass_")
    assert all(sys.modules[k] is m for k, m in modules.items())  # every module already there: the same object
    assert not hasattr(arm_pass_utils, "is_carried_quant_state")  # the installed release still lacks the helper
    assert not hasattr(installed.FoldScalarMulIntoConvPass, "_feeds_state_boundary")
    assert [(b.module, b.name, b.helper) for b in loaded.borrowed] == [(UTILS, "is_carried_quant_state",
                                                                        str(HELPER))]
    borrowed = loaded.function("is_carried_quant_state")
    assert borrowed.__code__.co_filename == str(HELPER)
    # the helper runs in a copy of the installed module's namespace: the installed names, as they are
    assert borrowed.__globals__ is not vars(arm_pass_utils)
    assert borrowed.__globals__["get_param_tensor"] is arm_pass_utils.get_param_tensor
    assert loaded.namespace["InstalledFoldPass"] is installed.FoldScalarMulIntoConvPass
    assert loaded.pass_class.__name__ == "FoldScalarMulIntoConvPass"
    assert issubclass(loaded.pass_class, installed.FoldScalarMulIntoConvPass)
    with pytest.raises(inspector.InspectorError, match="has no function 'no_such_helper'"):
        loaded.function("no_such_helper")


def test_only_the_borrowed_definition_and_what_it_uses_run(tmp_path):
    """The helper file's other statements never run: here they could not (a missing module, a division by zero)."""
    (tmp_path / PASS_FILE.name).write_text(PASS_FILE.read_text())
    (tmp_path / HELPER.name).write_text(
        "import a_module_no_one_installed\n"
        "BROKEN = 1 / 0\n"
        f"{HELPER.read_text()}\n"
        "def is_something_else(node):\n    return a_module_no_one_installed.check(node)\n")
    loaded = pr_pass_loader.load_pass_file(tmp_path / PASS_FILE.name)
    borrowed = loaded.function("is_carried_quant_state")
    assert "BROKEN" not in borrowed.__globals__ and "is_something_else" not in borrowed.__globals__
    assert borrowed.__globals__["STATE_KEY"] == KEY  # the constant it reads came along
    nodes = {n.name: n for n in _program(lambda nodes: nodes["relu"].meta.update({KEY: True})).graph.nodes}
    assert borrowed(nodes["relu"]) and not borrowed(nodes["mul"])


def test_a_pass_file_without_its_helper_is_one_line(tmp_path):
    lonely = tmp_path / PASS_FILE.name
    lonely.write_text(PASS_FILE.read_text())
    with pytest.raises(inspector.InspectorError, match=r"imports is_carried_quant_state from .*arm_pass_utils, which "
                                                       r"executorch .* lacks; put the pull request's arm_pass_utils"
                                                       r"\.py beside it$") as missing:
        pr_pass.pr_rule(lonely, register_it=False)
    (tmp_path / HELPER.name).write_text("X = 1\n")
    with pytest.raises(inspector.InspectorError, match="arm_pass_utils.py does not define is_carried_quant_state") \
            as undefined:
        pr_pass.pr_rule(lonely, register_it=False)
    assert "\n" not in str(missing.value) + str(undefined.value)


def test_a_file_that_does_not_parse_or_has_no_pass_class_is_one_line(tmp_path):
    broken = tmp_path / "fold.py"
    broken.write_text("def (:\n")
    with pytest.raises(inspector.InspectorError, match=r"^fold.py is not Python that parses"):
        pr_pass_loader.load_pass_file(broken)
    classless = tmp_path / "classless.py"
    classless.write_text("X = 1\n")
    with pytest.raises(inspector.InspectorError, match="has no pass class 'FoldScalarMulIntoConvPass'; found: none"):
        pr_pass_loader.load_pass_file(classless)


# ---------------------------------------------------------------- the rule


def test_the_rule_registers_and_runs_at_every_stage(rule):
    """Registered, the file is a rule like any other: ``analyze`` decides with it where the installed pass runs. A
    marker given to the inspector reaches the file's helper (the inspector sets the top-level key it reads): the
    marked site is kept, the installed pass folds it."""
    assert rule.name in inspector.rules and inspector.rules.get(rule.name) is rule
    assert rule.source == "PR #21234's pass file (tests/data/pr_shaped)"
    for stage in ("aten", "edge", "tfa"):
        analysis = inspector.analyze(ThreeSites(), example_inputs=_x(), stage=stage, rule=rule.name)
        upstream = analysis.with_rule("upstream")
        assert [s.decision for s in analysis.sites] == [s.decision for s in upstream.sites] == \
            ["fold", "fold", "skip"], stage
        state_site = analysis.sites[1].id
        marked = analysis.toggle_marker(state_site)
        assert [s.decision for s in marked.sites] == ["fold", "skip", "skip"], stage
        assert [s.decision for s in marked.with_rule("upstream").sites] == ["fold", "fold", "skip"], stage


def test_pr_decisions_names_the_check_that_fired(rule):
    """On a program whose author marked the relu after the second site's mul (top-level key) and put the key in
    ``meta["custom"]`` of the first: the file's guard keeps the second (reached through the relu), it never reads
    the custom key, and its matcher refuses the conv with two users. The decisions are those of the class called
    bare and of the rule run as the inspector runs it; the graph given is left as it was."""
    def mark(nodes):
        nodes["relu"].meta[KEY] = True
        nodes["mul"].meta["custom"] = {KEY: True}

    program = _program(mark)
    before = program.graph_module.print_readable(print_output=False)
    first, second, shared = _site_muls(program)
    decided = pr_pass.pr_decisions(rule, program.graph_module, program)
    assert program.graph_module.print_readable(print_output=False) == before
    assert [(d.mul, d.decision, d.checks, d.reached, d.guarded) for d in decided] == [
        (first, "fold", (), (), False),
        # the shaped file keeps a mul through its matcher, so both its guard and its matcher are recorded, in order
        (second, "skip", (pr_pass.MARKER, pr_pass.NOT_MATCHED), ("relu",), True),
        (shared, "skip", (pr_pass.NOT_MATCHED,), (), False),
    ]
    folds = [d.mul for d in decided if d.decision == "fold"]
    gm, copied = _copy(program)
    rule.pass_class(copied).call(gm)
    assert [m for m in _site_muls(program) if m not in {n.name for n in gm.graph.nodes}] == folds
    assert list(run_pass(*_copy(program), rule).folded) == folds


def test_pr_decisions_without_a_marker_folds_what_the_installed_pass_folds(rule):
    program = _program()
    decided = pr_pass.pr_decisions(rule, program.graph_module, program)
    assert [(d.decision, d.checks) for d in decided] == [("fold", ()), ("fold", ()), ("skip", (pr_pass.NOT_MATCHED,))]
    assert list(run_pass(*_copy(program), "upstream").folded) == [d.mul for d in decided if d.decision == "fold"]


def test_pr_decisions_of_a_class_without_the_helper_is_one_line():
    # the installed pass, imported where it is the subject
    from executorch.backends.arm._passes.fold_scalar_mul_into_conv_pass import (
        FoldScalarMulIntoConvPass,
    )

    program = _program()
    with pytest.raises(inspector.InspectorError, match="reads no is_carried_quant_state: not PR #21234's pass file"):
        pr_pass.pr_decisions(FoldScalarMulIntoConvPass, program.graph_module, program)
    with pytest.raises(inspector.InspectorError, match="rule 'upstream' runs the installed pass"):
        pr_pass.pr_decisions(inspector.rules.get("upstream"), program.graph_module, program)
