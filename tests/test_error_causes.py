"""Errors keep their cause: one line for the user, the whole traceback in ``details`` for whoever debugs it
(``--debug`` prints it, ``--json`` carries it, the widget and the HTML report show it behind a disclosure)."""

from __future__ import annotations

import json
import textwrap
from types import SimpleNamespace

import pytest
import torch

import inspector
from inspector import InspectorError
from inspector._base.errors import FoldPassCrash
from inspector._front.cli import main
from inspector.present import failures_html


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _deep_in_the_stack():
    raise ValueError("what broke, on two lines\nthe second line")


def _raised_from_a_cause() -> InspectorError:
    try:
        try:
            _deep_in_the_stack()
        except ValueError as exc:
            raise InspectorError("the one line") from exc
    except InspectorError as err:
        return err


def test_details_hold_the_cause_traceback_then_the_attached_text():
    err = _raised_from_a_cause()
    assert str(err) == "the one line"
    assert err.details.startswith("Traceback (most recent call last):")
    assert "in _deep_in_the_stack" in err.details and err.details.endswith("ValueError: what broke, on two lines\n"
                                                                        "the second line")
    err.details = "what the backend printed"  # setting replaces the attached text; the cause is read from the chain
    assert err.attached == "what the backend printed"
    assert err.details.count("Traceback (most recent call last):") == 1
    assert err.details.endswith("the second line\nwhat the backend printed")
    assert InspectorError("no cause", details="carried text").details == "carried text"
    assert InspectorError("no cause").details == ""


class ScaleTheWeightsPass:
    def call(self, graph_module):
        raise ValueError("the weight is not a parameter")


def test_an_error_executorch_wrapped_is_described_by_its_cause_and_pass():
    """ExecuTorch's pass manager raises a bare Exception naming the pass (in the Arm pipeline, an adapter around it):
    the one line describes the error it wrapped, and the pass that raised it."""
    from inspector._base.errors import describe

    try:
        try:
            ScaleTheWeightsPass().call(None)
        except ValueError as exc:
            raise Exception("An error occurred when running the '_Adapter' pass after the following passes: "
                            "['_Adapter']") from exc
    except Exception as wrapped:  # noqa: BLE001 - the bare Exception ExecuTorch's pass manager wraps with
        assert describe(wrapped) == "ValueError: the weight is not a parameter (in ExecuTorch's ScaleTheWeightsPass)"
    assert describe(RuntimeError("plain\nsecond")) == "RuntimeError: plain"


class BufferWeights(torch.nn.Module):
    """F.conv2d with weights held in buffers: the installed pass crashes folding it with a program."""

    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.randn(4, 3, 3, 3))
        self.register_buffer("b", torch.randn(4))

    def forward(self, x):
        return torch.nn.functional.conv2d(x, self.w, self.b, padding=1) * 0.5


def test_a_crash_of_the_installed_pass_keeps_the_pass_traceback():
    """The installed pass's own error stays chained below the one-line FoldPassCrash: its frame is in the details."""
    with pytest.raises(FoldPassCrash) as info:
        inspector.analyze(BufferWeights(), example_inputs=(torch.ones(1, 3, 8, 8),), stage="edge")
    assert "\n" not in str(info.value)
    assert "fold_scalar_mul_into_conv_pass.py" in info.value.details  # the frame of the installed pass that raised


def test_from_none_keeps_no_traceback():
    try:
        try:
            {}["missing"]
        except KeyError:
            raise InspectorError("unknown thing; choose one of: a, b") from None
    except InspectorError as err:
        assert err.details == ""


MODEL = textwrap.dedent("""
    import torch


    def load_weights():
        raise RuntimeError("the weights file is corrupt")


    class Broken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            load_weights()
""")


def test_cli_error_is_one_line_debug_has_the_cause_json_carries_it(tmp_path, capsys):
    """A model whose constructor raises (no lowering needed): the same three views of one error."""
    path = tmp_path / "broken.py"
    path.write_text(MODEL)
    target = f"{path}:Broken"
    code, out, err = run(capsys, "analyze", target)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: Broken() failed: RuntimeError: the weights file is corrupt"), err
    code, out, err = run(capsys, "--debug", "analyze", target)
    assert code == 2 and out == ""
    assert "Traceback (most recent call last):" in err and "in load_weights" in err and "in __init__" in err
    assert "The above exception was the direct cause of the following exception" in err
    assert err.rstrip("\n").splitlines()[-1].startswith("error: Broken() failed")  # the one line still ends it
    code, out, err = run(capsys, "analyze", target, "--json")
    assert code == 2 and err.count("\n") == 1
    data = json.loads(out)
    assert data["error"].startswith("Broken() failed: RuntimeError")
    assert "in load_weights" in data["details"] and "RuntimeError: the weights file is corrupt" in data["details"]


