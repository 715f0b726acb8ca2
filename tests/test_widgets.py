"""Headless tests of the FoldInspector widget: set control values, check traits and children."""

from __future__ import annotations

import json
import threading
import time

import ipywidgets as W
import pytest
import torch
from torch import nn

import inspector
from inspector import InspectorError
from widgets import FoldInspector

# every app draws its graphs with dot; the reference panel tests run the TOSA reference model
pytestmark = pytest.mark.requires_dot


def html_values(widget) -> list[str]:
    """Every value under ``widget`` that the browser parses as HTML (Labels and Buttons are text)."""
    out = []
    stack = [widget]
    while stack:
        w = stack.pop()
        if isinstance(w, W.HTML):
            out.append(w.value)
        stack.extend(getattr(w, "children", ()))
    return out


def rows(app):
    return [r for r in app.sites_box.children if "fi-site-row" in r._dom_classes]


def decision_of(row) -> str:
    info = row.children[1].value
    return "fold" if ">fold<" in info else "skip"


@pytest.fixture()
def stateful():
    return FoldInspector("sample:stateful_conv_mul", stage="tfa", policy="upstream")


def test_header_sites_and_pickers(stateful):
    app = stateful
    assert "fi-app" in app._dom_classes
    assert "sample:stateful_conv_mul" in app.title.value
    assert app.summary.value.count("1 site, 1 folded") == 1
    (row,) = rows(app)
    assert decision_of(row) == "fold" and "fi-site-fold" in row._dom_classes
    app.policy_picker.value = "state-aware-strict"
    (row,) = rows(app)
    assert decision_of(row) == "skip" and "feeds-buffer-mutation" in row.children[1].value
    assert "feeds-buffer-mutation: 1" in app.summary.value
    app.stage_picker.value = "edge"
    app.policy_picker.value = "state-aware"
    assert app.analysis.stage == "edge" and decision_of(rows(app)[0]) == "skip"
    assert app.steps_input.value == 10  # a state-carrying model defaults to several steps


@pytest.mark.requires_tosa
def test_marker_toggle_redecides_and_marks_results_stale():
    app = FoldInspector("sample:functional_recurrent_conv_mul", stage="tfa", policy="state-aware",
                        variants=("state-aware",), steps=2)
    site = app.sites[0].id
    assert app.sites[0].decision == "fold"
    app.run_reference(wait=True)
    assert app.comparison is not None and not app.stale
    assert "fi-stale" not in app.results.value and "<table" in app.results.value
    marker = rows(app)[0].children[2]
    marker.value = True  # the checkbox, as a click would
    assert app.markers == (site,) and app.sites[0].decision == "skip"
    assert app.sites[0].reason_codes == ("marked-carried-state",)
    assert app.stale and "fi-stale" in app.results.value
    rows(app)[0].children[2].value = False
    assert app.markers == () and app.sites[0].decision == "fold" and not app.stale
    assert rows(app)[0].children[2] is marker  # rows are updated in place, not rebuilt


def test_selecting_a_site_focuses_the_graphs(stateful):
    app = stateful
    assert "<svg" in app.graph.value
    select = rows(app)[0].children[0]
    select.click()
    assert app.selected == app.sites[0].id and rows(app)[0].children[0].button_style == "info"
    assert "fi-selected" in rows(app)[0]._dom_classes
    for which in ("before", "after", "side by side"):
        app.graph_which.value = which
        assert "<svg" in app.graph.value
    app.graph_scope.value = "whole"
    assert "<svg" in app.graph.value


@pytest.mark.requires_tosa
def test_reference_run_in_background_and_single_flight(monkeypatch, stateful):
    app = stateful
    calls, release = [], threading.Event()
    real = inspector.Analysis.compare

    def slow_compare(self, *args, **kwargs):
        calls.append(1)
        release.wait(30)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(inspector.Analysis, "compare", slow_compare)
    app.variant_picker.value = ("upstream",)
    app.steps_input.value = 2
    app.run_button.click()
    deadline = time.time() + 10
    while not calls and time.time() < deadline:
        time.sleep(0.01)
    assert app.running and app.run_button.disabled
    app.run_button.click()  # a second click while running starts nothing
    app.policy_picker.value = "off"  # the UI stays responsive while the run goes on
    assert app.analysis.policy == "off"
    release.set()
    app.wait(120)
    assert len(calls) == 1 and not app.running and not app.run_button.disabled
    assert app.progress.value == 1.0 and app.progress_label.value == "done"
    assert app.comparison.results[0].variant.policy == "upstream"
    assert "SQNR" in app.results.value and "<img" in app.plots.value
    assert app.stale  # computed under policy upstream, now showing off


