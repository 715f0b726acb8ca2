"""One set of defaults, said once: the same steps everywhere, keyword-only public verbs documented parameter by
parameter, and an accelerator looked up without being registered."""

from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path

import pytest

import inspector
from inspector import InspectorError
from inspector._advise import verdict as _verdict
from inspector._cost.accelerators import Accelerator, accelerator_of
from inspector._front.cli import main

# A model that carries state (its buffer is written every call) and one that does not.
STATEFUL, STATELESS = "sample:stateful_conv_mul", "sample:conv_mul_scalar"


class _Stop(Exception):
    """Raised by the stand-in for the verdict's comparison once it has seen the steps it was asked for."""


def _api_steps(target: str) -> int:
    return inspector.compare(target, variants=("upstream",), engine="simulation", workers=1).steps


def _cli_steps(target: str, capsys) -> int:
    capsys.readouterr()
    code = main(["compare", target, "--variants", "upstream", "--engine", "simulation", "--workers", "1", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)["steps"]


def _widget_steps(target: str) -> int:
    from widgets import FoldInspector

    app = FoldInspector(target, stage="tfa", isolate=False)
    return app.steps_input.value


def _verdict_steps(target: str, monkeypatch) -> int:
    seen = []

    def compare(loaded, **kwargs):
        seen.append(kwargs["steps"])
        raise _Stop

    monkeypatch.setattr(_verdict, "compare", compare)
    with pytest.raises(_Stop):
        inspector.verdict(target, accelerators=("tosa-int",), fp=False, markers_reach=False, workers=1)
    return seen[0]


@pytest.mark.parametrize("target", [STATEFUL, STATELESS])
def test_the_same_model_gets_the_same_default_steps_everywhere(target, capsys, monkeypatch):
    """The API, the CLI, the widget and ``verdict`` each run (or fill their form) with one default."""
    found = {"api": _api_steps(target), "cli": _cli_steps(target, capsys), "widget": _widget_steps(target),
             "verdict": _verdict_steps(target, monkeypatch)}
    assert len(set(found.values())) == 1, found
    # state shows only over several steps; a model without state needs one
    assert (found["api"] > 1) == (target == STATEFUL), found


def test_every_steps_help_says_the_one_default():
    """Every --steps of the CLI that has a default says it in the core's own words (``STEPS_HELP``)."""
    import argparse

    from inspector._front import cli
    from inspector.present import STEPS_HELP

    subparsers = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {name: next((a.help for a in sub._actions if "--steps" in a.option_strings), None)
             for name, sub in subparsers.choices.items()}
    helps = {name: text for name, text in helps.items() if text}
    assert {"compare", "attribute", "advise", "verdict", "sweep", "demo"} <= set(helps), sorted(helps)
    assert all(STEPS_HELP in str(text) for text in helps.values()), helps


def _public_functions():
    return [(name, getattr(inspector, name)) for name in inspector.__all__
            if inspect.isfunction(getattr(inspector, name))]


def test_there_are_public_functions_to_check():
    assert {"analyze", "compare", "bits", "attribution", "sweep", "journey", "advise", "verdict"} <= {
        name for name, _ in _public_functions()}


@pytest.mark.parametrize("name,fn", _public_functions())
def test_every_public_function_is_keyword_only_after_its_first_parameter(name, fn):
    params = list(inspect.signature(fn).parameters.values())
    late = [p.name for p in params[1:] if p.kind not in (p.KEYWORD_ONLY, p.VAR_KEYWORD)]
    assert not late, f"inspector.{name} takes {late} by position"


def _args_entries(doc: str) -> set[str]:
    """The parameter names a Google-style ``Args:`` section documents (``**kwargs`` as ``kwargs``)."""
    lines = doc.expandtabs().splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Args:"), None)
    if start is None:
        return set()
    indent = len(lines[start]) - len(lines[start].lstrip())
    entries = set()
    for line in lines[start + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break  # the next section
        found = re.match(rf"^\s{{{indent + 1},}}\**(\w+)(?: \([^)]*\))?:", line)
        if found and len(line) - len(line.lstrip()) == indent + 4:
            entries.add(found.group(1))
    return entries


@pytest.mark.parametrize("name,fn", _public_functions())
def test_every_public_function_documents_each_parameter_under_args(name, fn):
    doc = inspect.getdoc(fn) or ""
    assert "\nArgs:\n" in doc, f"inspector.{name}'s docstring has no Args: section"
    wanted = set(inspect.signature(fn).parameters)
    assert wanted <= _args_entries(doc), f"inspector.{name}: no Args: entry for {sorted(wanted - _args_entries(doc))}"


def test_the_args_reader_can_fail():
    doc = ("Summary.\n\nArgs:\n    target: a model.\n    steps: how many;\n        more words: not an entry.\n\n"
           "Returns:\n    x: no.")
    assert _args_entries(doc) == {"target", "steps"}


def test_compare_docstring_is_a_summary_and_args():
    doc = inspect.getdoc(inspector.compare)
    summary = doc.split("\nArgs:\n")[0]
    assert len(summary.splitlines()) <= 8, summary


def _registry_state():
    return (inspector.accelerators.names(), dict(inspector.accelerators._items))


def test_looking_up_an_accelerator_leaves_the_registry_unchanged():
    before = _registry_state()
    with pytest.raises(InspectorError, match="unknown accelerator 'no-such-chip'"):
        accelerator_of("no-such-chip")
    with pytest.raises(InspectorError):
        inspector.accelerators.get("no-such-chip")
    assert accelerator_of("ethos-u55-128") is inspector.accelerators.get("ethos-u55-128")
    assert accelerator_of(None).name == "tosa-int"
    mine = Accelerator(name="test-defaults-chip", help="a user's accelerator, never registered")
    assert accelerator_of(mine) is mine
    inspector.analyze(STATELESS, stage="aten", accelerator=mine)  # a verb given an unregistered one
    assert "test-defaults-chip" not in inspector.accelerators
    assert _registry_state() == before


def test_an_unregistered_accelerator_is_still_checked():
    with pytest.raises(InspectorError, match="one word"):
        accelerator_of(Accelerator(name="two words", help="bad"))


# The functions, besides the public verbs themselves, that turn a user's accelerator name into the registered one:
# each is a verb's own argument reader or a name check at the edge (the command line, a session's field).
_RESOLVERS = {
    ("_advise/widen.py", "_npu"): "widen's accelerator argument (an NPU is required: it prices cycles)",
    ("_advise/verdict.py", "_chips"): "verdict's list of accelerators",
    ("_sweep/sweep.py", "_accelerators"): "sweep's list of accelerators",
    ("_advise/marker_reach.py", "marker_reach"): "the marker-reach command's list of accelerators",
    ("_front/cli.py", "_accelerator"): "the command line's --accelerator, checked while parsing",
    ("_front/session.py", "accelerator"): "a session's accelerator field, checked as it is set",
}


def _accelerator_lookups():
    root = Path(inspector.__file__).parent
    for path in sorted(root.rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                    isinstance(n, ast.Call) and "accelerator_of" in (getattr(n.func, "id", None), getattr(n.func, "attr", None))
                    for n in ast.walk(fn)):
                yield path.relative_to(root).as_posix(), fn.name


def test_an_accelerator_is_resolved_once_at_each_verbs_entry():
    """Below a verb's entry every helper takes the resolved ``Accelerator`` (the stage helpers, the decider), so a
    name is looked up in one place per call, never again further down."""
    found = set(_accelerator_lookups())
    assert found, "the scan found no lookup at all: it is not reading the code"
    stray = {(path, name) for path, name in found if name not in inspector.__all__ and (path, name) not in _RESOLVERS}
    assert not stray, f"accelerator names looked up below a verb's entry: {sorted(stray)}"
    assert {("_decide/decide.py", "analyze"), ("_numbers/compare.py", "compare")} <= found