def test_an_internal_error_in_json_carries_its_traceback(monkeypatch, capsys):
    from inspector._front import cli

    def broken(args):
        raise ZeroDivisionError("a bug of ours")

    monkeypatch.setattr(cli, "_samples", broken)
    code, out, err = run(capsys, "samples")
    assert code == 1 and out == "" and err.count("\n") == 1 and "rerun with --debug" in err
    code, out, err = run(capsys, "--debug", "samples")
    assert code == 1 and "in broken" in err and "ZeroDivisionError: a bug of ours" in err


def test_a_comparison_where_one_variant_failed_carries_its_traceback_in_json(monkeypatch, capsys):
    """The others' numbers stand; the failed one is named on stderr, and its traceback is in the JSON's "errors"."""
    from inspector._front import cli

    def variant(label, error=None, log=""):
        return SimpleNamespace(variant=SimpleNamespace(label=label), error=error, log=log)

    ok = variant("off", log="WARNING: what the backend printed")
    bad = variant("upstream", "lower failed for variant upstream: RuntimeError: boom",
                  "Traceback (most recent call last):\n  File \"x.py\", line 1, in _crashing_call\nRuntimeError: boom")
    monkeypatch.setattr(cli, "compare", lambda *a, **k: SimpleNamespace(results=[ok, bad], errors=[bad],
                                                                        to_dict=lambda: {"variants": []}))
    code, out, err = run(capsys, "compare", "sample:conv_mul_scalar", "--variants", "off,upstream", "--json")
    assert code == 1 and err == f"error: {bad.error}\n"
    assert json.loads(out)["errors"] == [{"variant": "upstream", "error": bad.error, "details": bad.log}]
    code, out, err = run(capsys, "--debug", "compare", "sample:conv_mul_scalar", "--variants", "off,upstream", "--json")
    assert "--- why upstream failed (the traceback, then what the backend printed):" in err
    assert "in _crashing_call" in err
    assert "--- what the backend printed while running off:\nWARNING" in err


def test_report_and_widget_show_the_traceback_escaped_behind_a_disclosure():
    log = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nRuntimeError: <script>x</script>'
    failed = SimpleNamespace(variant=SimpleNamespace(label="up<b>stream"), error="lower failed", log=log)
    html = failures_html(SimpleNamespace(errors=[failed, SimpleNamespace(variant=failed.variant, error="x", log="")]))
    assert html.count("<details") == 1 and "<script>" not in html and "&lt;script&gt;" in html
    assert "up&lt;b&gt;stream" in html and "in &lt;module&gt;" in html
    pytest.importorskip("ipywidgets")
    from widgets._common import describe

    message, details = describe(_raised_from_a_cause())
    assert message == "the one line" and "in _deep_in_the_stack" in details
    assert describe(InspectorError("bad input")) == ("bad input", None)


def _crashing_call(self, graph_module):
    raise RuntimeError("simulated crash inside ExecuTorch's lowering")


@pytest.mark.requires_tosa
@pytest.mark.own_store  # the run's shared store may hold this variant already: then nothing would lower
def test_a_crash_inside_executorch_lowering_names_the_step_and_keeps_its_traceback(monkeypatch, capsys):
    """The issue's "done when": a pass of the Arm lowering pipeline raises; without --debug the user sees one line
    naming the flow step and the variant, with --debug the whole traceback (down to the raising function), and
    --json carries it."""
    from executorch.backends.arm._passes import FuseQuantizedActivationPass  # runs in every TOSA INT lowering

    inspector.clear_cache()  # a cached result would never lower
    monkeypatch.setattr(FuseQuantizedActivationPass, "call", _crashing_call)
    argv = ["compare", "sample:conv_mul_scalar", "--variants", "upstream", "--workers", "1"]
    code, out, err = run(capsys, *argv, "--json")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err[-3000:]
    assert err == ("error: lower failed for variant upstream: RuntimeError: simulated crash inside ExecuTorch's "
                   "lowering (in ExecuTorch's FuseQuantizedActivationPass)\n"), err
    data = json.loads(out)
    assert data["error"] == err[len("error: "):].rstrip("\n")
    assert "in _crashing_call" in data["details"] and "simulated crash inside ExecuTorch's lowering" in data["details"]
    assert "to_edge_transform_and_lower" in data["details"]  # ExecuTorch's own frames, not only ours
    code, out, err = run(capsys, "--debug", *argv)
    assert code == 2 and out == ""
    assert "Traceback (most recent call last):" in err and "in _crashing_call" in err
    assert "RuntimeError: simulated crash inside ExecuTorch's lowering" in err
    assert err.rstrip("\n").splitlines()[-1].startswith("error: lower failed for variant upstream: ")