def test_errors_show_in_the_widget_and_it_keeps_working(monkeypatch, stateful):
    app = stateful

    def broken(self, policy):
        raise InspectorError("the policy engine broke")

    monkeypatch.setattr(inspector.Analysis, "with_policy", broken)
    app.policy_picker.value = "off"
    assert "the policy engine broke" in app.error.value and app.last_error
    assert app.policy_picker.value == "upstream"  # the picker goes back to what the screen shows
    monkeypatch.undo()
    app.policy_picker.value = "state-aware-strict"
    assert app.error.value == "" and app.analysis.policy == "state-aware-strict"
    app.variant_picker.value = ()
    app.run_button.click()
    assert "pick at least one variant" in app.error.value and not app.running
    app.session_path.value = "/nonexistent-dir/x.json"
    app.save_button.click()
    assert "cannot write /nonexistent-dir/x.json: directory /nonexistent-dir does not exist" in app.error.value


@pytest.mark.requires_tosa
def test_session_round_trip_restores_the_same_screen(tmp_path):
    app = FoldInspector("sample:functional_recurrent_conv_mul", stage="tfa", policy="state-aware",
                        variants=("upstream", "state-aware"), steps=3)
    app.toggle_marker(app.sites[0].id)
    app.select_site(app.sites[0].id)
    app.run_reference(wait=True)
    path = app.save_session(tmp_path / "s.json")
    data = json.loads(path.read_text())
    assert data["markers"] == [app.sites[0].id] and data["results"]["steps"] == 3
    again = FoldInspector.load_session(path)
    assert (again.analysis.stage, again.analysis.policy, again.markers, again.selected) == (
        app.analysis.stage, app.analysis.policy, app.markers, app.selected)
    assert again.comparison.to_dict() == app.comparison.to_dict()
    assert again.results.value == app.results.value
    assert [r.children[1].value for r in rows(again)] == [r.children[1].value for r in rows(app)]
    assert list(again.variant_picker.value) == ["upstream", "state-aware"] and again.steps_input.value == 3
    assert not again.stale
    with pytest.raises(InspectorError, match="not a fold-inspector session"):
        (tmp_path / "bad.json").write_text("{}")
        FoldInspector.load_session(tmp_path / "bad.json")


def test_export_report_is_self_contained(tmp_path, stateful):
    path = stateful.export_report(tmp_path / "r.html")
    text = path.read_text()
    assert text.startswith("<!doctype html>") and "<svg" in text and "sample:stateful_conv_mul" in text
    assert "http://" not in text.replace("http://www.w3.org", "")


EVIL = "<img src=x onerror=alert(1)>"


class Evil(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module(EVIL, nn.Conv2d(3, 4, 3, padding=1))

    def forward(self, x):
        return getattr(self, EVIL)(x) * 0.5


def test_model_derived_strings_are_escaped_everywhere(tmp_path):
    app = FoldInspector(Evil(), (torch.randn(1, 3, 8, 8),), stage="aten")
    assert EVIL in app.sites[0].id
    app.select_site(app.sites[0].id)
    values = html_values(app)
    assert any("&lt;img src=x onerror=alert(1)&gt;" in v for v in values)
    for value in values:
        assert EVIL not in value, value[:200]
    assert any(EVIL in b.description for b in app.sites_box.children[1].children[:1])  # text, not HTML
    report = app.export_report(tmp_path / "evil.html").read_text()
    assert EVIL not in report and "&lt;img src=x onerror=alert(1)&gt;" in report


def test_model_picker_switches_samples_and_back_to_your_model():
    app = FoldInspector(Evil(), (torch.randn(1, 3, 8, 8),), stage="aten")
    assert app.model_picker.value == "own" and "(your model)" in app.model_picker.options[0][0]
    app.model_picker.value = "sample:conv_mul_multiple_users"
    assert app.analysis.name == "sample:conv_mul_multiple_users" and app.analysis.stage == "aten"
    assert app.sites[0].reason_codes == ("conv-has-other-users",)
    assert "conv-has-other-users" in rows(app)[0].children[1].value
    app.pick_model("own")
    assert EVIL in app.sites[0].id
    sample = FoldInspector("sample:conv_mul_scalar")
    assert sample.model_picker.value == "sample:conv_mul_scalar"
    assert "own" not in [v for _, v in sample.model_picker.options]


def test_programmatic_api_mirrors_controls(stateful):
    app = stateful
    app.set_policy("state-aware-strict")
    assert app.policy_picker.value == "state-aware-strict" and app.sites[0].decision == "skip"
    app.set_stage("aten")
    assert app.stage_picker.value == "aten" and app.analysis.stage == "aten"
    with pytest.raises(InspectorError, match="no site"):
        app.select_site("nope")


SCRIPT_MODEL = '''
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
    def forward(self, x):
        return self.conv(x) * 0.5
    def example_inputs(self):
        return (torch.ones(1, 3, 8, 8),)

open(__file__ + ".imported", "w").close()  # proves the file was run
'''


def test_a_session_naming_a_python_file_asks_before_running_it(tmp_path, stateful):
    script = tmp_path / "model.py"
    script.write_text(SCRIPT_MODEL)
    imported = tmp_path / "model.py.imported"
    session = tmp_path / "s.json"
    session.write_text(json.dumps({"version": 1, "target": f"{script}:Net", "stage": "aten", "policy": "upstream",
                                   "markers": [], "variants": ["upstream"], "steps": 1}))
    with pytest.raises(InspectorError, match="names the Python file .*model.py; loading it runs that file's code"):
        FoldInspector.load_session(session)
    assert not imported.exists()
    # in the widget: Load session shows the file and a Trust and load button, and runs nothing yet
    app = stateful
    app.session_path.value = str(session)
    app.load_button.click()
    assert not imported.exists() and app.analysis.name == "sample:stateful_conv_mul"
    message, buttons = app.trust_box.children
    assert str(script) in message.value and "Trust and load" == buttons.children[0].description
    buttons.children[0].click()
    assert imported.exists() and app.analysis.name == "Net" and app.analysis.stage == "aten"
    assert app.trust_box.children == () and app.error.value == ""
    assert app.model_picker.value == "own" and "Net (your model)" in app.model_picker.options[0][0]
    # the classmethod with trust=True
    again = FoldInspector.load_session(session, trust=True)
    assert again.analysis.name == "Net"


def test_bad_sessions_show_one_line_in_the_widget(tmp_path, stateful):
    app = stateful
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "target": "sample:conv_mul_scalar", "stage": "later",
                               "policy": "upstream"}))
    app.session_path.value = str(bad)
    app.load_button.click()
    assert "field 'stage' must be one of aten, tfa, edge" in app.last_error
    assert app.analysis.name == "sample:stateful_conv_mul"  # the screen is unchanged and still works
    app.session_path.value = str(tmp_path / "missing.json")
    app.load_button.click()
    assert "no such session file" in app.last_error and "no such session file" in app.error.value
    app.policy_picker.value = "off"
    assert app.error.value == "" and app.sites[0].decision == "skip"


def test_in_ipython_an_inspector_error_is_one_line(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    from widgets import install_error_display

    shell = InteractiveShell.instance()
    try:
        assert install_error_display() is True  # get_ipython() is this shell now
        result = shell.run_cell("import inspector\ninspector.analyze('sample:nope')")
        err = capsys.readouterr().err
        assert isinstance(result.error_in_exec, InspectorError)  # still an error: notebooks fail on it
        assert err.count("\n") == 1 and err.startswith("InspectorError: unknown sample 'nope'")
        assert "Traceback" not in err
        result = shell.run_cell("1 / 0")  # other errors keep IPython's usual traceback
        assert isinstance(result.error_in_exec, ZeroDivisionError)
    finally:
        InteractiveShell.clear_instance()
    assert install_error_display() is False  # no shell: nothing to install


@pytest.mark.requires_tosa
def test_the_where_does_the_error_enter_panel():
    app = FoldInspector("sample:stateful_wide_scale", stage="tfa", variants=("off", "upstream"), steps=3)
    app.run_attribution(wait=True)
    assert app.last_error is None and app.attr_progress.bar_style == "success"
    assert "Where the error enters" in app.attr_table.value and "<table" in app.attr_table.value
    assert list(app.attr_variant.options) == ["off", "upstream"] and app.attr_variant.value == "upstream"
    assert "SQNR, float vs quantized (dB)" in app.attr_graph.value  # the coloured after-graph
    assert app.attr_node.value == app.attribution.variants[0].entry_points[0].node  # the first entry point
    assert "fi-attr-curve-img" in app.attr_curve.value
    app.attr_variant.value = "off"
    assert "coloured by SQNR of variant off" in app.attr_graph.value
    app.select_error_node("root:copy_")
    assert app.attr_node.value == "root:copy_"
    with pytest.raises(InspectorError, match="no node 'nope'"):
        app.select_error_node("nope")
    assert app.comparison is not None and not app.stale  # the reference table came with it
    app.toggle_marker(app.sites[0].id)
    assert "fi-stale" in app.attr_table.value
    app.pick_model("sample:conv_mul_scalar")
    assert app.attribution is None and app.attr_graph.value == ""
